//! A `tcp://` destination whose connect never completes (a listener whose queue of connections is
//! full, so its SYNs go unanswered) does not hold the program's exit: it exits within seconds,
//! its status its own, with a warning naming the destination.

#![cfg(feature = "trace")]

mod common;

use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn work() {
    let kept: Vec<String> = (0..20_000).map(|i| format!("entry {i}")).collect();
    drop(kept);
}

/// A listener on 127.0.0.1 with a backlog of 0, never accepting; its file descriptor and address.
fn listener() -> (i32, SocketAddr) {
    // SAFETY: plain socket calls on a socket of this function's, with a valid address and lengths.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let mut address: libc::sockaddr_in = std::mem::zeroed();
        address.sin_family = libc::AF_INET as libc::sa_family_t;
        address.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(libc::bind(fd, (&raw const address).cast(), size), 0, "bind");
        assert_eq!(libc::listen(fd, 0), 0, "listen");
        let mut bound: libc::sockaddr_in = std::mem::zeroed();
        let mut length = size;
        assert_eq!(
            libc::getsockname(fd, (&raw mut bound).cast(), &mut length),
            0
        );
        let port = u16::from_be(bound.sin_port);
        (fd, SocketAddr::from(([127, 0, 0, 1], port)))
    }
}

#[test]
fn exit_behind_a_connect_that_never_completes() {
    if std::env::var_os("MEMPROF_TEST_TRACE_CHILD").is_some() {
        work();
        std::process::exit(0);
    }
    let (fd, address) = listener();
    // Fill the accept queue: further connects get no answer.
    let mut queued = Vec::new();
    for _ in 0..4 {
        if let Ok(stream) = TcpStream::connect_timeout(&address, Duration::from_millis(500)) {
            queued.push(stream);
        }
    }
    assert!(
        TcpStream::connect_timeout(&address, Duration::from_millis(500)).is_err(),
        "the listener's queue is not full"
    );
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "exit_behind_a_connect_that_never_completes",
            "--nocapture",
        ])
        .env("MEMPROF_TEST_TRACE_CHILD", "1")
        .env("MEMPROF_TRACE", format!("tcp://{address}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(child, Duration::from_secs(30), "exit behind a connect");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\n{stderr}", output.status);
    assert!(stderr.contains(&format!("tcp://{address}")), "{stderr}");
    drop(queued);
    // SAFETY: the listener's descriptor, closed once.
    unsafe { libc::close(fd) };
}
