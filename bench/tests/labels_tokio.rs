//! Labels on a multi-threaded tokio runtime: two kinds of request task, each wrapped with its
//! labels (`Labels::attach`), move between worker threads as they wait, keep some blocks, and
//! hand others to a shared queue where other tasks (of either kind) free them. The live and
//! allocated bytes per label set are exact, whichever thread polled a task and whichever task
//! freed a block; a nested `with_labels` inside a task adds its key to the task's labels.
//!
//! The tasks only wait on channels their senders fill from the test's own thread (ten times
//! each), so the wake-ups go through the runtime's shared queue and any worker may pick a task
//! up; the test checks that some did move. tokio itself allocates nothing while a task is
//! polled, so only the tasks' own blocks carry labels.

use memprof::Labels;
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Tasks of each kind.
const TASKS: usize = 100;

/// Blocks the tasks keep for the rest of the test.
static KEPT: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
/// Blocks handed over for other tasks to free.
static HANDED: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// Worker threads numbered as they first poll a task.
static NEXT_WORKER: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's number (from 1); 0 until it first polls a task.
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// The polling thread's number, as a bit.
fn worker_bit() -> u64 {
    WORKER.with(|w| {
        if w.get() == 0 {
            w.set(NEXT_WORKER.fetch_add(1, Ordering::Relaxed) + 1);
        }
        1 << (w.get() % 64)
    })
}

#[inline(never)]
fn block(size: usize) -> Vec<u8> {
    let block = Vec::with_capacity(size);
    std::hint::black_box(&block);
    block
}

/// Keeps `sizes` live, and hands `handed` over; then frees one block another task handed over.
fn allocate(kept: &[usize], handed: &[usize]) {
    for &size in kept {
        KEPT.lock().unwrap().push(block(size));
    }
    for &size in handed {
        HANDED.lock().unwrap().push(block(size));
    }
    let other = HANDED.lock().unwrap().pop();
    drop(other);
}

/// Times a request waits to be woken from outside the runtime, each a chance to move.
const WAITS: usize = 10;

/// A request: allocates in its first polls, waiting on `wakes` in between; returns the worker
/// threads that polled it.
async fn request(upload: bool, wakes: Vec<tokio::sync::oneshot::Receiver<()>>) -> u64 {
    let mut workers = worker_bit();
    if upload {
        allocate(&[1000, 70_000], &[800]);
    } else {
        allocate(&[500], &[300]);
    }
    for (i, wake) in wakes.into_iter().enumerate() {
        wake.await.unwrap();
        workers |= worker_bit();
        if i == 0 {
            if upload {
                allocate(&[24], &[800]);
            } else {
                allocate(&[500], &[100_000]);
                memprof::with_labels(&[("phase", "parse")], || allocate(&[64], &[]));
            }
        }
    }
    workers
}

/// `(live blocks, live bytes, allocated blocks, allocated bytes)` of the label set written
/// `labels` in `log_labels`.
fn logged(log: &str, labels: &str) -> [u64; 4] {
    let line = log
        .lines()
        .find(|l| l.ends_with(&format!("\t{labels}")))
        .unwrap_or_else(|| panic!("no {labels} in\n{log}"));
    let n: Vec<u64> = line
        .split('\t')
        .take(4)
        .map(|f| f.parse().unwrap())
        .collect();
    [n[0], n[1], n[2], n[3]]
}

#[test]
fn live_bytes_per_label_are_exact_across_workers_and_tasks() {
    // Room for every block first: the queues never grow while a task is polled.
    KEPT.lock().unwrap().reserve(10 * TASKS);
    HANDED.lock().unwrap().reserve(10 * TASKS);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let upload = Labels::new(&[("kind", "upload")]);
    let query = Labels::new(&[("kind", "query")]);
    let mut handles = Vec::new();
    let mut rounds: Vec<Vec<tokio::sync::oneshot::Sender<()>>> =
        (0..WAITS).map(|_| Vec::new()).collect();
    for i in 0..2 * TASKS {
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..WAITS).map(|_| tokio::sync::oneshot::channel()).unzip();
        for (round, sender) in rounds.iter_mut().zip(senders) {
            round.push(sender);
        }
        let is_upload = i % 2 == 0;
        let labels = if is_upload { upload } else { query };
        handles.push(runtime.spawn(labels.attach(request(is_upload, receivers))));
    }
    // Each round wakes every task from this thread, in turns from either end.
    for (r, round) in rounds.into_iter().enumerate() {
        let mut round = round;
        if r % 2 == 1 {
            round.reverse();
        }
        for tx in round {
            tx.send(()).unwrap();
        }
    }
    let workers: Vec<u64> = runtime.block_on(async {
        let mut workers = Vec::new();
        for handle in handles {
            workers.push(handle.await.unwrap());
        }
        workers
    });
    drop(runtime);
    // The blocks nobody freed yet go now, from this thread.
    HANDED.lock().unwrap().clear();

    let moved = workers.iter().filter(|w| w.count_ones() > 1).count();
    assert!(
        moved > 0,
        "no task ran on more than one worker: {workers:?}"
    );
    assert_eq!(Labels::current(), Labels::NONE);

    let mut out = Vec::new();
    memprof::log_labels(&mut out).unwrap();
    let log = String::from_utf8(out).unwrap();
    let n = TASKS as u64;
    // Uploads keep 1000 + 70,000 + 24 bytes and hand 2 x 800 over.
    assert_eq!(
        logged(&log, "kind=upload"),
        [3 * n, 71_024 * n, 5 * n, 72_624 * n],
        "{log}"
    );
    // Queries keep 2 x 500 and hand 300 and 100,000 over; their nested set keeps 64.
    assert_eq!(
        logged(&log, "kind=query"),
        [2 * n, 1000 * n, 4 * n, 101_300 * n],
        "{log}"
    );
    assert_eq!(
        logged(&log, "kind=query,phase=parse"),
        [n, 64 * n, n, 64 * n],
        "{log}"
    );
    eprintln!(
        "{moved} of {} tasks ran on more than one worker",
        workers.len()
    );
}
