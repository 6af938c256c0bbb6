//! The control channel of `memprof attach` (`src/control.rs`, docs/attach.md), spoken to from the
//! process itself: memprof's mark is in the program's file, where `readelf` finds it; the control
//! signal opens the abstract socket `memprof-control-PID`, which answers a request from this
//! process's user: the exports written where asked, a pause, a trace from now on (with the
//! `trace` feature; without it, an error that says so); a second signal while the channel is
//! open opens it again after; `MEMPROF_CONTROL_SIGNAL=off` leaves the signal unhandled.

mod common;

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::process::Command;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// The control signal when `MEMPROF_CONTROL_SIGNAL` is unset.
const SIGNAL: i32 = 59;

#[inline(never)]
fn kept_by_control_test() -> Vec<Vec<u8>> {
    std::hint::black_box((0..13).map(|_| vec![3u8; 5_555]).collect())
}

/// Sends the control signal to this process, connects, sends `request`; the connection.
fn ask(request: &str) -> UnixStream {
    // SAFETY: raising the signal whose handler memprof installed.
    assert_eq!(unsafe { libc::raise(SIGNAL) }, 0);
    let name =
        SocketAddr::from_abstract_name(format!("memprof-control-{}", std::process::id())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let stream = loop {
        match UnixStream::connect_addr(&name) {
            Ok(stream) => break stream,
            Err(error) if Instant::now() > deadline => panic!("no control channel: {error}"),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    writeln!(&stream, "{request}").unwrap();
    stream
}

fn answer(request: &str) -> String {
    let mut text = String::new();
    ask(request).read_to_string(&mut text).unwrap();
    text
}

#[test]
fn the_control_channel() {
    if std::env::var_os("MEMPROF_TEST_CONTROL_OFF").is_some() {
        // Started with MEMPROF_CONTROL_SIGNAL=off: memprof handles no signal 59.
        drop(std::hint::black_box(vec![0u8; 100]));
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
            .unwrap();
        assert_eq!(caught >> (SIGNAL - 1) & 1, 0, "{caught:x}");
        return;
    }
    let kept = kept_by_control_test();

    // The mark, an allocated section that `strip` keeps.
    let sections = Command::new("readelf")
        .args(["-S", "-W"])
        .arg(std::env::current_exe().unwrap())
        .output()
        .expect("readelf (binutils) is needed");
    let sections = String::from_utf8_lossy(&sections.stdout);
    let mark = sections
        .lines()
        .find(|l| l.contains(".memprof.control"))
        .unwrap_or_else(|| panic!("no mark:\n{sections}"));
    // Type, address, offset, size, entry size, then the flags.
    let fields: Vec<&str> = mark.split_whitespace().collect();
    let kind = fields.iter().position(|f| *f == "PROGBITS").unwrap();
    let flags = fields.get(kind + 5).copied().unwrap_or("");
    assert!(flags.contains('A'), "not allocated: {mark}");

    // The exports, written where asked, `%p` expanded.
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("control");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report-%p.tsv");
    let text = answer(&format!("outputs {}", report.display()));
    let written = dir.join(format!("report-{}.tsv", std::process::id()));
    assert_eq!(text, format!("wrote {}\nok\n", written.display()));
    let report = std::fs::read_to_string(&written).unwrap();
    // Count, bytes, frames.
    let exact = format!("13\t{}\t", 13 * 5_555);
    assert!(
        report
            .lines()
            .any(|l| l.starts_with(&exact) && l.contains("kept_by_control_test")),
        "{report}"
    );
    // An unknown format: an error, no file.
    let text = answer(&format!("outputs {}", dir.join("x.unknown").display()));
    assert!(text.starts_with("error "), "{text}");
    assert!(text.ends_with("error 1 of 1 files not written\n"), "{text}");
    assert!(!dir.join("x.unknown").exists());

    // A pause, a resume.
    assert_eq!(answer("pause"), "ok paused, was recording\n");
    assert!(memprof::is_paused());
    assert_eq!(answer("resume"), "ok resumed, was paused\n");
    assert!(!memprof::is_paused());
    assert!(answer("frobnicate").starts_with("error unknown request"));

    // A trace from now on.
    let mut stream = ask("trace");
    let mut first = [0u8; 3];
    stream.read_exact(&mut first).unwrap();
    #[cfg(feature = "trace")]
    {
        assert_eq!(&first, b"ok\n");
        let mut magic = [0u8; 8];
        stream.read_exact(&mut magic).unwrap();
        assert_eq!(&magic, b"\x89MPTRACE");
        // On once the header is out (set just after it).
        let deadline = Instant::now() + Duration::from_secs(5);
        while !memprof::is_tracing() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(memprof::is_tracing());
        // A second trace while this one runs: the signal waits for the channel, then an error.
        let second = std::thread::spawn(|| answer("trace"));
        std::thread::sleep(Duration::from_millis(300));
        writeln!(&stream, "end").unwrap();
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).unwrap();
        assert!(!memprof::is_tracing());
        let second = second.join().unwrap();
        assert!(
            second.starts_with("error this process has written its trace already"),
            "{second}"
        );
    }
    #[cfg(not(feature = "trace"))]
    {
        let mut rest = String::new();
        stream.read_to_string(&mut rest).unwrap();
        let text = format!("{}{rest}", String::from_utf8_lossy(&first));
        assert!(
            text.starts_with("error ") && text.contains("without the cargo feature `trace`"),
            "{text}"
        );
    }
    drop(kept);

    // Off: no handler for the signal.
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "the_control_channel"])
        .env("MEMPROF_TEST_CONTROL_OFF", "1")
        .env("MEMPROF_CONTROL_SIGNAL", "off")
        .status()
        .unwrap();
    assert!(status.success());
}
