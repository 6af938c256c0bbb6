//! `pause`/`resume` and the toggle signal: blocks allocated while paused are not recorded, and
//! freeing them later (or freeing recorded blocks while paused) causes no error.

mod common;

use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn while_paused() -> Vec<Vec<u8>> {
    // A size of its own, so an optimizer cannot fold this function into `while_recording`.
    std::hint::black_box((0..10).map(|_| vec![0u8; 9_999]).collect())
}

#[inline(never)]
fn while_recording() -> Vec<Vec<u8>> {
    std::hint::black_box((0..10).map(|_| vec![0u8; 10_000]).collect())
}

fn recorded(function: &str) -> u64 {
    common::groups_mentioning(function, 16)
        .iter()
        .map(|g| g.bytes)
        .sum()
}

#[test]
fn pause_resume_and_signal() {
    if std::env::var_os("MEMPROF_TEST_SIGNAL_CHILD").is_some() {
        // Runs in the child, with MEMPROF_TOGGLE_SIGNAL=USR2.
        let recorded_before = while_recording();
        // SAFETY: raising a signal whose handler memprof installed.
        unsafe { libc::raise(libc::SIGUSR2) };
        assert!(memprof::is_paused());
        let unrecorded = while_paused();
        assert_eq!(recorded("pause::while_paused"), 0);
        // SAFETY: as above.
        unsafe { libc::raise(libc::SIGUSR2) };
        assert!(!memprof::is_paused());
        assert_eq!(recorded("pause::while_recording"), 10 * 10_000 + 10 * 24);
        drop((recorded_before, unrecorded));
        return;
    }

    let before = while_recording();
    memprof::pause();
    let paused = while_paused();
    assert_eq!(recorded("pause::while_paused"), 0);
    // A recorded block freed while paused is still forgotten.
    drop(before);
    assert_eq!(recorded("pause::while_recording"), 0);
    memprof::resume();
    // Blocks allocated while paused, freed while recording: nothing to forget, no error.
    drop(paused);
    let after = while_recording();
    assert_eq!(recorded("pause::while_recording"), 10 * 10_000 + 10 * 24);
    drop(after);

    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "pause_resume_and_signal", "--nocapture"])
        .env("MEMPROF_TEST_SIGNAL_CHILD", "1")
        .env("MEMPROF_TOGGLE_SIGNAL", "USR2")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
}
