//! Many scrapers at once on the HTTP endpoint of a program whose threads allocate hard: no
//! deadlock, no crash, every response whole, and at the end the profile's counts equal the
//! truth; the endpoint's own work, hundreds of requests, adds nothing to them; slow clients that
//! never finish their request hold neither the program nor the other scrapers.
//!
//! The program is this test binary run again as a child, with `MEMPROF_HTTP=127.0.0.1:0`: it
//! says on stderr where it serves. Twenty scraper threads ask for every path in turn, `?seconds=1`
//! deltas among them, while two threads of the child allocate from two call sites and count what
//! they allocate; two more clients send half a request and wait. `MEMPROF_STRESS_SECONDS` sets how
//! long the child allocates (default 3).

#![cfg(feature = "http")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child.
const CHILD: &str = "MEMPROF_TEST_HTTP_SCRAPERS";

/// Threads of the child that allocate.
const THREADS: usize = 2;

/// Blocks each of them keeps live at once.
const RING: usize = 500;

const SCRAPERS: usize = 20;

const PATHS: [&str; 9] = [
    "/debug/pprof/heap",
    "/debug/pprof/allocs",
    "/debug/pprof/delta_heap",
    "/debug/memprof/report.md",
    "/debug/memprof/report.tsv",
    "/debug/memprof/crates",
    "/debug/memprof/objects",
    "/debug/memprof/",
    "/debug/pprof/heap?seconds=1",
];

#[inline(never)]
fn kept_block() -> Vec<u8> {
    let block = Vec::with_capacity(1000);
    // Used after the call, so the call is not a tail call that would leave no frame.
    std::hint::black_box(&block);
    block
}

#[inline(never)]
fn temporary_block() -> Vec<u8> {
    let block = Vec::with_capacity(64);
    std::hint::black_box(&block);
    block
}

/// The child: allocates from two sites on [`THREADS`] threads for `seconds`, says how many
/// iterations they made, keeps the live blocks and waits for stdin to close.
fn child(seconds: u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut ring: Vec<Vec<u8>> = Vec::with_capacity(RING);
                let mut iterations = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let block = kept_block();
                    if ring.len() < RING {
                        ring.push(block);
                    } else {
                        ring[iterations % RING] = block;
                    }
                    drop(std::hint::black_box(temporary_block()));
                    iterations += 1;
                }
                (iterations, ring)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let results: Vec<(usize, Vec<Vec<u8>>)> =
        threads.into_iter().map(|t| t.join().unwrap()).collect();
    let iterations: Vec<usize> = results.iter().map(|r| r.0).collect();
    let mut stdout = std::io::stdout();
    writeln!(stdout, "DONE {iterations:?}").unwrap();
    stdout.flush().unwrap();
    // From here on the program allocates nothing: what the endpoint serves must not change.
    let mut buffer = [0u8; 64];
    while std::io::stdin().read(&mut buffer).is_ok_and(|n| n > 0) {}
    drop(results);
}

#[test]
fn scrapers_while_threads_allocate() {
    let seconds: u64 = std::env::var("MEMPROF_STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    if std::env::var_os(CHILD).is_some() {
        child(seconds);
        return;
    }
    let mut program = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "scrapers_while_threads_allocate", "--nocapture"])
        .env(CHILD, "1")
        .env("MEMPROF_HTTP", "127.0.0.1:0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = program.id();
    let (address_tx, address_rx) = mpsc::channel();
    let stderr = BufReader::new(program.stderr.take().unwrap());
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        for line in stderr.lines() {
            let line = line.unwrap();
            if let Some(at) = line.strip_prefix("memprof: serving the heap profile at http://") {
                let address: SocketAddr = at.split('/').next().unwrap().parse().unwrap();
                let _ = address_tx.send(address);
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let (done_tx, done_rx) = mpsc::channel();
    let stdout = BufReader::new(program.stdout.take().unwrap());
    let stdout = std::thread::spawn(move || {
        for line in stdout.lines() {
            if let Some(counts) = line.unwrap().strip_prefix("DONE ") {
                let counts: Vec<usize> = counts
                    .trim_matches(['[', ']'])
                    .split(", ")
                    .map(|n| n.parse().unwrap())
                    .collect();
                let _ = done_tx.send(counts);
            }
        }
    });
    let address = address_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the child says where it serves");

    let done = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let scrapers: Vec<_> = (0..SCRAPERS)
        .map(|i| {
            let (done, served) = (Arc::clone(&done), Arc::clone(&served));
            std::thread::spawn(move || {
                let mut turn = i;
                while !done.load(Ordering::Relaxed) {
                    let path = PATHS[turn % PATHS.len()];
                    turn += 1;
                    let response =
                        common::http_get(address, path).unwrap_or_else(|e| panic!("{path}: {e}"));
                    assert_eq!(response.status, 200, "{path}: {response:?}");
                    let length: usize = response
                        .head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .unwrap()
                        .parse()
                        .unwrap();
                    assert_eq!(length, response.body.len(), "{path}: a whole body");
                    if path.starts_with("/debug/pprof/") {
                        common::decode_pprof(&response.body);
                    }
                    served.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let mut stream = TcpStream::connect(address).unwrap();
                    stream
                        .write_all(b"GET /debug/pprof/heap HTTP/1.1\r\n")
                        .unwrap();
                    // Never the rest: the server gives up on it after its deadline.
                    let mut answer = Vec::new();
                    let _ = stream.read_to_end(&mut answer);
                }
            })
        })
        .collect();

    let iterations = done_rx
        .recv_timeout(Duration::from_secs(seconds * 10 + 60))
        .expect("the child's threads finish while scraped");
    let started = Instant::now();
    done.store(true, Ordering::Relaxed);
    for scraper in scrapers {
        scraper.join().expect("a scraper failed");
    }
    for client in slow {
        client.join().unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the scrapers took {:?} to finish",
        started.elapsed()
    );
    let served = served.load(Ordering::Relaxed);
    assert!(served >= SCRAPERS, "only {served} responses");

    // The counts equal the truth.
    let total: i64 = iterations.iter().map(|&n| n as i64).sum();
    let live: i64 = iterations.iter().map(|&n| n.min(RING) as i64).sum();
    let profile = heap(address);
    assert_eq!(
        common::pprof_cumulative(&profile, "http_scrapers::kept_block"),
        [total, total * 1000, live, live * 1000]
    );
    assert_eq!(
        common::pprof_cumulative(&profile, "http_scrapers::temporary_block"),
        [total, total * 64, 0, 0]
    );
    // The endpoint's own work is never recorded: a round of every path changes nothing.
    let before = totals(&profile);
    for path in PATHS.iter().filter(|p| !p.contains("seconds")) {
        assert_eq!(
            common::http_get(address, path).unwrap().status,
            200,
            "{path}"
        );
    }
    assert_eq!(
        totals(&heap(address)),
        before,
        "the endpoint's allocations were recorded"
    );

    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let peak_rss = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .unwrap()
        .to_owned();
    drop(program.stdin.take());
    let output = common::wait_within(program, Duration::from_secs(60), "the scraped program");
    let stderr = stderr.join().unwrap();
    stdout.join().unwrap();
    assert!(output.status.success(), "{}\n{stderr}", output.status);
    eprintln!(
        "{served} responses to {SCRAPERS} scrapers in {seconds} s; {} iterations; child {peak_rss}",
        total
    );
}

/// The heap profile the endpoint at `address` serves now.
fn heap(address: SocketAddr) -> common::pprof_proto::Profile {
    let response = common::http_get(address, "/debug/pprof/heap").unwrap();
    assert_eq!(response.status, 200, "{response:?}");
    common::decode_pprof(&response.body)
}

/// Each value of `profile` summed over its samples.
fn totals(profile: &common::pprof_proto::Profile) -> Vec<i64> {
    let mut sums = vec![0; profile.sample_type.len()];
    for sample in &profile.sample {
        for (sum, value) in sums.iter_mut().zip(&sample.value) {
            *sum += value;
        }
    }
    sums
}
