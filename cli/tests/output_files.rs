//! What the commands do with the files they are told to write and read: `symbolize -o` and
//! `receive -o` refuse a FIFO (never replace what is not a regular file), `convert` leaves an
//! existing output as it was when the trace turns out damaged, and when this build cannot write
//! the format, and a missing trace is said to be missing. Everything happens in the test's
//! scratch directory; `receive` is sent to on 127.0.0.1 only.

mod support;

use std::io::{BufRead, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{known_trace, memprof_cli};

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("output_files-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn mkfifo(path: &Path) {
    let name = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
}

fn is_fifo(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

#[test]
fn symbolize_refuses_to_replace_a_fifo() {
    let dir = scratch("symbolize");
    let trace = dir.join("known.mptrace");
    std::fs::write(&trace, known_trace().0).unwrap();
    let fifo = dir.join("out.fifo");
    mkfifo(&fifo);
    let output = memprof_cli(&[
        "symbolize",
        "-o",
        fifo.to_str().unwrap(),
        trace.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: a FIFO is there, not a regular file",
            fifo.display()
        )),
        "{stderr}"
    );
    assert!(is_fifo(&fifo), "the FIFO was replaced");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "no file left");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn receive_refuses_to_replace_a_fifo() {
    let dir = scratch("receive");
    let fifo = dir.join("received.fifo");
    mkfifo(&fifo);
    let mut child = Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(["receive", "--listen", "127.0.0.1:0", "-o"])
        .arg(&fifo)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Should it listen, it is sent the trace once, so that it ends either way.
    let mut stderr = String::new();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while lines.read_line(&mut line).unwrap() > 0 {
        if let Some(address) = line.trim().strip_prefix("memprof: listening on ") {
            let mut stream = std::net::TcpStream::connect(address).unwrap();
            stream.write_all(&known_trace().0).unwrap();
        }
        stderr.push_str(&line);
        line.clear();
    }
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("memprof receive hung\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: a FIFO is there, not a regular file",
            fifo.display()
        )),
        "{stderr}"
    );
    assert!(is_fifo(&fifo), "the FIFO was replaced");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no file left");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn convert_keeps_the_output_when_the_trace_is_damaged() {
    let dir = scratch("convert-damaged");
    let (mut bytes, offsets) = known_trace();
    // A byte of the main thread's events changed: the trace opens, its events do not decode.
    let at = offsets[2] + memprof_trace::CHUNK_HEADER_BYTES + 4;
    bytes[at] ^= 0x55;
    let trace = dir.join("damaged.mptrace");
    std::fs::write(&trace, &bytes).unwrap();
    let json = dir.join("events.json");
    std::fs::write(&json, "kept").unwrap();
    let output = memprof_cli(&[
        "convert",
        "-o",
        json.to_str().unwrap(),
        trace.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(std::fs::read_to_string(&json).unwrap(), "kept", "{stderr}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "no file left");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(not(feature = "flamegraph"))]
#[test]
fn convert_to_svg_without_flamegraph_leaves_no_file() {
    let dir = scratch("convert-svg");
    let trace = dir.join("known.mptrace");
    std::fs::write(&trace, known_trace().0).unwrap();
    let svg = dir.join("x.svg");
    let output = memprof_cli(&[
        "convert",
        "-o",
        svg.to_str().unwrap(),
        trace.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("`flamegraph` feature"), "{stderr}");
    assert!(!svg.exists(), "an empty x.svg was left behind");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_trace_is_said_to_be_missing() {
    let dir = scratch("missing");
    let missing = dir.join("missing.mptrace");
    let output = memprof_cli(&["summary", missing.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!("memprof: {}: no such file", missing.display())
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
