//! Who points to what: object sizes and referrer graphs from a conservative scan of the heap.
//!
//! A [`Heap`] is a copy of the live blocks plus every reference between them, found by reading
//! the blocks (MemProf's rule: a pointer-aligned word that equals the start of a live block is a
//! reference; see [`scan`] for how that read is kept safe). The scan holds the live table for its
//! duration, so other threads' allocations and frees wait meanwhile; it reports its progress on
//! stderr when it takes more than a second. Blocks whose type holds no pointer (`String`, `[u8]`,
//! `[u64]`, …, see [`types`](mod@crate::types)) are not read.
//!
//! | function | output |
//! |---|---|
//! | [`log_object_sizes`] | the number of lines, then `bytes \t TypeName`: the heap bytes reachable from the live objects of each type, each byte counted once per type |
//! | [`object_size`] | the heap bytes reachable from one value, each byte counted once; in a build without debug information, without types (a word anywhere inside a block refers to it) |
//! | [`pretty_log_object_graph`] | a mermaid `graph LR` of up to `MEMPROF_REF_LIMIT` objects of a type and, up to `MEMPROF_REF_LEVEL` levels back, the blocks that point to them |
//!
//! The graph answers "who keeps this alive": each edge reads `referrer --@(field <byte offset>),
//! <level>--> referred`, level 0 for the blocks that point to an object of the type, 1 for those
//! that point to them, and so on. A reference is a guess (an integer can look like a pointer),
//! never an omission: every real pointer to the start of a block is found. Pointers into the
//! middle of a block (a slice of a `Vec`) are not references, except into hash tables: a
//! `HashMap` points at the control bytes in the middle of its table, so a word anywhere inside a
//! block typed as a `HashMap`/`HashSet` table refers to it.

#![deny(unsafe_code)]

pub(crate) mod scan;

use crate::address::StackId;
use crate::guard::untracked;
use crate::snapshot::{Snapshot, Which};
use crate::types::TypeRow;
use crate::types::{self, Typing, names};
pub(crate) use scan::BlockKind;

use std::sync::Arc;
use std::time::Duration;

/// Scans and analyses that take longer than this report their progress on stderr.
pub(crate) const PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// The live blocks and the references between them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Heap {
    /// The live blocks (sorted by address) and the stacks they were allocated from.
    pub snapshot: Snapshot,
    /// References of block `i` are `to[first[i]..first[i + 1]]`.
    first: Vec<usize>,
    /// The block each reference points to.
    to: Vec<u32>,
    /// The byte offset of each reference in its block.
    offset: Vec<u32>,
}

/// One reference of a synthetic heap: the word at `offset` in the block that starts at `from`
/// holds `to`, the start of another block.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reference {
    /// Start of the referring block.
    pub from: usize,
    /// Byte offset of the pointer in it.
    pub offset: u32,
    /// Start of the referred block.
    pub to: usize,
}

impl Heap {
    /// A heap from its parts, for synthetic data: references whose ends are not blocks of
    /// `snapshot` are left out.
    #[cfg(test)]
    pub(crate) fn from_parts(snapshot: Snapshot, references: &[Reference]) -> Heap {
        let index = |address: usize| {
            snapshot
                .blocks
                .binary_search_by_key(&address, |b| b.address)
                .ok()
        };
        let mut edges: Vec<(usize, u32, u32)> = references
            .iter()
            .filter_map(|r| Some((index(r.from)?, r.offset, index(r.to)? as u32)))
            .collect();
        edges.sort_unstable();
        let mut first = Vec::with_capacity(snapshot.blocks.len() + 1);
        let mut at = 0;
        for block in 0..snapshot.blocks.len() {
            first.push(at);
            while at < edges.len() && edges[at].0 == block {
                at += 1;
            }
        }
        first.push(at);
        Heap {
            first,
            to: edges.iter().map(|e| e.2).collect(),
            offset: edges.iter().map(|e| e.1).collect(),
            snapshot,
        }
    }

    /// Scans the process's live heap now, treating each block as `kind(stack, tag)` says.
    /// Progress goes to stderr after `progress_after`.
    pub(crate) fn scan_with(
        kind: &dyn Fn(StackId, u32) -> BlockKind,
        progress_after: Duration,
    ) -> Heap {
        untracked(|| {
            let scanned = scan::scan_table(kind, progress_after);
            let snapshot = Snapshot::of_held_blocks(scanned.blocks);
            Heap {
                snapshot,
                first: scanned.first,
                to: scanned.to,
                offset: scanned.offset,
            }
        })
    }

    /// Scans the process's live heap now, reading every block whose type may hold a pointer, and
    /// types its blocks.
    pub(crate) fn scan() -> (Heap, Typing) {
        untracked(|| {
            // Type what is live now first (symbolizing must not happen while the table is held),
            // so that pointer-free blocks need not be read.
            let (before, ids) = Snapshot::take_with_ids(Which::Live);
            let stack_types = types::process_stack_types(&before, |s| s.live_blocks > 0);
            let tag_names = types::tag_names();
            let kind = block_kinds(&ids, &stack_types, &tag_names);
            let heap = Heap::scan_with(&kind, PROGRESS_AFTER);
            let stack_types = types::process_stack_types(&heap.snapshot, |s| s.live_blocks > 0);
            let typing = Typing::new(&heap.snapshot, &stack_types, &types::tag_names());
            (heap, typing)
        })
    }

    /// The references of block `index`: `(byte offset, referred block)`.
    pub(crate) fn references(&self, index: usize) -> impl Iterator<Item = (u32, usize)> + '_ {
        let range = self.first[index]..self.first[index + 1];
        self.offset[range.clone()]
            .iter()
            .zip(&self.to[range])
            .map(|(&offset, &to)| (offset, to as usize))
    }

    /// For each type of `typing`, the bytes reachable from its live objects, each byte counted
    /// once per type: `bytes \t name` rows, most first.
    pub(crate) fn sizes(&self, typing: &Typing) -> Vec<TypeRow> {
        let blocks = &self.snapshot.blocks;
        // Blocks grouped by type.
        let mut by_type: Vec<Vec<usize>> = vec![Vec::new(); typing.names.len()];
        for (index, &t) in typing.of_block.iter().enumerate() {
            by_type[t as usize].push(index);
        }
        let mut mark = vec![u32::MAX; blocks.len()];
        let mut pending = Vec::new();
        let mut rows = Vec::with_capacity(by_type.len());
        let mut progress = scan::Progress::new("sizing the types", PROGRESS_AFTER);
        for (t, members) in by_type.iter().enumerate() {
            let epoch = t as u32;
            let mut bytes = 0u64;
            for &index in members {
                if mark[index] != epoch {
                    mark[index] = epoch;
                    bytes += blocks[index].size;
                    pending.push(index);
                }
            }
            while let Some(index) = pending.pop() {
                for (_, to) in self.references(index) {
                    if mark[to] != epoch {
                        mark[to] = epoch;
                        bytes += blocks[to].size;
                        pending.push(to);
                    }
                }
            }
            rows.push(TypeRow {
                value: bytes,
                name: typing.names[t].clone(),
            });
            progress.update(t as u64 + 1, by_type.len() as u64, "types");
        }
        progress.finish(by_type.len() as u64, "types");
        types::sorted_rows(rows)
    }

    /// The referrer graph of the objects of type `name`: up to `limit` of them (0 for all, lowest
    /// addresses first) and the blocks that point to them, up to `levels` levels back (0 for no
    /// limit). Each block is followed back once; each reference appears once, at the level of
    /// the block it points to.
    pub(crate) fn graph(&self, typing: &Typing, name: &str, limit: usize, levels: usize) -> Graph {
        let blocks = &self.snapshot.blocks;
        let node = |index: usize| GraphNode {
            address: blocks[index].address,
            name: typing.name_of(index).to_owned(),
        };
        let Some(wanted) = typing.type_index(name) else {
            return Graph::default();
        };
        let mut frontier: Vec<usize> = (0..blocks.len())
            .filter(|&i| typing.of_block[i] == wanted)
            .take(if limit == 0 { usize::MAX } else { limit })
            .collect();
        let targets = frontier.iter().map(|&i| node(i)).collect();
        // Referrers of every block: (referred, referrer, offset), sorted.
        let mut back: Vec<(u32, u32, u32)> = Vec::with_capacity(self.to.len());
        for from in 0..blocks.len() {
            for (offset, to) in self.references(from) {
                back.push((to as u32, from as u32, offset));
            }
        }
        back.sort_unstable();
        let mut seen = vec![false; blocks.len()];
        for &i in &frontier {
            seen[i] = true;
        }
        let mut edges = Vec::new();
        let mut level = 0;
        while !frontier.is_empty() && (levels == 0 || level < levels) {
            let mut next = Vec::new();
            for &to in &frontier {
                let start = back.partition_point(|e| e.0 < to as u32);
                for &(_, from, offset) in back[start..].iter().take_while(|e| e.0 == to as u32) {
                    let from = from as usize;
                    edges.push(GraphEdge {
                        from: node(from),
                        field: offset,
                        level,
                        to: blocks[to].address,
                    });
                    if !std::mem::replace(&mut seen[from], true) {
                        next.push(from);
                    }
                }
            }
            frontier = next;
            level += 1;
        }
        Graph { targets, edges }
    }
}

/// How to scan a block of type `name` (`None` when unknown: read it, starts only).
pub(crate) fn kind_of(name: Option<&str>) -> BlockKind {
    match name {
        Some(name) => BlockKind {
            pointer_free: names::is_pointer_free(name),
            interior: names::is_hash_table(name),
        },
        None => BlockKind::default(),
    }
}

/// How to scan the block of a stack and a tag, by the types known (a block of a stack not typed
/// yet is read, and only its start is referred to).
fn block_kinds(
    ids: &[StackId],
    stack_types: &[Option<Arc<str>>],
    tag_names: &[&'static str],
) -> impl Fn(StackId, u32) -> BlockKind + use<> {
    let by_stack: Vec<(StackId, BlockKind)> = ids
        .iter()
        .zip(stack_types)
        .map(|(&id, t)| (id, kind_of(t.as_deref())))
        .collect();
    let by_tag: Vec<BlockKind> = tag_names.iter().map(|n| kind_of(Some(n))).collect();
    move |stack: StackId, tag: u32| {
        if tag != 0 {
            by_tag.get(tag as usize - 1).copied().unwrap_or_default()
        } else {
            // `ids` are in increasing order: the stacks of a snapshot.
            match by_stack.binary_search_by_key(&stack, |&(id, _)| id) {
                Ok(place) => by_stack[place].1,
                Err(_) => BlockKind::default(),
            }
        }
    }
}

/// A block in a graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GraphNode {
    /// Where it starts.
    pub address: usize,
    /// Its type name.
    pub name: String,
}

/// A reference in a graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GraphEdge {
    /// The referring block.
    pub from: GraphNode,
    /// The byte offset of the pointer in it.
    pub field: u32,
    /// 0 when it points to a target object, 1 when to a referrer of one, …
    pub level: usize,
    /// The start of the referred block.
    pub to: usize,
}

/// The objects of one type and the blocks that keep them alive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Graph {
    /// The objects of the type, by address.
    pub targets: Vec<GraphNode>,
    /// References, by level, then by referred block, then by referrer.
    pub edges: Vec<GraphEdge>,
}

/// The heap bytes reachable from `value`: its own block when it lives in one, plus every block
/// reachable through pointers from its bytes, each byte counted once. 0 for a value that owns no
/// heap memory, or when memprof is not the global allocator.
///
/// With debug information, each block is read by what its type allows: a block of a type
/// without pointers (`String`, `Vec<u64>`) is not read, and only a hash table is referred to from
/// inside. Without it (a release build with Cargo's default `debug = false`), no type is known:
/// every block reached is read, and a word pointing anywhere inside a live block refers to it, so
/// no block the value owns is missed; a guess can only add (a stale or integer word that looks
/// like such an address in memory the value does not use).
pub fn object_size<T: ?Sized>(value: &T) -> u64 {
    untracked(|| {
        if crate::modules::executable_has_debug_info() {
            let (before, ids) = Snapshot::take_with_ids(Which::Live);
            let stack_types = types::process_stack_types(&before, |s| s.live_blocks > 0);
            let tag_names = types::tag_names();
            let kind = block_kinds(&ids, &stack_types, &tag_names);
            return scan::reachable_from(value, &kind);
        }
        let untyped = |_: StackId, _: u32| BlockKind {
            pointer_free: false,
            interior: true,
        };
        scan::reachable_from(value, &untyped)
    })
}
