//! Typing a snapshot: the type name of every live block, and the rows of the per-type reports.
//!
//! A block's type is its explicit tag if it has one, else its stack's inferred type, else its
//! size: `(unknown, 96 B)`, so that no block is left out of a report.

#![forbid(unsafe_code)]

use super::infer::process_stack_types;
use super::tags::tag_names;
use crate::snapshot::Snapshot;
use std::collections::HashMap;
use std::sync::Arc;

/// One line of a per-type log: a number and the type it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TypeRow {
    /// Objects or bytes.
    pub value: u64,
    /// The type's name (`app::Foo`, `[app::Bar]`, `(unknown, 96 B)`).
    pub name: String,
}

/// One allocation context of a traced type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TraceRow {
    /// Objects of the type allocated from this context over the run.
    pub count: u64,
    /// The frames, innermost first, as MemProf prints them.
    pub context: Vec<String>,
}

/// The name of a block whose type is unknown: `(unknown, 96 B)`.
pub(crate) fn unknown_name(size: u64) -> String {
    format!("(unknown, {size} B)")
}

/// The type of every block of a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Typing {
    /// The distinct type names; a type's index is its position.
    pub names: Vec<String>,
    /// The type index of each block, in the snapshot's block order.
    pub of_block: Vec<u32>,
}

impl Typing {
    /// Types the blocks of `snapshot`: a block's explicit tag (`tag_names[tag - 1]`) first, else
    /// its stack's inferred type (`stack_types[stack]`), else `(unknown, <size> B)`.
    pub(crate) fn new(
        snapshot: &Snapshot,
        stack_types: &[Option<Arc<str>>],
        tag_names: &[&str],
    ) -> Typing {
        let mut index: HashMap<String, u32> = HashMap::new();
        let mut names = Vec::new();
        let mut intern = |name: &str| -> u32 {
            if let Some(&i) = index.get(name) {
                return i;
            }
            let i = names.len() as u32;
            names.push(name.to_owned());
            index.insert(name.to_owned(), i);
            i
        };
        let of_block = snapshot
            .blocks
            .iter()
            .map(|block| {
                let tagged = (block.tag != 0)
                    .then(|| tag_names.get(block.tag as usize - 1))
                    .flatten();
                match tagged {
                    Some(name) => intern(name),
                    None => match stack_types.get(block.stack.0 as usize) {
                        Some(Some(name)) => intern(name),
                        _ => intern(&unknown_name(block.size)),
                    },
                }
            })
            .collect();
        Typing { names, of_block }
    }

    /// Types a snapshot of this process (symbolizing what it must).
    pub(crate) fn of_process(snapshot: &Snapshot) -> Typing {
        let stack_types = process_stack_types(snapshot, |s| s.live_blocks > 0);
        Typing::new(snapshot, &stack_types, &tag_names())
    }

    /// The type name of block `index` of the snapshot.
    pub(crate) fn name_of(&self, index: usize) -> &str {
        &self.names[self.of_block[index] as usize]
    }

    /// The index of the type called `name`, if any block has it.
    pub(crate) fn type_index(&self, name: &str) -> Option<u32> {
        self.names.iter().position(|n| n == name).map(|i| i as u32)
    }

    /// Live objects per type: `count \t name` rows, most first.
    pub(crate) fn counts(&self) -> Vec<TypeRow> {
        let mut counts = vec![0u64; self.names.len()];
        for &t in &self.of_block {
            counts[t as usize] += 1;
        }
        sorted_rows(
            self.names
                .iter()
                .zip(counts)
                .map(|(name, value)| TypeRow {
                    value,
                    name: name.clone(),
                })
                .collect(),
        )
    }
}

/// Rows by value, largest first, then by name; rows of value 0 left out.
pub(crate) fn sorted_rows(mut rows: Vec<TypeRow>) -> Vec<TypeRow> {
    rows.retain(|r| r.value > 0);
    rows.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::StackId;
    use crate::snapshot::StackSummary;

    #[test]
    fn typing_prefers_tags_then_inference_then_size() {
        use crate::snapshot::LiveBlock;
        let block = |address, size, stack, tag| LiveBlock {
            address,
            size,
            stack: StackId(stack),
            tag,
        };
        let stacks = vec![StackSummary::default(), StackSummary::default()];
        let snapshot = Snapshot::from_parts(
            vec![
                block(0x1000, 16, 0, 0),
                block(0x2000, 16, 0, 1),
                block(0x3000, 96, 1, 0),
                block(0x4000, 96, 1, 0),
                block(0x5000, 32, 1, 0),
            ],
            stacks,
            0,
        );
        let stack_types = vec![Some(Arc::from("app::Foo")), None];
        let typing = Typing::new(&snapshot, &stack_types, &["app::Tagged"]);
        let names: Vec<&str> = (0..5).map(|i| typing.name_of(i)).collect();
        assert_eq!(
            names,
            [
                "app::Foo",
                "app::Tagged",
                "(unknown, 96 B)",
                "(unknown, 96 B)",
                "(unknown, 32 B)"
            ]
        );
        let rows = typing.counts();
        let counts: Vec<(u64, &str)> = rows.iter().map(|r| (r.value, r.name.as_str())).collect();
        assert_eq!(
            counts,
            [
                (2, "(unknown, 96 B)"),
                (1, "(unknown, 32 B)"),
                (1, "app::Foo"),
                (1, "app::Tagged")
            ]
        );
    }
}
