//! `memprof symbolize` on the trace of a program killed by `kill -9` and recorded without symbols
//! (`MEMPROF_TRACE_SYMBOLS=0`): from the binary the trace names, from a separate debug file found
//! by build id once the binary is stripped, and a clear error once the binary is gone.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Output};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

fn memprof(args: &[&str], trace: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(args)
        .arg(trace)
        .output()
        .unwrap()
}

/// The TSV report at the peak, every frame shown.
fn report(trace: &Path) -> String {
    let output = memprof(
        &[
            "report",
            "--at",
            "peak",
            "--format",
            "tsv",
            "--min-bytes",
            "0",
            "--depth",
            "30",
        ],
        trace,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    String::from_utf8(output.stdout).unwrap()
}

fn symbolize(args: &[&str], trace: &Path) -> (bool, String) {
    let output = memprof(&[&["symbolize"], args].concat(), trace);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (output.status.success(), stderr)
}

#[test]
fn symbolize_a_killed_program() {
    if std::env::var_os("MEMPROF_TEST_CLI_CHILD").is_some() {
        common::allocate_forever();
    }
    for tool in ["objcopy", "strip", "readelf"] {
        if Command::new(tool).arg("--version").output().is_err() {
            common::missing_tool("symbolize check", "apt-get install -y binutils");
            return;
        }
    }
    let dir = std::env::temp_dir().join(format!("memprof-cli-symbolize-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // A copy of this test binary is traced, so that it can be stripped and removed afterwards.
    let program = dir.join("traced-program");
    std::fs::copy(std::env::current_exe().unwrap(), &program).unwrap();
    let trace = dir.join("killed.mptrace");
    common::trace_then_kill(
        Command::new(&program)
            .args(["--exact", "symbolize_a_killed_program", "--nocapture"])
            .env("MEMPROF_TEST_CLI_CHILD", "1")
            // A trace without symbols, which the writer would otherwise write as stacks appear.
            .env("MEMPROF_TRACE_SYMBOLS", "0"),
        &trace,
        100_000,
    );

    let before = report(&trace);
    assert!(!before.contains("allocate_forever"), "{before}");

    // From the binary the trace names, into another file.
    let symbolized = dir.join("symbolized.mptrace");
    let (ok, stderr) = symbolize(&["-o", symbolized.to_str().unwrap()], &trace);
    assert!(ok, "{stderr}");
    let after = report(&symbolized);
    assert!(
        after.contains("symbolize_kill9::common::allocate_forever"),
        "{after}"
    );
    // The line of the allocation in `allocate_forever`.
    let line = include_str!("../../tests/common/mod.rs")
        .lines()
        .position(|l| l.contains("let block = vec![round as u8"))
        .unwrap()
        + 1;
    assert!(after.contains(&format!("common/mod.rs:{line}:")), "{after}");
    // The same blocks, only named.
    let blocks = |report: &str| -> u64 {
        report
            .lines()
            .skip(1)
            .map(|l| l.split('\t').next().unwrap().parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(blocks(&before), blocks(&after));
    let summary = memprof(&["summary"], &symbolized);
    let summary = String::from_utf8_lossy(&summary.stdout);
    assert!(summary.contains("(cut short: no END record)"), "{summary}");

    // Stripped, with its debug information in a separate file named by build id.
    let notes = common::run(Command::new("readelf").arg("-n").arg(&program));
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{notes}"))
        .trim()
        .to_owned();
    let debug_dir = dir.join("debug");
    let debug_file = debug_dir
        .join(".build-id")
        .join(&build_id[..2])
        .join(format!("{}.debug", &build_id[2..]));
    std::fs::create_dir_all(debug_file.parent().unwrap()).unwrap();
    common::run(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&program)
            .arg(&debug_file),
    );
    common::run(Command::new("strip").arg("--strip-all").arg(&program));
    // The stripped binary names nothing.
    let stripped_trace = dir.join("stripped.mptrace");
    let (ok, stderr) = symbolize(&["-o", stripped_trace.to_str().unwrap()], &trace);
    assert!(ok, "{stderr}");
    let stripped = report(&stripped_trace);
    assert!(!stripped.contains("allocate_forever"), "{stripped}");
    assert_eq!(blocks(&before), blocks(&stripped));
    // In place, replacing that symbol section with the debug file's names.
    let (ok, stderr) = symbolize(
        &["--debug-dir", debug_dir.to_str().unwrap()],
        &stripped_trace,
    );
    assert!(ok, "{stderr}");
    let from_debug = report(&stripped_trace);
    assert!(
        from_debug.contains("symbolize_kill9::common::allocate_forever"),
        "{from_debug}"
    );
    assert_eq!(blocks(&before), blocks(&from_debug));

    // Without the binary: an error naming it, and the trace left as it was.
    std::fs::remove_file(&program).unwrap();
    let length = std::fs::metadata(&trace).unwrap().len();
    let (ok, stderr) = symbolize(&[], &trace);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the traced executable {}: no such file",
            program.display()
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::metadata(&trace).unwrap().len(), length);
    std::fs::remove_dir_all(&dir).unwrap();
}
