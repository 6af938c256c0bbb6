//! The slots: the live blocks of [`MemProf`](crate::MemProf), which carry a header.
//!
//! The global allocator puts 16 bytes in front of every block it hands out (see
//! `header`): the block's size, its stack and its slot here. A free reads them
//! there, from memory the program has just used, instead of looking the address up in a table
//! larger than the caches, so neither an allocation nor a free waits for a cache miss of the
//! table's. The slots exist for the readers: every live block's address and word, in an array
//! that [`Locked::for_each_block`](super::Locked::for_each_block) walks.
//!
//! A slot is 16 bytes: the block's address (0 when the slot is free) and its [`Word`]. Each
//! writer keeps the slots its thread freed in a list threaded through their words and takes its
//! next slot from there, the one it freed last (still in its cache), or else from a run of fresh
//! slots it claims [`RUN`] at a time. So memory per live block is the header and a slot, 32
//! bytes, whatever the block's size; slots freed stay for the next blocks.
//!
//! The slots are allocated in buckets, each twice the size of the one before, made on first use
//! and never moved, so a slot's place is found with a shift and never changes while others grow.
//!
//! A free nested in its thread's own change of the table (a signal handler's, see `nested`)
//! clears its slot but leaves it out of the free list the interrupted change may be using: that
//! slot is not used again.

use super::nested::Deferred;
use super::side::Extras;
use super::word::{LARGE, Word};
use super::writers::{Entered, Writer, bump};
use super::{Block, Mode, Table};
use crate::address::StackId;
use crate::header::Headed;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};

/// A slot's address and word.
type Slot = [AtomicU64; 2];

/// Slots in the first bucket; bucket `b` holds `FIRST << b`.
const FIRST: usize = 1 << 12;

/// Buckets: as many as slot numbers below [`NO_SLOT`](crate::header::NO_SLOT) fill.
const BUCKETS: usize = 20;

/// Slots in all the buckets.
const LIMIT: u64 = (FIRST as u64) * ((1 << BUCKETS) - 1);

/// Fresh slots a writer claims at a time.
const RUN: u32 = 256;

/// Every slot, in buckets made on first use.
pub(super) struct Slots {
    buckets: [OnceLock<Box<[Slot]>>; BUCKETS],
    /// The first slot no writer has claimed (past [`LIMIT`] once they are all claimed).
    next: AtomicU64,
    /// What some blocks keep beside their slot: sizes too large for a word, type tags. A slot's
    /// word never says which it has: a tag is set without touching the slot, which its owner may
    /// be changing, so every tag is looked up once any was set ([`Slots::any_tags`]).
    extras: Mutex<Extras>,
    /// Blocks whose extras a nested free could not take out (their thread held `extras`): taken
    /// out by the next holder, first.
    deferred: Deferred,
    /// Whether a tag was ever set: until then, frees skip the tag map.
    any_tags: AtomicBool,
}

/// The bucket of slot `slot` and its index there.
#[inline]
fn locate(slot: u32) -> (usize, usize) {
    let q = slot as usize / FIRST + 1;
    let bucket = (usize::BITS - 1 - q.leading_zeros()) as usize;
    (bucket, slot as usize - FIRST * ((1 << bucket) - 1))
}

impl Slots {
    pub(super) const fn new() -> Slots {
        Slots {
            buckets: [const { OnceLock::new() }; BUCKETS],
            next: AtomicU64::new(0),
            extras: Mutex::new(Extras::new()),
            deferred: Deferred::new(),
            any_tags: AtomicBool::new(false),
        }
    }

    /// After `fork`, in the child: a deferred removal that a thread which did not come along was
    /// writing is dropped (that free never finished).
    pub(super) fn reset_after_fork(&self) {
        self.deferred.reset_after_fork();
    }

    /// The extras, held, with the removals deferred to them made.
    pub(super) fn extras(&self) -> MutexGuard<'_, Extras> {
        self.drained(self.extras.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// `extras`, just taken, with the removals deferred to them made.
    fn drained<'a>(&self, mut extras: MutexGuard<'a, Extras>) -> MutexGuard<'a, Extras> {
        self.deferred.drain(|address| {
            extras.take(address, true);
        });
        extras
    }

    /// Slot `slot`, when its bucket was made.
    #[inline]
    fn get(&self, slot: u32) -> Option<&Slot> {
        let (bucket, index) = locate(slot);
        self.buckets.get(bucket)?.get()?.get(index)
    }

    /// Slot `slot`, its bucket made if needed (inside the reentrancy guard); `None` when the
    /// allocation failed.
    #[inline]
    fn make(&self, slot: u32) -> Option<&Slot> {
        if let Some(s) = self.get(slot) {
            return Some(s);
        }
        self.make_bucket(slot)
    }

    #[cold]
    #[inline(never)]
    fn make_bucket(&self, slot: u32) -> Option<&Slot> {
        let (bucket, index) = locate(slot);
        let cell = self.buckets.get(bucket)?;
        if cell.get().is_none() {
            // Zeroed memory: its pages stay untouched, and cost nothing, until slots are used.
            let slots = bytemuck::allocation::try_zeroed_slice_box::<Slot>(FIRST << bucket).ok()?;
            let _ = cell.set(slots);
        }
        cell.get()?.get(index)
    }

    /// Calls `f(address, word)` for every slot in use.
    pub(super) fn for_each(&self, mut f: impl FnMut(usize, Word)) {
        // Slots claimed past `next` hold nothing yet.
        let end = self.next.load(Relaxed).min(LIMIT) as usize;
        for (b, cell) in self.buckets.iter().enumerate() {
            let first = FIRST * ((1 << b) - 1);
            if first >= end {
                break;
            }
            // A bucket is made when its first slot is used, which need not be in order.
            let Some(bucket) = cell.get() else { continue };
            for [address, word] in bucket.iter().take(end - first) {
                let address = address.load(Relaxed);
                if address != 0 {
                    f(address as usize, Word(word.load(Relaxed)));
                }
            }
        }
    }
}

impl Writer {
    /// A slot for a new block: the last one this writer freed, or a fresh one. Only the owner,
    /// inside the table.
    #[inline]
    fn claim_slot<'s>(&self, slots: &'s Slots) -> Option<(u32, &'s Slot)> {
        let head = self.free_slots.load(Relaxed);
        if head != 0 {
            let slot = head - 1;
            let s = slots.get(slot)?;
            self.free_slots.store(s[1].load(Relaxed) as u32, Relaxed);
            return Some((slot, s));
        }
        let (mut next, mut end) = (self.fresh_next.load(Relaxed), self.fresh_end.load(Relaxed));
        if next == end {
            let run = slots.next.fetch_add(u64::from(RUN), Relaxed);
            if run + u64::from(RUN) > LIMIT {
                return None;
            }
            (next, end) = (run as u32, (run + u64::from(RUN)) as u32);
            self.fresh_end.store(end, Relaxed);
        }
        self.fresh_next.store(next + 1, Relaxed);
        Some((next, slots.make(next)?))
    }

    /// Puts `slot`, just cleared, at the head of this writer's free list.
    #[inline]
    fn free_slot(&self, slot: u32, s: &Slot) {
        s[1].store(u64::from(self.free_slots.load(Relaxed)), Relaxed);
        self.free_slots.store(slot + 1, Relaxed);
    }
}

impl Table {
    /// Records a new block of the global allocator; returns what its header must hold.
    #[inline]
    pub(crate) fn insert_headed(&self, address: usize, size: u64, stack: StackId) -> Headed {
        let mode = self.mode();
        let Some(inside) = self.enter() else {
            return Headed::UNRECORDED;
        };
        let entered = &inside.entered;
        let Some(slot) = self.store_slot(entered, address, size, stack) else {
            return Headed::UNRECORDED;
        };
        self.count_allocated(entered.writer, stack, size, mode);
        self.grow(entered.writer, stack, size, mode);
        Headed { slot, stack, size }
    }

    /// Puts a block in a slot and counts it live. Inlined always, as the allocation path's
    /// callees are (see [`Table::count_allocated`]).
    #[inline(always)]
    fn store_slot(
        &self,
        entered: &Entered<'_>,
        address: usize,
        size: u64,
        stack: StackId,
    ) -> Option<u32> {
        let block = Block {
            size,
            stack,
            tag: 0,
        };
        let word = Word::new(&block);
        if word.is_large() {
            self.slots.extras().large.insert(address, size);
        }
        let (slot, s) = entered.writer.claim_slot(&self.slots)?;
        s[1].store(word.0, Relaxed);
        s[0].store(address as u64, Relaxed);
        bump(&entered.writer.live_blocks, 1);
        bump(&entered.writer.live_bytes, size);
        Some(slot)
    }

    /// Takes the block of `headed`, at `address`, out of its slot, counts it gone, and returns
    /// its type tag (0 for none); `None`, with nothing changed, when the slot the header names
    /// does not hold that address: the header was not this allocator's, but data that only looked
    /// like one in front of another allocator's block. Nested in this thread's own change of the
    /// table (a signal handler's), it is made as part of that change.
    #[inline]
    pub(crate) fn remove_headed(&self, address: usize, headed: Headed) -> Option<u32> {
        let s = self.slots.get(headed.slot)?;
        let block = Block {
            size: headed.size,
            stack: headed.stack,
            tag: 0,
        };
        match self.enter_to_free() {
            Some(inside) => {
                // A slot holding the block changes only with the block's free, which this is.
                if s[0].load(Relaxed) != address as u64 {
                    return None;
                }
                let mode = self.mode();
                s[0].store(0, Relaxed);
                inside.entered.writer.free_slot(headed.slot, s);
                self.count_gone_from(&inside.entered, &block);
                self.shrink(inside.entered.writer, block.stack, block.size, mode);
                Some(self.take_slot_extras(address, headed.size))
            }
            None if s[0].load(Relaxed) != address as u64 => None,
            None => Some(self.remove_headed_nested(address, s, &block)),
        }
    }

    /// [`Table::remove_headed`] when this thread cannot enter the table: the slot is cleared
    /// and the block counted gone in the shared counters; the slot is not used again.
    #[cold]
    #[inline(never)]
    fn remove_headed_nested(&self, address: usize, s: &Slot, block: &Block) -> u32 {
        // A thread that holds the table still is the only one changing it.
        let _nested = (!super::hold::holding_whole())
            .then(|| super::writers::nested(&self.door.frozen, &self.door.nested_waiting));
        s[0].store(0, Relaxed);
        self.count_gone(address, block, self.mode(), false);
        if !self.has_extras(block.size) {
            return 0;
        }
        // The interrupted change may hold the extras: then their holder takes the block's out.
        let large = block.size >= u64::from(LARGE) - 1;
        match self.slots.extras.try_lock() {
            Ok(extras) => self.slots.drained(extras).take(address, large),
            Err(TryLockError::Poisoned(extras)) => {
                self.slots.drained(extras.into_inner()).take(address, large)
            }
            Err(TryLockError::WouldBlock) => {
                let _ = self.slots.deferred.push(address);
                0
            }
        }
    }

    /// Whether a block of `size` may keep something beside its slot.
    #[inline]
    fn has_extras(&self, size: u64) -> bool {
        size >= u64::from(LARGE) - 1 || self.slots.any_tags.load(Relaxed)
    }

    /// Takes out what a slot's block kept beside it: its size when large, its tag.
    #[inline]
    fn take_slot_extras(&self, address: usize, size: u64) -> u32 {
        if !self.has_extras(size) {
            return 0;
        }
        self.slots
            .extras()
            .take(address, size >= u64::from(LARGE) - 1)
    }

    /// Puts a block of the global allocator back after a failed `realloc`; returns what its
    /// header must hold again.
    pub(crate) fn restore_headed(&self, address: usize, size: u64, stack: StackId) -> Headed {
        let mode = self.mode();
        let Some(inside) = self.enter() else {
            return Headed::UNRECORDED;
        };
        let Some(slot) = self.store_slot(&inside.entered, address, size, stack) else {
            return Headed::UNRECORDED;
        };
        self.grow(inside.entered.writer, stack, size, mode);
        Headed { slot, stack, size }
    }

    /// The slots' extras, held, when a block may keep something there: a tag was set, or a size
    /// too large for a word recorded. For readers, which hold them while they walk every slot.
    pub(super) fn slot_extras(&self) -> Option<MutexGuard<'_, Extras>> {
        let extras = self.slots.extras();
        (self.slots.any_tags.load(Relaxed) || !extras.large.is_empty()).then_some(extras)
    }

    /// Sets the type tag of the block in slot `slot`, when it is the live block at `address`;
    /// returns its stack and previous tag. Inside the reentrancy guard: the tag map may grow.
    pub(crate) fn set_slot_tag(
        &self,
        slot: u32,
        address: usize,
        tag: u32,
    ) -> Option<(StackId, u32)> {
        let _inside = self.enter()?;
        let s = self.slots.get(slot)?;
        if s[0].load(Relaxed) != address as u64 {
            return None;
        }
        let stack = Word(s[1].load(Relaxed)).stack();
        self.slots.any_tags.store(true, Relaxed);
        let previous = self.slots.extras().tags.insert(address, tag).unwrap_or(0);
        Some((stack, previous))
    }

    /// Counts an allocation from `stack` in `writer`'s counters. Inlined always, like the rest of
    /// what the allocation path calls once it has the stack ([`Stacks::intern`], [`Table::grow`]):
    /// the path has one instance per kind of block, and with more than one caller `#[inline]`
    /// leaves these calls, which cost the path a few percent of its instructions.
    ///
    /// [`Stacks::intern`]: super::stacks::Stacks::intern
    #[inline(always)]
    pub(super) fn count_allocated(&self, writer: &Writer, stack: StackId, size: u64, mode: Mode) {
        let (blocks, bytes) = crate::sampling::estimate(size, mode.interval);
        if stack.0 < super::WRITER_STACKS {
            writer.count_stack(stack.0, blocks, bytes);
        } else {
            self.stacks.allocated_record(stack).add(blocks, bytes);
        }
        bump(&writer.total_blocks, blocks);
        bump(&writer.total_bytes, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::ReturnAddress;
    use crate::header::NO_SLOT;

    #[test]
    fn locate_covers_every_slot_once() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(FIRST as u32 - 1), (0, FIRST - 1));
        assert_eq!(locate(FIRST as u32), (1, 0));
        assert_eq!(locate(3 * FIRST as u32 - 1), (1, 2 * FIRST - 1));
        assert_eq!(locate(3 * FIRST as u32), (2, 0));
        assert_eq!(
            locate(LIMIT as u32 - 1),
            (BUCKETS - 1, (FIRST << (BUCKETS - 1)) - 1)
        );
        assert!(LIMIT < u64::from(NO_SLOT));
    }

    fn stack(table: &Table, n: usize) -> StackId {
        table.stacks.intern(&[ReturnAddress(0x1000 + n)])
    }

    /// Every block the readers see, by address.
    fn blocks(table: &Table) -> Vec<(usize, Block)> {
        let mut all = Vec::new();
        table.lock_all().for_each_block(|a, b| all.push((a, b)));
        all.sort_by_key(|&(a, _)| a);
        all
    }

    #[test]
    fn slots_list_live_blocks_and_reuse_freed_slots() {
        let table = Table::new();
        let (s1, s2) = (stack(&table, 1), stack(&table, 2));
        let a = table.insert_headed(0x10_0010, 24, s1);
        let b = table.insert_headed(0x20_0010, 1000, s2);
        let huge = 5u64 << 30;
        let c = table.insert_headed(0x30_0010, huge, s2);
        assert!(a.is_recorded() && b.is_recorded() && c.is_recorded());
        assert_eq!((b.size, b.stack), (1000, s2));
        let block = |size, stack| Block {
            size,
            stack,
            tag: 0,
        };
        assert_eq!(
            blocks(&table),
            [
                (0x10_0010, block(24, s1)),
                (0x20_0010, block(1000, s2)),
                (0x30_0010, block(huge, s2)),
            ]
        );
        assert_eq!(table.remove_headed(0x20_0010, b), Some(0));
        assert_eq!(table.remove_headed(0x30_0010, c), Some(0));
        // Gone: a header naming its slot again (a stranger's, or a second free) changes nothing.
        assert_eq!(table.remove_headed(0x30_0010, c), None);
        assert_eq!(table.remove_headed(0x10_0020, a), None);
        let stats = table.stats();
        assert_eq!((stats.live_blocks, stats.live_bytes), (1, 24));
        assert_eq!((stats.total_blocks, stats.total_bytes), (3, 1024 + huge));
        assert_eq!(blocks(&table), [(0x10_0010, block(24, s1))]);
        // The slot freed last is the next one used.
        let d = table.insert_headed(0x40_0010, 8, s1);
        assert_eq!(d.slot, c.slot);
        assert_eq!(table.allocated()[s1.0 as usize], (2, 32));
    }

    #[test]
    fn tags_follow_the_slot_and_leave_with_it() {
        let table = Table::new();
        let s1 = stack(&table, 1);
        let a = table.insert_headed(0x10_0010, 24, s1);
        // A slot that holds another address is not the block's.
        assert_eq!(table.set_slot_tag(a.slot, 0x10_0020, 7), None);
        assert_eq!(table.set_slot_tag(a.slot, 0x10_0010, 7), Some((s1, 0)));
        assert_eq!(blocks(&table)[0].1.tag, 7);
        assert_eq!(table.remove_headed(0x10_0010, a), Some(7));
        assert!(blocks(&table).is_empty());
    }

    #[test]
    fn restore_puts_a_block_back_without_counting_it_allocated_again() {
        let table = Table::new();
        let s1 = stack(&table, 1);
        let a = table.insert_headed(0x10_0010, 24, s1);
        table.remove_headed(0x10_0010, a);
        let back = table.restore_headed(0x10_0010, 24, s1);
        assert!(back.is_recorded());
        let stats = table.stats();
        assert_eq!((stats.live_blocks, stats.total_blocks), (1, 1));
        assert_eq!(blocks(&table).len(), 1);
    }
}
