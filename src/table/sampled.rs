//! Sampling: the interval, and the filter that lets the free of an unsampled block skip the table.
//!
//! Under sampling (a non-zero [`Table::sample_interval`]) only sampled blocks are in the table and
//! every count is an estimate: allocated totals add each block's randomly rounded weight, live
//! figures sum the weights of the live blocks when they are read. Most freed blocks were never
//! sampled, and looking each of them up would cost every free a trip to the side tables: a small
//! counting filter, one counter per slot of addresses, answers "never recorded here" for most of
//! them without touching the table.

use super::Table;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};

/// Slots of the sampled-block filter; a power of two. Each slot is a byte, so the filter stays
/// small enough for the first-level cache that every free reads it from, and a free's check is one
/// load and a compare.
const FILTER: usize = 1 << 14;

/// A filter counter's largest value; a counter that reaches it stays there.
const COUNT_MAX: u8 = u8::MAX;

/// The sampling interval and the sampled-block filter of one table.
pub(super) struct Sampled {
    /// Mean bytes between sampled allocations; 0 records every allocation.
    interval: AtomicU64,
    /// Under sampling: how many live blocks fall in each slot (saturating, then sticky), so a slot
    /// at 0 proves an address was never recorded.
    filter: [AtomicU8; FILTER],
}

impl Sampled {
    /// Every allocation recorded, nothing in the filter.
    pub(super) const fn new() -> Sampled {
        Sampled {
            interval: AtomicU64::new(0),
            filter: [const { AtomicU8::new(0) }; FILTER],
        }
    }

    /// Mean bytes between sampled allocations; 0 when every allocation is recorded.
    #[inline]
    pub(super) fn interval(&self) -> u64 {
        self.interval.load(Relaxed)
    }

    /// Sets the sampling interval.
    pub(super) fn set_interval(&self, interval: u64) {
        self.interval.store(interval, Relaxed);
    }

    /// Whether a block may be recorded at `address`: `false` proves it is not.
    #[inline]
    pub(super) fn may_hold(&self, address: usize) -> bool {
        self.filter[slot(address)].load(Relaxed) != 0
    }

    /// Counts a sampled block recorded at `address` (saturating at [`COUNT_MAX`], then sticky).
    pub(super) fn add(&self, address: usize) {
        let _ = self.filter[slot(address)].fetch_update(Relaxed, Relaxed, |count| {
            (count < COUNT_MAX).then(|| count + 1)
        });
    }

    /// Counts a sampled block at `address` gone; a counter stuck at [`COUNT_MAX`] stays there,
    /// since it no longer knows how many blocks it counts.
    pub(super) fn remove(&self, address: usize) {
        let _ = self.filter[slot(address)].fetch_update(Relaxed, Relaxed, |count| {
            (count > 0 && count < COUNT_MAX).then(|| count - 1)
        });
    }
}

/// The filter slot of `address`: by 16-byte granule, so blocks next to a sampled one (where the
/// allocator is busy) have counters of their own, and addresses share one only [`FILTER`]
/// granules apart.
#[inline]
fn slot(address: usize) -> usize {
    (address >> 4) % FILTER
}

impl Table {
    /// Mean bytes between sampled allocations; 0 when every allocation is recorded.
    #[inline]
    pub(crate) fn sample_interval(&self) -> u64 {
        self.sampled.interval()
    }

    /// Sets the sampling interval. Call it before the first block is recorded.
    pub(crate) fn set_sample_interval(&self, interval: u64) {
        self.sampled.set_interval(interval);
    }

    /// Under sampling, whether a block may be recorded at `address`: `false` proves it is not,
    /// without touching the table. (Without sampling, any block may be.)
    #[inline]
    pub(crate) fn may_hold_sampled(&self, address: usize) -> bool {
        self.sampled.may_hold(address)
    }
}
