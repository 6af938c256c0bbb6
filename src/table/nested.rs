//! Frees that come while their thread is inside the table already: a signal handler that frees
//! memory, having interrupted its thread in the middle of a change of the table (or the table's
//! own memory, freed while the table changes).
//!
//! Such a free cannot enter the table (its writer is busy with the interrupted change) and must
//! not be dropped: its block would stay "live" after the memory went back to the allocator, and
//! the object scan would read it. So it is made as part of the interrupted change
//! ([`writers::nested`] keeps readers out meanwhile):
//!
//! - a block in a slot (see `slots`) leaves it with one store; the slot is not used again, since
//!   the interrupted change may be taking a slot from the same free list;
//! - a block of the side tables leaves its side table under that side table's lock. When this
//!   thread may hold a side table itself (the interrupted change is inside one), waiting could be
//!   waiting for itself, so it only tries the lock; failing that, the free is deferred to the
//!   side table ([`Deferred`]), and whoever takes that side table next applies it first: before a
//!   block at that address can be stored there again, and before a reader reads the table;
//! - the block's counts go to the table's shared counters with locked instructions (the
//!   writer's own are plain load-and-store pairs the interrupted change may be in the middle of),
//!   and its live bytes straight to the peak counter.
//!
//! A free is deferred only when its side table has fewer than [`DEFERRED`] frees waiting: past
//! that (handlers freeing that many blocks of one side table while their threads are inside it),
//! the block stays counted and listed.
//!
//! Allocations made there are not recorded (their frees later find nothing), nor is the new
//! block of a `realloc`.

use super::side::{SIDES, Side};
use super::writers;
use super::{Block, Mode, Table};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Frees a side table can hold back. A thread's blocks mostly share one side table (see `side`),
/// so the handlers that interrupt it defer to that one: enough room for a burst of handlers, each
/// freeing several blocks, all delivered while the thread holds it (a signal that comes during
/// a handler is delivered as soon as the handler returns, before the thread goes on).
pub(super) const DEFERRED: usize = 256;

/// What the nested changes of one table took out, and the frees they deferred.
pub(super) struct Nested {
    /// Live blocks taken out by nested changes, as a wrapping count down (their writers' own
    /// counters may be in the middle of a change).
    pub(super) blocks: AtomicU64,
    /// Live bytes likewise.
    pub(super) bytes: AtomicU64,
    /// Frees deferred to each side table.
    pub(super) deferred: [Deferred; SIDES],
}

impl Nested {
    /// Nothing taken out, nothing deferred.
    pub(super) const fn new() -> Nested {
        Nested {
            blocks: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            deferred: [const { Deferred::new() }; SIDES],
        }
    }
}

/// A slot's address while a handler writes it.
const WRITING: u64 = 1;

/// Frees waiting for a side table that was held when they came: their addresses. A slot is
/// claimed by moving it from 0 to [`WRITING`]; the address is stored last, so a slot above
/// [`WRITING`] is complete. `waiting` counts the claimed slots, so that taking the side table
/// costs one load when none waits.
pub(super) struct Deferred {
    slots: [AtomicU64; DEFERRED],
    waiting: AtomicU32,
}

impl Deferred {
    pub(super) const fn new() -> Deferred {
        Deferred {
            slots: [const { AtomicU64::new(0) }; DEFERRED],
            waiting: AtomicU32::new(0),
        }
    }

    /// Defers a free; `false` when every slot is taken.
    pub(super) fn push(&self, address: usize) -> bool {
        for at in &self.slots {
            if at
                .compare_exchange(0, WRITING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                self.waiting.fetch_add(1, Ordering::Relaxed);
                at.store(address as u64, Ordering::Release);
                return true;
            }
        }
        false
    }

    /// After `fork`, in the child, with the side table held: a slot that a thread which did not
    /// come along was writing is free again (that free never finished).
    pub(super) fn reset_after_fork(&self) {
        for at in &self.slots {
            if at.load(Ordering::Relaxed) == WRITING {
                at.store(0, Ordering::Relaxed);
                self.waiting.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Takes every complete free out, in no particular order.
    #[inline]
    pub(super) fn drain(&self, f: impl FnMut(usize)) {
        if self.waiting.load(Ordering::Acquire) != 0 {
            self.drain_now(f);
        }
    }

    #[cold]
    #[inline(never)]
    fn drain_now(&self, mut f: impl FnMut(usize)) {
        for at in &self.slots {
            let address = at.load(Ordering::Acquire);
            if address > WRITING {
                at.store(0, Ordering::Release);
                self.waiting.fetch_sub(1, Ordering::Relaxed);
                f(address as usize);
            }
        }
    }
}

impl Table {
    /// The free path when this thread cannot enter the table: takes the block at `address` out as
    /// part of the change this thread is in the middle of (see the module docs). Does nothing when
    /// the table does not hold the block, or when the thread holds the table still (its signals
    /// are blocked then, so the block is the table's own memory). Returns whether it took a block.
    #[cold]
    #[inline(never)]
    pub(super) fn remove_nested(&self, address: usize) -> bool {
        if super::hold::holding_whole() || self.inside_writer().is_none() {
            return false;
        }
        let _nested = writers::nested(&self.door.frozen, &self.door.nested_waiting);
        let mode = self.mode();
        match self.side_nested(address) {
            Some(mut side) => self.clear_side_entries(&mut side.side, address, mode),
            // Lost only when the side table's slots are all taken (see the module docs). Whether
            // the table held the block is not known here: most often it did not (the table's own
            // memory, freed as a side table grows), so the caller is told so, and trace mode
            // leaves the free out.
            None => {
                let _ = self.nested.deferred[super::side::side_of(address)].push(address);
                false
            }
        }
    }

    /// Applies the frees deferred to side table `i`, which the caller holds.
    #[inline]
    pub(super) fn apply_deferred(&self, i: usize, side: &mut Side) {
        self.nested.deferred[i].drain(|address| {
            self.clear_side_entries(side, address, self.mode());
        });
    }

    /// Takes the block at `address` out of `side`, when it is there, and counts it gone; returns
    /// whether it was there.
    fn clear_side_entries(&self, side: &mut Side, address: usize, mode: Mode) -> bool {
        let Some(word) = side.blocks.remove(&address) else {
            return false;
        };
        let block = side.take_entries(address, word);
        self.count_gone(address, &block, mode, true);
        true
    }

    /// Counts a block gone outside any writer: in the table's shared counters, the peak counter,
    /// the stack's live counts and (for a block of the side tables, `filtered`) the sampled-block
    /// filter, each with one atomic operation.
    pub(super) fn count_gone(&self, address: usize, block: &Block, mode: Mode, filtered: bool) {
        self.nested.blocks.fetch_sub(1, Ordering::Relaxed);
        self.nested.bytes.fetch_sub(block.size, Ordering::Relaxed);
        let bytes = self.peak_bytes_of(block.size, mode.interval);
        self.peak.counter.change(-(bytes as i64));
        if mode.track_peak {
            self.stacks.made_live_record(block.stack).sub(1, bytes);
        }
        if filtered && mode.interval != 0 {
            self.sampled.remove(address);
        }
    }
}
