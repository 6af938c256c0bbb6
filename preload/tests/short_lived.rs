//! Processes that end early or abruptly: a shell's `exit 3` and a program's `_exit`, at once and
//! after 100,000 allocations, have their trace closed by the library's `_exit` (dash, the `sh`
//! here, ends by `_exit`), every allocation in it; a program killed half a second in leaves a
//! trace that reads as one (the header is written when tracing starts, the module list at the
//! writer's first round), which `memprof summary` says was not closed, with the hint that
//! `memprof symbolize` names the frames it has no symbols for. Before, the `_exit` traces were
//! unclosed, and the one of 100,000 allocations lost its last, partly filled buffer.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

fn program(dir: &Path) -> PathBuf {
    compile(dir, &["short_lived.c"], "short_lived", &["-O2", "-g"])
}

/// `memprof summary` of `trace`: (stdout, stderr), asserting it succeeded.
fn summary(trace: &Path) -> (String, String) {
    let output = run_ok(
        clean_command(memprof_command()).arg("summary").arg(trace),
        "memprof summary",
    );
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The `allocations: N` of a summary.
fn allocations(summary: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.starts_with("allocations: "))
        .unwrap_or_else(|| panic!("{summary}"));
    line["allocations: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn assert_not_closed(trace: &Path, stdout: &str, stderr: &str) {
    assert!(stdout.contains("(cut short: no END record)"), "{stdout}");
    assert!(
        stdout.contains("note: the process ended without closing its trace"),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "memprof: warning: {}: the process ended without closing its trace",
            trace.display()
        )),
        "{stderr}"
    );
}

fn assert_closed(stdout: &str, stderr: &str) {
    assert!(
        stdout.contains("(closed normally, 0 events lost)"),
        "{stdout}"
    );
    assert!(!stderr.contains("without closing its trace"), "{stderr}");
}

#[test]
fn shell_exit_closes_its_trace() {
    let dir = scratch("short_lived_shell");
    let trace = dir.join("sh.mptrace");
    let output = run_within(
        preloaded("sh")
            .env("MEMPROF_TRACE", &trace)
            .args(["-c", "exit 3"]),
        Duration::from_secs(60),
        "sh -c 'exit 3'",
    );
    assert_eq!(output.status.code(), Some(3), "{}", both(&output));
    let (stdout, stderr) = summary(&trace);
    assert!(stdout.contains("process: "), "{stdout}");
    assert_closed(&stdout, &stderr);
}

#[test]
fn underscore_exit_at_once_and_after_many_allocations() {
    let dir = scratch("short_lived_exit");
    let program = program(&dir);
    let now = dir.join("now.mptrace");
    run_ok(
        preloaded(&program).env("MEMPROF_TRACE", &now).arg("now"),
        "now",
    );
    let (stdout, stderr) = summary(&now);
    assert_closed(&stdout, &stderr);

    let many = dir.join("many.mptrace");
    run_ok(
        preloaded(&program).env("MEMPROF_TRACE", &many).arg("many"),
        "many",
    );
    let (stdout, stderr) = summary(&many);
    assert_closed(&stdout, &stderr);
    // Every allocation, the last buffer's too (it holds 16,384), and the symbols, written at the
    // close: no hint to symbolize.
    let kept = allocations(&stdout);
    assert!(kept >= 100_000, "{kept} allocations kept\n{stdout}");
    assert!(!stderr.contains("memprof symbolize"), "{stderr}");
}

#[test]
fn killed_program_leaves_a_readable_trace() {
    let dir = scratch("short_lived_killed");
    let program = program(&dir);
    let trace = dir.join("killed.mptrace");
    let mut child = preloaded(&program)
        .env("MEMPROF_TRACE", &trace)
        .arg("sleep")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed half a second after its trace appears (a loaded machine may take as long to load
    // a debug build of the library).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !trace.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    let (stdout, stderr) = summary(&trace);
    assert_not_closed(&trace, &stdout, &stderr);
    // The module list is there: the trace's frames are named by module at least.
    let bytes = std::fs::read(&trace).unwrap();
    let mut reader = memprof_trace::Reader::new(&bytes[..]).unwrap();
    let mut modules = 0;
    while let Ok(Some(chunk)) = reader.next_chunk() {
        for record in chunk.records() {
            if let Ok(memprof_trace::Record::Modules(list)) = record {
                modules += list.len();
            }
        }
    }
    assert!(modules > 0, "no module list in the trace");
}
