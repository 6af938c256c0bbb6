//! `memprof serve` on traces at the edges of scale: a stack of 10,000 frames (a deep recursion)
//! answered by `/api/flame` and `/api/diff` without bringing the server down, and 200,000
//! markers served once, by `/api/markers`, not repeated in every summary and timeline.

use memprof_trace::{ChunkEncoder, Compressor, Header, SymbolFrame};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `memprof serve TRACE`, stopped when dropped.
struct Server {
    child: Child,
    address: String,
}

impl Server {
    fn start(trace: &std::path::Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memprof"))
            .arg("serve")
            .arg(trace)
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let address = loop {
            let line = lines
                .next()
                .expect("memprof serve stopped before it served")
                .unwrap();
            if let Some(rest) = line.strip_prefix("memprof: serving on http://") {
                break rest.trim_end_matches('/').to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Server { child, address }
    }

    /// One GET: status and body; status 0 when the server closed the connection unanswered.
    fn get(&self, path: &str) -> (u16, Vec<u8>) {
        let Ok(mut stream) = TcpStream::connect(&self.address) else {
            return (0, Vec::new());
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        // HTTP/1.0: the body comes whole, never chunked.
        let request = format!("GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.address);
        if stream.write_all(request.as_bytes()).is_err() {
            return (0, Vec::new());
        }
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        let Some(split) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
            return (0, Vec::new());
        };
        let head = String::from_utf8_lossy(&response[..split]);
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, response[split + 4..].to_vec())
    }

    fn json(&self, path: &str) -> (Value, usize) {
        let (status, body) = self.get(path);
        assert_eq!(
            status,
            200,
            "GET {path}: {}",
            String::from_utf8_lossy(&body)
        );
        (serde_json::from_slice(&body).unwrap(), body.len())
    }

    /// Whether the process is still running.
    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve_scale");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}-{}.mpt", std::process::id()))
}

fn finish(encoder: &mut ChunkEncoder, out: &mut Vec<u8>) {
    encoder
        .finish(Some(&mut Compressor::new(3).unwrap()), out)
        .unwrap();
}

/// A trace whose one stack is `depth` frames deep, each its own function `app::deep_N`: one
/// block of 1000 bytes allocated from it at 100 ns and left live.
fn deep_trace(depth: u64) -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(0, depth as u32, 0)
        .write_to(&mut out)
        .unwrap();
    let address = |frame: u64| 0x10_0000 + frame * 16 + 1;
    let mut definitions = ChunkEncoder::new(0);
    let frames: Vec<u64> = (0..depth).map(address).collect();
    definitions.stack(0, frames.into_iter());
    definitions.thread(1, 100, "main");
    finish(&mut definitions, &mut out);
    let mut main = ChunkEncoder::new(1);
    main.alloc(100, 0xa000, 1000, 0);
    main.alloc(200, 0xb000, 10, 0);
    main.free(300, 0xb000);
    finish(&mut main, &mut out);
    let mut symbols = ChunkEncoder::new(0);
    for frame in 0..depth {
        symbols.symbol(
            address(frame),
            &[SymbolFrame {
                function: Some(format!("app::deep_{frame}")),
                file: Some("src/app.rs".into()),
                line: 10,
                column: 5,
            }],
        );
    }
    symbols.end(400, 0);
    finish(&mut symbols, &mut out);
    out
}

#[test]
fn a_stack_of_10000_frames_is_a_flame_graph_10000_deep() {
    let path = scratch("deep");
    std::fs::write(&path, deep_trace(10_000)).unwrap();
    let mut server = Server::start(&path);
    for query in [
        "/api/flame",
        "/api/flame?what=allocated",
        "/api/flame?what=temporary",
        "/api/diff",
    ] {
        let (status, body) = server.get(query);
        let text = String::from_utf8_lossy(&body);
        if status != 200 {
            // Let a server that went down be reaped before asking.
            std::thread::sleep(Duration::from_secs(1));
            let state = if server.alive() { "running" } else { "down" };
            panic!("GET {query}: status {status} (the server is {state}): {text}");
        }
        // One node per frame, each nested in its caller's.
        assert_eq!(text.matches("'app::deep_").count(), 10_000, "GET {query}");
        assert_eq!(
            text.matches("\"children\":[").count(),
            10_001,
            "GET {query}"
        );
        let innermost = text.find("'app::deep_0'").unwrap();
        let outermost = text.find("'app::deep_9999'").unwrap();
        assert!(outermost < innermost, "GET {query}: outermost caller first");
    }
    // As text: a line per frame, each short however deep (past 32 levels, the level is named).
    let (status, body) = server.get("/api/flame?format=text");
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10_001);
    assert!(lines[0].ends_with(" all"), "{}", lines[0]);
    assert!(
        lines[10_000].contains("[level 10000] └─ "),
        "{}",
        lines[10_000]
    );
    assert!(lines.iter().all(|l| l.len() < 400));
    // Still serving.
    let (summary, _) = server.json("/api/summary");
    assert_eq!(summary["end"]["bytes"], 1000);
    std::fs::remove_file(&path).unwrap();
}

/// A trace with `count` markers (labels `m0`, `m1`, ...), one every 10 ns, among a few events.
fn marked_trace(count: u32) -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let mut definitions = ChunkEncoder::new(0);
    definitions.stack(0, [0x1001].into_iter());
    definitions.thread(1, 100, "main");
    for label in 0..count {
        definitions.label(label, &format!("m{label}"));
    }
    finish(&mut definitions, &mut out);
    let mut main = ChunkEncoder::new(1);
    main.alloc(5, 0xa000, 1000, 0);
    for label in 0..count {
        main.mark(10 + 10 * u64::from(label), label);
    }
    main.free(10 + 10 * u64::from(count), 0xa000);
    finish(&mut main, &mut out);
    let mut symbols = ChunkEncoder::new(0);
    symbols.symbol(
        0x1001,
        &[SymbolFrame {
            function: Some("app::main".into()),
            file: Some("src/main.rs".into()),
            line: 3,
            column: 1,
        }],
    );
    symbols.end(20 + 10 * u64::from(count), 0);
    finish(&mut symbols, &mut out);
    out
}

#[test]
fn markers_are_served_once_not_in_every_answer() {
    const COUNT: u32 = 200_000;
    let path = scratch("markers");
    std::fs::write(&path, marked_trace(COUNT)).unwrap();
    let server = Server::start(&path);

    // The summary and the timelines list a bounded number, and say how many there are.
    let (summary, size) = server.json("/api/summary");
    assert!(size < 100_000, "a summary of {size} bytes");
    assert_eq!(summary["markers_total"], COUNT);
    assert!(summary["markers"].as_array().unwrap().len() < COUNT as usize);
    assert_eq!(summary["markers"][0]["label"], "m0");
    for query in [
        "/api/timeline",
        "/api/timeline?points=10",
        "/api/timeline?from=0.000001&to=0.000002",
    ] {
        let (timeline, size) = server.json(query);
        assert!(size < 200_000, "GET {query}: {size} bytes");
        let listed = timeline["markers"].as_array().unwrap();
        let (from, to) = (
            timeline["from_ns"].as_u64().unwrap(),
            timeline["to_ns"].as_u64().unwrap(),
        );
        // Markers at 10, 20, ... ns: those within (from, to].
        let within = (1..=u64::from(COUNT))
            .filter(|k| 10 * k > from && 10 * k <= to)
            .count();
        assert_eq!(timeline["markers_total"], within, "GET {query}");
        assert_eq!(listed.len(), within.min(1_000), "GET {query}");
        for marker in listed {
            let time = marker["time_ns"].as_u64().unwrap();
            assert!(time > from && time <= to, "GET {query}: {marker}");
        }
    }
    // Every marker, in time order, from their own endpoint.
    let (all, _) = server.json("/api/markers");
    let listed = all["markers"].as_array().unwrap();
    assert_eq!(listed.len(), COUNT as usize);
    assert_eq!(all["markers_total"], COUNT);
    assert_eq!(listed[0]["label"], "m0");
    assert_eq!(listed[0]["time_ns"], 10);
    assert_eq!(
        listed[COUNT as usize - 1]["label"],
        format!("m{}", COUNT - 1)
    );

    // A moment at a marker beyond those listed still works.
    let last = format!("m{}", COUNT - 1);
    let (sites, _) = server.json(&format!("/api/sites?at=marker:{last}"));
    assert_eq!(sites["sites"][0]["live_bytes"], 1000);
    std::fs::remove_file(&path).unwrap();
}
