//! The stress case: for a bounded time, threads allocate, grow and free blocks of random sizes and
//! alignments, hand blocks to each other to free, exit with blocks still live, while a reader
//! takes snapshots and writes every report. A watchdog ends the process if anything hangs. At the
//! end, the live table holds exactly the blocks the program holds.
//!
//! `MEMPROF_STRESS_SECONDS` sets how long it runs (default 6). Forks, `dlopen`/`dlclose` races,
//! signal handlers and garbage in the variables have their own tests (`fork`, `dlclose_race`,
//! `signal_frees`, `config_warnings`, `dump_races_exit`).

use std::alloc::{Layout, alloc, dealloc, realloc};
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

const WORKERS: usize = 6;

/// The sizes this test allocates: between 1,000 and 64,000 bytes and 37 past a multiple of 64,
/// sizes nothing else in the process asks for, so the table's blocks of these sizes are the test's.
fn is_test_size(size: u64) -> bool {
    (1000..64_000).contains(&size) && size % 64 == 37
}

/// A small xorshift generator: the test needs no allocation to draw a number.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn size(&mut self) -> usize {
        1000 / 64 * 64 + 64 + 37 + (self.next() % 900) as usize * 64
    }

    fn align(&mut self) -> usize {
        1 << (self.next() % 13)
    }
}

/// A block the program holds: where, and with which layout.
struct Held {
    address: usize,
    layout: Layout,
}

// SAFETY: a `Held` is a plain record of a block; whoever holds it is the one thread that frees it.
unsafe impl Send for Held {}

fn allocate(rng: &mut Rng) -> Held {
    let layout = Layout::from_size_align(rng.size(), rng.align()).unwrap();
    // SAFETY: the layout's size is not zero.
    let address = unsafe { alloc(layout) } as usize;
    assert_ne!(address, 0, "out of memory");
    Held { address, layout }
}

fn free(block: Held) {
    // SAFETY: the block was allocated with this layout and is freed once, by its holder.
    unsafe { dealloc(block.address as *mut u8, block.layout) }
}

fn grow(block: Held, rng: &mut Rng) -> Held {
    let size = rng.size();
    // SAFETY: the block was allocated with this layout; the new size is not zero and keeps the
    // same alignment's rules.
    let address = unsafe { realloc(block.address as *mut u8, block.layout, size) } as usize;
    assert_ne!(address, 0, "out of memory");
    Held {
        address,
        layout: Layout::from_size_align(size, block.layout.align()).unwrap(),
    }
}

/// One worker: allocates, grows and frees its own blocks, frees what its neighbour sends, sends
/// some of its own to the next worker, and returns with the blocks it keeps.
#[inline(never)]
fn work(
    seed: u64,
    stop: &AtomicBool,
    operations: &AtomicU64,
    to_next: mpsc::Sender<Held>,
    from_previous: mpsc::Receiver<Held>,
) -> Vec<Held> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut mine: Vec<Held> = Vec::with_capacity(4096);
    let mut done = 0;
    while !stop.load(Ordering::Relaxed) {
        match rng.next() % 8 {
            0..=2 => mine.push(allocate(&mut rng)),
            3 if !mine.is_empty() => {
                let i = (rng.next() as usize) % mine.len();
                let block = mine.swap_remove(i);
                mine.push(grow(block, &mut rng));
            }
            4 | 5 if !mine.is_empty() => {
                let i = (rng.next() as usize) % mine.len();
                free(mine.swap_remove(i));
            }
            6 if !mine.is_empty() => {
                let i = (rng.next() as usize) % mine.len();
                let _ = to_next.send(mine.swap_remove(i));
            }
            _ => {}
        }
        while let Ok(block) = from_previous.try_recv() {
            free(block);
        }
        if mine.len() > 2000 {
            free(mine.swap_remove(0));
        }
        done += 1;
    }
    operations.fetch_add(done, Ordering::Relaxed);
    // What the previous worker sent before it stopped is this worker's to free.
    drop(to_next);
    for block in from_previous {
        free(block);
    }
    mine
}

/// Ends the process if the test has not finished by `deadline`: a hang fails instead of stalling.
fn watchdog(deadline: Duration, finished: &'static AtomicBool) {
    std::thread::spawn(move || {
        let started = Instant::now();
        while started.elapsed() < deadline {
            if finished.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let message = b"stress: the watchdog's deadline passed: something hangs\n";
        // SAFETY: writes a static buffer to stderr and ends the process; both are
        // async-signal-safe and take no lock that a hung thread may hold.
        unsafe {
            libc::write(2, message.as_ptr().cast(), message.len());
            libc::_exit(3);
        }
    });
}

/// The live blocks of the test's sizes in the table, by address.
fn recorded() -> HashMap<usize, u64> {
    memprof::Snapshot::take()
        .blocks
        .iter()
        .filter(|b| is_test_size(b.size))
        .map(|b| (b.address, b.size))
        .collect()
}

#[test]
fn threads_readers_and_exits_keep_the_table_exact() {
    static FINISHED: AtomicBool = AtomicBool::new(false);
    let seconds: u64 = std::env::var("MEMPROF_STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    watchdog(Duration::from_secs(seconds * 10 + 60), &FINISHED);

    let stop = AtomicBool::new(false);
    let operations = AtomicU64::new(0);
    let reports = AtomicU64::new(0);
    let started = Instant::now();
    let kept: Vec<Held> = std::thread::scope(|scope| {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..WORKERS).map(|_| mpsc::channel()).unzip();
        let mut receivers: Vec<Option<mpsc::Receiver<Held>>> =
            receivers.into_iter().map(Some).collect();
        let mut workers = Vec::new();
        for (w, to_next) in senders.into_iter().enumerate() {
            // Worker `w` sends to worker `w + 1` and receives from worker `w - 1`.
            let from_previous = receivers[(w + WORKERS - 1) % WORKERS].take().unwrap();
            let (stop, operations) = (&stop, &operations);
            workers.push(
                scope.spawn(move || work(w as u64 + 1, stop, operations, to_next, from_previous)),
            );
        }
        // A reader: snapshots and every report, while the workers run.
        let (stop, reports) = (&stop, &reports);
        scope.spawn(move || {
            let mut sink = std::io::sink();
            while !stop.load(Ordering::Relaxed) {
                let snapshot = memprof::Snapshot::take();
                assert!(snapshot.blocks.len() as u64 <= snapshot.stats.live_blocks);
                memprof::pretty_log_allocations(&mut sink).unwrap();
                memprof::log_allocations(&mut sink).unwrap();
                memprof::log_object_counts(&mut sink).unwrap();
                let _ = memprof::HeapStats::get();
                reports.fetch_add(1, Ordering::Relaxed);
            }
        });
        // Threads that exit with blocks still live, one after another.
        scope.spawn(|| {
            let mut handed_over = Vec::new();
            let mut seed = 1000;
            while !stop.load(Ordering::Relaxed) {
                seed += 1;
                let block = std::thread::spawn(move || allocate(&mut Rng(seed)))
                    .join()
                    .unwrap();
                handed_over.push(block);
                if handed_over.len() > 200 {
                    free(handed_over.swap_remove(0));
                }
            }
            for block in handed_over {
                free(block);
            }
        });
        std::thread::sleep(Duration::from_secs(seconds));
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let elapsed = started.elapsed();

    // The table holds exactly the blocks the workers kept, with their sizes.
    let table = recorded();
    let truth: HashMap<usize, u64> = kept
        .iter()
        .map(|b| (b.address, b.layout.size() as u64))
        .collect();
    let missing = truth
        .iter()
        .filter(|(a, s)| table.get(a) != Some(s))
        .count();
    let extra = table.keys().filter(|a| !truth.contains_key(a)).count();
    let ops = operations.load(Ordering::Relaxed);
    let mut stderr = std::io::stderr();
    let _ = writeln!(
        stderr,
        "stress: {WORKERS} workers, {ops} operations in {elapsed:.1?} ({:.0} per second), {} \
         snapshots with reports, {} blocks kept; {missing} missing from the table, {extra} in it \
         that the program freed",
        ops as f64 / elapsed.as_secs_f64(),
        reports.load(Ordering::Relaxed),
        kept.len(),
    );
    assert_eq!((missing, extra), (0, 0));
    assert!(reports.load(Ordering::Relaxed) > 0 && ops > 0);

    for block in kept {
        free(block);
    }
    assert!(recorded().is_empty(), "blocks left after every free");
    FINISHED.store(true, Ordering::Relaxed);
}
