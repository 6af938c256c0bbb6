//! The live table: every live block by address, with its size and interned stack.
//!
//! Blocks are spread over [`SHARDS`] shards by address, each behind its own `std::sync::Mutex`
//! (a futex: it never allocates), so threads allocating at the same time rarely meet. A block's
//! stack is interned once in [`stacks`]; the block keeps only the stack's id. Each shard counts its
//! own blocks and bytes under its lock; [`stats`] adds them up. Everything here is called inside the reentrancy guard, so the maps' own growth goes
//! to the wrapped allocator unrecorded.

#![forbid(unsafe_code)]

pub mod stacks;
pub mod stats;

use crate::capture::ReturnAddress;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

pub use stacks::{StackId, StackRecord, Stacks};
pub use stats::{HeapStats, Peak, ShardCounts};

/// Number of address shards; a power of two.
pub const SHARDS: usize = 64;

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

/// Live blocks of one shard, keyed by address.
pub type Blocks = hashbrown::HashMap<usize, Block, AddressHasher>;

/// One shard of the live table.
#[derive(Default)]
pub struct Shard {
    /// Live blocks whose address maps to this shard.
    pub blocks: Blocks,
    /// This shard's counters.
    pub counts: ShardCounts,
}

impl Shard {
    fn add(&mut self, address: usize, block: Block) -> Option<Block> {
        self.counts.live_bytes += block.size;
        let stale = self.blocks.insert(address, block);
        if let Some(stale) = &stale {
            self.counts.live_bytes -= stale.size;
        }
        stale
    }
}

/// A live table: the process has one, [`TABLE`]; tests make their own.
pub struct Table {
    /// Live blocks, sharded by address.
    shards: [Mutex<Shard>; SHARDS],
    /// The stacks blocks were allocated from.
    pub stacks: Stacks,
    /// Live bytes over all shards, and their peak.
    peak: Peak,
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
            shards: [const {
                Mutex::new(Shard {
                    blocks: hashbrown::HashMap::with_hasher(AddressHasher(0)),
                    counts: ShardCounts {
                        live_bytes: 0,
                        total_blocks: 0,
                        total_bytes: 0,
                    },
                })
            }; SHARDS],
            stacks: Stacks::new(),
            peak: Peak::new(),
        }
    }

    /// The current totals, adding up the shards one at a time.
    pub fn stats(&self) -> HeapStats {
        let mut stats = HeapStats::default();
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            Self::add_counts(&mut stats, &shard);
        }
        stats.peak_bytes = self.peak.peak_bytes().max(stats.live_bytes);
        stats
    }

    fn add_counts(stats: &mut HeapStats, shard: &Shard) {
        stats.live_blocks += shard.blocks.len() as u64;
        stats.live_bytes += shard.counts.live_bytes;
        stats.total_blocks += shard.counts.total_blocks;
        stats.total_bytes += shard.counts.total_bytes;
    }

    /// The totals of shards held by [`Table::lock_all`]: consistent with their blocks.
    pub fn stats_of(&self, shards: &[MutexGuard<'_, Shard>]) -> HeapStats {
        let mut stats = HeapStats::default();
        for shard in shards {
            Self::add_counts(&mut stats, shard);
        }
        stats.peak_bytes = self.peak.peak_bytes().max(stats.live_bytes);
        stats
    }

    #[inline]
    fn shard(&self, address: usize) -> MutexGuard<'_, Shard> {
        let index = (mix(address) >> 58) as usize % SHARDS;
        // A panic never happens while a shard is held, but a poisoned lock must not stop recording.
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a new live block allocated from `frames`.
    #[inline]
    pub fn insert(&self, address: usize, size: usize, frames: &[ReturnAddress]) {
        let stack = self.stacks.intern(frames);
        self.insert_block(address, size as u64, stack);
    }

    /// Records a new live block whose stack is already interned.
    #[inline]
    pub fn insert_block(&self, address: usize, size: u64, stack: StackId) {
        self.stacks.record(stack).on_alloc(size);
        self.peak.grow(size);
        let stale = {
            let mut shard = self.shard(address);
            shard.counts.total_blocks += 1;
            shard.counts.total_bytes += size;
            shard.add(
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
            self.peak.shrink(stale.size);
        }
    }

    /// Removes a block about to be freed; `None` when the table never saw it.
    #[inline]
    pub fn remove(&self, address: usize) -> Option<Block> {
        let block = {
            let mut shard = self.shard(address);
            let block = shard.blocks.remove(&address)?;
            shard.counts.live_bytes -= block.size;
            block
        };
        self.peak.shrink(block.size);
        Some(block)
    }

    /// Puts back a block that [`Table::remove`] took out, when the free did not happen after all
    /// (a failed `realloc`).
    pub fn restore(&self, address: usize, block: Block) {
        self.peak.grow(block.size);
        if let Some(stale) = self.shard(address).add(address, block) {
            self.peak.shrink(stale.size);
        }
    }

    /// Locks every shard, in order: while the returned guards live, no block is added or removed.
    pub fn lock_all(&self) -> Vec<MutexGuard<'_, Shard>> {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner))
            .collect()
    }
}

/// The process's live table.
pub static TABLE: Table = Table::new();

#[cfg(test)]
mod tests;
