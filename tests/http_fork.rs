//! A program that serves the HTTP endpoint forks a child that lives on after the program exits:
//! the child closed its copy of the listening socket, so the address refuses connections and can
//! be bound again, instead of queueing scrapers that nobody answers; the child's reports still
//! work, and it may serve on an address of its own, forked while its parent's endpoint made
//! profiles for a scraper.

#![cfg(feature = "http")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the program.
const PROGRAM: &str = "MEMPROF_TEST_HTTP_FORK";

/// The program: serves, forks a child that waits for stdin to close, says where it served and
/// which child it forked, and exits.
fn program() {
    let address = memprof::serve_http("127.0.0.1:0").unwrap();
    let index = common::http_get(address, "/debug/memprof/").unwrap();
    assert_eq!(index.status, 200);
    // The peak is not tracked: the index page prints it as the lower bound it is.
    let page = String::from_utf8_lossy(&index.body);
    assert!(page.contains("; peak ≥ "), "{page}");
    // A scraper asks for profiles while the program forks, so a worker may be making one.
    let scraper = std::thread::spawn(move || {
        for _ in 0..20 {
            assert_eq!(
                common::http_get(address, "/debug/pprof/heap")
                    .unwrap()
                    .status,
                200
            );
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    std::io::stdout().flush().unwrap();
    // SAFETY: the child only reports, reads stdin and leaves through `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let devnull = std::fs::File::options()
            .write(true)
            .open("/dev/null")
            .unwrap();
        let code = std::panic::catch_unwind(|| {
            // The parent's output pipes are the test's: let them close when the parent exits.
            // SAFETY: replaces this process's stdout and stderr with /dev/null.
            unsafe {
                libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&devnull), 1);
                libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&devnull), 2);
            }
            let mut report = Vec::new();
            memprof::log_allocations(&mut report).unwrap();
            assert!(!report.is_empty());
            // The child may serve on an address of its own: it finds the endpoint's locks free.
            let own = memprof::serve_http("127.0.0.1:0").unwrap();
            let heap = common::http_get(own, "/debug/pprof/heap").unwrap();
            assert_eq!(heap.status, 200);
            let mut buffer = [0u8; 16];
            while std::io::stdin().read(&mut buffer).is_ok_and(|n| n > 0) {}
        })
        .map_or(1, |()| 0);
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    scraper.join().unwrap();
    println!("SERVED {address} CHILD {pid}");
}

#[test]
fn forked_child_closes_the_listener() {
    if std::env::var_os(PROGRAM).is_some() {
        program();
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "forked_child_closes_the_listener", "--nocapture"])
        .env(PROGRAM, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let output = common::wait_within(child, Duration::from_secs(60), "the serving program");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = BufReader::new(&output.stdout[..])
        .lines()
        .map(Result::unwrap)
        .find(|l| l.starts_with("SERVED "))
        .expect("the program says where it served");
    let words: Vec<&str> = line.split_whitespace().collect();
    let address: SocketAddr = words[1].parse().unwrap();
    let pid: libc::pid_t = words[3].parse().unwrap();
    assert!(alive(pid), "the forked child lives on");

    let refused = TcpStream::connect_timeout(&address, Duration::from_secs(5)).unwrap_err();
    assert_eq!(
        refused.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{refused}"
    );
    drop(TcpListener::bind(address).expect("the address is free again"));

    drop(stdin);
    let started = Instant::now();
    while alive(pid) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the child did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` runs: it exists and is not a zombie that its new parent has yet to reap.
fn alive(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}
