//! The table of label sets: each distinct set of (key, value) pairs stored once and named by a
//! dense id from 1 (0 is the empty set), up to [`MAX_SETS`]; past that, new sets are dropped
//! and counted.
//!
//! A key or value longer than [`MAX_TEXT`] bytes is cut to that (at a character boundary), and a
//! set keeps at most [`MAX_PAIRS`] pairs, where the set is made: so every report, export and
//! trace shows the same labels, and a trace's definition of a set always fits in one chunk. The
//! first cut is said once on stderr.
//!
//! Off the allocation path: interning runs where code sets labels, inside the reentrancy guard
//! (its own allocations are not recorded), under one lock that nothing holds while it waits for
//! anything else. Merging a set over another (nested labels) is cached by the pair of ids, so
//! a future polled again and again under the same outer labels finds its merged set without
//! hashing strings.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

/// The most distinct label sets the table keeps.
pub(crate) const MAX_SETS: u32 = 1 << 16;

/// The most bytes of a label's key or value; longer ones are cut.
pub(crate) const MAX_TEXT: usize = 64 << 10;

/// The most pairs of one set; a set of more keeps the first this many by key (when nested
/// labels are merged, the inner ones first).
pub(crate) const MAX_PAIRS: usize = 64;

/// Merged pairs of sets remembered; the cache starts over past this.
const MAX_MERGED: usize = 1 << 16;

/// A set's pairs, sorted by key, keys unique.
type Pairs = Arc<[(Box<str>, Box<str>)]>;

/// The interned sets.
#[derive(Default)]
struct Inner {
    /// Ids by pairs.
    ids: HashMap<Pairs, u32>,
    /// Pairs by id - 1.
    sets: Vec<Pairs>,
    /// The set of `inner` merged over `outer`, by `(outer, inner)`.
    merged: HashMap<(u32, u32), u32>,
}

/// The process's table of label sets.
pub(crate) struct LabelSets {
    inner: Mutex<Option<Inner>>,
    /// New sets refused because the table was full.
    dropped: AtomicU64,
}

/// The process's label sets.
pub(crate) static SETS: LabelSets = LabelSets::new();

impl LabelSets {
    const fn new() -> LabelSets {
        LabelSets {
            inner: Mutex::new(None),
            dropped: AtomicU64::new(0),
        }
    }

    /// The table, held by the forking thread across `fork`: a thread interning a set at that
    /// moment would otherwise leave it held forever in the child, whose next snapshot (a dump, the
    /// report at exit) and labels would wait for it.
    pub(crate) fn lock_for_fork(&'static self) -> impl Sized + 'static {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the table, held. Inside the reentrancy guard.
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f(inner.get_or_insert_with(Inner::default))
    }

    /// The id of the set of `pairs` (the last value of a key given twice wins); 0 for the empty
    /// set, or when the table is full. A pair with an empty key or an empty value is refused (left
    /// out): pprof has no label with an empty value, and every output shows the same labels.
    /// Inside the reentrancy guard.
    /// A key or value above [`MAX_TEXT`] bytes is cut, pairs past [`MAX_PAIRS`] are left out.
    pub(crate) fn intern(&self, pairs: &[(&str, &str)]) -> u32 {
        let mut sorted: Vec<(Box<str>, Box<str>)> = Vec::with_capacity(pairs.len());
        for &(key, value) in pairs {
            if key.is_empty() || value.is_empty() {
                continue;
            }
            let (key, value) = (cut(key), cut(value));
            match sorted.iter_mut().find(|(k, _)| &**k == key) {
                Some(pair) => pair.1 = value.into(),
                None => sorted.push((key.into(), value.into())),
            }
        }
        self.intern_sorted(sorted)
    }

    /// [`LabelSets::intern`] for pairs with unique keys.
    fn intern_sorted(&self, mut pairs: Vec<(Box<str>, Box<str>)>) -> u32 {
        if pairs.is_empty() {
            return 0;
        }
        pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        keep_at_most(&mut pairs);
        let pairs: Pairs = pairs.into();
        self.with(|inner| inner.id(pairs, &self.dropped))
    }

    /// The set of `inner` merged over `outer` (its values override `outer`'s for the same key).
    /// Inside the reentrancy guard.
    pub(crate) fn merge(&self, outer: u32, inner: u32) -> u32 {
        self.with(|table| {
            if let Some(&id) = table.merged.get(&(outer, inner)) {
                return id;
            }
            let (Some(o), Some(i)) = (table.get(outer), table.get(inner)) else {
                return inner;
            };
            let mut pairs: Vec<(Box<str>, Box<str>)> = o
                .iter()
                .filter(|(k, _)| i.iter().all(|(ik, _)| ik != k))
                .cloned()
                .collect();
            // The inner pairs first, so that a set cut to its bound keeps them.
            let outer_kept = MAX_PAIRS.saturating_sub(i.len());
            if pairs.len() > outer_kept {
                warn_cut();
                pairs.truncate(outer_kept);
            }
            pairs.extend(i.iter().cloned());
            pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            // A full table keeps the outer labels.
            let id = match table.id(pairs.into(), &self.dropped) {
                0 => return outer,
                id => id,
            };
            if table.merged.len() >= MAX_MERGED {
                table.merged.clear();
            }
            table.merged.insert((outer, inner), id);
            id
        })
    }

    /// The pairs of set `id`, sorted by key; empty for 0 or an unknown id. Inside the
    /// reentrancy guard.
    pub(crate) fn pairs(&self, id: u32) -> Vec<(String, String)> {
        self.with(|inner| inner.get(id).map(to_strings).unwrap_or_default())
    }

    /// Every set by id (index 0, the empty set, included); empty when none was ever interned.
    /// Inside the reentrancy guard.
    pub(crate) fn all(&self) -> Vec<Vec<(String, String)>> {
        self.with(|inner| {
            if inner.sets.is_empty() {
                return Vec::new();
            }
            std::iter::once(Vec::new())
                .chain(inner.sets.iter().map(to_strings))
                .collect()
        })
    }

    /// New sets refused because the table was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }
}

/// `text` cut to [`MAX_TEXT`] bytes, at a character boundary.
fn cut(text: &str) -> &str {
    if text.len() <= MAX_TEXT {
        return text;
    }
    warn_cut();
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Leaves out the pairs of `pairs` past [`MAX_PAIRS`].
fn keep_at_most(pairs: &mut Vec<(Box<str>, Box<str>)>) {
    if pairs.len() > MAX_PAIRS {
        warn_cut();
        pairs.truncate(MAX_PAIRS);
    }
}

/// Says once that labels were cut to their bounds.
fn warn_cut() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, Relaxed) {
        crate::config::warn(format_args!(
            "labels cut: a key or value is kept to its first {} KiB, a set to {MAX_PAIRS} pairs \
             (docs/labels.md)",
            MAX_TEXT >> 10
        ));
    }
}

/// `pairs` as owned strings.
fn to_strings(pairs: &Pairs) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Inner {
    /// The id of `pairs` (sorted, keys unique), interned on first sight; 0 when the table is
    /// full, counted in `dropped`.
    fn id(&mut self, pairs: Pairs, dropped: &AtomicU64) -> u32 {
        if let Some(&id) = self.ids.get(&pairs) {
            return id;
        }
        if self.sets.len() >= MAX_SETS as usize {
            dropped.fetch_add(1, Relaxed);
            return 0;
        }
        self.sets.push(pairs.clone());
        let id = self.sets.len() as u32;
        self.ids.insert(pairs, id);
        id
    }

    /// The pairs of set `id`.
    fn get(&self, id: u32) -> Option<&Pairs> {
        self.sets.get(id.checked_sub(1)? as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_drops_new_sets_and_counts_them() {
        let table = LabelSets::new();
        let mut inner = Inner::default();
        for i in 0..MAX_SETS {
            let pairs: Pairs = vec![("n".into(), i.to_string().into())].into();
            assert_eq!(inner.id(pairs, &table.dropped), i + 1);
        }
        let known: Pairs = vec![("n".into(), "7".into())].into();
        assert_eq!(inner.id(known, &table.dropped), 8);
        let new: Pairs = vec![("n".into(), "new".into())].into();
        assert_eq!(inner.id(new.clone(), &table.dropped), 0);
        assert_eq!(inner.id(new, &table.dropped), 0);
        assert_eq!(table.dropped(), 2);
    }

    #[test]
    fn merging_overrides_outer_keys_and_is_cached() {
        let table = LabelSets::new();
        let outer = table.intern(&[("tenant", "acme"), ("kind", "read")]);
        let inner = table.intern(&[("kind", "write"), ("span", "s")]);
        let merged = table.merge(outer, inner);
        assert_eq!(
            table.pairs(merged),
            [
                ("kind".to_owned(), "write".to_owned()),
                ("span".to_owned(), "s".to_owned()),
                ("tenant".to_owned(), "acme".to_owned())
            ]
        );
        assert_eq!(table.merge(outer, inner), merged);
        assert_eq!(
            table.intern(&[("tenant", "acme"), ("kind", "write"), ("span", "s")]),
            merged
        );
        assert_eq!(table.all().len(), 4);
    }

    #[test]
    fn long_values_and_many_pairs_are_cut_where_the_set_is_made() {
        let table = LabelSets::new();
        let long = "é".repeat(MAX_TEXT); // 2 bytes each: cut at a character boundary
        let id = table.intern(&[("k", &long)]);
        let pairs = table.pairs(id);
        assert_eq!(pairs[0].1.len(), MAX_TEXT);
        assert!(long.starts_with(&pairs[0].1));
        let keys: Vec<String> = (0..MAX_PAIRS + 10).map(|i| format!("k{i:03}")).collect();
        let many: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
        let id = table.intern(&many);
        assert_eq!(table.pairs(id).len(), MAX_PAIRS);
        // Merged over a full set, the inner pair stays.
        let inner = table.intern(&[("zz", "inner")]);
        let merged = table.pairs(table.merge(id, inner));
        assert_eq!(merged.len(), MAX_PAIRS);
        assert!(merged.contains(&("zz".to_owned(), "inner".to_owned())));
    }

    #[test]
    fn pairs_with_an_empty_key_or_value_are_refused() {
        let table = LabelSets::new();
        assert_eq!(table.intern(&[("tenant", "")]), 0);
        assert_eq!(table.intern(&[("", "x"), ("", "")]), 0);
        let kept = table.intern(&[("kind", "k")]);
        assert_eq!(
            table.intern(&[("tenant", ""), ("kind", "k"), ("", "x")]),
            kept
        );
        // An empty value given after a real one refuses the pair, not the key's value before.
        assert_eq!(table.intern(&[("kind", "k"), ("kind", "")]), kept);
        assert_eq!(table.all().len(), 2);
    }
}
