//! Sampling: the interval, and the filter that lets the free of an unsampled block skip the table.
//!
//! Under sampling (a non-zero [`Table::sample_interval`]) only sampled blocks are in the table and
//! every count is an estimate: allocated totals add each block's randomly rounded weight, live
//! figures sum the weights of the live blocks when they are read. Most freed blocks were never
//! sampled, and looking each of them up would cost every free a trip to the side tables: a small
//! counting filter, one counter per slot of addresses, answers "never recorded here" for most of
//! them without touching the table.

use super::Table;
use std::sync::atomic::Ordering::Relaxed;

/// Slots of the sampled-block filter; a power of two. Each slot is a byte, so the filter stays
/// small enough for the first-level cache that every free reads it from, and a free's check is one
/// load and a compare.
pub(super) const FILTER: usize = 1 << 14;

/// A filter counter's largest value; a counter that reaches it stays there.
const COUNT_MAX: u8 = u8::MAX;

impl Table {
    /// Mean bytes between sampled allocations; 0 when every allocation is recorded.
    #[inline]
    pub fn sample_interval(&self) -> u64 {
        self.sample_interval.load(Relaxed)
    }

    /// Sets the sampling interval. Call it before the first block is recorded.
    pub fn set_sample_interval(&self, interval: u64) {
        self.sample_interval.store(interval, Relaxed);
    }

    /// Under sampling, whether a block may be recorded at `address`: `false` proves it is not,
    /// without touching the table. (Without sampling, any block may be.)
    #[inline]
    pub fn may_hold_sampled(&self, address: usize) -> bool {
        self.filter[Self::slot(address)].load(Relaxed) != 0
    }

    /// The filter slot of `address`: by 16-byte granule, so blocks next to a sampled one (where
    /// the allocator is busy) have counters of their own, and addresses share one only [`FILTER`]
    /// granules apart.
    #[inline]
    fn slot(address: usize) -> usize {
        (address >> 4) % FILTER
    }

    /// Counts a sampled block recorded at `address` (saturating at [`COUNT_MAX`], then sticky).
    pub(super) fn filter_add(&self, address: usize) {
        let _ = self.filter[Self::slot(address)].fetch_update(Relaxed, Relaxed, |count| {
            (count < COUNT_MAX).then(|| count + 1)
        });
    }

    /// Counts a sampled block at `address` gone; a counter stuck at [`COUNT_MAX`] stays there,
    /// since it no longer knows how many blocks it counts.
    pub(super) fn filter_remove(&self, address: usize) {
        let _ = self.filter[Self::slot(address)].fetch_update(Relaxed, Relaxed, |count| {
            (count > 0 && count < COUNT_MAX).then(|| count - 1)
        });
    }
}
