//! The default peak (not tracked exactly) never exceeds the true peak, and falls short of it by
//! at most 64 KiB per recording thread: eight threads each free 63 KiB of blocks another thread
//! allocated (less than a batch each), then one block as large as all of them is allocated. A
//! counting allocator around memprof counts the live bytes memprof records, each allocation
//! before memprof sees it and each free after, so its peak is at least the true one.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Barrier, Mutex};

/// Counts the live bytes the program asks for, and their peak; not what memprof asks for itself.
/// Each block carries a prefix saying whether it was counted, so that a block allocated by memprof
/// (not counted) and freed by the program is not taken away either.
struct Counting {
    inner: memprof::MemProf<System>,
    live: AtomicU64,
    peak: AtomicU64,
}

thread_local! {
    /// Inside `Counting`: the allocations under it are memprof's own.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

impl Counting {
    /// The prefix in front of a block of `layout`, and the layout asked of memprof.
    fn prefixed(layout: Layout) -> (usize, Layout) {
        let prefix = layout.align().max(16);
        let outer = Layout::from_size_align(layout.size() + prefix, layout.align()).unwrap();
        (prefix, outer)
    }
}

// SAFETY: every block is memprof's, with a prefix in front that only this allocator touches.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let (prefix, outer) = Self::prefixed(layout);
        let counted = INSIDE.try_with(|i| !i.replace(true)).unwrap_or(false);
        if counted {
            let live = self.live.fetch_add(outer.size() as u64, SeqCst) + outer.size() as u64;
            self.peak.fetch_max(live, SeqCst);
        }
        // SAFETY: a layout of non-zero size.
        let base = unsafe { self.inner.alloc(outer) };
        if counted {
            let _ = INSIDE.try_with(|i| i.set(false));
        }
        if base.is_null() {
            if counted {
                self.live.fetch_sub(outer.size() as u64, SeqCst);
            }
            return base;
        }
        // SAFETY: the prefix is at least 16 bytes of the block, aligned to at least 8.
        unsafe {
            (base as *mut u64).write(counted as u64);
            base.add(prefix)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let (prefix, outer) = Self::prefixed(layout);
        // SAFETY: `ptr` came from `alloc` with this layout, `prefix` bytes into the block.
        let (base, counted) = unsafe {
            let base = ptr.sub(prefix);
            (base, (base as *const u64).read() == 1)
        };
        let nested = INSIDE.try_with(|i| i.replace(true)).unwrap_or(true);
        // SAFETY: the block memprof gave `alloc`, with its layout.
        unsafe { self.inner.dealloc(base, outer) };
        if !nested {
            let _ = INSIDE.try_with(|i| i.set(false));
        }
        if counted {
            self.live.fetch_sub(outer.size() as u64, SeqCst);
        }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting {
    inner: memprof::MemProf::new(),
    live: AtomicU64::new(0),
    peak: AtomicU64::new(0),
};

/// Threads that free blocks of another thread.
const FREERS: usize = 8;
/// Blocks each of them frees, of [`SIZE`] bytes: 63 KiB, less than a batch.
const BLOCKS: usize = 63;
const SIZE: usize = 1024;
/// The batch of a thread's changes the default peak may miss.
const BATCH: u64 = 64 * 1024;

#[test]
fn the_default_peak_stays_within_its_bound() {
    assert!(
        std::env::var_os("MEMPROF_PEAK").is_none(),
        "the default peak is tested"
    );
    let shares: Vec<Mutex<Vec<Box<[u8]>>>> = (0..FREERS)
        .map(|_| Mutex::new(Vec::with_capacity(BLOCKS)))
        .collect();
    let barrier = Barrier::new(FREERS + 1);
    let one_at_a_time = Mutex::new(());
    std::thread::scope(|scope| {
        for share in &shares {
            let (barrier, one_at_a_time) = (&barrier, &one_at_a_time);
            scope.spawn(move || {
                // Bring this thread's batch to a known state: a block larger than two batches
                // reaches the counter with it, and so does its free.
                {
                    let _one = one_at_a_time.lock().unwrap();
                    drop(std::hint::black_box(vec![0u8; 2 * BATCH as usize]));
                }
                barrier.wait();
                // The main thread allocates.
                barrier.wait();
                share.lock().unwrap().clear();
                barrier.wait();
                // The main thread allocates the large block and reads the peak.
                barrier.wait();
            });
        }
        barrier.wait();
        for share in &shares {
            let mut share = share.lock().unwrap();
            for _ in 0..BLOCKS {
                share.push(vec![1u8; SIZE].into_boxed_slice());
            }
        }
        barrier.wait();
        // The freers free.
        barrier.wait();
        let large = std::hint::black_box(vec![2u8; FREERS * BLOCKS * SIZE]);
        let stats = memprof::HeapStats::get();
        let reported = stats.peak_bytes;
        let counted = GLOBAL.peak.load(SeqCst);
        drop(large);
        barrier.wait();
        eprintln!("reported peak {reported}, counted peak {counted}");
        // Not tracked, the peak is a lower bound, and says so wherever it is printed.
        assert!(!stats.peak_exact, "{stats:?}");
        assert!(
            stats
                .to_string()
                .contains(&format!("; peak ≥ {reported} bytes;")),
            "{stats}"
        );
        assert!(!memprof::Snapshot::take().stats.peak_exact);
        assert!(
            reported <= counted,
            "the peak {reported} exceeds the true peak, at most {counted}, by {}",
            reported - counted
        );
        // The main thread, the test harness's threads, the freers: each may hold a batch.
        let threads = FREERS as u64 + 4;
        assert!(
            reported + threads * BATCH >= counted,
            "the peak {reported} falls short of the true peak {counted} by more than a batch per thread"
        );
    });
}
