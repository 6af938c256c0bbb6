//! The side tables: the live blocks without a header, by address, split over [`SIDES`] hash maps,
//! each behind its own lock. Those are the global allocator's blocks of 64 KiB and more or
//! aligned to more than 16 bytes, all of its blocks when blocks carry no header (the profiler
//! samples, or was off at the first allocation: `header`), the blocks the C ABI reports, and the
//! preloaded library's blocks (`hooks::preload`: the C library's `malloc` and the rest, known by
//! address alone).
//!
//! A block is one [`Word`] in its side table's map: 16 bytes of entry and one control byte, in a
//! map kept between 7/16 and 7/8 full, so memory per live block stays between 19 and 39 bytes
//! whatever the block's size and wherever the allocator put it. (A table indexed by address, as a
//! shadow of the address space, costs memory in proportion to the heap's address span instead,
//! which for blocks of a few hundred bytes and more is far more than the blocks' count calls for.)
//!
//! The side table of a block is picked by its 64 MiB region of the address space. Allocators give
//! each thread (or each arena of threads) memory of its own in regions of that size or larger
//! (glibc's per-thread arenas are heaps of 64 MiB, aligned to it), so a thread's blocks share a
//! side table, which its next change finds in its own core's cache, and threads that allocate from
//! different arenas mostly change different side tables (unless their regions' hashes meet, or
//! one frees the other's blocks), so their locks and maps seldom move between cores.
//! Within a side table, the map keeps a page's blocks in neighbouring buckets (see [`place`]).
//! Sizes too large for a word and type tags are rare and kept beside the blocks ([`Extras`]).

use super::hold::Hold;
use super::word::{LARGE, Word};
use super::{Block, Table};
use crate::guard::Guard;
use std::hash::{BuildHasher, Hasher};
use std::sync::{MutexGuard, PoisonError, TryLockError};

/// Side tables; a power of two. Enough that threads seldom meet on one, and that each stays
/// small enough to be found in the cache when a thread comes back to it.
pub(super) const SIDES: usize = 16;

/// A folded multiply: every bit of the result depends on every bit of `address`.
#[inline]
fn mix(address: usize) -> u64 {
    let product = (address as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (product as u64) ^ ((product >> 64) as u64)
}

/// The hash map's hasher for addresses.
#[derive(Clone, Copy, Default)]
pub(crate) struct AddressHasher(u64);

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
        self.0 = place(address);
    }
}

impl BuildHasher for AddressHasher {
    type Hasher = AddressHasher;
    fn build_hasher(&self) -> AddressHasher {
        AddressHasher(0)
    }
}

/// Live blocks, keyed by address.
type Blocks = hashbrown::HashMap<usize, Word, AddressHasher>;

/// The live blocks whose addresses map to one side table.
pub(crate) struct Side {
    /// Every live block of the side table's pages.
    pub(super) blocks: Blocks,
    /// What the blocks whose word says so keep beside it.
    pub(super) extras: Extras,
}

impl Side {
    pub(super) const fn new() -> Side {
        Side {
            blocks: hashbrown::HashMap::with_hasher(AddressHasher(0)),
            extras: Extras::new(),
        }
    }

    /// The block at `address` as stored in `word`.
    pub(super) fn unpack(&self, address: usize, word: Word) -> Block {
        match word.has_side() {
            true => self.extras.unpack(address, word, word.is_tagged()),
            false => word.block(),
        }
    }
}

/// What some blocks keep beside their word, by address: sizes too large for it, and type tags set
/// explicitly. Both are rare. A side table has its own; the slots share one.
pub(super) struct Extras {
    /// Sizes that do not fit a word.
    pub(super) large: hashbrown::HashMap<usize, u64, AddressHasher>,
    /// Type tags.
    pub(super) tags: hashbrown::HashMap<usize, u32, AddressHasher>,
}

impl Extras {
    pub(super) const fn new() -> Extras {
        Extras {
            large: hashbrown::HashMap::with_hasher(AddressHasher(0)),
            tags: hashbrown::HashMap::with_hasher(AddressHasher(0)),
        }
    }

    /// The block at `address` whose word is `word`, its size looked up here when the word is
    /// large, and its tag when `tagged`.
    pub(super) fn unpack(&self, address: usize, word: Word, tagged: bool) -> Block {
        Block {
            size: match word.is_large() {
                true => self
                    .large
                    .get(&address)
                    .copied()
                    .unwrap_or(u64::from(LARGE)),
                false => word.small_size(),
            },
            stack: word.stack(),
            tag: match tagged {
                true => self.tags.get(&address).copied().unwrap_or(0),
                false => 0,
            },
        }
    }

    /// Keeps what `block`, packed in `word` at `address`, does not fit in the word.
    pub(super) fn keep(&mut self, address: usize, word: Word, block: &Block) {
        if word.is_large() {
            self.large.insert(address, block.size);
        }
        if block.tag != 0 {
            self.tags.insert(address, block.tag);
        }
    }

    /// Takes out what the block at `address` kept here (its size only when `large`); returns its
    /// tag, 0 for none.
    pub(super) fn take(&mut self, address: usize, large: bool) -> u32 {
        if large {
            self.large.remove(&address);
        }
        self.tags.remove(&address).unwrap_or(0)
    }
}

/// Bits of an address below its page: blocks on one page sit in neighbouring buckets.
const PAGE_BITS: u32 = 12;
/// Bits of an address below its region: blocks in one region share a side table.
const REGION_BITS: u32 = 26;
/// Bits of an address below the 16-byte granule blocks start on.
const GRANULE_BITS: u32 = 4;

/// The side table of `address`: from its region's hash.
#[inline]
pub(super) fn side_of(address: usize) -> usize {
    (mix(address >> REGION_BITS) >> 32) as usize % SIDES
}

/// The hash of an address in its side table's map. The blocks of one page get consecutive
/// hashes, by their offset in the page, from a start the page's hash picks at random: a page's
/// blocks sit in neighbouring buckets, so the blocks an allocator hands out one after another
/// (and frees in about that order) touch a few cache lines and one page of the map, where a hash
/// of the whole address would miss the cache on every block once the map outgrows it. The top
/// seven bits, which the map keeps as each bucket's tag, also take the offset, so the blocks of
/// one page in one group of buckets have different tags.
#[inline]
fn place(address: usize) -> u64 {
    let granule = ((address >> GRANULE_BITS) & ((1 << (PAGE_BITS - GRANULE_BITS)) - 1)) as u64;
    let tag = granule.wrapping_mul(0x9E37_79B9_7F4A_7C15) & (0x7f << 57);
    mix(address >> PAGE_BITS).wrapping_add(granule) ^ tag
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
        if !super::hold::holding_side() {
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

    /// Stores `block`, packed in `word`, at `address`; returns the block that was there.
    #[inline]
    pub(super) fn add_block(&self, address: usize, word: Word, block: &Block) -> Option<Block> {
        let mut held = self.side(address);
        let side = &mut *held.side;
        let old = side.blocks.insert(address, word);
        let old = old.map(|old| side.take_entries(address, old));
        side.extras.keep(address, word, block);
        old
    }

    /// Takes the block at `address` out; `None` when the table does not hold it.
    #[inline]
    pub(super) fn take_block(&self, address: usize) -> Option<Block> {
        let mut held = self.side(address);
        let side = &mut *held.side;
        let word = side.blocks.remove(&address)?;
        let block = side.take_entries(address, word);
        side.shrink();
        Some(block)
    }
}

impl Side {
    /// The block `word`, just taken out of [`Side::blocks`], stands for at `address`, with what it
    /// kept beside it taken out too.
    #[inline]
    pub(super) fn take_entries(&mut self, address: usize, word: Word) -> Block {
        if !word.has_side() {
            return word.block();
        }
        let block = self.unpack(address, word);
        self.extras.take(address, true);
        block
    }

    /// Gives memory back once the blocks fill less than an eighth of their map (a large one: the
    /// small ones cost too little to be worth the copy), so memory follows the live blocks when
    /// their number falls.
    #[inline]
    fn shrink(&mut self) {
        let capacity = self.blocks.capacity();
        if capacity > 1024 && self.blocks.len() < capacity / 8 {
            self.shrink_now();
        }
    }

    /// Shrinks the map. The free path comes here outside the reentrancy guard: the new array is
    /// the table's own memory, so it is made inside it, unrecorded (recording it would intern a
    /// stack while this side table is held, against the order in which `fork` takes the locks).
    #[cold]
    #[inline(never)]
    fn shrink_now(&mut self) {
        let _guard = Guard::enter();
        self.blocks.shrink_to(self.blocks.len() * 4);
    }
}
