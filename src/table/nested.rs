//! Frees that come while their thread is inside the table already: a signal handler that frees
//! memory, having interrupted its thread in the middle of a change of the table (or the table's
//! own memory, freed while the table changes).
//!
//! Such a free cannot enter the table (its writer is busy with the interrupted change) and must
//! not be dropped: its block would stay "live" after the memory went back to the allocator, and
//! the object scan would read it. So it is made as part of the interrupted change
//! ([`writers::nested`] keeps readers out meanwhile):
//!
//! - the block's word leaves the shadow at once, with a plain load and store: no other thread
//!   writes it (the allocator hands the address out again only after this free), and the
//!   interrupted change is about another block;
//! - what the block kept in a side table is cleared under that side table's lock. When this
//!   thread may hold a side table itself (the interrupted change is inside one), waiting could be
//!   waiting for itself, so it only tries the lock; failing that, the free is deferred to the side
//!   table ([`Deferred`]), and whoever takes that side table next applies it first: before a
//!   block at that address can keep anything there again, and before a reader reads the table;
//! - the block's counts go to the table's shared counters with locked instructions (the
//!   writer's own are plain load-and-store pairs the interrupted change may be in the middle of),
//!   and its live bytes straight to the peak counter.
//!
//! A free is deferred only when its side table has fewer than [`DEFERRED`] frees waiting: past
//! that (handlers freeing that many blocks of one side table while their threads are inside it),
//! the block stays counted, and a block the shadow does not hold stays listed.
//!
//! Allocations made there are not recorded (their frees later find nothing), nor is the new
//! block of a `realloc`.

use super::side::Side;
use super::word::Word;
use super::writers;
use super::{Block, Mode, Table};
use std::sync::atomic::{AtomicU64, Ordering};

/// Frees a side table can hold back.
pub(super) const DEFERRED: usize = 16;

/// A slot's address while a handler writes it.
const WRITING: u64 = 1;

/// Frees waiting for a side table that was held when they came: `(address, word)` pairs, the
/// word the block had in the shadow (already taken out of it) or 0 when the block is in
/// [`Side::odd`]. A slot is claimed by moving its address from 0 to [`WRITING`]; the address is
/// stored last, so a slot with an address above [`WRITING`] is complete.
pub(super) struct Deferred {
    slots: [[AtomicU64; 2]; DEFERRED],
}

impl Deferred {
    pub(super) const fn new() -> Deferred {
        Deferred {
            slots: [const { [AtomicU64::new(0), AtomicU64::new(0)] }; DEFERRED],
        }
    }

    /// Defers a free; `false` when every slot is taken.
    fn push(&self, address: usize, word: u64) -> bool {
        for [at, value] in &self.slots {
            if at
                .compare_exchange(0, WRITING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                value.store(word, Ordering::Relaxed);
                at.store(address as u64, Ordering::Release);
                return true;
            }
        }
        false
    }

    /// After `fork`, in the child, with the side table held: a slot that a thread which did not
    /// come along was writing is free again (that free never finished).
    pub(super) fn reset_after_fork(&self) {
        for [at, _] in &self.slots {
            if at.load(Ordering::Relaxed) == WRITING {
                at.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Takes every complete free out, in no particular order.
    fn drain(&self, mut f: impl FnMut(usize, u64)) {
        for [at, value] in &self.slots {
            let address = at.load(Ordering::Acquire);
            if address > WRITING {
                let word = value.load(Ordering::Relaxed);
                at.store(0, Ordering::Release);
                f(address as usize, word);
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
        if super::door::holding_whole() || self.inside_writer().is_none() {
            return false;
        }
        let _nested = writers::nested(&self.frozen, &self.nested_waiting);
        let mode = self.mode();
        let word = self.shadow.take(address);
        if word != 0 && !Word(word).has_side() {
            self.count_gone(address, &Word(word).block(), mode);
            return true;
        }
        if word == 0 && self.odd_blocks.load(Ordering::Relaxed) == 0 {
            return false;
        }
        match self.side_nested(address) {
            Some(mut side) => {
                let held = word != 0 || side.side.odd.contains_key(&address);
                self.clear_side_entries(&mut side.side, address, word, mode);
                held
            }
            // Lost only when the side table's slots are all taken (see the module docs).
            None => {
                let _ = self.deferred[super::side::side_of(address)].push(address, word);
                word != 0
            }
        }
    }

    /// Applies the frees deferred to side table `i`, which the caller holds.
    pub(super) fn apply_deferred(&self, i: usize, side: &mut Side) {
        let mode = self.mode();
        self.deferred[i].drain(|address, word| {
            self.clear_side_entries(side, address, word, mode);
        });
    }

    /// Takes out what the block at `address` keeps in `side`: its word `word` was taken out of the
    /// shadow already, or is in [`Side::odd`] when `word` is 0. Counts the block gone.
    fn clear_side_entries(&self, side: &mut Side, address: usize, word: u64, mode: Mode) {
        let word = match word {
            0 => match side.odd.remove(&address) {
                Some(word) => {
                    self.odd_blocks.fetch_sub(1, Ordering::Relaxed);
                    word
                }
                None => return,
            },
            word => Word(word),
        };
        let block = side.unpack(address, word);
        if word.has_side() {
            side.large.remove(&address);
            side.tags.remove(&address);
        }
        self.count_gone(address, &block, mode);
    }

    /// Counts a block gone outside any writer: in the table's shared counters, the peak counter,
    /// the stack's live counts and the sampled-block filter, each with one atomic operation.
    fn count_gone(&self, address: usize, block: &Block, mode: Mode) {
        self.nested_blocks.fetch_sub(1, Ordering::Relaxed);
        self.nested_bytes.fetch_sub(block.size, Ordering::Relaxed);
        let bytes = self.peak_bytes_of(block.size, mode.interval);
        self.peak.change(-(bytes as i64));
        if mode.track_peak {
            self.stacks.record(block.stack).on_live(false, bytes);
        }
        if mode.interval != 0 {
            self.filter_remove(address);
        }
    }
}
