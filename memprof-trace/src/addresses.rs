//! Values by block address in one open-addressing table: each slot holds the address and the
//! value inline, found by linear probing from a home slot mixed from the address, removed by
//! shifting the slots after it back (no tombstones). A replay applies an allocation or a free per
//! event to millions of live blocks; a lookup here touches the cache line or two of its slot,
//! where a table with separate control bytes touches one more. [`AddressMap::touch`] lets a
//! replay load the home slots of the next few events together, so that their cache misses
//! overlap rather than follow one another.
//!
//! Home slots keep no locality of addresses on purpose: nearby addresses given nearby slots
//! (a region's blocks in one run of slots) overlap other regions' runs, and linear probing then
//! makes long clusters.

/// The empty slot's key. A value at address 0 is kept apart ([`AddressMap::zero`]).
const EMPTY: u64 = 0;

/// Values by address (`u64`), an open-addressing table with the values inline.
#[derive(Clone, Debug)]
pub struct AddressMap<V> {
    /// `(address, value)`; `address == EMPTY`: a free slot. A power of two long, or empty.
    slots: Vec<(u64, V)>,
    /// The value at address 0, which cannot be a key of `slots`.
    zero: Option<(u64, V)>,
    /// Entries in `slots` (`zero` aside).
    used: usize,
}

impl<V> Default for AddressMap<V> {
    fn default() -> AddressMap<V> {
        AddressMap {
            slots: Vec::new(),
            zero: None,
            used: 0,
        }
    }
}

/// Mixes the bits of `x` (the finalizer of SplitMix64).
#[inline]
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl<V: Copy + Default> AddressMap<V> {
    /// Slots of the smallest table.
    const FIRST: usize = 64;

    /// An empty map; it allocates at its first insertion.
    pub const fn new() -> AddressMap<V> {
        AddressMap {
            slots: Vec::new(),
            zero: None,
            used: 0,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.used + usize::from(self.zero.is_some())
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every entry, keeping the table's room.
    pub fn clear(&mut self) {
        for slot in &mut self.slots {
            slot.0 = EMPTY;
        }
        self.zero = None;
        self.used = 0;
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// The slot where a probe for `key` starts.
    #[inline]
    fn home(&self, key: u64) -> usize {
        mix(key) as usize & self.mask()
    }

    /// The slot holding `key`, or the free slot where a probe for it ended.
    #[inline]
    fn find(&self, key: u64) -> (usize, bool) {
        let mask = self.mask();
        let mut at = self.home(key);
        loop {
            let slot = self.slots[at].0;
            if slot == key {
                return (at, true);
            }
            if slot == EMPTY {
                return (at, false);
            }
            at = (at + 1) & mask;
        }
    }

    /// Reads the home slot of `key`, so that a lookup of it soon finds it in the cache; returns
    /// what it read, for the caller to keep the read from being left out.
    #[inline]
    pub(crate) fn touch(&self, key: u64) -> u64 {
        match self.slots.get(self.home(key)) {
            Some(slot) => slot.0,
            None => 0,
        }
    }

    /// The value at `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<&V> {
        if key == EMPTY {
            return self.zero.as_ref().map(|(_, v)| v);
        }
        if self.used == 0 {
            return None;
        }
        match self.find(key) {
            (at, true) => Some(&self.slots[at].1),
            _ => None,
        }
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    /// Puts `value` at `key`; returns the value it replaced.
    #[inline]
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        if key == EMPTY {
            return self.zero.replace((key, value)).map(|(_, v)| v);
        }
        // At most three quarters full.
        if (self.used + 1) * 4 > self.slots.len() * 3 {
            let slots = (self.slots.len() * 2).max(Self::FIRST);
            self.rebuild(slots);
        }
        let (at, found) = self.find(key);
        if found {
            return Some(std::mem::replace(&mut self.slots[at].1, value));
        }
        self.slots[at] = (key, value);
        self.used += 1;
        None
    }

    /// Removes the value at `key` and returns it.
    #[inline]
    pub fn remove(&mut self, key: u64) -> Option<V> {
        if key == EMPTY {
            return self.zero.take().map(|(_, v)| v);
        }
        if self.used == 0 {
            return None;
        }
        let (mut hole, found) = self.find(key);
        if !found {
            return None;
        }
        let value = self.slots[hole].1;
        // Backward shift: each later slot of the run whose home is not strictly between the hole
        // and it moves into the hole.
        let mask = self.mask();
        let mut at = hole;
        loop {
            at = (at + 1) & mask;
            let key = self.slots[at].0;
            if key == EMPTY {
                break;
            }
            let home = self.home(key);
            // Its distance from home against the hole's: it may move when the hole is no
            // farther from its home than it is.
            if (at.wrapping_sub(home) & mask) >= (at.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[at];
                hole = at;
            }
        }
        self.slots[hole].0 = EMPTY;
        self.used -= 1;
        Some(value)
    }

    /// The table made again with `slots` slots (a power of two).
    fn rebuild(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![(EMPTY, V::default()); slots]);
        let mask = self.mask();
        for &(key, value) in old.iter().filter(|s| s.0 != EMPTY) {
            let mut at = self.home(key);
            while self.slots[at].0 != EMPTY {
                at = (at + 1) & mask;
            }
            self.slots[at] = (key, value);
        }
    }

    /// The entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &V)> + '_ {
        self.zero
            .iter()
            .chain(self.slots.iter().filter(|s| s.0 != EMPTY))
            .map(|(k, v)| (k, v))
    }

    /// The values, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    /// The values, to change, in no particular order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> + '_ {
        self.zero
            .iter_mut()
            .chain(self.slots.iter_mut().filter(|s| s.0 != EMPTY))
            .map(|(_, v)| v)
    }
}

/// Whether a slot holds an entry.
fn held<V>(slot: &(u64, V)) -> bool {
    slot.0 != EMPTY
}

impl<V> IntoIterator for AddressMap<V> {
    type Item = (u64, V);
    type IntoIter = std::iter::Chain<
        std::option::IntoIter<(u64, V)>,
        std::iter::Filter<std::vec::IntoIter<(u64, V)>, fn(&(u64, V)) -> bool>,
    >;

    /// The entries, in no particular order.
    fn into_iter(self) -> Self::IntoIter {
        let held: fn(&(u64, V)) -> bool = held;
        self.zero
            .into_iter()
            .chain(self.slots.into_iter().filter(held))
    }
}

/// Hashes block addresses: one multiplication (Fibonacci hashing), enough for addresses, which
/// the table's own order makes neither adversarial nor clustered in the high bits once mixed.
#[derive(Clone, Copy, Debug, Default)]
pub struct AddressHasher(u64);

impl std::hash::Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, value: u32) {
        self.write_u64(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0 ^ value)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(26);
    }
}

#[cfg(test)]
mod tests {
    use super::AddressMap;
    use std::collections::HashMap;

    /// A small generator of test cases (SplitMix64).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            super::mix(self.0)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Every entry of `model` is found in `map` with its value, and nothing else is there.
    fn check(map: &AddressMap<(u64, u32)>, model: &HashMap<u64, (u64, u32)>) {
        assert_eq!(map.len(), model.len());
        assert_eq!(map.is_empty(), model.is_empty());
        for (&key, value) in model {
            assert_eq!(map.get(key), Some(value), "key {key:#x}");
        }
        let mut seen: Vec<(u64, (u64, u32))> = map.iter().map(|(&k, &v)| (k, v)).collect();
        let mut expected: Vec<(u64, (u64, u32))> = model.iter().map(|(&k, &v)| (k, v)).collect();
        seen.sort_unstable();
        expected.sort_unstable();
        assert_eq!(seen, expected);
    }

    /// Random insertions (new keys and replacements), removals (held keys and absent ones) and
    /// lookups give what a `HashMap` gives, while the table grows from empty to tens of
    /// thousands of entries and shrinks back: keys drawn from ranges of several widths (a few
    /// hundred addresses, so that keys come back and probes run into each other; blocks packed
    /// 16 bytes apart; any 64-bit value), 0 and `u64::MAX` among them.
    #[test]
    fn behaves_as_a_hash_map_under_random_operations() {
        for (seed, keys) in [(1u64, 300u64), (2, 1 << 16), (3, u64::MAX), (4, 40_000)] {
            let mut rng = Rng(seed);
            let mut map = AddressMap::new();
            let mut model = HashMap::new();
            let key = |rng: &mut Rng| match rng.below(50) {
                0 => 0,
                1 => u64::MAX,
                _ if keys == u64::MAX => rng.next(),
                _ => 0x5555_0000_0000 + 16 * rng.below(keys),
            };
            for step in 0..120_000u64 {
                // Mostly insertions for the first half, mostly removals after.
                let insert = rng.below(100) < if step < 60_000 { 65 } else { 35 };
                let k = key(&mut rng);
                if insert {
                    let value = (rng.next(), step as u32);
                    assert_eq!(
                        map.insert(k, value),
                        model.insert(k, value),
                        "insert {k:#x}"
                    );
                } else if rng.below(3) == 0 || model.is_empty() {
                    // A key that may be absent.
                    assert_eq!(map.remove(k), model.remove(&k), "remove {k:#x}");
                } else {
                    // A held key: the first of a few tried that is held.
                    let k = (0..8)
                        .map(|_| key(&mut rng))
                        .find(|k| model.contains_key(k))
                        .unwrap_or(k);
                    assert_eq!(map.remove(k), model.remove(&k), "remove {k:#x}");
                }
                assert_eq!(map.get(k), model.get(&k));
                assert_eq!(map.contains_key(k), model.contains_key(&k));
                if step % 10_000 == 0 {
                    check(&map, &model);
                }
            }
            check(&map, &model);
            let mut drained: Vec<(u64, (u64, u32))> = map.clone().into_iter().collect();
            drained.sort_unstable();
            let mut expected: Vec<(u64, (u64, u32))> = model.clone().into_iter().collect();
            expected.sort_unstable();
            assert_eq!(drained, expected);
            map.clear();
            model.clear();
            check(&map, &model);
        }
    }

    /// Keys that share a home slot make one run; removing any of them, first, middle or last,
    /// leaves the others found (the backward shift keeps each reachable from its home), also
    /// when the run wraps past the table's last slot.
    #[test]
    fn removals_keep_colliding_keys_reachable() {
        let mut map: AddressMap<(u64, u32)> = AddressMap::new();
        map.insert(1, (1, 1));
        let slots = map.slots.len();
        // Keys whose home is the last slot or the one before it, so that runs wrap.
        let mut keys = Vec::new();
        let mut k = 2u64;
        while keys.len() < 12 {
            if map.home(k) >= slots - 2 {
                keys.push(k);
            }
            k += 1;
        }
        for order in [[0usize, 5, 11, 3], [11, 10, 0, 6], [4, 4, 7, 1]] {
            let mut map = map.clone();
            let mut model: HashMap<u64, (u64, u32)> = HashMap::from([(1, (1, 1))]);
            for (i, &k) in keys.iter().enumerate() {
                map.insert(k, (k, i as u32));
                model.insert(k, (k, i as u32));
            }
            assert_eq!(map.slots.len(), slots, "no growth within the test");
            for at in order {
                assert_eq!(map.remove(keys[at]), model.remove(&keys[at]));
                check(&map, &model);
            }
        }
    }

    /// A value at address 0, which cannot be a slot's key, is held apart and counted.
    #[test]
    fn address_zero_is_a_key() {
        let mut map: AddressMap<(u64, u32)> = AddressMap::new();
        assert_eq!(map.get(0), None);
        assert_eq!(map.insert(0, (5, 5)), None);
        assert_eq!(map.insert(0, (6, 6)), Some((5, 5)));
        assert_eq!(map.insert(16, (7, 7)), None);
        assert_eq!(map.len(), 2);
        assert_eq!(map.get(0), Some(&(6, 6)));
        assert_eq!(map.remove(0), Some((6, 6)));
        assert_eq!(map.remove(0), None);
        assert_eq!(map.len(), 1);
        assert_eq!(map.values().copied().collect::<Vec<_>>(), vec![(7, 7)]);
    }
}
