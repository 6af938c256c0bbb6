//! Process totals: current, peak and cumulative blocks and bytes.
//!
//! Counts that only need to be summed later (blocks, totals) are kept per thread (see
//! [`super::writers`]). Live bytes also reach one global atomic, in per-thread batches (or at once
//! when the peak is tracked exactly), the only way to know the peak.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Heap totals of the recorded allocations, readable at any time with [`HeapStats::get`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeapStats {
    /// Blocks live now.
    pub live_blocks: u64,
    /// Bytes live now.
    pub live_bytes: u64,
    /// The most bytes that were live at once: exact when the peak is tracked (`MEMPROF_PEAK=1`,
    /// [`MemProf::track_peak`](crate::MemProf::track_peak)), otherwise counted from per-thread
    /// batches of allocations: never more than the true peak, and short of it by less than
    /// 64 KiB per thread that recorded. [`HeapStats::peak_exact`] says which.
    pub peak_bytes: u64,
    /// Whether [`HeapStats::peak_bytes`] is the exact peak; when not, it is a lower bound (and
    /// the `Display` form prints it `peak ≥ N bytes`). Under sampling the peak is an estimate,
    /// like the live figures, and this tells whether the estimate was tracked at every change.
    pub peak_exact: bool,
    /// Blocks allocated over the whole run (a `realloc` counts as one).
    pub total_blocks: u64,
    /// Bytes allocated over the whole run.
    pub total_bytes: u64,
}

impl HeapStats {
    /// The totals of the process's live table now.
    ///
    /// Without sampling it adds up every recording thread's counters: cheap, but not free, so
    /// call it between steps of a program rather than in its inner loop. Under sampling it weighs
    /// every live sampled block while holding the table still, which pauses the threads that
    /// allocate for as long: read it now and then (once a second, once a request), not in a loop.
    pub fn get() -> HeapStats {
        crate::table::TABLE.stats()
    }
}

/// One line: `live: B blocks, N bytes; peak N bytes; allocated over the run: B blocks, N bytes`,
/// with `peak ≥ N bytes` when the peak is a lower bound ([`HeapStats::peak_exact`]).
impl std::fmt::Display for HeapStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bound = if self.peak_exact { "" } else { "≥ " };
        write!(
            f,
            "live: {} blocks, {} bytes; peak {bound}{} bytes; allocated over the run: {} blocks, \
             {} bytes",
            self.live_blocks, self.live_bytes, self.peak_bytes, self.total_blocks, self.total_bytes
        )
    }
}

/// The live-bytes counter the peak is read from, and its high-water mark.
pub(crate) struct Peak {
    /// Live bytes, as the threads' batches reached it: signed, since one thread's frees may
    /// arrive before another's batch of the same blocks' allocations, and a batch takes bytes
    /// away ahead of its frees (see `peak`).
    live_bytes: AtomicI64,
    peak_bytes: AtomicU64,
}

impl Peak {
    pub(super) const fn new() -> Peak {
        Peak {
            live_bytes: AtomicI64::new(0),
            peak_bytes: AtomicU64::new(0),
        }
    }

    /// Adds `bytes` (negative when blocks go) to the live bytes; returns whether that set a new
    /// peak.
    #[inline]
    pub(super) fn change(&self, bytes: i64) -> bool {
        let live = self.live_bytes.fetch_add(bytes, Relaxed) + bytes;
        // Dumps on growth and near the memory limit: a load and a comparison.
        crate::alarm::check(live);
        // Most changes do not set a new peak: a plain load keeps the common case cheap.
        bytes > 0
            && live > 0
            && live as u64 > self.peak_bytes.load(Relaxed)
            && self.peak_bytes.fetch_max(live as u64, Relaxed) < live as u64
    }

    /// Bytes live now, as far as the batches have told.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.live_bytes.load(Relaxed).max(0) as u64
    }

    /// The most bytes that were live at once.
    pub(crate) fn peak_bytes(&self) -> u64 {
        self.peak_bytes.load(Relaxed)
    }
}

/// What was live per stack when the heap was at its peak (DHAT's t-gmax).
///
/// It is not copied on every new peak: a new peak only marks a capture as due, and the capture
/// happens at the next free (the moment the heap starts to come down), and only when the heap has
/// grown by more than 1/64 since the last capture. So it costs one copy of the per-stack counters
/// per 1.6% of growth, and describes a moment whose live bytes are within 1.6% of the peak.
#[derive(Clone, Debug, Default)]
pub(crate) struct PeakTable {
    /// Live bytes at the captured moment.
    pub live_bytes: u64,
    /// Live `(blocks, bytes)` per stack id at that moment.
    pub stacks: Vec<(u64, u64)>,
}
