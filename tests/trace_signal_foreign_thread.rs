//! Trace mode on, a signal handler frees a Rust block on a thread memprof has never seen (made
//! with `pthread_create`, it only calls the C library's `malloc` and `free`), while that thread
//! is inside them: that free is the thread's first trace event. Taking a trace buffer for it, and
//! a thread number, must neither allocate nor register a thread-exit destructor (glibc's
//! `__cxa_thread_atexit_impl` calls `calloc`): either would wait for the lock the interrupted
//! `malloc` holds. A hang is the failure: the test runs itself as a child process under a
//! deadline. Then every free reaches the trace, though the threads that made them never
//! registered an end-of-thread flush.

#![cfg(feature = "trace")]

mod common;

use common::trace_replay::replay;
use memprof_trace::{Reader, Record};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child process, which runs the rounds.
const CHILD: &str = "MEMPROF_TEST_TRACE_SIGNAL_FOREIGN_THREAD_CHILD";
/// Rounds: a new thread each, one signal each.
const ROUNDS: usize = 300;
/// How long the child may take for all of them.
const DEADLINE: Duration = Duration::from_secs(60);
/// The size of the blocks the handlers free: no other block of the test has it.
const SIZE: usize = 4321;

fn rounds() {
    common::foreign_thread::run(ROUNDS, SIZE);
}

#[test]
fn a_handler_frees_on_a_thread_memprof_never_saw_while_tracing() {
    if std::env::var_os(CHILD).is_some() {
        rounds();
        return;
    }
    let path = std::env::temp_dir().join(format!(
        "memprof-trace-signal-foreign-{}.mptrace",
        std::process::id()
    ));
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_handler_frees_on_a_thread_memprof_never_saw_while_tracing",
        ])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("MEMPROF_TRACE", &path)
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "the child failed: {status}");
            break;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(&path);
            panic!("{ROUNDS} rounds did not end in {DEADLINE:?}: a handler's free hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();

    // The blocks of the rounds: allocated by the main thread, freed each on its own thread.
    let mut reader = Reader::new(&bytes[..]).unwrap();
    let mut allocated = 0;
    let mut main_thread = None;
    let mut freeing_threads = std::collections::HashSet::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        let thread = chunk.header.thread;
        for record in chunk.records() {
            match record.unwrap() {
                Record::Alloc { size, .. } if size == SIZE as u64 => {
                    allocated += 1;
                    main_thread = Some(thread);
                }
                Record::Free { .. } => {
                    freeing_threads.insert(thread);
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        allocated, ROUNDS,
        "the rounds' blocks allocated in the trace"
    );
    let replayed = replay(&bytes, None);
    assert_eq!(replayed.error, None);
    let (_, lost) = replayed.end.expect("the trace was closed");
    assert_eq!(lost, 0, "events lost");
    assert!(
        replayed.conflicts.is_empty(),
        "{:?}",
        &replayed.conflicts[..5.min(replayed.conflicts.len())]
    );
    let still_live = replayed
        .live
        .values()
        .filter(|(size, _)| *size == SIZE as u64)
        .count();
    assert_eq!(still_live, 0, "blocks whose free is missing from the trace");
    // The frees were made on the rounds' threads, each with a number of its own.
    freeing_threads.remove(&main_thread.unwrap());
    freeing_threads.remove(&0);
    assert!(
        freeing_threads.len() >= ROUNDS,
        "{} threads made frees",
        freeing_threads.len()
    );
}
