//! Live memory mappings as disjoint address ranges, as the kernel keeps them: an `mmap` over
//! mapped pages (`MAP_FIXED`) replaces them, an `munmap` of part of a mapping trims it or splits
//! it in two. The replay keeps the trace's mappings in one ([`Heap::mappings`](crate::Heap)); the
//! recorder (the preloaded library) keeps the program's live mappings in another.

use std::collections::BTreeMap;

/// Disjoint ranges `[start, start + len)`, each with a value that its pieces keep when it is
/// split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeMap<V> {
    /// By start: the length and the value.
    ranges: BTreeMap<u64, (u64, V)>,
    /// Sum of the lengths.
    bytes: u64,
}

impl<V> Default for RangeMap<V> {
    fn default() -> RangeMap<V> {
        RangeMap {
            ranges: BTreeMap::new(),
            bytes: 0,
        }
    }
}

impl<V: Clone> RangeMap<V> {
    /// An empty map.
    pub const fn new() -> RangeMap<V> {
        RangeMap {
            ranges: BTreeMap::new(),
            bytes: 0,
        }
    }

    /// Ranges held.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Sum of the ranges' lengths.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The ranges in address order: start, length, value.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, &V)> + '_ {
        self.ranges.iter().map(|(&s, (l, v))| (s, *l, v))
    }

    /// Removes what is held of `[start, start + len)`: ranges inside it leave whole, ranges that
    /// cross one of its ends are trimmed to what lies outside it (a range around it is split in
    /// two). Returns the pieces removed, in address order, each with its range's value.
    pub fn remove(&mut self, start: u64, len: u64) -> Vec<(u64, u64, V)> {
        let end = start.saturating_add(len);
        let mut removed = Vec::new();
        if len == 0 {
            return removed;
        }
        // The ranges that overlap: those starting before `end` and ending after `start`; being
        // disjoint, they are the last ones before `end` until one ends at or before `start`.
        let overlapping: Vec<u64> = self
            .ranges
            .range(..end)
            .rev()
            .take_while(|(s, (l, _))| s.saturating_add(*l) > start)
            .map(|(&s, _)| s)
            .collect();
        for s in overlapping.into_iter().rev() {
            let (l, value) = self.ranges.remove(&s).expect("listed above");
            let e = s.saturating_add(l);
            if s < start {
                self.ranges.insert(s, (start - s, value.clone()));
            }
            if e > end {
                self.ranges.insert(end, (e - end, value.clone()));
            }
            let (cut_start, cut_end) = (s.max(start), e.min(end));
            self.bytes -= cut_end - cut_start;
            removed.push((cut_start, cut_end - cut_start, value));
        }
        removed
    }

    /// Holds `[start, start + len)` with `value`, replacing what was held there (returned as
    /// [`RangeMap::remove`] returns it). A zero length holds nothing.
    pub fn insert(&mut self, start: u64, len: u64, value: V) -> Vec<(u64, u64, V)> {
        let len = len.min(u64::MAX - start);
        let removed = self.remove(start, len);
        if len > 0 {
            self.ranges.insert(start, (len, value));
            self.bytes += len;
        }
        removed
    }

    /// The range holding `address`, if any: its start, length and value.
    pub fn get(&self, address: u64) -> Option<(u64, u64, &V)> {
        let (&s, (l, v)) = self.ranges.range(..=address).next_back()?;
        (address < s.saturating_add(*l)).then_some((s, *l, v))
    }
}

#[cfg(test)]
mod tests {
    use super::RangeMap;
    use proptest::prelude::*;

    const PAGE: u64 = 4096;

    fn ranges(map: &RangeMap<u32>) -> Vec<(u64, u64, u32)> {
        map.iter().map(|(s, l, &v)| (s, l, v)).collect()
    }

    #[test]
    fn middle_unmap_splits_in_two() {
        let mut map = RangeMap::new();
        map.insert(0x10000, 3 * PAGE, 7);
        let removed = map.remove(0x10000 + PAGE, PAGE);
        assert_eq!(removed, vec![(0x10000 + PAGE, PAGE, 7)]);
        assert_eq!(
            ranges(&map),
            vec![(0x10000, PAGE, 7), (0x10000 + 2 * PAGE, PAGE, 7)]
        );
        assert_eq!(map.bytes(), 2 * PAGE);
    }

    #[test]
    fn trims_either_end_and_spans_several() {
        let mut map = RangeMap::new();
        map.insert(0, 4 * PAGE, 1);
        map.insert(8 * PAGE, 4 * PAGE, 2);
        // Across the end of the first, the gap, and the start of the second.
        let removed = map.remove(3 * PAGE, 6 * PAGE);
        assert_eq!(removed, vec![(3 * PAGE, PAGE, 1), (8 * PAGE, PAGE, 2)]);
        assert_eq!(
            ranges(&map),
            vec![(0, 3 * PAGE, 1), (9 * PAGE, 3 * PAGE, 2)]
        );
        assert_eq!(map.bytes(), 6 * PAGE);
        // A range in a hole removes nothing.
        assert!(map.remove(4 * PAGE, 4 * PAGE).is_empty());
        // Whole ranges.
        assert_eq!(map.remove(0, 100 * PAGE).len(), 2);
        assert!(map.is_empty());
        assert_eq!(map.bytes(), 0);
    }

    #[test]
    fn fixed_mapping_replaces() {
        let mut map = RangeMap::new();
        map.insert(0, 4 * PAGE, 1);
        let replaced = map.insert(PAGE, 2 * PAGE, 2);
        assert_eq!(replaced, vec![(PAGE, 2 * PAGE, 1)]);
        assert_eq!(
            ranges(&map),
            vec![(0, PAGE, 1), (PAGE, 2 * PAGE, 2), (3 * PAGE, PAGE, 1)]
        );
        assert_eq!(map.get(PAGE + 5).map(|(s, _, &v)| (s, v)), Some((PAGE, 2)));
        assert_eq!(map.get(4 * PAGE), None);
        assert_eq!(map.bytes(), 4 * PAGE);
    }

    proptest! {
        /// Against a page-by-page model.
        #[test]
        fn matches_a_model_of_pages(ops in proptest::collection::vec((any::<bool>(), 0u64..32, 1u64..8), 1..64)) {
            let mut map = RangeMap::new();
            let mut pages: [Option<u32>; 40] = [None; 40];
            for (i, (map_it, start, len)) in ops.into_iter().enumerate() {
                let i = i as u32;
                if map_it {
                    map.insert(start * PAGE, len * PAGE, i);
                    for p in start..start + len { pages[p as usize] = Some(i); }
                } else {
                    let removed: u64 = map.remove(start * PAGE, len * PAGE).iter().map(|r| r.1).sum();
                    let model: u64 = (start..start + len).filter(|&p| pages[p as usize].take().is_some()).count() as u64;
                    prop_assert_eq!(removed, model * PAGE);
                }
                for (p, want) in pages.iter().enumerate() {
                    prop_assert_eq!(map.get(p as u64 * PAGE + 1).map(|(_, _, &v)| v), *want);
                }
                prop_assert_eq!(map.bytes(), pages.iter().flatten().count() as u64 * PAGE);
            }
        }
    }
}
