//! Interned stacks: each distinct raw stack is stored once and named by a dense [`StackId`].
//!
//! Records sit in an append-only concurrent vector, so a record is read by id without a lock and
//! its counters are plain atomics. Finding the id of a stack goes through a small hash index,
//! sharded by the stack's hash.

use crate::capture::ReturnAddress;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

/// Index shards of the stack table; a power of two.
const INDEX_SHARDS: usize = 16;

/// A stack's index in the stack table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StackId(pub u32);

/// One distinct stack and its counters.
#[derive(Debug)]
pub struct StackRecord {
    /// Return addresses, innermost first.
    pub frames: Box<[ReturnAddress]>,
    /// `hash(frames)`, kept so the index never hashes a stored stack again.
    hash: u64,
    /// Blocks allocated from this stack over the whole run.
    pub allocated_blocks: AtomicU64,
    /// Bytes allocated from this stack over the whole run.
    pub allocated_bytes: AtomicU64,
    /// Blocks from this stack live now.
    pub live_blocks: AtomicU64,
    /// Bytes from this stack live now.
    pub live_bytes: AtomicU64,
}

impl StackRecord {
    pub(super) fn on_alloc(&self, size: u64) {
        self.allocated_blocks.fetch_add(1, Relaxed);
        self.allocated_bytes.fetch_add(size, Relaxed);
        self.on_restore(size);
    }

    pub(super) fn on_restore(&self, size: u64) {
        self.live_blocks.fetch_add(1, Relaxed);
        self.live_bytes.fetch_add(size, Relaxed);
    }

    pub(super) fn on_free(&self, size: u64) {
        self.live_blocks.fetch_sub(1, Relaxed);
        self.live_bytes.fetch_sub(size, Relaxed);
    }
}

/// Hashes a raw stack (FxHash-style: rotate, xor, multiply).
#[inline]
pub fn hash(frames: &[ReturnAddress]) -> u64 {
    frames.iter().fold(frames.len() as u64, |h, a| {
        (h.rotate_left(5) ^ a.0 as u64).wrapping_mul(0x51_7C_C1_B7_27_22_0A_95)
    })
}

/// The stack table.
pub struct Stacks {
    /// Records by id.
    records: boxcar::Vec<StackRecord>,
    /// Ids by stack hash, sharded by the hash's top bits.
    index: [Mutex<hashbrown::HashTable<u32>>; INDEX_SHARDS],
}

impl Stacks {
    pub(super) const fn new() -> Stacks {
        Stacks {
            records: boxcar::Vec::new(),
            index: [const { Mutex::new(hashbrown::HashTable::new()) }; INDEX_SHARDS],
        }
    }

    /// The id of `frames`, interning it on first sight.
    pub fn intern(&self, frames: &[ReturnAddress]) -> StackId {
        let hash = hash(frames);
        let shard = (hash >> 60) as usize % INDEX_SHARDS;
        let mut index = self.index[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let same = |id: &u32| {
            let record = self.get(*id);
            record.hash == hash && *record.frames == *frames
        };
        if let Some(&id) = index.find(hash, same) {
            return StackId(id);
        }
        let id = self.records.push(StackRecord {
            frames: frames.into(),
            hash,
            allocated_blocks: AtomicU64::new(0),
            allocated_bytes: AtomicU64::new(0),
            live_blocks: AtomicU64::new(0),
            live_bytes: AtomicU64::new(0),
        }) as u32;
        index.insert_unique(hash, id, |id| self.get(*id).hash);
        StackId(id)
    }

    fn get(&self, id: u32) -> &StackRecord {
        // Ids are handed out only after their record is written, and records are never removed.
        &self.records[id as usize]
    }

    /// The record of an interned stack.
    #[inline]
    pub fn record(&self, id: StackId) -> &StackRecord {
        self.get(id.0)
    }

    /// Number of interned stacks; ids run from 0 to this.
    pub fn len(&self) -> usize {
        self.records.count()
    }

    /// Whether no stack was interned yet.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Every record, by id.
    pub fn iter(&self) -> impl Iterator<Item = (StackId, &StackRecord)> {
        self.records.iter().map(|(id, r)| (StackId(id as u32), r))
    }
}
