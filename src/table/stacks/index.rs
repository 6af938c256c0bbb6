//! One shard of the stack tree's node index: node ids by the hash of their path, in one array of
//! words probed linearly, each word a node id + 1 in its low half and the top half of the node's
//! path hash in its high half (0 for an empty place).
//!
//! A word carries what placing it needs, so growing the array moves words without reading a
//! node; and a lookup reads a node only when the word's half of the hash matches. The caller
//! holds the shard's lock for every call.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Places in the first array made.
const FIRST: usize = 64;

/// A shard of the index.
pub(in crate::table) struct Shard {
    /// The words; their number is 0 or a power of two.
    words: Vec<u64>,
    /// Words in use.
    len: usize,
}

/// Where a shard's words are, for a reader that does not hold its lock to warm the cache with
/// ([`Hint::prefetch`]): an address and a mask, written whenever the words move. A stale hint
/// costs a wasted prefetch, never a wrong answer: nothing is read through it.
pub(super) struct Hint {
    words: AtomicUsize,
    mask: AtomicUsize,
}

impl Hint {
    pub(super) const fn new() -> Hint {
        Hint {
            words: AtomicUsize::new(0),
            mask: AtomicUsize::new(0),
        }
    }

    /// Asks the processor to fetch the place where a lookup of `hash` starts: lookups of a
    /// walk's frames then wait for memory together, not one after another.
    #[inline]
    pub(super) fn prefetch(&self, hash: u64) {
        let words = self.words.load(Relaxed);
        if words == 0 {
            return;
        }
        let at = Shard::home(hash >> 32, self.mask.load(Relaxed));
        crate::native::prefetch(words.wrapping_add(at * 8));
    }
}

impl Shard {
    pub(super) const fn new() -> Shard {
        Shard {
            words: Vec::new(),
            len: 0,
        }
    }

    /// The first place a word whose hash has `top` as its high half is looked for.
    #[inline]
    fn home(top: u64, mask: usize) -> usize {
        (top.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & mask
    }

    /// The node whose path hashes to `hash` for which `is` holds, when there.
    #[inline]
    pub(super) fn find(&self, hash: u64, is: impl Fn(u32) -> bool) -> Option<u32> {
        if self.words.is_empty() {
            return None;
        }
        let mask = self.words.len() - 1;
        let top = hash >> 32;
        let mut at = Self::home(top, mask);
        loop {
            let word = self.words[at];
            if word == 0 {
                return None;
            }
            if word >> 32 == top && is((word as u32).wrapping_sub(1)) {
                return Some((word as u32).wrapping_sub(1));
            }
            at = (at + 1) & mask;
        }
    }

    /// Adds node `id`, whose path hashes to `hash` and which is not in the shard; `false` when
    /// the array could not grow.
    pub(super) fn insert(&mut self, hash: u64, id: u32, hint: &Hint) -> bool {
        // At most three places in four used: probe runs stay short.
        if (self.len + 1) * 4 > self.words.len() * 3 {
            if !self.grow() {
                return false;
            }
            hint.words.store(self.words.as_ptr() as usize, Relaxed);
            hint.mask.store(self.words.len() - 1, Relaxed);
        }
        self.place(((hash >> 32) << 32) | u64::from(id.wrapping_add(1)));
        self.len += 1;
        true
    }

    /// Puts `word` in the first empty place from its home.
    fn place(&mut self, word: u64) {
        let mask = self.words.len() - 1;
        let mut at = Self::home(word >> 32, mask);
        while self.words[at] != 0 {
            at = (at + 1) & mask;
        }
        self.words[at] = word;
    }

    /// Doubles the array; `false` when its memory could not be had.
    #[cold]
    fn grow(&mut self) -> bool {
        let size = (self.words.len() * 2).max(FIRST);
        let mut words = Vec::new();
        if words.try_reserve_exact(size).is_err() {
            return false;
        }
        words.resize(size, 0);
        let old = std::mem::replace(&mut self.words, words);
        for word in old.into_iter().filter(|&w| w != 0) {
            self.place(word);
        }
        true
    }

    /// The bytes of the array.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::Shard;

    #[test]
    fn finds_what_it_holds_through_growth_and_shared_halves() {
        let mut shard = Shard::new();
        let hash = |i: u32| u64::from(i).wrapping_mul(0xD6E8_FEB8_6659_FD93) | 1;
        for id in 0..10_000u32 {
            assert!(shard.insert(hash(id), id, &super::Hint::new()));
        }
        for id in 0..10_000u32 {
            assert_eq!(shard.find(hash(id), |found| found == id), Some(id));
        }
        assert_eq!(shard.find(hash(10_001), |_| true), None);
        // Two nodes whose hashes share their high half: the test of the node tells them apart.
        let same = 0xABCD_0000_0000_0000;
        assert!(shard.insert(same | 1, 20_000, &super::Hint::new()));
        assert!(shard.insert(same | 2, 20_001, &super::Hint::new()));
        assert_eq!(shard.find(same | 2, |id| id == 20_001), Some(20_001));
        assert_eq!(shard.find(same | 1, |id| id == 20_000), Some(20_000));
        assert!(shard.bytes() >= 10_002 * 8 * 4 / 3);
    }
}
