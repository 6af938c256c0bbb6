//! A consistent copy of the live table: the only input of every report and export.
//!
//! [`Snapshot::take`] holds the table still for the time of one copy, so no block is half added or
//! half removed in it, and leaves the table alone afterwards: reports built from the copy never
//! make the allocation path wait.
//!
//! The one stage that reads the live table: what comes after it (symbolize, types, the memory
//! scanner, breakdown, report, export, http) reads the table through it, as a [`Snapshot`], as the
//! process's totals ([`heap_stats`], [`sample_interval`]), or, for the memory scanner, as the
//! table held still with its blocks ([`hold`]).

#![forbid(unsafe_code)]

use crate::address::ReturnAddress;
use crate::address::StackId;
use crate::guard::untracked;
use crate::table::{HeapStats, Locked, PeakTable, TABLE, Table};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// One live block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveBlock {
    /// Where it starts.
    pub address: usize,
    /// Its size in bytes.
    pub size: u64,
    /// The stack it was allocated from: an index into [`Snapshot::stacks`].
    pub stack: StackId,
    /// Its type tag; 0 when unknown.
    pub tag: u32,
}

/// The live blocks of a held table, by address.
fn blocks_of(table: &Locked<'_>) -> Vec<LiveBlock> {
    let mut blocks = Vec::with_capacity(table.len());
    table.for_each_block(|address, b| {
        blocks.push(LiveBlock {
            address,
            size: b.size,
            stack: b.stack,
            tag: b.tag,
        });
    });
    if !blocks.is_sorted_by_key(|b| b.address) {
        blocks.sort_unstable_by_key(|b| b.address);
    }
    blocks
}

/// The stacks a snapshot copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    /// Those of the live blocks, and of the blocks live at the peak when the table keeps it:
    /// what a snapshot of the live heap costs is in proportion to what is live, never to the
    /// stacks seen over the run.
    Live,
    /// Every stack seen, freed or not: for what shows the figures allocated over the run.
    All,
}

/// The table's ids of the stacks `which` asks for, in increasing order: every stack's, or those
/// of `blocks` and of the stacks live at the captured peak.
fn stack_ids(
    table: &Table,
    which: Which,
    blocks: &[LiveBlock],
    peak: Option<&PeakTable>,
) -> Vec<StackId> {
    if which == Which::All {
        return (0..table.stacks.len() as u32).map(StackId).collect();
    }
    let mut ids: Vec<StackId> = blocks.iter().map(|b| b.stack).collect();
    if let Some(peak) = peak {
        let at_peak = peak.stacks.iter().enumerate();
        ids.extend(
            at_peak
                .filter(|(_, at)| at.0 != 0)
                .map(|(id, _)| StackId(id as u32)),
        );
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Renames the stacks of `blocks` from the table's ids to their places in `ids` (sorted, with
/// every block's stack).
fn renumber(blocks: &mut [LiveBlock], ids: &[StackId]) {
    for block in blocks {
        let place = ids.binary_search(&block.stack).unwrap_or_default();
        block.stack = StackId(place as u32);
    }
}

/// The stacks of `ids` (the table's ids) with their allocated totals (live counts left at 0).
fn stacks_of(table: &Table, ids: &[StackId]) -> Vec<StackSummary> {
    let all = ids.len() == table.stacks.len();
    let allocated = if all { table.allocated() } else { Vec::new() };
    ids.iter()
        .map(|&id| {
            let (blocks, bytes) = match all {
                true => allocated.get(id.0 as usize).copied().unwrap_or((0, 0)),
                false => table.allocated_of(id),
            };
            StackSummary {
                frames: table.stacks.frames(id),
                labels: table.stacks.labels(id),
                allocated_blocks: blocks,
                allocated_bytes: bytes,
                ..StackSummary::default()
            }
        })
        .collect()
}

/// The process's heap totals now ([`HeapStats::get`]), read without copying the table: for what
/// shows the totals alone (the endpoint's index page).
#[cfg(feature = "http")]
pub(crate) fn heap_stats() -> HeapStats {
    TABLE.stats()
}

/// The process's sampling interval now: mean bytes between recorded allocations, 0 when every
/// one is recorded (as in [`Snapshot::sample_interval`]).
#[cfg(any(feature = "http", feature = "trace"))]
pub(crate) fn sample_interval() -> u64 {
    TABLE.sample_interval()
}

/// The process's live table held still, until dropped: while it lives, no block the table holds
/// is freed (a free removes its block from the table before the wrapped allocator gets it back,
/// and waits while the table is held), so its blocks' memory may be read (`object_graph::scan`).
/// Other threads' allocations and frees wait meanwhile; this thread's own go to the wrapped
/// allocator unrecorded (it runs inside the reentrancy guard).
pub(crate) struct Held(Locked<'static>);

impl Held {
    /// The live blocks of the held table, by address.
    pub(crate) fn blocks(&self) -> Vec<LiveBlock> {
        blocks_of(&self.0)
    }
}

/// Holds the process's live table still ([`Held`]). Call it inside the reentrancy guard, and not
/// while this thread holds the table already.
pub(crate) fn hold() -> Held {
    Held(TABLE.lock_all())
}

/// One interned stack with its counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackSummary {
    /// Return addresses, innermost first.
    pub frames: Vec<ReturnAddress>,
    /// Blocks allocated from this stack over the whole run.
    pub allocated_blocks: u64,
    /// Bytes allocated from this stack over the whole run.
    pub allocated_bytes: u64,
    /// Blocks from this stack live in the snapshot.
    pub live_blocks: u64,
    /// Bytes from this stack live in the snapshot.
    pub live_bytes: u64,
    /// Blocks from this stack live at the heap's peak (when [`Snapshot::peak_known`]).
    pub peak_blocks: u64,
    /// Bytes from this stack live at the heap's peak (when [`Snapshot::peak_known`]).
    pub peak_bytes: u64,
    /// The label set its blocks were allocated with: an index into [`Snapshot::label_sets`];
    /// 0 for none. The same frames with another label set are another stack.
    pub labels: u32,
}

/// A copy of the live table at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Live blocks, by address.
    pub blocks: Vec<LiveBlock>,
    /// The stacks of the live blocks (and of the blocks live at the peak, when it is known), or
    /// every stack seen so far ([`Snapshot::take_all`]); [`LiveBlock::stack`] is a place in it.
    /// Live counts agree with `blocks`.
    pub stacks: Vec<StackSummary>,
    /// Process totals; `live_*` agree with `blocks`.
    pub stats: HeapStats,
    /// Mean bytes between sampled allocations when the snapshot was taken; 0 when every
    /// allocation was recorded. When not 0, every count is an unbiased estimate: each block stands
    /// for more than itself (`MEMPROF_SAMPLE_INTERVAL`).
    pub sample_interval: u64,
    /// Whether the stacks' `peak_*` counts are known: the table kept its peak
    /// ([`MemProf::track_peak`](crate::MemProf::track_peak), `MEMPROF_PEAK=1`). They describe a
    /// moment within 1/64 of the peak's live bytes.
    pub peak_known: bool,
    /// The label sets the stacks name ([`StackSummary::labels`]), by id, each as (key, value)
    /// pairs sorted by key; index 0 is the empty set. Empty when no labels were ever set.
    pub label_sets: Vec<Vec<(String, String)>>,
}

impl Snapshot {
    /// Copies the process's live table now, without stopping other threads for longer than the
    /// copy: the live blocks with their stacks. Its cost is in proportion to what is live, not to
    /// the stacks seen over the run.
    pub fn take() -> Snapshot {
        untracked(|| Snapshot::of(&TABLE, Which::Live))
    }

    /// [`Snapshot::take`] with every stack seen so far, live or not, and what each allocated over
    /// the run: for the figures of blocks since freed (pprof's `alloc_space`, DHAT's totals).
    pub fn take_all() -> Snapshot {
        untracked(|| Snapshot::of(&TABLE, Which::All))
    }

    /// [`Snapshot::take`] or [`Snapshot::take_all`], with the table's id of each of its stacks.
    pub(crate) fn take_with_ids(which: Which) -> (Snapshot, Vec<StackId>) {
        untracked(|| {
            let (snapshot, ids, _) = Snapshot::of_held(&TABLE, which);
            (snapshot, ids)
        })
    }

    /// [`Snapshot::take`] or [`Snapshot::take_all`], with how long the table was held still.
    #[cfg(feature = "http")]
    pub(crate) fn take_held(which: Which) -> (Snapshot, Duration) {
        untracked(|| {
            let (snapshot, _, held) = Snapshot::of_held(&TABLE, which);
            (snapshot, held)
        })
    }

    /// Copies `table` now. Call it inside the reentrancy guard when `table` is the process's own.
    pub(crate) fn of(table: &Table, which: Which) -> Snapshot {
        Snapshot::of_held(table, which).0
    }

    /// [`Snapshot::of`], with the table's id of each stack and how long `table` was held still.
    fn of_held(table: &Table, which: Which) -> (Snapshot, Vec<StackId>, Duration) {
        let start = Instant::now();
        let (mut blocks, stats) = {
            let held = table.lock_all();
            (blocks_of(&held), held.stats())
        };
        let held = start.elapsed();
        let peak = table.peak_table();
        let ids = stack_ids(table, which, &blocks, peak.as_ref());
        if which == Which::Live {
            renumber(&mut blocks, &ids);
        }
        let stacks = stacks_of(table, &ids);
        let label_sets = crate::labels::sets::SETS.all();
        let mut snapshot =
            Snapshot::sampled(blocks, stacks, stats.peak_bytes, table.sample_interval());
        snapshot.stats.total_blocks = stats.total_blocks;
        snapshot.stats.total_bytes = stats.total_bytes;
        snapshot.stats.peak_exact = stats.peak_exact;
        snapshot.label_sets = label_sets;
        if let Some(peak) = peak {
            // The heap is at (or above) its captured peak now: the peak is this very moment.
            let now = peak.live_bytes <= snapshot.stats.live_bytes;
            for (id, stack) in ids.iter().zip(snapshot.stacks.iter_mut()) {
                (stack.peak_blocks, stack.peak_bytes) = if now {
                    (stack.live_blocks, stack.live_bytes)
                } else {
                    peak.stacks.get(id.0 as usize).copied().unwrap_or_default()
                };
            }
            snapshot.peak_known = true;
        }
        (snapshot, ids, held)
    }

    /// Builds a snapshot from its parts (synthetic snapshots for tests and tools): live counts are
    /// recomputed from `blocks`, totals from the stacks' allocated counts; `peak_bytes` is raised to
    /// the live bytes if below.
    ///
    /// # Panics
    /// When a block names a stack that `stacks` does not have.
    pub fn from_parts(
        blocks: Vec<LiveBlock>,
        stacks: Vec<StackSummary>,
        peak_bytes: u64,
    ) -> Snapshot {
        Snapshot::sampled(blocks, stacks, peak_bytes, 0)
    }

    /// A snapshot of the process's table made of `blocks`, copied while it was held ([`hold`]):
    /// the stacks of `blocks` with their allocated totals, the live counts from `blocks`, the
    /// heap's peak now.
    pub(crate) fn of_held_blocks(mut blocks: Vec<LiveBlock>) -> Snapshot {
        let ids = stack_ids(&TABLE, Which::Live, &blocks, None);
        renumber(&mut blocks, &ids);
        let stacks = stacks_of(&TABLE, &ids);
        let stats = TABLE.stats();
        let mut snapshot = Snapshot::from_parts(blocks, stacks, stats.peak_bytes);
        snapshot.stats.peak_exact = stats.peak_exact;
        snapshot
    }

    /// [`Snapshot::from_parts`] for blocks sampled one per `sample_interval` bytes on average:
    /// live counts are the sums of the blocks' weights.
    pub fn sampled(
        mut blocks: Vec<LiveBlock>,
        mut stacks: Vec<StackSummary>,
        peak_bytes: u64,
        sample_interval: u64,
    ) -> Snapshot {
        blocks.sort_unstable_by_key(|b| b.address);
        let mut weights = vec![(0.0f64, 0.0f64); stacks.len()];
        for block in &blocks {
            let (b, s) = crate::sampling::weight(block.size, sample_interval);
            let weight = &mut weights[block.stack.0 as usize];
            weight.0 += b;
            weight.1 += s;
        }
        for (stack, (blocks, bytes)) in stacks.iter_mut().zip(weights) {
            stack.live_blocks = blocks.round() as u64;
            stack.live_bytes = bytes.round() as u64;
        }
        // Estimates may be near `u64::MAX`: the sums saturate.
        let sum = |f: fn(&StackSummary) -> u64| {
            stacks.iter().fold(0u64, |sum, s| sum.saturating_add(f(s)))
        };
        let live_blocks = sum(|s| s.live_blocks);
        let live_bytes = sum(|s| s.live_bytes);
        let stats = HeapStats {
            live_blocks,
            live_bytes,
            peak_bytes: peak_bytes.max(live_bytes),
            // The figure given, taken as it is.
            peak_exact: true,
            total_blocks: sum(|s| s.allocated_blocks),
            total_bytes: sum(|s| s.allocated_bytes),
        };
        Snapshot {
            blocks,
            stacks,
            stats,
            sample_interval,
            peak_known: false,
            label_sets: Vec::new(),
        }
    }

    /// The stack a block was allocated from.
    pub fn stack(&self, id: StackId) -> &StackSummary {
        &self.stacks[id.0 as usize]
    }

    /// The (key, value) pairs of label set `id` ([`StackSummary::labels`]), sorted by key;
    /// empty for 0 or an id the snapshot does not have.
    pub fn label_set(&self, id: u32) -> &[(String, String)] {
        self.label_sets.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// Whether the stack `stack` was labelled with `key` = `value`.
    pub fn has_label(&self, stack: &StackSummary, key: &str, value: &str) -> bool {
        self.label_set(stack.labels)
            .iter()
            .any(|(k, v)| k == key && v == value)
    }

    /// What changed per stack since `earlier` (a snapshot of the same process taken before):
    /// the growth or shrinkage of its live blocks and bytes, and what it allocated in between.
    /// Stacks are matched by frames and labels. What a stack with nothing live in `self`
    /// allocated in between is known only when `self` holds every stack ([`Snapshot::take_all`]).
    pub fn diff(&self, earlier: &Snapshot) -> SnapshotDiff {
        // Stacks are matched by their frames and labels: a snapshot of the live heap holds the
        // stacks of its live blocks only, so places differ from one snapshot to the next.
        let before: HashMap<StackKey<'_>, &StackSummary> = earlier
            .stacks
            .iter()
            .map(|s| ((s.frames.as_slice(), earlier.label_set(s.labels)), s))
            .collect();
        let mut stacks: Vec<StackDelta> = self
            .stacks
            .iter()
            .filter_map(|later| {
                let labels = self.label_set(later.labels);
                let before = before
                    .get(&(later.frames.as_slice(), labels))
                    .copied()
                    .cloned()
                    .unwrap_or_default();
                let delta = StackDelta {
                    frames: later.frames.clone(),
                    live_blocks: later.live_blocks as i64 - before.live_blocks as i64,
                    live_bytes: later.live_bytes as i64 - before.live_bytes as i64,
                    allocated_blocks: later
                        .allocated_blocks
                        .saturating_sub(before.allocated_blocks),
                    allocated_bytes: later.allocated_bytes.saturating_sub(before.allocated_bytes),
                    labels: labels.to_vec(),
                };
                (delta.live_blocks != 0 || delta.live_bytes != 0 || delta.allocated_blocks != 0)
                    .then_some(delta)
            })
            .collect();
        // A stack live before and not now is not in this snapshot's stacks: it lost them all.
        let now: HashSet<StackKey<'_>> = self
            .stacks
            .iter()
            .map(|s| (s.frames.as_slice(), self.label_set(s.labels)))
            .collect();
        for gone in &earlier.stacks {
            let labels = earlier.label_set(gone.labels);
            if gone.live_blocks != 0 && !now.contains(&(gone.frames.as_slice(), labels)) {
                stacks.push(StackDelta {
                    frames: gone.frames.clone(),
                    live_blocks: -(gone.live_blocks as i64),
                    live_bytes: -(gone.live_bytes as i64),
                    labels: labels.to_vec(),
                    ..StackDelta::default()
                });
            }
        }
        SnapshotDiff {
            stacks,
            sample_interval: self.sample_interval,
        }
    }
}

/// What tells a stack of one snapshot from another's: its frames and its labels.
type StackKey<'a> = (&'a [ReturnAddress], &'a [(String, String)]);

/// The change of one stack between two snapshots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackDelta {
    /// Return addresses, innermost first.
    pub frames: Vec<ReturnAddress>,
    /// Live blocks gained (negative: lost).
    pub live_blocks: i64,
    /// Live bytes gained (negative: lost).
    pub live_bytes: i64,
    /// Blocks allocated between the two snapshots.
    pub allocated_blocks: u64,
    /// Bytes allocated between the two snapshots.
    pub allocated_bytes: u64,
    /// The labels its blocks were allocated with ([`with_labels`](crate::with_labels)), sorted by
    /// key; empty for none.
    pub labels: Vec<(String, String)>,
}

/// What changed between two snapshots, per stack: [`Snapshot::diff`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotDiff {
    /// The stacks that changed.
    pub stacks: Vec<StackDelta>,
    /// The later snapshot's sampling interval (0: exact counts).
    pub sample_interval: u64,
}
