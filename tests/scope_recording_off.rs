//! With `MEMPROF_ENABLED=0` nothing is recorded, so a heap assertion cannot tell a leak from no
//! allocation at all: it must fail and say so, never pass. And under sampling, with nothing in the
//! table yet, an empty scope still passes. The test runs this same binary as the child.

use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child.
const CHILD: &str = "MEMPROF_TEST_SCOPE_RECORDING_OFF";

#[inline(never)]
fn leak() {
    std::mem::forget(std::hint::black_box(vec![0u8; 800_000]));
}

#[test]
fn scope_recording_off() {
    if std::env::var(CHILD).as_deref() == Ok("sampled") {
        // Recording, but under sampling nothing may be in the table yet, and no scope has seen
        // an allocation: an empty scope must still pass, not be taken for recording off.
        let scope = memprof::Scope::start();
        scope.assert_no_leaks();
        scope.assert_max_allocated_bytes(0);
        assert_eq!(scope.stats(), memprof::ScopeStats::default());
        let scope = memprof::Scope::start();
        let kept = std::hint::black_box(vec![0u8; 100]);
        assert_eq!(scope.stats().live_bytes, 100);
        drop(kept);
        scope.assert_no_leaks();
        println!("child checked");
        return;
    }
    if std::env::var_os(CHILD).is_some() {
        let scope = memprof::Scope::start();
        leak();
        let failure =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scope.assert_no_leaks()))
                .expect_err("an assertion over nothing recorded must fail");
        let message = failure.downcast_ref::<String>().expect("a message");
        assert!(
            message.contains("nothing was recorded") && message.contains("MEMPROF_ENABLED=0"),
            "{message}"
        );
        // Every assertion, not only the leak check.
        for assertion in [
            (|s: &memprof::Scope| s.assert_max_allocated_bytes(u64::MAX)) as fn(&memprof::Scope),
            |s| s.assert_max_live_bytes(u64::MAX),
            |s| s.assert_max_peak_bytes(u64::MAX),
            |s| s.assert_max_allocated_blocks(u64::MAX),
        ] {
            let failed =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| assertion(&scope)));
            assert!(failed.is_err());
        }
        println!("child checked");
        return;
    }
    for (mode, variable, value) in [
        ("off", "MEMPROF_ENABLED", "0"),
        ("sampled", "MEMPROF_SAMPLE_INTERVAL", "bytes:1000000000000"),
    ] {
        let output = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "scope_recording_off", "--nocapture"])
            .env(CHILD, mode)
            .env(variable, value)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("child checked"),
            "{mode}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
