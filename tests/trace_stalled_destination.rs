//! A trace destination that stops reading does not hold the program's exit: a FIFO whose reader
//! holds it open and reads nothing, a TCP peer that accepted and reads nothing. The program exits
//! within seconds, its status its own, and a warning names the destination given up and the
//! events not written.

#![cfg(feature = "trace")]

mod common;

use std::fmt::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Far more trace than a pipe holds, and than a socket's buffers on both sides hold (markers with
/// long labels of random hexadecimal digits, which zstd halves at most: about 60 MB, 30 MB
/// compressed, where loopback's buffers may grow to about 10 MB).
#[inline(never)]
fn work() {
    let mut kept = Vec::new();
    for i in 0..20_000 {
        let text = format!("entry {i}");
        if i % 3 == 0 {
            kept.push(text);
        }
    }
    drop(kept);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut label = String::new();
    for _ in 0..30_000 {
        label.clear();
        for _ in 0..128 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            write!(label, "{state:016x}").unwrap();
        }
        memprof::mark(&label);
    }
}

/// Runs the child tracing into `destination`, and checks that it exits within seconds, warning
/// that the destination was given up.
fn run(destination: &str) {
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "exit_behind_a_stalled_destination",
            "--nocapture",
        ])
        .env("MEMPROF_TEST_TRACE_CHILD", "1")
        .env("MEMPROF_TRACE", destination)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(child, Duration::from_secs(30), destination);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\n{stderr}", output.status);
    assert!(
        stderr.contains(&format!("{destination} kept the trace waiting"))
            && stderr.contains("events not written"),
        "{stderr}"
    );
}

#[test]
fn exit_behind_a_stalled_destination() {
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
    run(fifo.to_str().unwrap());
    drop(reader.join().unwrap());

    // The peer accepts the connection and never reads it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || listener.accept().unwrap().0);
    run(&format!("tcp://{address}"));
    drop(peer.join().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}
