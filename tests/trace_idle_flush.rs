//! A program gone idle has its last events written: the writer writes out what a thread's
//! buffer holds, though not full, about every second, so a trace read while the program waits
//! (a live viewer, `memprof serve --listen-trace`) has its last allocations and markers, where
//! before it had only the buffers that had filled; and then a `WRITTEN` record at or past the
//! marker, with no event at or before a `WRITTEN` time in a chunk after it.

#![cfg(feature = "trace")]

mod common;

use common::trace_replay::replay;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// A size no other block of the child has.
const KEPT: usize = 123_457;

/// The child: a few allocations (far from filling a buffer), a marker, then idle until told.
fn child(dir: &Path) {
    let kept = vec![7u8; KEPT];
    memprof::mark("idle");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !dir.join("done").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(kept);
}

#[test]
fn an_idle_programs_events_are_written() {
    if let Some(dir) = std::env::var_os("MEMPROF_TEST_TRACE_DIR") {
        child(Path::new(&dir));
        return;
    }
    let dir = std::env::temp_dir().join(format!("memprof-trace-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("idle.mptrace");
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_idle_programs_events_are_written",
            "--nocapture",
        ])
        .env("MEMPROF_TEST_TRACE_DIR", &dir)
        .env("MEMPROF_TRACE", &trace)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The marker and the block live at it reach the file while the child waits (a minute at
    // most: the writer's timer is a second).
    let deadline = Instant::now() + Duration::from_secs(60);
    let seen = loop {
        let bytes = std::fs::read(&trace).unwrap_or_default();
        let at_mark = replay(&bytes, Some("idle"));
        if at_mark.marked {
            break Some(at_mark);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // How far the events are written: past the marker soon after (the record comes about every
    // 200 ms once events were written), and true of every chunk after it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (marked_at, written) = loop {
        let (marked_at, written) = written_past(&std::fs::read(&trace).unwrap_or_default());
        if marked_at.is_some_and(|at| written >= at) || Instant::now() > deadline {
            break (marked_at, written);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    std::fs::write(dir.join("done"), b"").unwrap();
    let output = common::wait_within(child, Duration::from_secs(60), "the idle child");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let at_mark = seen.expect("the marker of the idle program never reached the trace");
    let marked_at = marked_at.expect("the marker's time");
    assert!(
        written >= marked_at,
        "no WRITTEN record reached the marker at {marked_at} ns: {written}"
    );
    written_past(&std::fs::read(&trace).unwrap());
    assert!(
        at_mark.live.values().any(|&(size, _)| size == KEPT as u64),
        "no block of {KEPT} bytes live at the marker"
    );
    // The whole trace, once closed, still replays: nothing written twice, nothing lost.
    let whole = replay(&std::fs::read(&trace).unwrap(), None);
    assert!(whole.error.is_none(), "{:?}", whole.error);
    assert!(whole.conflicts.is_empty(), "{:?}", whole.conflicts);
    assert_eq!(whole.end.map(|e| e.1), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The marker's time in `bytes`, a trace as far as it is written, and the latest `WRITTEN`
/// time; asserts that no event at or before a `WRITTEN` time comes in a chunk after it.
fn written_past(bytes: &[u8]) -> (Option<u64>, u64) {
    let Ok(mut reader) = memprof_trace::Reader::new(bytes) else {
        return (None, 0);
    };
    let (mut marked_at, mut written) = (None, 0);
    // A chunk cut at the end of what is written so far ends the reading.
    while let Ok(Some(chunk)) = reader.next_chunk() {
        for record in chunk.records().map_while(Result::ok) {
            let time = match record {
                memprof_trace::Record::Written { time } => {
                    written = written.max(time);
                    continue;
                }
                memprof_trace::Record::Mark { time, .. } => {
                    marked_at = Some(time);
                    time
                }
                memprof_trace::Record::Alloc { time, .. }
                | memprof_trace::Record::Free { time, .. }
                | memprof_trace::Record::Realloc { time, .. } => time,
                _ => continue,
            };
            assert!(
                written == 0 || time > written,
                "an event at {time} ns after a WRITTEN record of {written} ns"
            );
        }
    }
    (marked_at, written)
}
