//! `MEMPROF_TRACE_SYMBOLS=0`: a trace closed normally holds every event and stack, and no
//! symbol; the same program without it has a symbol for every return address of its stacks.

#![cfg(feature = "trace")]

mod common;

use common::trace_replay::replay;
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn work() -> Vec<Vec<u8>> {
    (0..5_000).map(|i| vec![i as u8; 16 + i % 300]).collect()
}

/// Runs this test binary as a traced child with `symbols` as `MEMPROF_TRACE_SYMBOLS`; the
/// trace's replay.
fn traced(symbols: &str) -> common::trace_replay::Replay {
    let path = std::env::temp_dir().join(format!(
        "memprof-trace-no-symbols-{}-{symbols}.mptrace",
        std::process::id()
    ));
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "symbols_can_be_left_out", "--nocapture"])
        .env("MEMPROF_TEST_TRACE_CHILD", "1")
        .env("MEMPROF_TRACE", &path)
        .env("MEMPROF_TRACE_SYMBOLS", symbols)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let replayed = replay(&bytes, None);
    assert_eq!(replayed.error, None);
    replayed
}

#[test]
fn symbols_can_be_left_out() {
    if std::env::var_os("MEMPROF_TEST_TRACE_CHILD").is_some() {
        let kept = work();
        assert_eq!(kept.len(), 5_000);
        memprof::close_trace().unwrap().expect("a trace was open");
        return;
    }
    let without = traced("0");
    let with = traced("1");
    for replayed in [&without, &with] {
        assert_eq!(replayed.end.map(|(_, lost)| lost), Some(0));
        assert!(replayed.events >= 5_000, "{} events", replayed.events);
        assert!(!replayed.stacks.is_empty());
    }
    assert!(without.symbols.is_empty(), "{:?}", without.symbols.len());
    for address in with.stacks.values().flatten() {
        assert!(with.symbols.contains_key(address), "{address:#x}");
    }
}
