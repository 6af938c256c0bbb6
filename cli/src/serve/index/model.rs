//! What the index and a scan are made of: per-class counters over time buckets ([`Tally`]), the
//! buckets' ends ([`Edges`]), the classes they count ([`Classes`]), the whole-run figures
//! ([`Totals`]), the index's counters split by bin ([`Bin`], [`BinCell`], [`BinTotals`];
//! numbered and filtered in [`super::bins`]) and the aggregates of one pass ([`Agg`]) with the
//! lookups that answer from them.
//!
//! Blocks and bytes count as what each recorded block stands for ([`weight`]): itself without
//! sampling, so that the sums are whole numbers, exact; under sampling, the estimate the reports
//! make, summed as `f64` and rounded per stack when answered ([`Cell`], [`Live`]).

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Counters of one class within one bucket (or over some buckets), blocks and bytes counted as
/// `T`. Allocation-side counters (`allocs` to `life_*`) belong to the bucket of the allocation;
/// `frees` and `free_bytes` to the bucket of the free. `life_count` and `life_sum` count the
/// recorded blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts<T> {
    /// Blocks allocated.
    pub allocs: T,
    /// Bytes allocated.
    pub alloc_bytes: T,
    /// Blocks freed.
    pub frees: T,
    /// Bytes freed.
    pub free_bytes: T,
    /// Allocations freed by their thread before it allocated or freed anything else.
    pub temporary: T,
    /// Bytes of those.
    pub temporary_bytes: T,
    /// Allocations freed (their lifetime known).
    pub life_count: u64,
    /// Sum of their lifetimes, ns.
    pub life_sum: u64,
}

impl<T: std::ops::AddAssign + Copy> Counts<T> {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Counts<T>) {
        self.allocs += other.allocs;
        self.alloc_bytes += other.alloc_bytes;
        self.frees += other.frees;
        self.free_bytes += other.free_bytes;
        self.temporary += other.temporary;
        self.temporary_bytes += other.temporary_bytes;
        self.life_count += other.life_count;
        self.life_sum = self.life_sum.saturating_add(other.life_sum);
    }
}

/// The counters as counted: blocks and bytes weighted ([`weight`]).
pub type Tally = Counts<f64>;

/// The counters as answered: whole numbers ([`Tally`] rounded).
pub type Cell = Counts<u64>;

/// Live bytes and blocks as counted, weighted ([`weight`]).
pub type Weighed = (f64, f64);

/// What one recorded block of `size` bytes counts for, `(bytes, blocks)`: itself when `interval`
/// is 0 (every allocation recorded), else what it stands for under sampling one allocation per
/// `interval` bytes on average, as the reports weigh it ([`memprof_trace::weight`]).
#[inline]
pub fn weight(size: u64, interval: u64) -> Weighed {
    if interval == 0 {
        return (size as f64, 1.0);
    }
    let (blocks, bytes) = memprof_trace::weight(size, interval);
    (bytes, blocks)
}

/// Live bytes and blocks as answered: whole numbers.
pub type Live = (u64, u64);

/// Where the buckets end.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Edges {
    /// Bucket `i` ends at `i * width` (bucket 0 holds the events at time 0).
    Uniform(u64),
    /// Bucket `i` ends at `edges[i]`; the last bucket, after every edge, never ends.
    Explicit(Vec<u64>),
}

impl Edges {
    /// The bucket of an event at `time`.
    pub fn bucket(&self, time: u64) -> usize {
        match self {
            Edges::Uniform(width) => time.div_ceil(*width) as usize,
            Edges::Explicit(edges) => edges.partition_point(|&e| e < time),
        }
    }

    /// The bucket that ends exactly at `time`, when one does.
    pub fn ending_at(&self, time: u64) -> Option<usize> {
        match self {
            Edges::Uniform(width) => time.is_multiple_of(*width).then(|| (time / width) as usize),
            Edges::Explicit(edges) => edges.binary_search(&time).ok(),
        }
    }

    /// The end of bucket `i`.
    pub fn end(&self, i: usize) -> u64 {
        match self {
            Edges::Uniform(width) => i as u64 * width,
            Edges::Explicit(edges) => edges.get(i).copied().unwrap_or(u64::MAX),
        }
    }
}

/// A moment a scan keeps the live heap of, per class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Point {
    /// After every event at or before this time.
    Time(u64),
    /// After this many events.
    Events(u64),
}

/// (stack, thread) pairs, numbered in order of first allocation.
#[derive(Clone, Debug, Default)]
pub struct Classes {
    /// Each class's stack (an index into the trace's stacks) and thread.
    pub list: Vec<(u32, u32)>,
    ids: HashMap<(u32, u32), u32>,
}

impl Classes {
    /// These pairs as classes, in this order.
    pub fn from_pairs(list: Vec<(u32, u32)>) -> Classes {
        Classes {
            list,
            ids: HashMap::new(),
        }
    }

    /// The class of a pair, numbered next when it is new.
    pub(super) fn intern(&mut self, stack: u32, thread: u32) -> u32 {
        let next = self.list.len() as u32;
        let id = *self.ids.entry((stack, thread)).or_insert(next);
        if id == next {
            self.list.push((stack, thread));
        }
        id
    }

    /// Adds the classes `other` has past those of `self` (`other` numbers every class of
    /// `self` alike, as the index it was copied from grows).
    pub fn sync_from(&mut self, other: &Classes) {
        for &(stack, thread) in &other.list[self.list.len().min(other.list.len())..] {
            self.intern(stack, thread);
        }
    }

    /// The class of a pair, when it allocated.
    pub fn get(&self, stack: u32, thread: u32) -> Option<u32> {
        self.ids.get(&(stack, thread)).copied()
    }
}

/// A global figure of one bucket of the index: the highest live bytes reached within it (of the
/// blocks recorded, as the reports find the peak).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct BucketPeak {
    /// Live bytes at the highest, recorded.
    pub bytes: u64,
    /// Live blocks then, recorded.
    pub blocks: u64,
    /// When.
    pub time: u64,
    /// Live bytes and blocks then, weighted ([`weight`]).
    pub weighed: Weighed,
}

/// Whole-run figures the index keeps besides its buckets: of the events and blocks recorded (under
/// sampling, the samples; their estimates are the buckets' and the live heaps').
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Totals {
    /// Allocation events (a reallocation's new block too).
    pub allocations: u64,
    /// Reallocations.
    pub reallocs: u64,
    /// Free events (a reallocation's old block too).
    pub frees: u64,
    /// Bytes allocated.
    pub allocated_bytes: u64,
    /// Temporary allocations.
    pub temporary: u64,
    /// Events replayed.
    pub events: u64,
    /// Time of the last event.
    pub last_time: u64,
    /// The peak: events up to it, its time, bytes and blocks.
    pub peak_events: u64,
    /// Its time.
    pub peak_time: u64,
    /// Live bytes and blocks there.
    pub peak: Live,
    /// Live at the end.
    pub end: Live,
    /// Markers in order: time, events up to and with it, label id.
    pub markers: Vec<(u64, u64, u32)>,
    /// The program's own mappings made (`mmap`, and `mremap`'s new ranges).
    pub mappings: u64,
    /// Whether the trace holds glibc's chunk flags of any block (format 1.3, `BLOCK_FLAGS`).
    pub chunk_flags: bool,
    /// The trace's sampling interval (0: every allocation recorded), which the blocks and bytes
    /// of the buckets and live heaps are weighted by ([`weight`]).
    pub sample_interval: u64,
}

/// Aggregates of one pass.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Agg {
    /// The buckets' ends.
    pub edges: Edges,
    /// Buckets in use.
    pub buckets: usize,
    /// Per class, its non-empty buckets in order: (bucket, counters).
    pub cells: Vec<Vec<(u32, Tally)>>,
    /// The index's highest live bytes within each bucket (empty for a scan).
    pub peaks: Vec<BucketPeak>,
    /// Live per class at each point asked for (a scan) or captured (the index: the peak, then
    /// the first marker of each label, by label id in `marker_live`).
    pub points: HashMap<Point, Vec<Weighed>>,
    /// The index's live per class at the first marker of each label.
    pub marker_live: HashMap<u32, Vec<Weighed>>,
    /// Live per class at the end.
    pub end: Vec<Weighed>,
    /// Whole-run figures (the index's; a scan's count only what it selects).
    pub totals: Totals,
    /// Per class, the times of its first and last allocation counted (`(u64::MAX, 0)`: none).
    pub first_last: Vec<(u64, u64)>,
    /// The index's counters split by size and lifetime: per class, its non-empty (bucket, bin)
    /// pairs in order (empty for a scan).
    pub bins: Vec<Vec<(u32, Bin, BinCell)>>,
    /// The index's live heap at the peak and markers, and first and last allocations, by bin.
    pub bin_totals: BinTotals,
}

impl Agg {
    /// Live per class after bucket `last` (a prefix sum of the cells).
    pub fn live_through(&self, last: usize, classes: usize) -> Vec<Weighed> {
        let mut live = vec![(0.0, 0.0); classes];
        for (class, cells) in self.cells.iter().enumerate() {
            let (mut bytes, mut blocks) = (0.0f64, 0.0f64);
            for (bucket, cell) in cells {
                if *bucket as usize > last {
                    break;
                }
                bytes += cell.alloc_bytes - cell.free_bytes;
                blocks += cell.allocs - cell.frees;
            }
            live[class] = (bytes.max(0.0), blocks.max(0.0));
        }
        live
    }

    /// Per class, the counters summed over buckets `first..=last`.
    pub fn sum(&self, first: usize, last: usize, classes: usize) -> Vec<Tally> {
        let mut sums = vec![Tally::default(); classes];
        for (class, cells) in self.cells.iter().enumerate() {
            let start = cells.partition_point(|(b, _)| (*b as usize) < first);
            for (bucket, cell) in &cells[start..] {
                if *bucket as usize > last {
                    break;
                }
                sums[class].add(cell);
            }
        }
        sums
    }
}

/// The lifetime bin of blocks never freed (or still live at the end).
pub const NEVER: u8 = 41;

/// Which counters of a class and bucket: a size bin, a lifetime bin, and whether temporary.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Bin {
    /// [`size_bin`](super::bins::size_bin) of the blocks' size.
    pub size: u8,
    /// [`life_bin`](super::bins::life_bin) of their lifetime, [`NEVER`] when never freed.
    pub life: u8,
    /// Whether they were temporary.
    pub temporary: bool,
}

impl Bin {
    /// A class and a bin as one number, for the maps of the pass.
    pub fn key(self, class: u32) -> u64 {
        u64::from(class) << 24
            | u64::from(self.size) << 16
            | u64::from(self.life) << 8
            | u64::from(self.temporary)
    }

    /// The class and bin of a [`Bin::key`].
    pub fn of_key(key: u64) -> (u32, Bin) {
        (
            (key >> 24) as u32,
            Bin {
                size: (key >> 16) as u8,
                life: (key >> 8) as u8,
                temporary: key & 1 == 1,
            },
        )
    }
}

/// Counters of one class, bucket and bin. `allocs` to `life_sum` belong to the bucket of the
/// allocation, `frees` and `free_bytes` to that of the free. Blocks and bytes are weighted
/// ([`weight`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BinCell {
    /// Blocks allocated.
    pub allocs: f64,
    /// Bytes allocated.
    pub alloc_bytes: f64,
    /// Blocks freed.
    pub frees: f64,
    /// Bytes freed.
    pub free_bytes: f64,
    /// Blocks allocated that were freed, as recorded (their lifetimes are summed).
    pub life_count: u64,
    /// Sum of the lifetimes of the blocks allocated, ns.
    pub life_sum: u64,
}

impl BinCell {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &BinCell) {
        self.allocs += other.allocs;
        self.alloc_bytes += other.alloc_bytes;
        self.frees += other.frees;
        self.free_bytes += other.free_bytes;
        self.life_count += other.life_count;
        self.life_sum = self.life_sum.saturating_add(other.life_sum);
    }
}

/// The index's split figures besides its per-bucket bins.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct BinTotals {
    /// Live at the peak, per class and bin (entries only where some live).
    pub peak: Vec<(u32, Bin, Weighed)>,
    /// Times of the first and last allocation, per class and bin.
    pub first_last: Vec<(u32, Bin, u64, u64)>,
    /// The labels whose first marker the index keeps the live heap at, in order of the run.
    pub marker_labels: Vec<u32>,
    /// Live at those markers as differences: a block live at markers `i..j` of
    /// `marker_labels` counts `+` at `i` and `-` at `j` (when `j` is one): the live heap at
    /// marker `m` is the sum of the entries at `0..=m`. Per class, bin and marker.
    pub marker_steps: Vec<(u32, Bin, u32, f64, f64)>,
}
