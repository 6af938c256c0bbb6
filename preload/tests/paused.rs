//! Started paused (`MEMPROF_PAUSED=1 MEMPROF_TOGGLE_SIGNAL=USR1`): the blocks a program leaks
//! before it raises SIGUSR1 at itself are not in the report, those after are; a block made while
//! paused and freed after is no trouble. The same through `memprof run --paused`, whose summary
//! names the function that leaked after the signal and not the one before.

mod support;

use std::time::Duration;
use support::*;

#[test]
fn paused_until_the_signal() {
    let dir = scratch("paused");
    let program = compile(&dir, &["paused.c"], "paused", &["-O2", "-g"]);
    let output = run_ok(
        preloaded(&program)
            .env("MEMPROF_PAUSED", "1")
            .env("MEMPROF_TOGGLE_SIGNAL", "USR1"),
        "paused",
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout), "ok\n");
    let log = tsv_log(&output.stderr);
    let shown = show(&log);
    assert!(
        log.iter()
            .all(|g| g.frames.iter().all(|f| !f.contains("before_signal"))),
        "{shown}"
    );
    let after = groups_at(&log, "'after_signal'");
    assert_eq!(after.len(), 1, "{shown}");
    assert_eq!((after[0].count, after[0].bytes), (7, 7 * 1313), "{shown}");
}

#[test]
fn memprof_run_paused() {
    let dir = scratch("run_paused");
    let program = compile(&dir, &["paused.c"], "paused", &["-O2", "-g"]);
    let output = run_within(
        clean_command(memprof_command())
            .args(["run", "--paused", "--trace"])
            .arg(dir.join("t-%p.mptrace"))
            .arg("--")
            .arg(&program)
            .current_dir(&dir),
        Duration::from_secs(120),
        "memprof run --paused",
    );
    assert!(output.status.success(), "{}", both(&output));
    let summary = String::from_utf8_lossy(&output.stderr);
    assert!(summary.contains("after_signal"), "{}", both(&output));
    assert!(!summary.contains("before_signal"), "{}", both(&output));
}
