//! A trace FIFO whose reader goes away does not kill the program with `SIGPIPE`, even a program
//! that keeps `SIGPIPE`'s default action (as C hosts and command-line tools do): tracing stops
//! with a warning naming the FIFO, and the program runs on to its own exit status.

#![cfg(feature = "trace")]

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// About `buffers` trace buffers' worth of events.
#[inline(never)]
fn churn(buffers: usize) {
    for i in 0..buffers * 12_000 {
        drop(std::hint::black_box(vec![1u8; 8 + i % 64]));
    }
}

fn child(gone: &Path) {
    // SAFETY: sets a signal's action to its default; no handler involved.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    churn(2);
    let started = Instant::now();
    while !gone.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no word from the reader"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    churn(4);
    std::thread::sleep(Duration::from_millis(200));
    churn(2);
    std::process::exit(0);
}

#[test]
fn fifo_reader_gone_is_no_sigpipe() {
    if let Some(gone) = std::env::var_os("MEMPROF_TEST_READER_GONE") {
        child(Path::new(&gone));
    }
    let dir = std::env::temp_dir().join(format!("memprof-trace-gone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("trace.fifo");
    let gone = dir.join("reader-gone");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "fifo_reader_gone_is_no_sigpipe", "--nocapture"])
        .env("MEMPROF_TEST_READER_GONE", &gone)
        .env("MEMPROF_TRACE", &fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader reads the start of the trace, then goes away.
    let mut file = std::fs::File::open(&fifo).unwrap();
    let mut start = [0u8; 4096];
    assert!(file.read(&mut start).unwrap() > 0);
    drop(file);
    std::fs::write(&gone, b"").unwrap();
    let output = common::wait_within(child, Duration::from_secs(30), "the traced child");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\n{stderr}", output.status);
    assert!(
        stderr.contains(&format!("cannot write {}", fifo.display())),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
