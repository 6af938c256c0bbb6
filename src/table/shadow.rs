//! The shadow of the address space: one 8-byte word per 16-byte granule where a block may start.
//!
//! A block's record sits at a place computed from its address, not hashed from it, so blocks
//! allocated one after another have their records side by side: the allocation path writes, and
//! the free path reads, a cache line it touched moments before, where a hash table would miss the
//! cache on every lookup once the live set outgrows it. It costs 8 bytes of memory per 16 bytes of
//! heap, but only on the pages of the shadow that a block start ever touched.
//!
//! Three levels: a fixed top array, middle arrays made on first use, and chunks of 2^20 words
//! (8 MiB of address space for 16 MiB of heap) allocated zeroed, which the system allocator maps
//! lazily, so a chunk's untouched pages take no memory. Each chunk remembers which of its pages
//! were ever written, so iterating reads only those.
//!
//! Addresses the shadow does not cover (not 16-byte aligned, or beyond 2^47) are for the caller to
//! keep elsewhere. A word is read and written with relaxed atomics; the caller serializes the
//! writers of one word (the allocator hands an address out again only after its free).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bytes of address space per word.
const GRANULE_BITS: u32 = 4;
/// Address bits the shadow covers.
const ADDRESS_BITS: u32 = 47;
/// Words per chunk, as a power of two.
const CHUNK_BITS: u32 = 20;
/// Words per chunk.
const CHUNK: usize = 1 << CHUNK_BITS;
/// Chunks per middle array, as a power of two.
const MID_BITS: u32 = 12;
/// Chunks per middle array.
const MID: usize = 1 << MID_BITS;
/// Middle arrays in the top array.
const TOP: usize = 1 << (ADDRESS_BITS - GRANULE_BITS - CHUNK_BITS - MID_BITS);
/// Words per page of a chunk (4 KiB pages).
const PAGE_WORDS: usize = 512;
/// Pages per chunk.
const PAGES: usize = CHUNK / PAGE_WORDS;

/// Words at the end of a chunk that hold one bit per page of it, set once a word of the page was
/// written.
const TOUCHED: usize = PAGES / 64;

/// One chunk: a word per granule of 2^24 bytes of address space, 0 where no block starts, then
/// the [`TOUCHED`] words. One allocation, so a lookup follows one pointer less; a fixed-size
/// array, so indexing it with a word index needs no bounds check.
type Chunk = [AtomicU64; CHUNK + TOUCHED];

/// Chunks of 2^36 bytes of address space, made on first use.
type Mid = Box<[OnceLock<Box<Chunk>>; MID]>;

/// The shadow; see the module docs.
pub struct Shadow {
    top: [OnceLock<Mid>; TOP],
}

impl Default for Shadow {
    fn default() -> Self {
        Shadow::new()
    }
}

/// Where the word of `address` lives: top index, middle index, word index.
#[inline]
fn place(address: usize) -> Option<(usize, usize, usize)> {
    if !address.is_multiple_of(1 << GRANULE_BITS) || address >> ADDRESS_BITS != 0 {
        return None;
    }
    let granule = address >> GRANULE_BITS;
    let word = granule % CHUNK;
    let chunk = granule >> CHUNK_BITS;
    // `% TOP` changes nothing for a covered address; it lets indexing skip the bounds check.
    Some(((chunk >> MID_BITS) % TOP, chunk % MID, word))
}

impl Shadow {
    /// An empty shadow; it allocates nothing until a word is written.
    pub const fn new() -> Shadow {
        Shadow {
            top: [const { OnceLock::new() }; TOP],
        }
    }

    /// The word of `address`: 0 when no block starts there (or the shadow does not cover it).
    #[inline]
    pub fn get(&self, address: usize) -> u64 {
        self.existing(address).map_or(0, |w| w.load(Relaxed))
    }

    /// Clears the word of `address` and returns what it held.
    #[inline]
    pub fn take(&self, address: usize) -> u64 {
        match self.existing(address) {
            Some(word) => {
                // The caller serializes the writers of a word: a load and a store do.
                let value = word.load(Relaxed);
                if value != 0 {
                    word.store(0, Relaxed);
                }
                value
            }
            None => 0,
        }
    }

    /// Sets the word of `address`; returns what it held, or `None` when the shadow does not cover
    /// the address or its chunk could not be allocated (the caller keeps the block elsewhere).
    /// May allocate a chunk: call it inside the reentrancy guard.
    #[inline]
    pub fn set(&self, address: usize, value: u64) -> Option<u64> {
        let (top, mid, word) = place(address)?;
        let chunk = self.chunk(top, mid)?;
        let page = word / PAGE_WORDS;
        let bit = 1u64 << (page % 64);
        let touched = &chunk[CHUNK + page / 64];
        if touched.load(Relaxed) & bit == 0 {
            touched.fetch_or(bit, Relaxed);
        }
        // The caller serializes the writers of a word: a load and a store do, without the cost of
        // a locked instruction.
        let word = &chunk[word];
        let old = word.load(Relaxed);
        word.store(value, Relaxed);
        Some(old)
    }

    /// The word of `address` when its chunk exists.
    #[inline]
    pub fn existing(&self, address: usize) -> Option<&AtomicU64> {
        let (top, mid, word) = place(address)?;
        let chunk = self.top[top].get()?[mid].get()?;
        Some(&chunk[word])
    }

    /// The chunk at `(top, mid)`, made on first use; `None` when the allocation failed.
    #[cold]
    #[inline(never)]
    fn make_chunk(slot: &OnceLock<Box<Chunk>>) -> Option<&Chunk> {
        let words =
            bytemuck::allocation::try_zeroed_slice_box::<AtomicU64>(CHUNK + TOUCHED).ok()?;
        let chunk: Box<Chunk> = words.try_into().ok()?;
        Some(&**slot.get_or_init(|| chunk))
    }

    /// The middle array of `slot`, made on first use.
    #[cold]
    #[inline(never)]
    fn make_mid(slot: &OnceLock<Mid>) -> Option<&Mid> {
        let mids = super::empty_cells()?;
        Some(slot.get_or_init(|| mids))
    }

    #[inline]
    fn chunk(&self, top: usize, mid: usize) -> Option<&Chunk> {
        let mids = match self.top[top].get() {
            Some(mids) => mids,
            None => Self::make_mid(&self.top[top])?,
        };
        let slot = &mids[mid];
        match slot.get() {
            Some(chunk) => Some(&**chunk),
            None => Self::make_chunk(slot),
        }
    }

    /// Calls `f(address, word)` for every non-zero word, by increasing address. Reads only the
    /// pages that were ever written.
    pub fn for_each(&self, mut f: impl FnMut(usize, u64)) {
        for (t, mids) in self.top.iter().enumerate() {
            let Some(mids) = mids.get() else { continue };
            for (m, chunk) in mids.iter().enumerate() {
                let Some(chunk) = chunk.get() else { continue };
                let base = ((t << MID_BITS) | m) << CHUNK_BITS;
                for (group, bits) in chunk[CHUNK..].iter().enumerate() {
                    let mut bits = bits.load(Relaxed);
                    while bits != 0 {
                        let page = group * 64 + bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        let first = page * PAGE_WORDS;
                        for (i, word) in chunk[first..first + PAGE_WORDS].iter().enumerate() {
                            let value = word.load(Relaxed);
                            if value != 0 {
                                f((base + first + i) << GRANULE_BITS, value);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_iterate_in_order() {
        let shadow = Shadow::new();
        let addresses = [0x10, 0x5555_0000_1230, 0x7fff_ffff_fff0, 0x1000_0000];
        for (i, &a) in addresses.iter().enumerate() {
            assert_eq!(shadow.set(a, i as u64 + 1), Some(0));
        }
        assert_eq!(shadow.get(0x5555_0000_1230), 2);
        assert_eq!(shadow.get(0x5555_0000_1240), 0);
        let mut seen = Vec::new();
        shadow.for_each(|a, w| seen.push((a, w)));
        assert_eq!(
            seen,
            vec![
                (0x10, 1),
                (0x1000_0000, 4),
                (0x5555_0000_1230, 2),
                (0x7fff_ffff_fff0, 3)
            ]
        );
        assert_eq!(shadow.take(0x10), 1);
        assert_eq!(shadow.take(0x10), 0);
        assert_eq!(shadow.get(0x10), 0);
    }

    #[test]
    fn uncovered_addresses_are_refused() {
        let shadow = Shadow::new();
        assert_eq!(shadow.set(0x1008, 1), None);
        assert_eq!(shadow.get(0x1008), 0);
        assert_eq!(shadow.take(1 << 47), 0);
    }
}
