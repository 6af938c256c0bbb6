//! A signal handler frees a Rust block on a thread memprof has never seen (made with
//! `pthread_create`, it only calls the C library's `malloc` and `free`), while that thread is
//! inside them: the free goes through the table without claiming a writer for the thread, which
//! would allocate and wait for the lock the interrupted `malloc` holds. A hang is the failure: the
//! test runs itself as a child process under a deadline.

use std::time::{Duration, Instant};

mod common;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child process, which runs the rounds.
const CHILD: &str = "MEMPROF_TEST_SIGNAL_FOREIGN_THREAD_CHILD";
/// Rounds: a new thread each, one signal each.
const ROUNDS: usize = 300;
/// How long the child may take for all of them.
const DEADLINE: Duration = Duration::from_secs(60);

fn rounds() {
    common::foreign_thread::run(ROUNDS, 64);
    let stats = memprof::HeapStats::get();
    assert!(stats.live_blocks < 1000, "the freed blocks left the table");
}

#[test]
fn a_handler_frees_on_a_thread_memprof_never_saw() {
    if std::env::var_os(CHILD).is_some() {
        rounds();
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_handler_frees_on_a_thread_memprof_never_saw"])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "the child failed: {status}");
            return;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{ROUNDS} rounds did not end in {DEADLINE:?}: a handler's free hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
