//! The live table: every live block by address, with its size and interned stack.
//!
//! The global allocator's blocks under 64 KiB carry a header (their size, stack and [`slots`]
//! number) and each fills one 16-byte slot, which holds its address and [`word`]: the free path
//! reads the header beside the block, and only readers walk the slots. Every other block is one
//! word in one of the [`side`] tables, hash maps behind small locks picked by the block's 64 MiB
//! region: the global allocator's larger or more aligned ones, all of its blocks when they carry
//! no header (under sampling, or with recording off, see `header`), the C ABI's, and the
//! preloaded library's (`hooks::preload`, which knows its blocks by address alone). Either way memory per live block is a
//! few dozen bytes whatever its size. What does not fit a word (sizes too large for it, type
//! tags) is rare and kept beside it.
//! Counters are per thread ([`writers`]): each recording thread writes its own with plain stores,
//! and readers add them up. A change of the table passes a [`door`] that lets a reader hold the
//! table still ([`Table::lock_all`]) while it copies or scans it. A block's stack is interned once
//! in [`stacks`]; the block keeps only the stack's id. Everything here is called inside the
//! reentrancy guard, so the table's own growth goes to the wrapped allocator unrecorded.
//!
//! Beside the blocks, the table keeps the heap's [`peak`], and under sampling its estimates and
//! the filter that lets most frees skip the table ([`sampled`]).
//!
//! A free that comes while its thread is inside the table already (a signal handler that
//! interrupted a change) is made as part of that change ([`nested`]); around `fork`, the forking
//! thread holds the whole table so that the child gets it in one piece ([`fork`]).

#![forbid(unsafe_code)]

mod door;
mod fork;
mod hold;
#[cfg(feature = "preload")]
pub(crate) mod mappings;
mod nested;
mod peak;
mod sampled;
mod side;
mod slots;
pub(crate) mod stacks;
pub(crate) mod stats;
mod word;
pub(crate) mod writers;

#[cfg(test)]
use crate::address::ReturnAddress;
use door::{Door, Inside};
use nested::Nested;
use peak::PeakAccount;
use sampled::Sampled;
use side::{SIDES, Side};
use slots::Slots;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, OnceLock};
use word::Word;
use writers::{Entered, Writers, bump};

use crate::address::StackId;
use crate::header::BlockRef;
pub(crate) use door::Locked;
pub(crate) use fork::ForkHold;
pub(crate) use hold::holding_table;
pub(crate) use stacks::Stacks;
pub use stats::HeapStats;
pub(crate) use stats::{Peak, PeakTable};

/// Stacks whose allocations a thread counts in its own writer, without a locked instruction: the
/// first ones interned, far more than the distinct stacks of a large program. Their counters are
/// made as a thread first uses them ([`writers`]), so a thread's memory for them follows the
/// stacks it allocates from rather than this bound. The stacks after them count in shared atomics.
const WRITER_STACKS: u32 = 1 << 20;

/// What the table knows of one live block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    /// Requested size in bytes.
    pub size: u64,
    /// The stack that allocated it (or reallocated it last).
    pub stack: StackId,
    /// The explicit type tag the program gave the block (`types::tags`, which numbers the type
    /// names from 1); 0 for none.
    pub tag: u32,
}

/// The settings a change of the table depends on, read once per change (both are set before the
/// first block is recorded).
#[derive(Clone, Copy)]
struct Mode {
    /// [`Table::sample_interval`].
    interval: u64,
    /// [`Table::tracks_peak`].
    track_peak: bool,
}

/// `N` empty cells, built on the heap directly: the table's arrays of cells made on first use are
/// too large for the stack of every thread. `None` when the allocation failed.
fn empty_cells<T, const N: usize>() -> Option<Box<[OnceLock<T>; N]>> {
    let cells: Box<[OnceLock<T>]> = (0..N).map(|_| OnceLock::new()).collect();
    cells.try_into().ok()
}

/// A live table: the process has one, [`TABLE`]; tests make their own.
pub(crate) struct Table {
    /// Live blocks without a header, by address: see [`side`] for which.
    sides: [Mutex<Side>; SIDES],
    /// Live blocks of the global allocator, which carry a header.
    slots: Slots,
    /// One per thread that recorded, and the orphans'; see [`writers`].
    writers: Writers,
    /// What lets a reader hold the table still; see [`door`].
    door: Door,
    /// What nested changes took out, and the frees they deferred; see [`nested`].
    nested: Nested,
    /// The stacks blocks were allocated from.
    pub stacks: Stacks,
    /// The heap's peak, and when tracked what was live per stack at the peak; see [`peak`].
    peak: PeakAccount,
    /// The sampling interval, and under sampling the filter of the addresses that may be
    /// recorded; see [`sampled`].
    sampled: Sampled,
}

impl Default for Table {
    fn default() -> Self {
        Table::new()
    }
}

impl Table {
    /// An empty table.
    pub(crate) const fn new() -> Table {
        Table {
            sides: [const { Mutex::new(Side::new()) }; SIDES],
            slots: Slots::new(),
            writers: Writers::new(),
            door: Door::new(),
            nested: Nested::new(),
            stacks: Stacks::new(),
            peak: PeakAccount::new(),
            sampled: Sampled::new(),
        }
    }

    /// The writers' counters added up (not under sampling's weights), without a peak.
    fn counts(&self) -> HeapStats {
        let mut stats = HeapStats {
            live_blocks: self.nested.blocks.load(Relaxed),
            live_bytes: self.nested.bytes.load(Relaxed),
            ..HeapStats::default()
        };
        for w in self.all_writers() {
            stats.live_blocks = stats.live_blocks.wrapping_add(w.live_blocks.load(Relaxed));
            stats.live_bytes = stats.live_bytes.wrapping_add(w.live_bytes.load(Relaxed));
            stats.total_blocks = stats
                .total_blocks
                .wrapping_add(w.total_blocks.load(Relaxed));
            stats.total_bytes = stats.total_bytes.wrapping_add(w.total_bytes.load(Relaxed));
        }
        // Read while other threads change them, the sums may be caught between a block's
        // allocation in one thread and its free in another.
        if stats.live_blocks > i64::MAX as u64 {
            stats.live_blocks = 0;
        }
        if stats.live_bytes > i64::MAX as u64 {
            stats.live_bytes = 0;
        }
        stats
    }

    /// `(blocks, bytes)` allocated per stack id, over all threads.
    pub(crate) fn allocated(&self) -> Vec<(u64, u64)> {
        let mut allocated: Vec<(u64, u64)> = self
            .stacks
            .iter()
            .map(|(_, r)| (r.allocated_blocks, r.allocated_bytes))
            .collect();
        for w in self.all_writers() {
            w.add_stacks(&mut allocated);
        }
        allocated
    }

    /// Blocks and bytes allocated from stack `id` over the run: [`Table::allocated`] for one stack.
    pub(crate) fn allocated_of(&self, id: StackId) -> (u64, u64) {
        let own = self.stacks.counts(id.0);
        let mut sum = (own.allocated_blocks, own.allocated_bytes);
        for w in self.all_writers() {
            let (blocks, bytes) = w.stack_counts(id.0);
            sum = (sum.0.wrapping_add(blocks), sum.1.wrapping_add(bytes));
        }
        sum
    }

    /// The settings of a change, read now.
    #[inline]
    fn mode(&self) -> Mode {
        Mode {
            interval: self.sample_interval(),
            track_peak: self.tracks_peak(),
        }
    }

    /// The current totals. Without sampling it adds up the threads' counters (while other threads
    /// record, a moment's changes may be caught half-way); under sampling it weighs every live
    /// block, holding the table still.
    pub(crate) fn stats(&self) -> HeapStats {
        if self.sample_interval() != 0 {
            return self.lock_all().stats();
        }
        let mut stats = self.counts();
        stats.peak_bytes = self.peak.counter.peak_bytes().max(stats.live_bytes);
        stats.peak_exact = self.tracks_peak();
        stats
    }

    /// Stores `block` at `address`; returns the block that was there.
    #[inline]
    fn add(&self, entered: &Entered<'_>, address: usize, block: Block) -> Option<Block> {
        let stale = self.add_block(address, Word::new(&block), &block);
        if let Some(stale) = &stale {
            self.count_gone_from(entered, stale);
        }
        bump(&entered.writer.live_blocks, 1);
        bump(&entered.writer.live_bytes, block.size);
        stale
    }

    /// Counts a block that left the table gone from `entered`'s writer.
    #[inline]
    fn count_gone_from(&self, entered: &Entered<'_>, block: &Block) {
        bump(&entered.writer.live_blocks, 1u64.wrapping_neg());
        bump(&entered.writer.live_bytes, block.size.wrapping_neg());
    }

    /// The word of the block at `address`, left in place.
    fn word(&self, address: usize) -> Option<Word> {
        self.side(address).side.blocks.get(&address).copied()
    }

    /// Takes the block at `address` out of the side tables and counts it gone.
    #[inline]
    fn take_stored(&self, entered: &Entered<'_>, address: usize) -> Option<Block> {
        let block = self.take_block(address)?;
        self.count_gone_from(entered, &block);
        Some(block)
    }

    /// Records a new live block allocated from `frames`.
    #[cfg(test)]
    pub(crate) fn insert(&self, address: usize, size: usize, frames: &[ReturnAddress]) -> StackId {
        let stack = self.stacks.intern(frames);
        self.insert_block(address, size as u64, stack);
        stack
    }

    /// Records a new live block whose stack is already interned.
    #[inline]
    pub(crate) fn insert_block(&self, address: usize, size: u64, stack: StackId) {
        let mode = self.mode();
        if mode.interval != 0 {
            self.sampled.add(address);
        }
        let Some(inside) = self.enter() else {
            return;
        };
        let entered = &inside.entered;
        let writer = entered.writer;
        self.count_allocated(writer, stack, size, mode);
        self.grow(writer, stack, size, mode);
        let block = Block {
            size,
            stack,
            tag: 0,
        };
        // An address handed out twice without a free in between means a free went unseen
        // (another allocator, or one made before memprof was ready): the stale block is gone.
        if let Some(stale) = self.add(entered, address, block) {
            self.retire(entered, address, &stale, mode);
        }
    }

    /// Takes out a block that may be freed, and returns it for [`Table::restore`] in case the free
    /// does not happen (the realloc path); `None` when the table never saw it, or when this thread
    /// is inside the table already: then the block goes as part of the change this thread is in
    /// ([`nested`]), for good (the new block of a `realloc` made there is not recorded either).
    #[inline]
    pub(crate) fn take(&self, address: usize) -> Option<Block> {
        match self.enter_to_free() {
            Some(inside) => self.remove_block(&inside, address),
            None => {
                self.remove_nested(address);
                None
            }
        }
    }

    /// Removes a block about to be freed, when the table has it (the free path, which does not
    /// need the block); returns whether it had it.
    #[inline(never)]
    pub(crate) fn remove(&self, address: usize) -> bool {
        match self.enter_to_free() {
            Some(inside) => self.remove_block(&inside, address).is_some(),
            None => self.remove_nested(address),
        }
    }

    /// What [`Table::take`] and [`Table::remove`] do once inside: the block at `address` leaves
    /// the table, its live bytes the peak accounting, and its count the sampled-block filter.
    #[inline(always)]
    fn remove_block(&self, inside: &Inside<'_>, address: usize) -> Option<Block> {
        let mode = self.mode();
        let block = self.take_stored(&inside.entered, address)?;
        self.retire(&inside.entered, address, &block, mode);
        Some(block)
    }

    /// Undoes what recording `block` added to the peak and the filter.
    #[inline]
    fn retire(&self, entered: &Entered<'_>, address: usize, block: &Block, mode: Mode) {
        self.shrink(entered.writer, block.stack, block.size, mode);
        if mode.interval != 0 {
            self.sampled.remove(address);
        }
    }

    /// Puts back a block that [`Table::take`] took out, when the free did not happen after all
    /// (a failed `realloc`).
    pub(crate) fn restore(&self, address: usize, block: Block) {
        let mode = self.mode();
        if mode.interval != 0 {
            self.sampled.add(address);
        }
        let Some(inside) = self.enter() else {
            return;
        };
        let entered = &inside.entered;
        self.grow(entered.writer, block.stack, block.size, mode);
        if let Some(stale) = self.add(entered, address, block) {
            self.retire(entered, address, &stale, mode);
        }
    }

    /// Whether any block was ever recorded (every recorded block has an interned stack): one
    /// relaxed load, for callers that must cost nothing when memprof is not the global allocator.
    #[inline]
    pub(crate) fn has_recorded(&self) -> bool {
        !self.stacks.is_empty()
    }

    /// Sets the type tag of the live block that starts at `address`; returns the block's stack and
    /// its previous tag, or `None` when no live block starts there. Call it inside the reentrancy
    /// guard: the tag map may allocate.
    pub(crate) fn set_tag(&self, address: usize, tag: u32) -> Option<(StackId, u32)> {
        let inside = self.enter()?;
        let word = self.word(address)?;
        let block = if word.has_side() {
            self.side(address).side.unpack(address, word)
        } else {
            word.block()
        };
        self.add(&inside.entered, address, Block { tag, ..block });
        Some((block.stack, block.tag))
    }
}

/// A header that named a slot which does not hold its block: the header was not this
/// allocator's, but data that only looked like one in front of another allocator's block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stranger;

/// The allocation path's entries: one per event, over a [`BlockRef`] matched on once, here, where
/// the two kinds of block are stored differently (slots for blocks with a header, side tables for
/// the others). Inlined always: where the path knows the kind, the match costs nothing, and in
/// unoptimized builds it adds no frame.
impl Table {
    /// Records a new block of the kind `block` says, whose stack is already interned; returns the
    /// block as recorded (for a block with a header, what the header must hold).
    #[inline(always)]
    pub(crate) fn insert_any(
        &self,
        address: usize,
        size: u64,
        stack: StackId,
        block: BlockRef,
    ) -> BlockRef {
        match block {
            BlockRef::Headless => {
                self.insert_block(address, size, stack);
                BlockRef::Headless
            }
            BlockRef::Headed(_) => BlockRef::Headed(self.insert_headed(address, size, stack)),
        }
    }

    /// Removes a block about to be freed (the free path, which does not need the block); returns
    /// whether the table held it.
    #[inline(always)]
    pub(crate) fn remove_any(&self, address: usize, block: BlockRef) -> Result<bool, Stranger> {
        match block {
            BlockRef::Headless => Ok(self.remove(address)),
            BlockRef::Headed(headed) => match self.remove_headed(address, headed) {
                Some(_) => Ok(true),
                None => Err(Stranger),
            },
        }
    }

    /// Takes out a block that may be freed (the realloc path), with its tag, for
    /// [`Table::restore_any`] in case the free does not happen; `None` when the table does not
    /// hold it (see [`Table::take`]).
    #[inline(always)]
    pub(crate) fn take_any(
        &self,
        address: usize,
        block: BlockRef,
    ) -> Result<Option<Block>, Stranger> {
        match block {
            BlockRef::Headless => Ok(self.take(address)),
            BlockRef::Headed(headed) => match self.remove_headed(address, headed) {
                Some(tag) => Ok(Some(Block {
                    size: headed.size,
                    stack: headed.stack,
                    tag,
                })),
                None => Err(Stranger),
            },
        }
    }

    /// Puts back, with its tag, a block [`Table::take_any`] took out, when the free did not happen
    /// after all (a failed `realloc`); returns the block as recorded again.
    #[inline(always)]
    pub(crate) fn restore_any(&self, address: usize, old: Block, block: BlockRef) -> BlockRef {
        match block {
            BlockRef::Headless => {
                self.restore(address, old);
                BlockRef::Headless
            }
            BlockRef::Headed(_) => {
                let headed = self.restore_headed(address, old.size, old.stack);
                if old.tag != 0 && headed.is_recorded() {
                    self.set_slot_tag(headed.slot, address, old.tag);
                }
                BlockRef::Headed(headed)
            }
        }
    }

    /// Gives `tag` to the block just recorded at `address` as `block`. Inside the reentrancy
    /// guard: the tag map may grow.
    #[inline(always)]
    pub(crate) fn retag_any(&self, address: usize, block: BlockRef, tag: u32) {
        match block {
            BlockRef::Headless => {
                self.set_tag(address, tag);
            }
            BlockRef::Headed(headed) => {
                if headed.is_recorded() {
                    self.set_slot_tag(headed.slot, address, tag);
                }
            }
        }
    }
}

/// The process's live table.
pub(crate) static TABLE: Table = Table::new();

#[cfg(test)]
mod tests;
