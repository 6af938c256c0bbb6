//! The trace sent to `tcp://HOST:PORT` (and to a FIFO) arrives whole: what the receiver saved
//! replays to the live table at the marker, and ends with the symbols and the end record.

#![cfg(feature = "trace")]

mod common;

use common::trace_replay::{self, replay};
use std::io::Read;
use std::path::Path;
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn work() -> Vec<String> {
    let mut kept = Vec::new();
    for i in 0..50_000 {
        let text = format!("entry {i}");
        if i % 3 == 0 {
            kept.push(text);
        }
    }
    kept
}

fn child(dir: &Path) {
    let kept = work();
    let table = dir.join(format!("{}.table", std::process::id()));
    memprof::mark("sent");
    trace_replay::write_table(&table);
    drop(kept);
}

/// Runs the child tracing into `destination` while `receive` collects the bytes.
fn traced(dir: &Path, destination: &str, receive: std::thread::JoinHandle<Vec<u8>>) {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "trace_over_tcp_and_fifo", "--nocapture"])
        .env("MEMPROF_TEST_TRACE_DIR", dir)
        .env("MEMPROF_TRACE", destination)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let output = common::wait_within(child, std::time::Duration::from_secs(60), destination);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let bytes = receive.join().unwrap();
    let at_mark = replay(&bytes, Some("sent"));
    assert!(at_mark.marked, "{destination}");
    let table = trace_replay::read_table(&dir.join(format!("{pid}.table")));
    assert!(table.0.len() > 10_000);
    trace_replay::assert_same(&at_mark, &table, destination);
    let whole = replay(&bytes, None);
    assert!(whole.error.is_none(), "{:?}", whole.error);
    assert_eq!(whole.end.map(|e| e.1), Some(0), "{destination}");
    assert!(!whole.symbols.is_empty());
}

#[test]
fn trace_over_tcp_and_fifo() {
    if let Some(dir) = std::env::var_os("MEMPROF_TEST_TRACE_DIR") {
        child(Path::new(&dir));
        return;
    }
    let dir = std::env::temp_dir().join(format!("memprof-trace-tcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let receive = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).unwrap();
        bytes
    });
    traced(&dir, &format!("tcp://{address}"), receive);

    let fifo = dir.join("trace.fifo");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let reader = fifo.clone();
    let receive = std::thread::spawn(move || std::fs::read(reader).unwrap());
    traced(&dir, fifo.to_str().unwrap(), receive);
    std::fs::remove_dir_all(&dir).unwrap();
}
