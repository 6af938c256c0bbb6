//! Counts over the whole run: objects created per type, freed or not.
//!
//! Freed blocks are gone from a snapshot, but each stack counts the blocks it allocated; a stack's
//! count goes to its inferred type, less the blocks tagged explicitly, which go to their tag.

#![forbid(unsafe_code)]

use super::typing::{TypeRow, sorted_rows};
use crate::address::StackId;
use crate::snapshot::Snapshot;
use std::collections::HashMap;
use std::sync::Arc;

/// The name under which blocks of unknown type are tallied over the run (their sizes are not
/// kept per block once freed).
pub(crate) const UNKNOWN: &str = "(unknown)";

/// How many blocks each stack allocated under each type over the whole run: a stack's blocks go
/// to its inferred type (or [`UNKNOWN`]), except those tagged explicitly, which go to their tag.
pub(crate) fn per_stack_counts<'a>(
    snapshot: &Snapshot,
    stack_types: &'a [Option<Arc<str>>],
    tag_names: &'a [&'a str],
    tag_counts: &[(u32, StackId, u64)],
) -> Vec<(&'a str, StackId, u64)> {
    let mut tagged = vec![0u64; snapshot.stacks.len()];
    let mut out = Vec::new();
    for &(tag, stack, n) in tag_counts {
        if let Some(slot) = tagged.get_mut(stack.0 as usize) {
            *slot += n;
        }
        if let Some(name) = tag_names.get((tag as usize).wrapping_sub(1)) {
            out.push((*name, stack, n));
        }
    }
    for (id, stack) in snapshot.stacks.iter().enumerate() {
        let rest = stack.allocated_blocks.saturating_sub(tagged[id]);
        if rest == 0 {
            continue;
        }
        let name = match stack_types.get(id) {
            Some(Some(name)) => name,
            _ => UNKNOWN,
        };
        out.push((name, StackId(id as u32), rest));
    }
    out
}

/// Objects created over the whole run (freed or not), per type, most first.
pub(crate) fn tallies(
    snapshot: &Snapshot,
    stack_types: &[Option<Arc<str>>],
    tag_names: &[&str],
    tag_counts: &[(u32, StackId, u64)],
) -> Vec<TypeRow> {
    let mut totals: HashMap<&str, u64> = HashMap::new();
    for (name, _, n) in per_stack_counts(snapshot, stack_types, tag_names, tag_counts) {
        *totals.entry(name).or_default() += n;
    }
    sorted_rows(
        totals
            .into_iter()
            .map(|(name, value)| TypeRow {
                value,
                name: name.to_owned(),
            })
            .collect(),
    )
}
