//! `fork` while other threads allocate and report: every child must be able to take a snapshot,
//! allocate, write a report and exit (also through the at-exit report), and its table must hold
//! exactly the blocks its heap holds.
//!
//! The test runs this binary again as a parent process (under a deadline, so that a parent that
//! hangs in `fork` fails the test). The parent starts four threads that allocate and free in a
//! loop and one that takes reports in a loop, then forks [`FORKS`] times, one child at a time;
//! each child gets [`CHILD_DEADLINE`] to exit, and is killed and counted as hung past it.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Children per mode: enough to meet the parent's threads at every stage of their work, few
/// enough for a debug build, where a fork and a child's report are slow.
const FORKS: usize = 100;
/// How long a child may take before it counts as hung.
const CHILD_DEADLINE: Duration = Duration::from_secs(3);
/// Hung children after which a parent stops forking (unless `MEMPROF_TEST_ALL_FORKS` is set,
/// to count them all).
const ENOUGH_HUNG: usize = 5;
/// How long a parent may take in all.
const PARENT_DEADLINE: Duration = Duration::from_secs(120);

/// Blocks the parent's main thread keeps across every fork, and their size.
const KEPT: usize = 100;
const KEPT_SIZE: usize = 777;
/// Blocks each child allocates, and their size.
const CHILD_BLOCKS: usize = 100;
const CHILD_SIZE: usize = 1234;

#[inline(never)]
fn parent_blocks() -> Vec<Box<[u8]>> {
    (0..KEPT)
        .map(|_| vec![7u8; KEPT_SIZE].into_boxed_slice())
        .collect()
}

#[inline(never)]
fn child_blocks() -> Vec<Box<[u8]>> {
    (0..CHILD_BLOCKS)
        .map(|_| vec![1u8; CHILD_SIZE].into_boxed_slice())
        .collect()
}

/// Allocates and frees blocks of sizes between 16 and 700 bytes until `stop`, keeping up to 64.
fn churn(seed: u64, stop: &AtomicBool) {
    let mut state = seed | 1;
    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(64);
    while !stop.load(Ordering::Relaxed) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let size = 16 + (state % 685) as usize;
        if kept.len() == 64 {
            kept.swap_remove((state >> 20) as usize % 64);
        }
        kept.push(vec![0u8; size]);
        // A realloc, a tagged block and a short-lived box now and then.
        if state.is_multiple_of(7)
            && let Some(last) = kept.last_mut()
        {
            last.resize(size + 100, 0);
        }
        if state.is_multiple_of(11) {
            let tagged = memprof::tagged(Box::new([0u64; 4]));
            std::hint::black_box(&tagged);
        }
    }
}

/// Takes reports until `stop`: a snapshot, the TSV log and the per-type counts.
fn report(stop: &AtomicBool) {
    let mut sink = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        sink.clear();
        memprof::log_allocations(&mut sink).unwrap();
        sink.clear();
        memprof::log_object_counts(&mut sink).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `snapshot` holds a block of `size` bytes at the address of each of `blocks` (`true`),
/// or at none of them (`false`); `None` otherwise.
fn holds(snapshot: &memprof::Snapshot, blocks: &[usize], size: usize) -> Option<bool> {
    let found = blocks
        .iter()
        .filter(|&&address| {
            snapshot
                .blocks
                .binary_search_by_key(&address, |b| b.address)
                .is_ok_and(|i| snapshot.blocks[i].size == size as u64)
        })
        .count();
    match found {
        0 => Some(false),
        n if n == blocks.len() => Some(true),
        _ => None,
    }
}

/// The addresses of `blocks`.
fn addresses(blocks: &[Box<[u8]>]) -> Vec<usize> {
    blocks.iter().map(|b| b.as_ptr() as usize).collect()
}

/// What a child does after `fork`; its exit code (0 when everything held).
fn child(kept: &[Box<[u8]>]) -> i32 {
    let snapshot = memprof::Snapshot::take();
    // The parent's blocks are the child's heap too.
    if holds(&snapshot, &addresses(kept), KEPT_SIZE) != Some(true) {
        return 2;
    }
    // The child's only thread: the counters must agree with the blocks exactly.
    if memprof::HeapStats::get().live_blocks != snapshot.blocks.len() as u64 {
        return 3;
    }
    let mine = child_blocks();
    let at = addresses(&mine);
    if holds(&memprof::Snapshot::take(), &at, CHILD_SIZE) != Some(true) {
        return 4;
    }
    let mut log = Vec::new();
    if memprof::log_allocations(&mut log).is_err()
        || !String::from_utf8_lossy(&log).contains("child_blocks")
    {
        return 5;
    }
    drop(mine);
    if holds(&memprof::Snapshot::take(), &at, CHILD_SIZE) != Some(false) {
        return 6;
    }
    // A thread of the child's own records too (with a writer the parent's threads left), and
    // the counts stay exact.
    let theirs = std::thread::spawn(child_blocks).join().unwrap();
    let at = addresses(&theirs);
    let snapshot = memprof::Snapshot::take();
    let live = memprof::HeapStats::get().live_blocks;
    if holds(&snapshot, &at, CHILD_SIZE) != Some(true) || live != snapshot.blocks.len() as u64 {
        return 7;
    }
    0
}

/// Outcome of one child.
enum Outcome {
    Exited(i32),
    Signaled(i32),
    Hung,
}

/// Waits for `pid` for up to [`CHILD_DEADLINE`]; kills it past that.
fn wait_for(pid: libc::pid_t) -> Outcome {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; `pid` is our child.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            return if libc::WIFEXITED(status) {
                Outcome::Exited(libc::WEXITSTATUS(status))
            } else {
                Outcome::Signaled(libc::WTERMSIG(status))
            };
        }
        if start.elapsed() > CHILD_DEADLINE {
            // SAFETY: kills and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Outcome::Hung;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The parent: threads allocating and reporting, and [`FORKS`] children. `at_exit`: the children
/// end through `exit` with `MEMPROF_PRINT_AT_EXIT=1`, their stderr in files under `dir`.
fn parent(at_exit: bool, dir: &std::path::Path) {
    let kept = parent_blocks();
    // Warm the symbolizer, so that children inherit its cache.
    memprof::log_allocations(&mut Vec::new()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads: Vec<_> = (0..4)
        .map(|i| {
            let stop = stop.clone();
            std::thread::spawn(move || churn(0x9E37_79B9 * (i + 1), &stop))
        })
        .collect();
    threads.push({
        let stop = stop.clone();
        std::thread::spawn(move || report(&stop))
    });
    let (mut forks, mut hung, mut failed) = (0, 0, Vec::new());
    let started = Instant::now();
    for i in 0..FORKS {
        std::thread::sleep(Duration::from_micros(200 + (i as u64 * 37) % 800));
        let log = dir.join(format!("child-{i}.log"));
        // SAFETY: the child runs memprof and the code below, then leaves through `_exit` or
        // `exit`; that is what the test checks.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = std::panic::catch_unwind(|| {
                if at_exit {
                    let mine = child_blocks();
                    std::hint::black_box(&mine);
                    let file = std::fs::File::create(&log).unwrap();
                    // SAFETY: points fd 2 at the open file; `file` stays open until exit.
                    unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&file), 2) };
                    std::mem::forget(file);
                    std::mem::forget(mine);
                    std::process::exit(0);
                }
                child(&kept)
            })
            .unwrap_or(99);
            // SAFETY: ends the child without running the parent's at-exit work twice.
            unsafe { libc::_exit(code) };
        }
        match wait_for(pid) {
            Outcome::Exited(0) if at_exit => {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if !text.contains("child_blocks") {
                    failed.push(format!("child {i}: no report at exit: {text:?}"));
                }
            }
            Outcome::Exited(0) => {}
            Outcome::Exited(code) => failed.push(format!("child {i}: exit code {code}")),
            Outcome::Signaled(signal) => failed.push(format!("child {i}: signal {signal}")),
            Outcome::Hung => hung += 1,
        }
        let _ = std::fs::remove_file(&log);
        forks = i + 1;
        if hung >= ENOUGH_HUNG && std::env::var_os("MEMPROF_TEST_ALL_FORKS").is_none() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    println!(
        "forks: {forks}, hung: {hung}, failed: {}, in {:.1} s",
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    for f in &failed {
        println!("{f}");
    }
    assert_eq!((hung, failed.len()), (0, 0), "{failed:?}");
    drop(kept);
}

/// Runs this test again as a parent in `mode`, under [`PARENT_DEADLINE`]; returns its stdout.
fn run_parent(mode: &str) -> String {
    let dir = std::env::temp_dir().join(format!("memprof-fork-{}-{mode}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "fork", "--nocapture", "--test-threads=1"])
        .env("MEMPROF_TEST_PARENT", mode)
        .env("MEMPROF_TEST_DIR", &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if mode == "exit" {
        command.env("MEMPROF_PRINT_AT_EXIT", "1");
    }
    let output = common::wait_within(
        command.spawn().unwrap(),
        PARENT_DEADLINE,
        &format!("the {mode} parent"),
    );
    let (status, stdout) = (output.status, String::from_utf8(output.stdout).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    let summary = stdout.lines().find(|l| l.contains("forks:")).unwrap_or("");
    eprintln!("{mode}: {}", summary.trim_start_matches("test fork ... "));
    assert!(
        status.success(),
        "the {mode} parent failed ({status}):\n{stdout}"
    );
    stdout
}

#[test]
fn fork() {
    match std::env::var("MEMPROF_TEST_PARENT").as_deref() {
        Ok(mode) => {
            let dir = std::path::PathBuf::from(std::env::var_os("MEMPROF_TEST_DIR").unwrap());
            parent(mode == "exit", &dir);
        }
        Err(_) => {
            run_parent("snapshot");
            run_parent("exit");
        }
    }
}
