//! Process totals: current, peak and cumulative blocks and bytes.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Heap totals of the recorded allocations, readable at any time with [`HeapStats::get`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeapStats {
    /// Blocks live now.
    pub live_blocks: u64,
    /// Bytes live now.
    pub live_bytes: u64,
    /// The most bytes that were live at once.
    pub peak_bytes: u64,
    /// Blocks allocated over the whole run (a `realloc` counts as one).
    pub total_blocks: u64,
    /// Bytes allocated over the whole run.
    pub total_bytes: u64,
}

impl HeapStats {
    /// The totals of the process's live table now.
    pub fn get() -> HeapStats {
        crate::table::TABLE.stats()
    }
}

/// The counters, updated on every allocation and free.
pub struct Stats {
    live_blocks: AtomicU64,
    live_bytes: AtomicU64,
    peak_bytes: AtomicU64,
    total_blocks: AtomicU64,
    total_bytes: AtomicU64,
}

impl Stats {
    pub(super) const fn new() -> Stats {
        Stats {
            live_blocks: AtomicU64::new(0),
            live_bytes: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
            total_blocks: AtomicU64::new(0),
            total_bytes: AtomicU64::new(0),
        }
    }

    pub(super) fn on_alloc(&self, size: u64) {
        self.total_blocks.fetch_add(1, Relaxed);
        self.total_bytes.fetch_add(size, Relaxed);
        self.on_restore(size);
    }

    pub(super) fn on_restore(&self, size: u64) {
        self.live_blocks.fetch_add(1, Relaxed);
        let live = self.live_bytes.fetch_add(size, Relaxed) + size;
        // Most allocations do not set a new peak: a plain load keeps the common case cheap.
        if live > self.peak_bytes.load(Relaxed) {
            self.peak_bytes.fetch_max(live, Relaxed);
        }
    }

    pub(super) fn on_free(&self, size: u64) {
        self.live_blocks.fetch_sub(1, Relaxed);
        self.live_bytes.fetch_sub(size, Relaxed);
    }

    pub(super) fn get(&self) -> HeapStats {
        HeapStats {
            live_blocks: self.live_blocks.load(Relaxed),
            live_bytes: self.live_bytes.load(Relaxed),
            peak_bytes: self.peak_bytes.load(Relaxed),
            total_blocks: self.total_blocks.load(Relaxed),
            total_bytes: self.total_bytes.load(Relaxed),
        }
    }
}
