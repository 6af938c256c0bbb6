//! A consistent copy of the live table: the only input of every report and export.
//!
//! [`Snapshot::take`] holds every shard of the table for the time of one copy, so no block is half
//! added or half removed in it, and leaves the table alone afterwards: reports built from the copy
//! never hold a lock the allocation path needs.

#![forbid(unsafe_code)]

use crate::capture::{ReturnAddress, untracked};
use crate::table::{HeapStats, StackId, TABLE, Table};

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
}

/// A copy of the live table at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Live blocks, by address.
    pub blocks: Vec<LiveBlock>,
    /// Every stack seen so far, indexed by [`StackId`]; live counts agree with `blocks`.
    pub stacks: Vec<StackSummary>,
    /// Process totals; `live_*` agree with `blocks`.
    pub stats: HeapStats,
}

impl Snapshot {
    /// Copies the process's live table now, without stopping other threads for longer than the copy.
    pub fn take() -> Snapshot {
        untracked(|| Snapshot::of(&TABLE))
    }

    /// Copies `table` now. Call it inside the reentrancy guard when `table` is the process's own.
    pub fn of(table: &Table) -> Snapshot {
        let (mut blocks, stats) = {
            let shards = table.lock_all();
            let count = shards.iter().map(|s| s.blocks.len()).sum();
            let mut blocks = Vec::with_capacity(count);
            for shard in &shards {
                blocks.extend(shard.blocks.iter().map(|(&address, b)| LiveBlock {
                    address,
                    size: b.size,
                    stack: b.stack,
                    tag: b.tag,
                }));
            }
            (blocks, table.stats_of(&shards))
        };
        blocks.sort_unstable_by_key(|b| b.address);
        let stacks = table
            .stacks
            .iter()
            .map(|(_, record)| StackSummary {
                frames: record.frames.to_vec(),
                allocated_blocks: record
                    .allocated_blocks
                    .load(std::sync::atomic::Ordering::Relaxed),
                allocated_bytes: record
                    .allocated_bytes
                    .load(std::sync::atomic::Ordering::Relaxed),
                live_blocks: 0,
                live_bytes: 0,
            })
            .collect();
        Snapshot::from_parts(blocks, stacks, stats.peak_bytes)
    }

    /// Builds a snapshot from its parts (synthetic snapshots for tests and tools): live counts and
    /// totals are recomputed from `blocks`; `peak_bytes` is raised to the live bytes if below.
    ///
    /// # Panics
    /// When a block names a stack that `stacks` does not have.
    pub fn from_parts(
        mut blocks: Vec<LiveBlock>,
        mut stacks: Vec<StackSummary>,
        peak_bytes: u64,
    ) -> Snapshot {
        blocks.sort_unstable_by_key(|b| b.address);
        for stack in &mut stacks {
            stack.live_blocks = 0;
            stack.live_bytes = 0;
        }
        for block in &blocks {
            let stack = &mut stacks[block.stack.0 as usize];
            stack.live_blocks += 1;
            stack.live_bytes += block.size;
        }
        let live_bytes = blocks.iter().map(|b| b.size).sum();
        let stats = HeapStats {
            live_blocks: blocks.len() as u64,
            live_bytes,
            peak_bytes: peak_bytes.max(live_bytes),
            total_blocks: stacks.iter().map(|s| s.allocated_blocks).sum(),
            total_bytes: stacks.iter().map(|s| s.allocated_bytes).sum(),
        };
        Snapshot {
            blocks,
            stacks,
            stats,
        }
    }

    /// The stack a block was allocated from.
    pub fn stack(&self, id: StackId) -> &StackSummary {
        &self.stacks[id.0 as usize]
    }
}
