//! A trace destination that stops reading does not hold the program's exit: a FIFO whose reader
//! holds it open and reads nothing. The program exits within seconds, its status its own, and a
//! warning names the destination given up and the events not written.

#![cfg(feature = "trace")]

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Far more trace than a pipe holds.
#[inline(never)]
fn work() {
    let mut kept = Vec::new();
    for i in 0..100_000 {
        let text = format!("entry {i}");
        if i % 3 == 0 {
            kept.push(text);
        }
    }
    drop(kept);
}

#[test]
fn exit_behind_a_stalled_fifo() {
    if std::env::var_os("MEMPROF_TEST_TRACE_CHILD").is_some() {
        work();
        std::process::exit(0);
    }
    let dir = std::env::temp_dir().join(format!("memprof-trace-stalled-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("trace.fifo");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    // The reader opens the FIFO and never reads it.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::File::open(fifo).unwrap())
    };
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "exit_behind_a_stalled_fifo", "--nocapture"])
        .env("MEMPROF_TEST_TRACE_CHILD", "1")
        .env("MEMPROF_TRACE", &fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(child, Duration::from_secs(30), "exit behind a stalled FIFO");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\n{stderr}", output.status);
    assert!(
        stderr.contains(&format!("{} kept the trace waiting", fifo.display()))
            && stderr.contains("events not written"),
        "{stderr}"
    );
    drop(reader.join().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}
