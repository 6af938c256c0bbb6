//! What a replay accumulates: the live blocks by address, the live bytes, and each stack's
//! allocated totals (weighted under sampling as the live table weights them).

use crate::addresses::AddressMap;
use crate::ranges::RangeMap;
use crate::records::ChunkFlags;
use crate::replay::{Event, Timed};

/// A live block during a replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// Its size.
    pub size: u64,
    /// Its stack (an index into [`Trace::stacks`](crate::Trace::stacks)).
    pub stack: u32,
    /// The trace's number of the thread that allocated it.
    pub thread: u32,
    /// When it was allocated.
    pub time: u64,
    /// glibc's flags of the block (whether glibc mapped it by itself, which arena it came from);
    /// `None`: unknown (the allocator was not glibc's, or the trace is older than version 1.3).
    pub flags: Option<ChunkFlags>,
}

/// A live memory mapping during a replay (its range is the key of [`Heap::mappings`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Its stack (an index into [`Trace::stacks`](crate::Trace::stacks)).
    pub stack: u32,
    /// `mmap`'s `prot`.
    pub prot: u32,
    /// `mmap`'s `flags`.
    pub flags: u32,
    /// The trace's number of the thread that made it.
    pub thread: u32,
    /// When it was made.
    pub time: u64,
}

/// Live blocks by address.
pub type LiveBlocks = AddressMap<Block>;

/// The state of a replay: live blocks and per-stack totals allocated so far.
#[derive(Clone, Debug, Default)]
pub struct Heap {
    /// Live blocks by address.
    pub live: LiveBlocks,
    /// Blocks and bytes allocated per stack so far.
    pub allocated: Vec<(u64, u64)>,
    /// Sum of the live blocks' sizes.
    pub live_bytes: u64,
    /// The trace's sampling interval (0: every allocation recorded); when not 0, `estimated`
    /// is kept.
    pub sample_interval: u64,
    /// Under sampling, the blocks and bytes each stack stands for so far (the recorded ones
    /// weighted as the live table weights them).
    pub estimated: Vec<(f64, f64)>,
    /// The program's live memory mappings (its own `mmap` calls, not the allocator's), by range;
    /// a mapping partly unmapped is trimmed or split.
    pub mappings: RangeMap<Mapping>,
}

impl Heap {
    /// Applies a mapping event ([`Event::Map`], [`Event::Unmap`]): returns the pieces of live
    /// mappings it removed (a `Map` replaces what was at its pages), each with its start and
    /// length. Other events change nothing here.
    pub(crate) fn apply_mapping(&mut self, timed: &Timed) -> Vec<(u64, u64, Mapping)> {
        match timed.event {
            Event::Map {
                address,
                length,
                stack,
                prot,
                flags,
            } => self.mappings.insert(
                address,
                length,
                Mapping {
                    stack,
                    prot,
                    flags,
                    thread: timed.thread,
                    time: timed.time,
                },
            ),
            Event::Unmap { address, length } => self.mappings.remove(address, length),
            _ => Vec::new(),
        }
    }

    /// Reads the table slots of the blocks that `events` allocate and free, together, before
    /// they are applied one by one: their cache misses overlap.
    pub(crate) fn touch(&self, events: &[Timed]) {
        let mut read = 0;
        for timed in events {
            if let Event::Alloc { address, .. } | Event::Free { address, .. } = timed.event {
                read ^= self.live.touch(address);
            }
        }
        std::hint::black_box(read);
    }

    /// Applies one event. Returns the block it ends: for a free, the freed block when it was
    /// live; for an allocation, the live block at its address whose free went unseen.
    pub(crate) fn apply(&mut self, timed: &Timed) -> Option<Block> {
        match timed.event {
            Event::Alloc {
                address,
                size,
                stack,
                flags,
                ..
            } => {
                let block = Block {
                    size,
                    stack,
                    thread: timed.thread,
                    time: timed.time,
                    flags,
                };
                let replaced = self.live.insert(address, block);
                if let Some(old) = replaced {
                    self.live_bytes -= old.size;
                }
                self.live_bytes += size;
                let index = stack as usize;
                if self.allocated.len() <= index {
                    self.allocated.resize(index + 1, (0, 0));
                }
                self.allocated[index].0 += 1;
                self.allocated[index].1 += size;
                if self.sample_interval != 0 {
                    if self.estimated.len() <= index {
                        self.estimated.resize(index + 1, (0.0, 0.0));
                    }
                    let (blocks, bytes) = weight(size, self.sample_interval);
                    self.estimated[index].0 += blocks;
                    self.estimated[index].1 += bytes;
                }
                replaced
            }
            Event::Free { address, .. } => {
                let block = self.live.remove(address)?;
                self.live_bytes -= block.size;
                Some(block)
            }
            Event::Mark { .. } => None,
            Event::Map { .. } | Event::Unmap { .. } => None,
        }
    }
}

/// The blocks and bytes that one recorded allocation of `size` bytes stands for under sampling
/// every `interval` bytes on average (0: every allocation recorded): `1/p` blocks and `size/p`
/// bytes, `p = 1 - exp(-size/interval)`, as the trace header's `sample_interval` specifies and as
/// the live table weighs its own samples.
#[inline]
pub fn weight(size: u64, interval: u64) -> (f64, f64) {
    let p = if interval == 0 {
        1.0
    } else {
        -(-(size as f64) / interval as f64).exp_m1()
    };
    if p <= 0.0 {
        return (1.0, size as f64);
    }
    (1.0 / p, size as f64 / p)
}
