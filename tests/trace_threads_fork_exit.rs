//! No event lost: 8 threads, some ending mid-run (one freeing memory from a thread-local
//! destructor after its own flush), a fork whose child allocates, a pause, and
//! `std::process::exit` while threads still hold blocks: the trace replayed to its end equals
//! the live table at exit, block for block. Run whole and sampled. The forked child writes
//! nothing into the parent's trace.

#![cfg(feature = "trace")]

mod common;

use common::trace_replay::{self, replay};
use std::cell::RefCell;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// A size only the forked child allocates.
const CHILD_SIZE: usize = 77_777;

thread_local! {
    /// Registered before the thread's first allocation, so destroyed after the thread's trace
    /// buffer is handed over: its free goes to the trace's ended-threads buffer.
    static LATE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

#[inline(never)]
fn churn(seed: usize, rounds: usize) -> Vec<Box<[u8]>> {
    let mut kept = Vec::new();
    let mut text = String::new();
    for i in 0..rounds {
        let block = vec![seed as u8; 8 + (i * 31 + seed) % 300].into_boxed_slice();
        text.push_str("grow");
        if i % 5 == 0 {
            kept.push(block);
        }
        if i % 2000 == 1999 {
            kept.drain(..kept.len() / 2);
            text = String::new();
        }
    }
    kept
}

fn child(dir: &Path) {
    let rounds = 30_000;
    let (park_tx, park_rx) = mpsc::channel::<()>();
    let park_rx = std::sync::Arc::new(std::sync::Mutex::new(park_rx));
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let mut ending = Vec::new();
    for t in 0..8 {
        let ready_tx = ready_tx.clone();
        let park_rx = park_rx.clone();
        let handle = std::thread::spawn(move || {
            if t == 0 {
                // Touched before any allocation of this thread.
                LATE.with(|_| {});
            }
            let kept = churn(t, rounds);
            if t == 0 {
                LATE.with(|late| late.borrow_mut().push(vec![1; 4000]));
            }
            if t % 2 == 0 {
                // Ends mid-run, some blocks freed by the main thread later.
                return Some(kept);
            }
            ready_tx.send(()).unwrap();
            // Parked until the process exits, its blocks live.
            let _ = park_rx.lock().unwrap().recv();
            drop(kept);
            None
        });
        if t % 2 == 0 {
            ending.push(handle);
        }
    }
    let ended: Vec<_> = ending.into_iter().map(|h| h.join().unwrap()).collect();
    for _ in 0..4 {
        ready_rx.recv().unwrap();
    }
    // SAFETY: the child only allocates, frees and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let block = std::hint::black_box(vec![7u8; CHILD_SIZE]);
        drop(block);
        let more = churn(99, 1000);
        drop(more);
        std::process::exit(0);
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert_eq!(status, 0);
    memprof::pause();
    let unrecorded = churn(5, 1000);
    memprof::resume();
    drop(unrecorded);
    drop(ended.into_iter().flatten().take(2).collect::<Vec<_>>());
    let mine = churn(11, rounds);
    *TABLE_AT_EXIT.lock().unwrap() = Some(dir.join(format!("exit-{}.table", std::process::id())));
    // Registered after the profiler's own at-exit close, so it runs before it: the table as the
    // trace ends, after what `std::process::exit` frees before the C library's exit (stdout's
    // buffer).
    // SAFETY: `table_at_exit` is an `extern "C" fn()` that does not unwind.
    assert_eq!(unsafe { libc::atexit(table_at_exit) }, 0);
    std::mem::forget((mine, park_tx));
    std::process::exit(0);
}

static TABLE_AT_EXIT: std::sync::Mutex<Option<std::path::PathBuf>> = std::sync::Mutex::new(None);

extern "C" fn table_at_exit() {
    if let Some(path) = TABLE_AT_EXIT.lock().unwrap().as_ref() {
        trace_replay::write_table(path);
    }
}

fn run(dir: &Path, sampling: Option<&str>) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "no_event_lost", "--nocapture"])
        .env("MEMPROF_TEST_TRACE_DIR", dir)
        .env("MEMPROF_TRACE", dir.join("run-%p.mptrace"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(interval) = sampling {
        command.env("MEMPROF_SAMPLE_INTERVAL", interval);
    }
    let child = command.spawn().unwrap();
    let pid = child.id();
    let output = common::wait_within(
        child,
        std::time::Duration::from_secs(120),
        "the traced child",
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let traces: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mptrace"))
        .collect();
    // The forked child traced nothing, under its own name or into the parent's file.
    assert_eq!(traces, vec![dir.join(format!("run-{pid}.mptrace"))]);
    let bytes = std::fs::read(&traces[0]).unwrap();
    let whole = replay(&bytes, None);
    assert!(whole.error.is_none(), "{:?}", whole.error);
    let (events, lost) = whole.end.expect("closed at exit");
    assert_eq!((events, lost), (whole.events, 0));
    let table = trace_replay::read_table(&dir.join(format!("exit-{pid}.table")));
    trace_replay::assert_same(&whole, &table, "at exit");
    assert!(
        whole
            .live
            .values()
            .all(|&(size, _)| size != CHILD_SIZE as u64)
    );
    assert!(whole.threads.len() >= 9, "{:?}", whole.threads);
    match sampling {
        None => {
            assert_eq!(whole.header.sample_interval, 0);
            assert!(events > 8 * 30_000, "{events}");
        }
        Some(_) => {
            assert_eq!(whole.header.sample_interval, 4096);
            assert!(
                events < 8 * 30_000 && table.0.len() > 20,
                "{events}, {}",
                table.0.len()
            );
        }
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
}

#[test]
fn no_event_lost() {
    if let Some(dir) = std::env::var_os("MEMPROF_TEST_TRACE_DIR") {
        child(Path::new(&dir));
        return;
    }
    let dir = std::env::temp_dir().join(format!("memprof-trace-threads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    run(&dir, None);
    run(&dir, Some("bytes:4096"));
    std::fs::remove_dir_all(&dir).unwrap();
}
