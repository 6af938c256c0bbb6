//! An event dropped because no buffer could be had (the writer far behind a destination that does
//! not read, every buffer waiting for it) does not stop the trace: the thread keeps its number,
//! its later events reach the destination while the program runs, and the end record counts what
//! was dropped. The destination is a FIFO nobody opens yet, so the writer writes nothing and
//! recycles no buffer; the child's address space is limited while it asks, so that no new buffer
//! can be mapped, as when the buffers run out.

#![cfg(feature = "trace")]

mod common;

use memprof_trace::{Reader, Record};
use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Limits the process's address space to what it maps now and a quarter of a trace buffer more
/// (`true`), or lifts the limit (`false`): trace buffers are mapped, one at a time, so no new one
/// can be had while the limit holds, as when the buffers run out; the churn's blocks are reused
/// from the C library's heap.
fn refuse_new_buffers(refuse: bool) {
    let limit = if refuse {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split(' ').next().unwrap().parse().unwrap();
        // SAFETY: no argument.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
        pages * page + (1 << 17)
    } else {
        libc::RLIM_INFINITY
    };
    let limit = libc::rlimit {
        rlim_cur: limit,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid limit, read only.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
}

/// About `buffers` trace buffers' worth of events from this thread.
#[inline(never)]
fn churn(buffers: usize) {
    for i in 0..buffers * 12_000 {
        drop(std::hint::black_box(vec![1u8; 8 + i % 64]));
    }
}

fn child() {
    churn(3);
    refuse_new_buffers(true);
    churn(3);
    refuse_new_buffers(false);
    memprof::mark("after the loss");
    churn(3);
    println!("ready");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    std::process::exit(0);
}

/// The marker labels, thread numbers and end record of the trace in `bytes` so far.
fn read(bytes: &[u8]) -> (Vec<String>, Vec<u32>, Option<(u64, u64)>) {
    let (mut labels, mut threads, mut end) = (Vec::new(), Vec::new(), None);
    let Ok(mut reader) = Reader::new(bytes) else {
        return (labels, threads, end);
    };
    while let Ok(Some(chunk)) = reader.next_chunk() {
        for record in chunk.records().map_while(Result::ok) {
            match record {
                Record::Label { text, .. } => labels.push(text),
                Record::Thread { thread, .. } => threads.push(thread),
                Record::End { events, lost } => end = Some((events, lost)),
                _ => {}
            }
        }
    }
    (labels, threads, end)
}

#[test]
fn trace_goes_on_after_a_lost_event() {
    if std::env::var_os("MEMPROF_TEST_TRACE_CHILD").is_some() {
        child();
    }
    let dir = std::env::temp_dir().join(format!("memprof-trace-lost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("trace.fifo");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "trace_goes_on_after_a_lost_event", "--nocapture"])
        .env("MEMPROF_TEST_TRACE_CHILD", "1")
        .env("MEMPROF_TRACE", &fifo)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the child ended before it was ready"
        );
    }
    // Now the destination reads: the events after the loss arrive while the child waits.
    let bytes = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let bytes = bytes.clone();
        std::thread::spawn(move || {
            let mut file = std::fs::File::open(fifo).unwrap();
            let mut block = [0u8; 1 << 16];
            loop {
                match file.read(&mut block) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => bytes.lock().unwrap().extend_from_slice(&block[..n]),
                }
            }
        })
    };
    let started = Instant::now();
    let seen = loop {
        let (labels, _, _) = read(&bytes.lock().unwrap());
        if labels.iter().any(|l| l == "after the loss") {
            break true;
        }
        if started.elapsed() > Duration::from_secs(30) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stdin = child.stdin.take().unwrap();
    if !seen {
        child.kill().unwrap();
    }
    let _ = stdin.write_all(b"exit\n");
    drop(stdin);
    child.stdout = Some(stdout.into_inner());
    let output = common::wait_within(child, Duration::from_secs(60), "the traced child");
    reader.join().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        seen,
        "the events after the lost one never reached the trace while the program ran\n{stderr}"
    );
    assert!(output.status.success(), "{stderr}");
    let (_, threads, end) = read(&bytes.lock().unwrap());
    let (_, lost) = end.expect("the end record");
    assert!(
        lost > 0,
        "no event was lost: the test did not run out of buffers"
    );
    // One number per thread that allocated: the test's thread, the main thread, and a few of
    // the test harness's.
    assert!(threads.len() < 10, "{} thread numbers", threads.len());
    std::fs::remove_dir_all(&dir).unwrap();
}
