//! The side tables: what does not fit a block's word in the shadow, kept by address.
//!
//! Blocks the shadow cannot hold, sizes too large for a [`Word`], and type tags are rare, so they
//! live in small hash maps rather than in every word. The maps are split over [`SIDES`] tables,
//! each behind its own lock, picked by a hash of the address so that threads freeing unrelated
//! blocks seldom meet on one lock. The paths that reach them are kept out of line (`#[cold]`): the
//! common block never takes a lock.

use super::door::Hold;
use super::word::{LARGE, Word};
use super::{Block, Table};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{MutexGuard, PoisonError, TryLockError};

/// Side tables; a power of two.
pub(super) const SIDES: usize = 16;

/// Hashes an address: a folded multiply, so the bits the side-table index and the hash maps'
/// buckets use all depend on every address bit (blocks are 16-byte aligned, so the low bits alone
/// say nothing).
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

/// Live blocks at addresses the shadow does not cover, keyed by address.
type Blocks = hashbrown::HashMap<usize, Word, AddressHasher>;

/// What does not fit in the shadow's words, for the addresses that map to one side table.
pub struct Side {
    /// Live blocks the shadow cannot hold (addresses it does not cover, see
    /// [`Shadow`](super::Shadow)), and every live block under sampling.
    pub(super) odd: Blocks,
    /// Sizes that do not fit a word, by address.
    pub(super) large: hashbrown::HashMap<usize, u64, AddressHasher>,
    /// Type tags set explicitly, by address.
    pub(super) tags: hashbrown::HashMap<usize, u32, AddressHasher>,
}

impl Side {
    pub(super) const fn new() -> Side {
        Side {
            odd: hashbrown::HashMap::with_hasher(AddressHasher(0)),
            large: hashbrown::HashMap::with_hasher(AddressHasher(0)),
            tags: hashbrown::HashMap::with_hasher(AddressHasher(0)),
        }
    }

    /// The block at `address` as stored in `word`.
    pub(super) fn unpack(&self, address: usize, word: Word) -> Block {
        Block {
            size: if word.is_large() {
                self.large
                    .get(&address)
                    .copied()
                    .unwrap_or(u64::from(LARGE))
            } else {
                word.small_size()
            },
            stack: word.stack(),
            tag: if word.is_tagged() {
                self.tags.get(&address).copied().unwrap_or(0)
            } else {
                0
            },
        }
    }
}

/// The side table of `address`.
#[inline]
pub(super) fn side_of(address: usize) -> usize {
    (mix(address) >> 60) as usize % SIDES
}

/// A held side table; [`holding_table`](super::holding_table) says so while it lives.
pub(super) struct SideGuard<'a> {
    /// The side table, locked.
    pub(super) side: MutexGuard<'a, Side>,
    /// Counts the hold.
    _hold: Hold,
}

impl Table {
    /// The side table of `address`, held, with the frees deferred to it applied.
    pub(super) fn side(&self, address: usize) -> SideGuard<'_> {
        let _hold = Hold::side();
        let i = side_of(address);
        let mut side = self.sides[i].lock().unwrap_or_else(PoisonError::into_inner);
        self.apply_deferred(i, &mut side);
        SideGuard { side, _hold }
    }

    /// [`Table::side`] for a change nested in this thread's own (see `nested`): when this thread
    /// may hold a side table, it only tries (the one it needs may be its own, mid-change, and
    /// waiting for another could close a cycle); `None` when that fails.
    pub(super) fn side_nested(&self, address: usize) -> Option<SideGuard<'_>> {
        if !super::door::holding_side() {
            return Some(self.side(address));
        }
        let _hold = Hold::side();
        let i = side_of(address);
        let mut side = match self.sides[i].try_lock() {
            Ok(side) => side,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        self.apply_deferred(i, &mut side);
        Some(SideGuard { side, _hold })
    }

    /// Stores `word` at `address` in [`Side::odd`]; returns the word that was there.
    #[cold]
    pub(super) fn add_odd(&self, address: usize, word: Word) -> Option<Word> {
        let old = self.side(address).side.odd.insert(address, word);
        if old.is_none() {
            self.odd_blocks.fetch_add(1, Relaxed);
        }
        old
    }

    /// Keeps what does not fit `word` of `block`, at `address`, in the side tables.
    #[cold]
    pub(super) fn add_side(&self, address: usize, word: Word, block: &Block) {
        let mut side = self.side(address);
        if word.is_large() {
            side.side.large.insert(address, block.size);
        }
        if block.tag != 0 {
            side.side.tags.insert(address, block.tag);
        }
    }

    /// The block `word` stands for at `address`, its side-table entries cleared.
    #[cold]
    pub(super) fn forget_side(&self, address: usize, word: Word) -> Block {
        let mut side = self.side(address);
        let block = side.side.unpack(address, word);
        side.side.large.remove(&address);
        side.side.tags.remove(&address);
        block
    }

    /// Takes the word at `address` out of [`Side::odd`].
    #[cold]
    pub(super) fn take_odd(&self, address: usize) -> Option<Word> {
        let word = self.side(address).side.odd.remove(&address)?;
        self.odd_blocks.fetch_sub(1, Relaxed);
        Some(word)
    }
}
