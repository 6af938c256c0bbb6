//! Interned stacks: each distinct raw stack is stored once and named by a dense [`StackId`].
//!
//! Records sit in an append-only concurrent vector, so a record is read by id without a lock and
//! its counters are plain atomics. What the first million stacks allocate is counted per thread
//! instead (see [`super::writers`]), without a locked instruction. Finding the id of a stack goes
//! through a small hash index, sharded by the stack's hash.

use crate::address::{ReturnAddress, StackId};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// Index shards of the stack table; a power of two.
pub(super) const INDEX_SHARDS: usize = 16;

/// Entries of the per-thread cache of recently interned stacks; a power of two.
const RECENT: usize = 512;

/// Tags of stack tables; 0 is never one.
static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

/// A thread's recently interned stacks, all of one stack table.
struct Recent {
    /// The tag of the stack table the ids belong to; 0 for none.
    owner: u64,
    /// `(hash, id)` by `hash % RECENT`.
    ids: [(u64, u32); RECENT],
}

/// Entries that match no stack: the hash of each is one no lookup of its slot asks for.
const fn no_ids() -> [(u64, u32); RECENT] {
    let mut ids = [(0, u32::MAX); RECENT];
    let mut slot = 0;
    while slot < RECENT {
        ids[slot].0 = (slot ^ 1) as u64;
        slot += 1;
    }
    ids
}

thread_local! {
    /// This thread's recently interned stacks: most allocations repeat a stack the thread used
    /// shortly before, and a hit needs no lock.
    static RECENT_IDS: RefCell<Recent> = const {
        RefCell::new(Recent {
            owner: 0,
            ids: no_ids(),
        })
    };
}

/// A shard of the stack index, held.
pub(super) type HeldShard<'a> = MutexGuard<'a, hashbrown::HashTable<u32>>;

/// One distinct stack and its counters.
#[derive(Debug)]
pub(crate) struct StackRecord {
    /// Return addresses, innermost first.
    pub frames: Box<[ReturnAddress]>,
    /// `hash(frames)`, kept so the index never hashes a stored stack again.
    hash: u64,
    /// Blocks allocated from this stack over the run, where threads do not count them in their
    /// own writers (stack ids from 2^20 on); see [`super::Table::allocated`].
    pub allocated_blocks: AtomicU64,
    /// Bytes likewise.
    pub allocated_bytes: AtomicU64,
    /// Blocks from this stack live now; kept only while the table tracks its peak.
    pub live_blocks: AtomicU64,
    /// Bytes from this stack live now; kept only while the table tracks its peak.
    pub live_bytes: AtomicU64,
}

impl StackRecord {
    /// Counts a block of `bytes` live (`true`) or gone (`false`), for the peak table.
    #[inline]
    pub(super) fn on_live(&self, live: bool, bytes: u64) {
        if live {
            self.live_blocks.fetch_add(1, Relaxed);
            self.live_bytes.fetch_add(bytes, Relaxed);
        } else {
            self.live_blocks.fetch_sub(1, Relaxed);
            self.live_bytes.fetch_sub(bytes, Relaxed);
        }
    }
}

/// Hashes a raw stack: four independent multiply lanes, so the hash of a 30-frame stack is not one
/// 30-step dependency chain.
#[inline]
pub(crate) fn hash(frames: &[ReturnAddress]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [frames.len() as u64, 1, 2, 3];
    let mut chunks = frames.chunks_exact(4);
    for chunk in &mut chunks {
        for (lane, frame) in lanes.iter_mut().zip(chunk) {
            *lane = (*lane ^ frame.0 as u64).wrapping_mul(K);
        }
    }
    for (lane, frame) in lanes.iter_mut().zip(chunks.remainder()) {
        *lane = (*lane ^ frame.0 as u64).wrapping_mul(K);
    }
    let folded =
        lanes[0].rotate_left(7) ^ lanes[1].rotate_left(19) ^ lanes[2].rotate_left(31) ^ lanes[3];
    (folded ^ (folded >> 29)).wrapping_mul(K)
}

/// The stack table.
pub(crate) struct Stacks {
    /// Records by id.
    records: boxcar::Vec<StackRecord>,
    /// Ids by stack hash, sharded by the hash's top bits.
    index: [Mutex<hashbrown::HashTable<u32>>; INDEX_SHARDS],
    /// This table's tag for the threads' caches of recent ids; 0 until first needed.
    tag: AtomicU64,
}

impl Stacks {
    pub(super) const fn new() -> Stacks {
        Stacks {
            records: boxcar::Vec::new(),
            index: [const { Mutex::new(hashbrown::HashTable::new()) }; INDEX_SHARDS],
            tag: AtomicU64::new(0),
        }
    }

    /// This table's tag, assigned on first use: no other stack table of the process has it.
    #[inline]
    fn tag(&self) -> u64 {
        match self.tag.load(Relaxed) {
            0 => self.assign_tag(),
            tag => tag,
        }
    }

    #[cold]
    fn assign_tag(&self) -> u64 {
        let new = NEXT_TAG.fetch_add(1, Relaxed);
        match self.tag.compare_exchange(0, new, Relaxed, Relaxed) {
            Ok(_) => new,
            Err(current) => current,
        }
    }

    /// The id of `frames`, interning it on first sight. Inlined always: the allocation path's
    /// two instances (one per kind of block) both call it, and a plain `#[inline]` leaves it a
    /// call in each of them (misses go out of line, to [`Stacks::intern_missed`]).
    #[inline(always)]
    pub(crate) fn intern(&self, frames: &[ReturnAddress]) -> StackId {
        let hash = hash(frames);
        let slot = hash as usize % RECENT;
        let tag = self.tag();
        let hint = RECENT_IDS
            .try_with(|recent| {
                let recent = recent.try_borrow().ok()?;
                (recent.owner == tag).then(|| recent.ids[slot])
            })
            .ok()
            .flatten();
        // A hit is trusted on its 64-bit hash (the cache holds ids of this table only, and every
        // id it holds was interned): two distinct stacks would have to collide, about one chance
        // in 2^64 per lookup.
        if let Some((cached, id)) = hint
            && cached == hash
        {
            return StackId(id);
        }
        self.intern_missed(frames, hash, tag)
    }

    /// [`Stacks::intern`] past a miss of the thread's cache: the id from the index, then cached.
    /// Out of line, so that the allocation path's frame holds none of it (resetting the cache
    /// builds its whole array).
    #[cold]
    #[inline(never)]
    fn intern_missed(&self, frames: &[ReturnAddress], hash: u64, tag: u64) -> StackId {
        let id = self.intern_locked(frames, hash);
        let _ = RECENT_IDS.try_with(|recent| {
            if let Ok(mut recent) = recent.try_borrow_mut() {
                if recent.owner != tag {
                    recent.owner = tag;
                    recent.ids = no_ids();
                }
                recent.ids[hash as usize % RECENT] = (hash, id.0);
            }
        });
        id
    }

    #[cold]
    fn intern_locked(&self, frames: &[ReturnAddress], hash: u64) -> StackId {
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

    /// Every shard of the index, held (for `fork`: no other thread is interning meanwhile). With
    /// `only_try`, `None` when a shard is held already, which may be by this thread.
    pub(super) fn hold_index(&self, only_try: bool) -> Option<[HeldShard<'_>; INDEX_SHARDS]> {
        let shards: [Option<HeldShard<'_>>; INDEX_SHARDS] =
            std::array::from_fn(|i| match only_try {
                false => Some(self.index[i].lock().unwrap_or_else(PoisonError::into_inner)),
                true => match self.index[i].try_lock() {
                    Ok(guard) => Some(guard),
                    Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                    Err(TryLockError::WouldBlock) => None,
                },
            });
        if shards.iter().any(Option::is_none) {
            return None;
        }
        Some(shards.map(|shard| shard.expect("every shard is held")))
    }

    fn get(&self, id: u32) -> &StackRecord {
        // Ids are handed out only after their record is written, and records are never removed.
        &self.records[id as usize]
    }

    /// The record of an interned stack.
    #[inline]
    pub(crate) fn record(&self, id: StackId) -> &StackRecord {
        self.get(id.0)
    }

    /// Number of interned stacks; ids run from 0 to this.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.records.count()
    }

    /// Whether no stack was interned yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Every record, by id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (StackId, &StackRecord)> {
        self.records.iter().map(|(id, r)| (StackId(id as u32), r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_cache_entries_match_no_lookup() {
        for (slot, &(hash, _)) in no_ids().iter().enumerate() {
            assert_ne!(hash as usize % RECENT, slot);
        }
    }

    #[test]
    fn cached_ids_stay_with_their_table() {
        let frames = |i: usize| [ReturnAddress(0x1000 + i), ReturnAddress(0x2000)];
        let first = Stacks::new();
        for i in 0..8 {
            assert_eq!(first.intern(&frames(i)), StackId(i as u32));
        }
        let second = Stacks::new();
        assert_eq!(second.intern(&frames(7)), StackId(0));
        assert_eq!(first.intern(&frames(7)), StackId(7));
        assert_eq!(second.intern(&frames(7)), StackId(0));
        assert_eq!(second.intern(&frames(3)), StackId(1));
        assert_eq!(first.intern(&frames(3)), StackId(3));
        assert_eq!(second.len(), 2);
        assert_eq!(first.len(), 8);
    }
}
