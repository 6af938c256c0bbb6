//! Peak accounting: the live bytes every change of the table adds or takes away, the heap's peak,
//! and, when the peak is tracked, what was live per stack at the peak.
//!
//! Each thread gathers its allocations in a batch of under [`PEAK_BATCH`] bytes before adding them
//! to the one shared counter ([`Peak`]); its frees reach the counter at once unless the batch
//! covers them. So without [`Table::set_track_peak`] the counter never exceeds the live bytes and
//! the peak may fall short of the true one by a batch per thread, never exceed it; with it, every
//! change reaches the peak counter at once and the peak is exact. The shared counter is the only way to know the peak, and batching
//! keeps its locked instruction off most changes.

use super::writers::Writer;
use super::{Mode, Peak, PeakTable, Table};
use crate::address::StackId;
use crate::sampling;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

/// Live bytes a thread may gather before it adds them to the peak counter, unless the peak is
/// tracked exactly.
pub(crate) const PEAK_BATCH: i64 = 64 * 1024;

/// Bytes a batch keeps for frees to come when a free takes it below 0 (see
/// [`Table::peak_change`]): they are taken from the counter ahead of the frees, so that a thread
/// that frees more than it allocates reaches the counter once per this many bytes.
const PEAK_RESERVE: i64 = PEAK_BATCH / 2;

/// The live bytes a block of `size` stands for under the sampling `interval` (not 0).
#[cold]
fn sampled_bytes(size: u64, interval: u64) -> u64 {
    sampling::weight(size, interval).1.round() as u64
}

/// A table's peak accounting.
pub(super) struct PeakAccount {
    /// Live bytes over all threads (in batches), and their peak.
    pub(super) counter: Peak,
    /// Whether stacks count their live blocks and the peak table is kept.
    track: AtomicBool,
    /// A new peak was reached since the last capture of the peak table.
    due: AtomicBool,
    /// The live heap per stack at the peak, when tracked.
    pub(super) table: Mutex<PeakTable>,
}

impl PeakAccount {
    /// No peak yet, and the peak not tracked.
    pub(super) const fn new() -> PeakAccount {
        PeakAccount {
            counter: Peak::new(),
            track: AtomicBool::new(false),
            due: AtomicBool::new(false),
            table: Mutex::new(PeakTable {
                live_bytes: 0,
                stacks: Vec::new(),
            }),
        }
    }
}

impl Table {
    /// Keeps per-stack live counts and the table of the heap's peak from now on, and makes the
    /// peak exact. Call it before the first block is recorded.
    pub(crate) fn set_track_peak(&self, track: bool) {
        self.peak.track.store(track, Relaxed);
    }

    /// Whether the peak table is kept.
    #[inline]
    pub(crate) fn tracks_peak(&self) -> bool {
        self.peak.track.load(Relaxed)
    }

    /// Adds `bytes` (negative when a block goes) to the live bytes of the peak accounting: at
    /// once when the peak is tracked, else in the writer's batch.
    ///
    /// A batch never holds frees (it stays in `0..PEAK_BATCH`): a change that would take it below
    /// 0 reaches the counter at once, together with [`PEAK_RESERVE`] bytes more taken away, which
    /// the batch keeps for the frees to come. So the counter never counts more than is live, and
    /// the peak never exceeds the true one; it falls short of it by the batches, each under
    /// [`PEAK_BATCH`].
    #[inline]
    fn peak_change(&self, writer: &Writer, bytes: i64, mode: Mode) -> bool {
        let pending = writer.pending_peak.load(Relaxed) + bytes;
        if !mode.track_peak {
            if (0..PEAK_BATCH).contains(&pending) {
                writer.pending_peak.store(pending, Relaxed);
                return false;
            }
            if pending < 0 {
                writer.pending_peak.store(PEAK_RESERVE, Relaxed);
                return self.peak.counter.change(pending - PEAK_RESERVE);
            }
        }
        writer.pending_peak.store(0, Relaxed);
        self.peak.counter.change(pending)
    }

    /// Adds a live block to the peak accounting. Inlined always, as the allocation path's
    /// callees are (see [`Table::count_allocated`]).
    #[inline(always)]
    pub(super) fn grow(&self, writer: &Writer, stack: StackId, size: u64, mode: Mode) {
        let bytes = self.peak_bytes_of(size, mode.interval);
        let new_peak = self.peak_change(writer, bytes as i64, mode);
        if mode.track_peak {
            self.stacks.live_record(stack).add(1, bytes);
            if new_peak {
                self.peak.due.store(true, Relaxed);
            }
        }
    }

    /// Takes a live block out of the peak accounting; first captures the peak table when a new
    /// peak is due (the heap is about to come down from it).
    #[inline]
    pub(super) fn shrink(&self, writer: &Writer, stack: StackId, size: u64, mode: Mode) {
        let bytes = self.peak_bytes_of(size, mode.interval);
        if mode.track_peak {
            if self.peak.due.load(Relaxed) {
                self.capture_peak();
            }
            self.stacks.made_live_record(stack).sub(1, bytes);
        }
        self.peak_change(writer, -(bytes as i64), mode);
    }

    /// Copies the per-stack live counts into the peak table, when the heap has grown enough
    /// since the last copy (see [`PeakTable`]).
    #[cold]
    fn capture_peak(&self) {
        // The copy below allocates: on the free path this thread may be outside the guard, and
        // the copy must not be recorded (nor counted by a `Scope`).
        let _guard = crate::guard::Guard::enter();
        // Never wait on the allocation path: another thread capturing now does it for us.
        let Ok(mut peak) = self.peak.table.try_lock() else {
            return;
        };
        let live = self.peak.counter.live_bytes();
        if live <= peak.live_bytes {
            return;
        }
        self.peak.due.store(false, Relaxed);
        if live - peak.live_bytes <= peak.live_bytes / 64 {
            return;
        }
        peak.live_bytes = live;
        peak.stacks.clear();
        peak.stacks.extend(
            self.stacks
                .iter()
                .map(|(_, record)| (record.live_blocks, record.live_bytes)),
        );
    }

    /// The live bytes of the shared counter, as the threads' batches reached it (what the heap
    /// alarm compares with its level): short of the true figure by under [`PEAK_BATCH`] bytes per
    /// thread; cheap enough to read at any time.
    pub(crate) fn counted_live_bytes(&self) -> u64 {
        self.peak.counter.live_bytes()
    }

    /// The table of the heap's peak, when tracked: `None` otherwise.
    pub(crate) fn peak_table(&self) -> Option<PeakTable> {
        self.tracks_peak().then(|| {
            self.peak
                .table
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }

    /// The live bytes a block stands for in the peak: its size, or its weight under the sampling
    /// `interval`.
    #[inline]
    pub(super) fn peak_bytes_of(&self, size: u64, interval: u64) -> u64 {
        match interval {
            0 => size,
            interval => sampled_bytes(size, interval),
        }
    }
}
