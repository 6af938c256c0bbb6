//! What the connections of `memprof serve` cannot take from others: idle connections, hundreds of
//! them or more than the process has descriptors for, leave the viewer answering and never stop
//! it accepting; a sender of anything but a trace on `--listen-trace` is dropped, and the next
//! sender's trace is served; listening for a trace beyond loopback says so.

mod support;
#[path = "support/server.rs"]
mod server;

use server::Server;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The known trace in a directory of its own.
fn trace_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memprof-conn-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("known.mptrace");
    std::fs::write(&path, support::known_trace().0).unwrap();
    path
}

/// The status of a GET of `path`, or `None` when no whole answer comes within `within`.
fn status_within(address: &str, path: &str, within: Duration) -> Option<u16> {
    let address: SocketAddr = address.parse().unwrap();
    let mut stream = TcpStream::connect_timeout(&address, within).ok()?;
    stream.set_read_timeout(Some(within)).unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    String::from_utf8_lossy(&response)
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

/// Asserts that `/api/summary` is answered 200 within `within`, `what` saying when.
fn answers(server: &Server, within: Duration, what: &str) {
    let start = Instant::now();
    let status = status_within(&server.address, "/api/summary", within);
    assert_eq!(
        status,
        Some(200),
        "{what}: no answer within {within:?} (after {:?})",
        start.elapsed()
    );
}

/// Opens up to `count` connections that send nothing, each given a second to be made.
fn idle_connections(address: &str, count: usize) -> Vec<TcpStream> {
    let address: SocketAddr = address.parse().unwrap();
    (0..count)
        .filter_map(|_| TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok())
        .collect()
}

/// With 64 descriptors, 200 idle connections exhaust them: the server still answers while they
/// are open (the oldest unread connection makes room), and once they are closed.
#[test]
fn out_of_descriptors_the_viewer_answers_again() {
    let path = trace_file("fds");
    let server = Server::start_limited(&[path.to_str().unwrap()], 64);
    answers(
        &server,
        Duration::from_secs(10),
        "before any idle connection",
    );
    let idle = idle_connections(&server.address, 200);
    assert!(
        idle.len() > 64,
        "the server stopped accepting after {} connections",
        idle.len()
    );
    answers(
        &server,
        Duration::from_secs(5),
        "with 200 idle connections open",
    );
    drop(idle);
    for round in 0..3 {
        answers(
            &server,
            Duration::from_secs(5),
            &format!("request {round} after the idle connections closed"),
        );
    }
    // More idle connections, closed before a request: still answered.
    drop(idle_connections(&server.address, 200));
    std::thread::sleep(Duration::from_millis(200));
    answers(&server, Duration::from_secs(5), "after a second wave");
    drop(server);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// Hundreds of idle connections under the usual 1024 descriptors (about 570 stopped the former
/// server for good) hold no thread and keep no other client waiting.
#[test]
fn idle_connections_keep_no_client_waiting() {
    let path = trace_file("idle");
    let server = Server::start_limited(&[path.to_str().unwrap()], 1024);
    let idle = idle_connections(&server.address, 700);
    assert!(
        idle.len() >= 600,
        "the server stopped accepting after {} connections",
        idle.len()
    );
    for round in 0..3 {
        answers(
            &server,
            Duration::from_secs(3),
            &format!("request {round} beside {} idle connections", idle.len()),
        );
    }
    drop(idle);
    answers(&server, Duration::from_secs(3), "once they closed");
    drop(server);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// Garbage on `--listen-trace` is dropped with a message, the sender's connection closed, and the
/// trace of the next sender served.
#[test]
fn a_sender_of_garbage_is_dropped() {
    let dir = std::env::temp_dir().join(format!("memprof-conn-garbage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = dir.join("received.mptrace");
    let server = Server::start(&[output.to_str().unwrap(), "--listen-trace", "127.0.0.1:0"]);
    let trace_address = server.trace_address.clone().unwrap();

    let mut garbage = TcpStream::connect(&trace_address).unwrap();
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    garbage
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // The server closes it (end of stream, or a reset), well before the read timeout.
    let start = Instant::now();
    let mut byte = [0u8; 1];
    let read = garbage.read(&mut byte);
    let timed_out = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    };
    assert!(
        matches!(read, Ok(0)) || read.as_ref().is_err_and(|e| !timed_out(e)),
        "the garbage's sender was not dropped: {read:?} after {:?}",
        start.elapsed()
    );
    let (status, _) = server.get("/api/summary");
    assert_eq!(status, 503, "no trace yet");

    // The next sender's trace is received and served.
    let mut sender = TcpStream::connect(&trace_address).unwrap();
    sender.write_all(&support::known_trace().0).unwrap();
    drop(sender);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = server.get("/api/summary");
        if status == 200 {
            let summary: serde_json::Value = serde_json::from_slice(&body).unwrap();
            if summary["complete"] == true {
                assert_eq!(summary["totals"]["allocations"], 5, "{summary}");
                assert_eq!(summary["peak"]["bytes"], 7020, "{summary}");
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the second sender's trace was never served: {status} {}",
            String::from_utf8_lossy(&body)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The server said so before it closed the connection; the line reaches `later` through a
    // thread of the test's that reads the server's stderr, in its own time.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let said = server.later.lock().unwrap().join("\n");
        if said.contains("sent no memprof trace") {
            break;
        }
        assert!(Instant::now() < deadline, "never said: {said}");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--listen-trace` beyond loopback warns as `--listen` does.
#[test]
fn listening_for_a_trace_beyond_loopback_warns() {
    let dir = std::env::temp_dir().join(format!("memprof-conn-warn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = dir.join("received.mptrace");
    let server = Server::start(&[output.to_str().unwrap(), "--listen-trace", "0.0.0.0:0"]);
    let warning = server
        .messages
        .iter()
        .find(|line| line.contains("beyond this machine's loopback"));
    assert!(
        warning.is_some_and(|line| line.contains("--listen-trace")),
        "{:?}",
        server.messages
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
