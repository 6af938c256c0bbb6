//! What clients of the HTTP endpoint cannot take from others: slow clients (slowloris) and long
//! `?seconds=` requests leave the endpoint answering; a `Host` that is not an address of the
//! endpoint (DNS rebinding) is refused; binding beyond loopback says so.
//!
//! memprof is not the global allocator here: the endpoint serves an empty table, which is all
//! these tests need. Every peer is on 127.0.0.1.

#![cfg(feature = "http")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// Set in the child that binds beyond loopback.
const CHILD: &str = "MEMPROF_TEST_HTTP_LIMITS";

/// Sends a GET of `target` with `host` as its `Host`; returns the status and how long the answer
/// took, or fails the test when none comes within `within`.
fn get(address: SocketAddr, target: &str, host: &str, within: Duration) -> (u16, Duration) {
    let start = Instant::now();
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(within)).unwrap();
    stream
        .write_all(format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .unwrap();
    let mut bytes = Vec::new();
    if let Err(error) = stream.read_to_end(&mut bytes) {
        panic!(
            "no answer to {target} within {within:?} ({error}); got {:?}",
            String::from_utf8_lossy(&bytes)
        );
    }
    let head = String::from_utf8_lossy(&bytes);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, start.elapsed())
}

#[test]
fn slow_clients_do_not_delay_others() {
    let address = memprof::serve_http("127.0.0.1:0").unwrap();
    // Eight clients send their request a byte every 200 ms, for 6 s each: more than the workers.
    let slow: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(address).unwrap();
                let _ = stream.write_all(b"GET /debug/pprof/heap HTTP/1.1\r\n");
                for _ in 0..30 {
                    std::thread::sleep(Duration::from_millis(200));
                    if stream.write_all(b"X").is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (status, took) = get(
        address,
        "/debug/memprof/",
        &address.to_string(),
        Duration::from_secs(30),
    );
    assert_eq!(status, 200);
    assert!(
        took < Duration::from_secs(3),
        "a request behind 8 slow clients took {took:?}"
    );
    for thread in slow {
        thread.join().unwrap();
    }
}

#[test]
fn long_deltas_leave_the_endpoint_answering() {
    let address = memprof::serve_http("127.0.0.1:0").unwrap();
    // Six requests that wait 300 s each: more than the workers.
    let waiting: Vec<TcpStream> = (0..6)
        .map(|_| {
            let mut stream = TcpStream::connect(address).unwrap();
            stream
                .write_all(
                    format!(
                        "GET /debug/pprof/heap?seconds=300 HTTP/1.1\r\nHost: {address}\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    for path in [
        "/debug/memprof/",
        "/debug/pprof/heap",
        "/debug/memprof/report.md",
    ] {
        let (status, _) = get(address, path, &address.to_string(), Duration::from_secs(20));
        assert_eq!(status, 200, "{path}");
    }
    drop(waiting);
}

#[test]
fn hosts_other_than_the_endpoints_addresses_are_refused() {
    let address = memprof::serve_http("127.0.0.1:0").unwrap();
    let port = address.port();
    let within = Duration::from_secs(30);
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        assert_eq!(
            get(address, "/debug/memprof/", &host, within).0,
            200,
            "{host}"
        );
    }
    for host in [
        format!("rebound.example:{port}"),
        "rebound.example".to_owned(),
        format!("localhost.rebound.example:{port}"),
    ] {
        for path in ["/debug/memprof/", "/debug/pprof/heap"] {
            let status = get(address, path, &host, within).0;
            assert!(
                (400..500).contains(&status),
                "Host {host} on {path}: {status}"
            );
        }
    }
}

#[test]
fn binding_beyond_loopback_warns() {
    if let Ok(address) = std::env::var(CHILD) {
        memprof::serve_http(address.as_str()).unwrap();
        return;
    }
    let stderr_of = |address: &str| {
        let output = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "binding_beyond_loopback_warns", "--nocapture"])
            .env(CHILD, address)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let everywhere = stderr_of("0.0.0.0:0");
    assert!(
        everywhere.contains("memprof:") && everywhere.contains("beyond this machine's loopback"),
        "{everywhere}"
    );
    let loopback = stderr_of("127.0.0.1:0");
    assert!(!loopback.contains("loopback"), "{loopback}");
}
