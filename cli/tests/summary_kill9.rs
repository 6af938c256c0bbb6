//! `memprof summary` and `memprof report` on the trace of a program killed by `kill -9`: what was
//! written up to the last complete chunk, said to be cut short, never a failure or a panic.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[test]
fn summary_of_a_killed_program() {
    if std::env::var_os("MEMPROF_TEST_CLI_CHILD").is_some() {
        common::allocate_forever();
    }
    let path =
        std::env::temp_dir().join(format!("memprof-cli-kill9-{}.mptrace", std::process::id()));
    common::trace_then_kill(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "summary_of_a_killed_program", "--nocapture"])
            .env("MEMPROF_TEST_CLI_CHILD", "1"),
        &path,
        200_000,
    );

    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_memprof"))
            .args(args)
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        // A warning naming the byte where the trace ends when the kill cut a chunk, else one
        // saying the process did not close its trace.
        assert!(
            stderr.contains(": the trace ends here, cut short; read up to there")
                || stderr.contains(": the process ended without closing its trace"),
            "{stderr}"
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let summary = run(&["summary"]);
    assert!(summary.contains("(cut short: no END record)"), "{summary}");
    let allocations: u64 = summary
        .lines()
        .find_map(|l| l.strip_prefix("allocations: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(allocations > 20_000, "{summary}");
    // Without a symbol section the frames are unknown, but the blocks are all there.
    let report = run(&[
        "report",
        "--at",
        "peak",
        "--format",
        "tsv",
        "--min-bytes",
        "0",
    ]);
    let first = report.lines().nth(1).unwrap_or_else(|| panic!("{report}"));
    let blocks: u64 = first.split('\t').next().unwrap().parse().unwrap();
    assert!(blocks >= 100, "{report}");
    std::fs::remove_file(&path).unwrap();
}
