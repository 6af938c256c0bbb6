//! `memprof attach --serve ADDR`: the viewer, live, on the trace the attached process writes. Its
//! summary endpoint answers while attached, and counts the leak made then once it arrived; the
//! viewer stays up after the detach until Ctrl-C (SIGINT), which ends the command.

#[path = "support/attach.rs"]
mod attach;

use attach::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// `GET path` on `address`: the status and the body.
fn get(address: &str, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let status = reply
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = reply
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

#[test]
fn the_viewer_follows_the_attached_process() {
    let dir = scratch("serve");
    let dir = &dir;
    let program = compile("cc", dir, &["attach_target.c"], "target", &["-pthread"]);
    let mut command = Command::new(&program);
    command.args(["2", "read"]);
    let mut target = Target::start(command, "ready");
    let (status, said) = attach_during(
        memprof(dir),
        &[
            "--serve",
            "127.0.0.1:0",
            "--trace",
            "s-%p.mptrace",
            "--output",
            "serve.tsv",
        ],
        &mut target,
        |target, memprof, said| {
            let address = said
                .iter()
                .find_map(|l| l.strip_prefix("memprof: serving on http://"))
                .unwrap_or_else(|| panic!("no address in {said:?}"))
                .trim_end_matches('/')
                .to_owned();
            target.signal("-USR1");
            target.expect("leaked 1");
            // The index follows the file: the leak's bytes are counted once they arrive.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let (status, body) = get(&address, "/api/summary");
                if status == 200 {
                    let summary: serde_json::Value = serde_json::from_str(&body).unwrap();
                    let allocated = summary["totals"]["allocated_bytes"].as_u64().unwrap_or(0);
                    if allocated >= 37 * 1500 {
                        break;
                    }
                }
                assert!(Instant::now() < deadline, "{status}: {body}");
                std::thread::sleep(Duration::from_millis(200));
            }
            // The first Ctrl-C detaches; the viewer stays up until the second.
            interrupt(memprof);
            // The detach writes the files.
            let deadline = Instant::now() + Duration::from_secs(60);
            while !dir.join("serve.tsv").exists() {
                assert!(Instant::now() < deadline, "no detach");
                std::thread::sleep(Duration::from_millis(100));
            }
            std::thread::sleep(Duration::from_millis(500));
            assert_eq!(
                get(&address, "/api/summary").0,
                200,
                "the viewer is still up"
            );
            interrupt(memprof);
        },
    );
    assert!(status.success(), "{said}");
    assert!(said.contains("the viewer stays up"), "{said}");
    assert!(said.contains("memprof: detached from process"), "{said}");
}
