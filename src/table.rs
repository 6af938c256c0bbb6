//! The live table: every live block by address, with its size and interned stack.
//!
//! A block is one word in the [`shadow`] of the address space, at a place computed from its
//! address, so consecutive blocks have neighbouring words and the allocation and free paths touch
//! cache lines they touched moments before. Locks, counters and the rare extras (sizes of 4 GiB
//! or more, type tags, addresses the shadow cannot hold) are spread over [`SHARDS`] shards by the
//! block's 4 KiB page, each behind its own `std::sync::Mutex` (a futex: it never allocates), so
//! threads allocating at the same time, each in its own arena, rarely meet. A block's stack is
//! interned once in [`stacks`]; the block keeps only the stack's id. Each shard counts its own
//! blocks and bytes under its lock; [`stats`] adds them up. Everything here is called inside the
//! reentrancy guard, so the table's own growth goes to the wrapped allocator unrecorded.
//!
//! Under sampling (a non-zero [`Table::sample_interval`]) only sampled blocks are in the table and
//! every count is an estimate: allocated totals add each block's randomly rounded weight, live
//! figures sum the weights of the live blocks when they are read, and a small counting filter lets
//! the free of a block that was never sampled skip the table.

#![forbid(unsafe_code)]

pub mod shadow;
pub mod stacks;
pub mod stats;

use crate::capture::ReturnAddress;
use crate::capture::sampling;
use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

thread_local! {
    /// How many shards this thread holds: while it holds any, the blocks it frees are the table's
    /// own memory, and looking them up would wait for a shard it holds itself.
    static HELD: Cell<u32> = const { Cell::new(0) };
}

/// Whether the current thread holds a shard of a table.
#[inline]
pub fn holding_shards() -> bool {
    HELD.try_with(Cell::get).unwrap_or(0) != 0
}

/// A held shard; [`holding_shards`] says so while it lives.
pub struct ShardGuard<'a>(MutexGuard<'a, Shard>);

impl<'a> ShardGuard<'a> {
    fn lock(shard: &'a Mutex<Shard>) -> ShardGuard<'a> {
        // A panic never happens while a shard is held, but a poisoned lock must not stop recording.
        let guard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = HELD.try_with(|held| held.set(held.get() + 1));
        ShardGuard(guard)
    }
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        let _ = HELD.try_with(|held| held.set(held.get() - 1));
    }
}

impl Deref for ShardGuard<'_> {
    type Target = Shard;
    fn deref(&self) -> &Shard {
        &self.0
    }
}

impl DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut Shard {
        &mut self.0
    }
}

pub use shadow::Shadow;
pub use stacks::{StackId, StackRecord, Stacks};
pub use stats::{HeapStats, Peak, PeakTable, ShardCounts};

/// Number of address shards; a power of two.
pub const SHARDS: usize = 64;

/// Slots of the sampled-block filter; a power of two (32 KiB, so it stays in cache).
const FILTER: usize = 1 << 15;

/// What the table knows of one live block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Requested size in bytes.
    pub size: u64,
    /// The stack that allocated it (or reallocated it last).
    pub stack: StackId,
    /// A type tag; 0 means unknown. Reserved for per-type attribution.
    pub tag: u32,
}

/// Hashes an address: a folded multiply, so the bits the shard index and the hash map's buckets use
/// all depend on every address bit (blocks are 16-byte aligned, so the low bits alone say nothing).
#[inline]
fn mix(address: usize) -> u64 {
    let product = (address as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (product as u64) ^ ((product >> 64) as u64)
}

/// The hash map's hasher for addresses.
#[derive(Clone, Copy, Default)]
pub struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix((self.0 as usize).rotate_left(8) ^ usize::from(b));
        }
    }
    fn write_usize(&mut self, address: usize) {
        self.0 = mix(address);
    }
}

impl BuildHasher for AddressHasher {
    type Hasher = AddressHasher;
    fn build_hasher(&self) -> AddressHasher {
        AddressHasher(0)
    }
}

/// How a block is stored: one word, in the shadow or in [`Shard::odd`]. The low half is the size
/// plus one (so a stored word is never 0), or [`LARGE`] when the size is kept in [`Shard::large`];
/// the high half is the stack id, with [`TAGGED`] set when the block has a tag in [`Shard::tags`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Word(u64);

/// A size field that says the size is kept in [`Shard::large`].
const LARGE: u32 = u32::MAX;
/// The bit of the stack field that says the block has a tag; stack ids stay below it.
const TAGGED: u32 = 1 << 31;

impl Word {
    fn new(block: &Block) -> Word {
        let size = block
            .size
            .checked_add(1)
            .and_then(|s| u32::try_from(s).ok())
            .filter(|&s| s != LARGE)
            .unwrap_or(LARGE);
        let tagged = if block.tag != 0 { TAGGED } else { 0 };
        let stack = block.stack.0 & !TAGGED | tagged;
        Word(u64::from(size) | u64::from(stack) << 32)
    }

    fn is_large(self) -> bool {
        self.0 as u32 == LARGE
    }

    fn is_tagged(self) -> bool {
        (self.0 >> 32) as u32 & TAGGED != 0
    }

    fn stack(self) -> StackId {
        StackId((self.0 >> 32) as u32 & !TAGGED)
    }
}

/// Live blocks at addresses the shadow does not cover, keyed by address.
type Blocks = hashbrown::HashMap<usize, Word, AddressHasher>;

/// One shard of the live table: what is rare enough to be kept beside the shadow, and the
/// counters of the blocks whose addresses map to it.
pub struct Shard {
    /// Live blocks the shadow cannot hold (addresses not 16-byte aligned, or above 2^47).
    odd: Blocks,
    /// Sizes that do not fit a word, by address: rare, so they do not widen every word.
    large: hashbrown::HashMap<usize, u64, AddressHasher>,
    /// Type tags set explicitly, by address: rare, so they do not widen every word.
    tags: hashbrown::HashMap<usize, u32, AddressHasher>,
    /// This shard's counters.
    pub counts: ShardCounts,
}

impl Shard {
    const fn new() -> Shard {
        Shard {
            odd: hashbrown::HashMap::with_hasher(AddressHasher(0)),
            large: hashbrown::HashMap::with_hasher(AddressHasher(0)),
            tags: hashbrown::HashMap::with_hasher(AddressHasher(0)),
            counts: ShardCounts {
                live_blocks: 0,
                live_bytes: 0,
                total_blocks: 0,
                total_bytes: 0,
            },
        }
    }

    /// The block at `address` as stored in `word`.
    fn unpack(&self, address: usize, word: Word) -> Block {
        Block {
            size: if word.is_large() {
                self.large
                    .get(&address)
                    .copied()
                    .unwrap_or(u64::from(LARGE))
            } else {
                (word.0 as u32 - 1).into()
            },
            stack: word.stack(),
            tag: if word.is_tagged() {
                self.tags.get(&address).copied().unwrap_or(0)
            } else {
                0
            },
        }
    }

    /// Keeps beside the word what does not fit in it, and counts the block.
    fn keep(&mut self, address: usize, block: &Block, word: Word) {
        if word.is_large() {
            self.large.insert(address, block.size);
        }
        if block.tag != 0 {
            self.tags.insert(address, block.tag);
        }
        self.counts.live_blocks += 1;
        self.counts.live_bytes += block.size;
    }

    /// Clears what `word`, just taken out, kept beside it; returns its block.
    fn forget(&mut self, address: usize, word: Word) -> Block {
        let block = self.unpack(address, word);
        if word.is_large() {
            self.large.remove(&address);
        }
        if word.is_tagged() {
            self.tags.remove(&address);
        }
        self.counts.live_blocks -= 1;
        self.counts.live_bytes -= block.size;
        block
    }

    /// Live blocks whose addresses map to this shard.
    pub fn len(&self) -> usize {
        self.counts.live_blocks as usize
    }

    /// Whether no live block maps to this shard.
    pub fn is_empty(&self) -> bool {
        self.counts.live_blocks == 0
    }
}

/// Every shard of a table, held: while it lives no block is added or removed, and its blocks and
/// totals agree with each other.
pub struct Locked<'a> {
    table: &'a Table,
    shards: [ShardGuard<'a>; SHARDS],
}

impl Locked<'_> {
    /// Live blocks.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    /// Whether no block is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f(address, block)` for every live block: those in the shadow by increasing address,
    /// then the others.
    pub fn for_each_block(&self, mut f: impl FnMut(usize, Block)) {
        self.table.shadow.for_each(|address, word| {
            f(
                address,
                self.shards[shard_of(address)].unpack(address, Word(word)),
            );
        });
        for shard in &self.shards {
            for (&address, &word) in &shard.odd {
                f(address, shard.unpack(address, word));
            }
        }
    }

    /// The totals of the held table.
    pub fn stats(&self) -> HeapStats {
        let mut stats = HeapStats::default();
        match self.table.sample_interval() {
            0 => {
                for shard in &self.shards {
                    stats.live_blocks += shard.counts.live_blocks;
                    stats.live_bytes += shard.counts.live_bytes;
                }
            }
            interval => {
                let (mut blocks, mut bytes) = (0.0, 0.0);
                self.for_each_block(|_, block| {
                    let (wb, ws) = sampling::weight(block.size, interval);
                    blocks += wb;
                    bytes += ws;
                });
                stats.live_blocks = blocks.round() as u64;
                stats.live_bytes = bytes.round() as u64;
            }
        }
        for shard in &self.shards {
            stats.total_blocks += shard.counts.total_blocks;
            stats.total_bytes += shard.counts.total_bytes;
        }
        stats.peak_bytes = self.table.peak.peak_bytes().max(stats.live_bytes);
        stats
    }
}

/// The shard of `address`: by its 4 KiB page, so blocks allocated one after another share a lock
/// that stays in the allocating core's cache, and threads working in different arenas rarely meet.
#[inline]
fn shard_of(address: usize) -> usize {
    (mix(address >> 12) >> 58) as usize % SHARDS
}

/// A live table: the process has one, [`TABLE`]; tests make their own.
pub struct Table {
    /// Live blocks by address.
    shadow: Shadow,
    /// Locks and side tables, sharded by address.
    shards: [Mutex<Shard>; SHARDS],
    /// The stacks blocks were allocated from.
    pub stacks: Stacks,
    /// Live bytes over all shards, and their peak.
    peak: Peak,
    /// Mean bytes between sampled allocations; 0 records every allocation.
    sample_interval: AtomicU64,
    /// Under sampling: how many live blocks hash to each slot (saturating at 255, then sticky), so
    /// a slot at 0 proves an address was never recorded.
    filter: [AtomicU8; FILTER],
    /// Whether stacks count their live blocks and the peak table is kept.
    track_peak: AtomicBool,
    /// A new peak was reached since the last capture of the peak table.
    peak_due: AtomicBool,
    /// The live heap per stack at the peak, when tracked.
    peak_table: Mutex<PeakTable>,
}

impl Default for Table {
    fn default() -> Self {
        Table::new()
    }
}

impl Table {
    /// An empty table.
    pub const fn new() -> Table {
        Table {
            shadow: Shadow::new(),
            shards: [const { Mutex::new(Shard::new()) }; SHARDS],
            stacks: Stacks::new(),
            peak: Peak::new(),
            sample_interval: AtomicU64::new(0),
            filter: [const { AtomicU8::new(0) }; FILTER],
            track_peak: AtomicBool::new(false),
            peak_due: AtomicBool::new(false),
            peak_table: Mutex::new(PeakTable {
                live_bytes: 0,
                stacks: Vec::new(),
            }),
        }
    }

    /// Keeps per-stack live counts and the table of the heap's peak from now on. Call it before
    /// the first block is recorded.
    pub fn set_track_peak(&self, track: bool) {
        self.track_peak.store(track, Relaxed);
    }

    /// Whether the peak table is kept.
    #[inline]
    pub fn tracks_peak(&self) -> bool {
        self.track_peak.load(Relaxed)
    }

    /// Adds a live block to the peak accounting.
    #[inline]
    fn grow(&self, stack: StackId, size: u64) {
        let bytes = self.peak_bytes_of(size);
        let new_peak = self.peak.grow(bytes);
        if self.tracks_peak() {
            self.stacks.record(stack).on_live(true, bytes);
            if new_peak {
                self.peak_due.store(true, Relaxed);
            }
        }
    }

    /// Takes a live block out of the peak accounting; first captures the peak table when a new
    /// peak is due (the heap is about to come down from it).
    #[inline]
    fn shrink(&self, stack: StackId, size: u64) {
        let bytes = self.peak_bytes_of(size);
        if self.tracks_peak() {
            if self.peak_due.load(Relaxed) {
                self.capture_peak();
            }
            self.stacks.record(stack).on_live(false, bytes);
        }
        self.peak.shrink(bytes);
    }

    #[cold]
    fn capture_peak(&self) {
        // Never wait on the allocation path: another thread capturing now does it for us.
        let Ok(mut peak) = self.peak_table.try_lock() else {
            return;
        };
        let live = self.peak.live_bytes();
        if live <= peak.live_bytes {
            return;
        }
        self.peak_due.store(false, Relaxed);
        if live - peak.live_bytes <= peak.live_bytes / 64 {
            return;
        }
        peak.live_bytes = live;
        peak.stacks.clear();
        peak.stacks.extend(self.stacks.iter().map(|(_, record)| {
            (
                record.live_blocks.load(Relaxed),
                record.live_bytes.load(Relaxed),
            )
        }));
    }

    /// The table of the heap's peak, when tracked: `None` otherwise.
    pub fn peak_table(&self) -> Option<PeakTable> {
        self.tracks_peak().then(|| {
            self.peak_table
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }

    /// Mean bytes between sampled allocations; 0 when every allocation is recorded.
    #[inline]
    pub fn sample_interval(&self) -> u64 {
        self.sample_interval.load(Relaxed)
    }

    /// Sets the sampling interval. Call it before the first block is recorded.
    pub fn set_sample_interval(&self, interval: u64) {
        self.sample_interval.store(interval, Relaxed);
    }

    /// Whether a block may be recorded at `address`: always `true` without sampling; under
    /// sampling, `false` proves it is not, without touching the table.
    #[inline]
    pub fn may_hold(&self, address: usize) -> bool {
        self.sample_interval() == 0 || self.filter[Self::slot(address)].load(Relaxed) != 0
    }

    fn slot(address: usize) -> usize {
        (mix(address) >> 40) as usize % FILTER
    }

    fn filter_add(&self, address: usize) {
        let slot = &self.filter[Self::slot(address)];
        let _ = slot.fetch_update(Relaxed, Relaxed, |n| (n < u8::MAX).then_some(n + 1));
    }

    fn filter_remove(&self, address: usize) {
        let slot = &self.filter[Self::slot(address)];
        let _ = slot.fetch_update(Relaxed, Relaxed, |n| (n > 0 && n < u8::MAX).then(|| n - 1));
    }

    /// The live bytes a block stands for in the peak: its size, or its weight under sampling.
    fn peak_bytes_of(&self, size: u64) -> u64 {
        match self.sample_interval() {
            0 => size,
            interval => sampling::weight(size, interval).1.round() as u64,
        }
    }

    /// The current totals. Without sampling it adds up the shards one at a time; under sampling
    /// it weighs every live block, holding every shard.
    pub fn stats(&self) -> HeapStats {
        if self.sample_interval() != 0 {
            return self.lock_all().stats();
        }
        let mut stats = HeapStats::default();
        for shard in &self.shards {
            let shard = ShardGuard::lock(shard);
            stats.live_blocks += shard.counts.live_blocks;
            stats.live_bytes += shard.counts.live_bytes;
            stats.total_blocks += shard.counts.total_blocks;
            stats.total_bytes += shard.counts.total_bytes;
        }
        stats.peak_bytes = self.peak.peak_bytes().max(stats.live_bytes);
        stats
    }

    #[inline]
    fn shard(&self, address: usize) -> ShardGuard<'_> {
        ShardGuard::lock(&self.shards[shard_of(address)])
    }

    /// Stores `block` at `address` in the held `shard`; returns the block that was there.
    fn add(&self, shard: &mut Shard, address: usize, block: Block) -> Option<Block> {
        let word = Word::new(&block);
        let old = match self.shadow.set(address, word.0) {
            Some(old) => (old != 0).then_some(Word(old)),
            None => shard.odd.insert(address, word),
        };
        let stale = old.map(|old| shard.forget(address, old));
        shard.keep(address, &block, word);
        stale
    }

    /// The word of the block at `address` in the held `shard`, left in place.
    fn word(&self, shard: &Shard, address: usize) -> Option<Word> {
        match self.shadow.get(address) {
            0 => shard.odd.get(&address).copied(),
            word => Some(Word(word)),
        }
    }

    /// Takes the block at `address` out of the held `shard`.
    fn take(&self, shard: &mut Shard, address: usize) -> Option<Block> {
        let word = match self.shadow.take(address) {
            0 if shard.odd.is_empty() => return None,
            0 => shard.odd.remove(&address)?,
            word => Word(word),
        };
        Some(shard.forget(address, word))
    }

    /// Records a new live block allocated from `frames`.
    #[inline]
    pub fn insert(&self, address: usize, size: usize, frames: &[ReturnAddress]) -> StackId {
        let stack = self.stacks.intern(frames);
        self.insert_block(address, size as u64, stack);
        stack
    }

    /// Records a new live block whose stack is already interned.
    #[inline]
    pub fn insert_block(&self, address: usize, size: u64, stack: StackId) {
        let interval = self.sample_interval();
        let (blocks, bytes) = sampling::estimate(size, interval);
        self.stacks.record(stack).on_alloc(blocks, bytes);
        self.grow(stack, size);
        if interval != 0 {
            self.filter_add(address);
        }
        let stale = {
            let mut shard = self.shard(address);
            shard.counts.total_blocks += blocks;
            shard.counts.total_bytes += bytes;
            self.add(
                &mut shard,
                address,
                Block {
                    size,
                    stack,
                    tag: 0,
                },
            )
        };
        // An address handed out twice without a free in between means a free went unseen (another
        // allocator, or one made before memprof was ready): the stale block is gone.
        if let Some(stale) = stale {
            self.forget(address, &stale);
        }
    }

    /// Removes a block about to be freed; `None` when the table never saw it.
    #[inline]
    pub fn remove(&self, address: usize) -> Option<Block> {
        let block = self.take(&mut self.shard(address), address)?;
        self.forget(address, &block);
        Some(block)
    }

    /// Undoes, outside the shard, what recording `block` added to the peak and the filter.
    fn forget(&self, address: usize, block: &Block) {
        self.shrink(block.stack, block.size);
        if self.sample_interval() != 0 {
            self.filter_remove(address);
        }
    }

    /// Puts back a block that [`Table::remove`] took out, when the free did not happen after all
    /// (a failed `realloc`).
    pub fn restore(&self, address: usize, block: Block) {
        self.grow(block.stack, block.size);
        if self.sample_interval() != 0 {
            self.filter_add(address);
        }
        let stale = self.add(&mut self.shard(address), address, block);
        if let Some(stale) = stale {
            self.forget(address, &stale);
        }
    }

    /// Whether any block was ever recorded: one relaxed load, for callers that must cost nothing
    /// when memprof is not the global allocator.
    #[inline]
    pub fn has_recorded(&self) -> bool {
        self.peak.peak_bytes() != 0
    }

    /// Sets the type tag of the live block that starts at `address`; returns the block's stack and
    /// its previous tag, or `None` when no live block starts there. Call it inside the reentrancy
    /// guard: the tag map may allocate while the shard is held.
    pub fn set_tag(&self, address: usize, tag: u32) -> Option<(StackId, u32)> {
        let mut shard = self.shard(address);
        let word = self.word(&shard, address)?;
        let block = shard.unpack(address, word);
        self.add(&mut shard, address, Block { tag, ..block });
        Some((block.stack, block.tag))
    }

    /// Holds every shard, in order: while the result lives, no block is added or removed.
    pub fn lock_all(&self) -> Locked<'_> {
        Locked {
            table: self,
            shards: std::array::from_fn(|i| ShardGuard::lock(&self.shards[i])),
        }
    }
}

/// The process's live table.
pub static TABLE: Table = Table::new();

#[cfg(test)]
mod tests;
