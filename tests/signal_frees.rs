//! Frees from a signal handler: a handler (SIGUSR1, sent thousands of times at random moments by
//! another thread) frees blocks the main thread allocated, while the main thread allocates and
//! frees in a loop, so the handler often interrupts memprof in the middle of a change of the
//! table; a third thread takes snapshots and scans the heap meanwhile. At the end the table's
//! blocks must be exactly the live ones, and the object scan must run (it reads every live block;
//! a freed large block is unmapped, so reading one crashes).
//!
//! The handler frees only large blocks, which the wrapped allocator maps on their own: their free
//! is a `munmap`, safe in a handler that interrupted `malloc` (glibc's free of a heap chunk there
//! could wait forever for the arena's lock), and reading one after its free faults.
//!
//! Runs this binary again as the worker, under a deadline, so that a hang or a crash fails the
//! test with a message.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf<Mapping> = memprof::MemProf::wrap(Mapping);

/// Blocks this large or larger get a mapping of their own.
const MAPPED: usize = 64 * 1024;

/// The system allocator, but blocks of [`MAPPED`] bytes or more are mappings of their own.
struct Mapping;

// SAFETY: small blocks are `System`'s; large ones are fresh anonymous mappings, page-aligned (the
// test asks for no larger alignment), unmapped whole at their free.
unsafe impl GlobalAlloc for Mapping {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() < MAPPED {
            // SAFETY: the caller's layout.
            return unsafe { System.alloc(layout) };
        }
        // SAFETY: an anonymous private mapping of the requested size.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if at == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            at.cast()
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() < MAPPED {
            // SAFETY: allocated by `System` with this layout.
            return unsafe { System.dealloc(ptr, layout) };
        }
        // SAFETY: the mapping made for this block, of this size.
        unsafe { libc::munmap(ptr.cast(), layout.size()) };
    }
}

/// Blocks in play.
const SLOTS: usize = 256;
/// Signals sent at the least.
const SIGNALS: usize = 5_000;
/// Frees the handler must have done before the signals stop (more signals are sent until then).
const HANDLER_FREES_WANTED: usize = 1_000;
/// How long the signals may go on.
const STORM: Duration = Duration::from_secs(20);
/// How long the worker may take.
const DEADLINE: Duration = Duration::from_secs(120);

/// The live blocks, by slot: null when the slot is empty. The main thread fills and empties
/// slots; the handler only empties them.
static LIVE: [AtomicPtr<u8>; SLOTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];
/// Frees done by the handler.
static HANDLER_FREES: AtomicUsize = AtomicUsize::new(0);
/// The handler's random state.
static HANDLER_STATE: AtomicU64 = AtomicU64::new(0x2545_F491_4F6C_DD1D);

/// Every this many slots, one holds large blocks: the ones the handler frees.
const LARGE_EVERY: usize = 4;

/// The size of the blocks of slot `i`: unique to the slot, so the table's blocks of each slot can
/// be counted. Large slots are above [`MAPPED`].
fn size_of_slot(i: usize) -> usize {
    if i.is_multiple_of(LARGE_EVERY) {
        300_000 + 16 * i + 8
    } else {
        10_000 + 16 * i + 8
    }
}

fn layout(i: usize) -> Layout {
    Layout::from_size_align(size_of_slot(i), 8).unwrap()
}

fn next(state: u64) -> u64 {
    let mut x = state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// Empties slot `i`, freeing its block; whether it held one.
fn empty(i: usize) -> bool {
    let block = LIVE[i].swap(std::ptr::null_mut(), Ordering::AcqRel);
    if block.is_null() {
        return false;
    }
    // SAFETY: the block came from `GLOBAL.alloc(layout(i))` and the swap gave it to us alone.
    unsafe { GLOBAL.dealloc(block, layout(i)) };
    true
}

extern "C" fn on_usr1(_: libc::c_int) {
    let mut state = HANDLER_STATE.load(Ordering::Relaxed);
    for _ in 0..8 {
        state = next(state);
        if empty(state as usize % (SLOTS / LARGE_EVERY) * LARGE_EVERY) {
            HANDLER_FREES.fetch_add(1, Ordering::Relaxed);
        }
    }
    HANDLER_STATE.store(state, Ordering::Relaxed);
}

/// The worker: the main loop, the signals, then the checks.
fn work() {
    // SAFETY: the handler only swaps atomics and frees through the global allocator.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_usr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
            0
        );
    }
    // The first scan loads the symbolizer: not during the storm.
    memprof::log_object_sizes(&mut Vec::new()).unwrap();
    // SAFETY: `pthread_self` has no preconditions.
    let main = unsafe { libc::pthread_self() } as u64;
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let signaller = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut state = 0x9E37_79B9_7F4A_7C15u64;
            let (start, mut sent) = (Instant::now(), 0);
            while (sent < SIGNALS || HANDLER_FREES.load(Ordering::Relaxed) < HANDLER_FREES_WANTED)
                && start.elapsed() < STORM
            {
                sent += 1;
                state = next(state);
                let pause = Instant::now();
                while pause.elapsed() < Duration::from_micros(state % 200) {
                    std::hint::spin_loop();
                }
                // SAFETY: `main` is the main thread, alive until `done`.
                unsafe { libc::pthread_kill(main as libc::pthread_t, libc::SIGUSR1) };
            }
            done.store(true, Ordering::Release);
            sent
        })
    };
    let reader = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !done.load(Ordering::Acquire) {
                std::hint::black_box(memprof::Snapshot::take());
                if reads.is_multiple_of(16) {
                    memprof::log_object_sizes(&mut Vec::new()).unwrap();
                }
                reads += 1;
            }
            reads
        })
    };
    let mut state = 0xD1B5_4A32_D192_ED03u64;
    let mut rounds = 0u64;
    while !done.load(Ordering::Acquire) {
        state = next(state);
        // Half the time a large slot, the ones the handler frees.
        let i = match state >> 63 {
            0 => state as usize % SLOTS,
            _ => state as usize % (SLOTS / LARGE_EVERY) * LARGE_EVERY,
        };
        if !empty(i) {
            // SAFETY: a non-zero size.
            let block = unsafe { GLOBAL.alloc(layout(i)) };
            assert!(!block.is_null());
            // Tagged blocks keep part of their record in the side tables: half the large ones,
            // a few small ones.
            if i % 8 == 0 || i % 8 == 5 {
                memprof::types::tag_block_as(block as usize, "Slot");
            }
            LIVE[i].store(block, Ordering::Release);
        }
        rounds += 1;
    }
    let signals = signaller.join().unwrap();
    let reads = reader.join().unwrap();

    let snapshot = memprof::Snapshot::take();
    let mut stale = Vec::new();
    let mut missing = Vec::new();
    let mut live = 0;
    for (i, slot) in LIVE.iter().enumerate() {
        let size = size_of_slot(i) as u64;
        let recorded = snapshot.blocks.iter().filter(|b| b.size == size).count();
        let expected = usize::from(!slot.load(Ordering::Acquire).is_null());
        live += expected;
        if recorded > expected {
            stale.push(i);
        } else if recorded < expected {
            missing.push(i);
        }
    }
    let handler_frees = HANDLER_FREES.load(Ordering::Relaxed);
    println!(
        "rounds: {rounds}, signals: {signals}, handler frees: {handler_frees}, reads: {reads}, \
         live: {live}, stale in the table: {}, missing: {}",
        stale.len(),
        missing.len()
    );
    // The scan reads every live block: a freed one still in the table is read after its unmapping.
    let mut sizes = Vec::new();
    memprof::log_object_sizes(&mut sizes).unwrap();
    println!("object sizes: {} bytes of log", sizes.len());
    assert!(
        handler_frees > 200,
        "the handler freed too little to test anything"
    );
    assert!(
        stale.is_empty(),
        "freed blocks still in the table: slots {stale:?}"
    );
    assert!(missing.is_empty(), "live blocks missing: slots {missing:?}");
}

#[test]
fn signal_frees() {
    if std::env::var_os("MEMPROF_TEST_CHILD").is_some() {
        work();
        return;
    }
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "signal_frees", "--nocapture", "--test-threads=1"])
        .env("MEMPROF_TEST_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(child, DEADLINE, "the worker");
    let (status, stdout) = (output.status, String::from_utf8(output.stdout).unwrap());
    eprintln!("{}", stdout.trim());
    assert!(status.success(), "the worker failed ({status}):\n{stdout}");
}
