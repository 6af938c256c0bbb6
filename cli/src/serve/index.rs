//! The viewer's aggregates of a trace: per-class counters over time buckets, and the live heap
//! per class at chosen moments. One pass over the events builds them, either once for the whole
//! trace (the index: uniform buckets that coarsen as the run grows, no filter, the peak and the
//! markers captured) or for one query the index cannot answer (a scan: the query's own bucket
//! edges and moments, with its filter), so both answer through the same lookups.
//!
//! A class is an allocating (stack, thread) pair: the filters on threads and on a stack's frames
//! select whole classes, so the index answers them exactly. The index also splits each class's
//! counters by the blocks' size and lifetime bins ([`bins`]), so that size and lifetime bounds
//! on the bins' edges select whole bins, which it answers exactly too. A bucket `i` holds the events with
//! `edge(i - 1) < time <= edge(i)`, so the heap after every event at or before `edge(i)` is the
//! sum of buckets `0..=i`.

mod bins;

pub use bins::{Bin, BinCell, BinFilter, BinTotals, NEVER, edges as bin_edges};
use memprof_trace::{
    Accumulated, AddressHasher, Block, ChunkFlags, Event, Mapping, Timed, Visitor,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ops::ControlFlow;

/// Counters of one class within one bucket. Allocation-side counters (`allocs` to `life_*`)
/// belong to the bucket of the allocation; `frees` and `free_bytes` to the bucket of the free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    /// Blocks allocated.
    pub allocs: u64,
    /// Bytes allocated.
    pub alloc_bytes: u64,
    /// Blocks freed.
    pub frees: u64,
    /// Bytes freed.
    pub free_bytes: u64,
    /// Allocations freed by their thread before it allocated or freed anything else.
    pub temporary: u64,
    /// Bytes of those.
    pub temporary_bytes: u64,
    /// Allocations freed (their lifetime known).
    pub life_count: u64,
    /// Sum of their lifetimes, ns.
    pub life_sum: u64,
}

impl Cell {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Cell) {
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

/// Live bytes and blocks.
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

/// The filters on glibc's chunk flags of a block (`mmapped`, `arena`): a block whose flags the
/// trace does not know passes neither.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkFilter {
    /// Only blocks glibc mapped by themselves (true), or only the others (false).
    pub mmapped: Option<bool>,
    /// Only blocks of the main arena (true), or only those of another (false).
    pub main_arena: Option<bool>,
}

impl ChunkFilter {
    /// Whether any is set.
    pub fn is_set(&self) -> bool {
        self.mmapped.is_some() || self.main_arena.is_some()
    }

    /// Whether a block with these flags passes.
    pub fn passes(&self, flags: Option<ChunkFlags>) -> bool {
        if !self.is_set() {
            return true;
        }
        flags.is_some_and(|f| {
            self.mmapped.is_none_or(|m| m == f.mmapped)
                && self.main_arena.is_none_or(|m| m == f.main_arena)
        })
    }
}

/// What a scan keeps: which allocations count.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Classes selected (by thread and frames); `None`: all.
    pub classes: Option<Vec<bool>>,
    /// Inclusive size range.
    pub size: (u64, u64),
    /// Inclusive range of the block's address, when given.
    pub address: Option<(u64, u64)>,
    /// Inclusive lifetime range in ns, when given; blocks never freed have none.
    pub life: Option<(u64, u64)>,
    /// Only blocks never freed.
    pub never: bool,
    /// Only temporary blocks.
    pub temporary: bool,
    /// Only blocks freed (true) or not freed (false) within a range: events after the first
    /// time (none: from the first) up to and with the second.
    pub freed_in: Option<(bool, Option<u64>, u64)>,
    /// glibc's chunk flags.
    pub chunk: ChunkFilter,
}

impl Selection {
    /// Everything.
    pub fn all() -> Selection {
        Selection {
            size: (0, u64::MAX),
            ..Selection::default()
        }
    }

    fn class(&self, class: u32) -> bool {
        self.classes
            .as_ref()
            .is_none_or(|c| c.get(class as usize).copied().unwrap_or(false))
    }

    /// Whether a block resolved with this outcome counts (`life`: `None` when never freed;
    /// `freed`: when it was freed, `None` when never).
    pub fn outcome(&self, life: Option<u64>, temporary: bool, freed: Option<u64>) -> bool {
        if self.never && life.is_some() {
            return false;
        }
        if let Some((want, lo, hi)) = self.freed_in {
            let within = freed.is_some_and(|t| lo.is_none_or(|lo| t > lo) && t <= hi);
            if within != want {
                return false;
            }
        }
        if self.temporary && !temporary {
            return false;
        }
        match (self.life, life) {
            (Some((lo, hi)), Some(l)) => (lo..=hi).contains(&l),
            (Some(_), None) => false,
            _ => true,
        }
    }
}

/// A live block during the pass.
#[derive(Clone, Copy, Debug)]
struct Pending {
    size: u64,
    class: u32,
    time: u64,
    /// Events replayed up to and with its allocation.
    events: u64,
    bucket: u32,
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

    fn intern(&mut self, stack: u32, thread: u32) -> u32 {
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

/// A global figure of one bucket of the index: the highest live bytes reached within it.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct BucketPeak {
    /// Live bytes at the highest.
    pub bytes: u64,
    /// Live blocks then.
    pub blocks: u64,
    /// When.
    pub time: u64,
}

/// Whole-run figures the index keeps besides its buckets.
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
}

/// Aggregates of one pass.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Agg {
    /// The buckets' ends.
    pub edges: Edges,
    /// Buckets in use.
    pub buckets: usize,
    /// Per class, its non-empty buckets in order: (bucket, counters).
    pub cells: Vec<Vec<(u32, Cell)>>,
    /// The index's highest live bytes within each bucket (empty for a scan).
    pub peaks: Vec<BucketPeak>,
    /// Live per class at each point asked for (a scan) or captured (the index: the peak, then
    /// the first marker of each label, by label id in `marker_live`).
    pub points: HashMap<Point, Vec<Live>>,
    /// The index's live per class at the first marker of each label.
    pub marker_live: HashMap<u32, Vec<Live>>,
    /// Live per class at the end.
    pub end: Vec<Live>,
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
    pub fn live_through(&self, last: usize, classes: usize) -> Vec<Live> {
        let mut live = vec![(0u64, 0u64); classes];
        for (class, cells) in self.cells.iter().enumerate() {
            let (mut bytes, mut blocks) = (0i128, 0i128);
            for (bucket, cell) in cells {
                if *bucket as usize > last {
                    break;
                }
                bytes += i128::from(cell.alloc_bytes) - i128::from(cell.free_bytes);
                blocks += i128::from(cell.allocs) - i128::from(cell.frees);
            }
            live[class] = (bytes.max(0) as u64, blocks.max(0) as u64);
        }
        live
    }

    /// Per class, the counters summed over buckets `first..=last`.
    pub fn sum(&self, first: usize, last: usize, classes: usize) -> Vec<Cell> {
        let mut sums = vec![Cell::default(); classes];
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

const INDEX_BUCKETS: usize = 4096;

/// A class, a bucket (below 2^16: the index has at most [`INDEX_BUCKETS`]) and a bin as one
/// number.
fn bin_cell_key(class: u32, bucket: u32, bin: Bin) -> u64 {
    u64::from(class) << 32
        | u64::from(bucket & 0xffff) << 16
        | u64::from(bin.size) << 8
        | u64::from(bin.life) << 1
        | u64::from(bin.temporary)
}

/// The class, bucket and bin of a [`bin_cell_key`].
fn of_bin_cell_key(key: u64) -> (u32, u32, Bin) {
    (
        (key >> 32) as u32,
        (key >> 16) as u32 & 0xffff,
        Bin {
            size: (key >> 8) as u8,
            life: (key >> 1) as u8 & 0x7f,
            temporary: key & 1 == 1,
        },
    )
}
/// Cells the index keeps before it halves its resolution (72 bytes each).
const INDEX_CELLS: usize = 3 << 20;
/// Cells split by size and lifetime the index keeps before it halves its resolution (48 bytes
/// each).
const INDEX_BINS: usize = 4 << 20;

/// The pass: the index when `index` is set, else a scan.
#[derive(Debug)]
pub struct Builder<'a> {
    agg: Agg,
    index: bool,
    classes: Classes,
    /// A scan's classes come from the index; it interns none.
    fixed: Option<&'a Classes>,
    selection: Selection,
    scan_points: Vec<Point>,
    /// A scan that only needs its points stops after the last of them.
    stop_early: bool,
    live: HashMap<u64, Pending, BuildHasherDefault<AddressHasher>>,
    cell_count: usize,
    cell_limit: usize,
    // The index's running heap, per class and whole, and the peak's copy.
    current: Vec<Live>,
    now: Live,
    peak_live: Vec<Live>,
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    labels_seen: usize,
    // The index's counters by bin: how many, and the live heap at the peak of the blocks
    // resolved since the peak, the first and last allocations, the events of the markers kept
    // and the steps of the live heap there.
    /// The counters by (class, bucket, bin) while the pass runs, by [`bin_cell_key`]: a block's
    /// allocation counts in its bucket when it ends, often long after, so that a map rather
    /// than the sorted lists takes them; [`Builder::finish`] sorts them into [`Agg::bins`].
    bin_cells: HashMap<u64, BinCell, BuildHasherDefault<AddressHasher>>,
    /// Those of the latest bucket, `hot_bucket`, apart: most blocks end in the bucket they began
    /// in, and this small map stays in the cache.
    hot_cells: HashMap<u64, BinCell, BuildHasherDefault<AddressHasher>>,
    hot_bucket: u32,
    bin_limit: usize,
    peak_bins: HashMap<u64, Live, BuildHasherDefault<AddressHasher>>,
    first_last_bins: HashMap<u64, (u64, u64), BuildHasherDefault<AddressHasher>>,
    marker_events: Vec<u64>,
    marker_labels: Vec<u32>,
    marker_steps: HashMap<(u64, u32), (i64, i64)>,
}

impl<'a> Builder<'a> {
    /// The index of a whole trace.
    pub fn index() -> Builder<'static> {
        Builder::new(
            Edges::Uniform(1024),
            true,
            None,
            Selection::all(),
            Vec::new(),
        )
    }

    /// A scan with its bucket edges (sorted), its selection and the moments to keep.
    pub fn scan(
        classes: &'a Classes,
        edges: Vec<u64>,
        selection: Selection,
        points: Vec<Point>,
    ) -> Builder<'a> {
        Builder::new(
            Edges::Explicit(edges),
            false,
            Some(classes),
            selection,
            points,
        )
    }

    /// A scan for the live heap at `points` only: it stops after the last of them.
    pub fn points_only(
        classes: &'a Classes,
        selection: Selection,
        points: Vec<Point>,
    ) -> Builder<'a> {
        let mut builder = Builder::scan(classes, Vec::new(), selection, points);
        builder.stop_early = true;
        builder
    }

    /// Whether a points-only scan has passed every point: `next` is not needed.
    pub fn past(&self, next: &Timed) -> bool {
        self.stop_early
            && self.scan_points.iter().all(|point| match *point {
                Point::Time(t) => next.time > t,
                Point::Events(n) => self.agg.totals.events >= n,
            })
    }

    fn new(
        edges: Edges,
        index: bool,
        fixed: Option<&'a Classes>,
        selection: Selection,
        scan_points: Vec<Point>,
    ) -> Builder<'a> {
        let classes = fixed.map_or(0, |c| c.list.len());
        let mut points = HashMap::new();
        for point in &scan_points {
            points.insert(*point, vec![(0, 0); classes]);
        }
        Builder {
            agg: Agg {
                edges,
                buckets: 1,
                cells: vec![Vec::new(); classes],
                peaks: Vec::new(),
                points,
                marker_live: HashMap::new(),
                end: Vec::new(),
                totals: Totals::default(),
                first_last: vec![(u64::MAX, 0); classes],
                bins: Vec::new(),
                bin_totals: BinTotals::default(),
            },
            index,
            classes: Classes::default(),
            fixed,
            selection,
            scan_points,
            stop_early: false,
            live: HashMap::default(),
            cell_count: 0,
            cell_limit: INDEX_CELLS,
            current: Vec::new(),
            now: (0, 0),
            peak_live: Vec::new(),
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            labels_seen: 0,
            bin_cells: HashMap::default(),
            hot_cells: HashMap::default(),
            hot_bucket: 0,
            bin_limit: INDEX_BINS,
            peak_bins: HashMap::default(),
            first_last_bins: HashMap::default(),
            marker_events: Vec::new(),
            marker_labels: Vec::new(),
            marker_steps: HashMap::new(),
        }
    }

    fn cell(&mut self, class: u32, bucket: u32) -> &mut Cell {
        let cells = &mut self.agg.cells[class as usize];
        let at = match cells.last() {
            Some((b, _)) if *b == bucket => cells.len() - 1,
            Some((b, _)) if *b > bucket => match cells.binary_search_by_key(&bucket, |(b, _)| *b) {
                Ok(at) => at,
                Err(at) => {
                    cells.insert(at, (bucket, Cell::default()));
                    self.cell_count += 1;
                    at
                }
            },
            _ => {
                cells.push((bucket, Cell::default()));
                self.cell_count += 1;
                cells.len() - 1
            }
        };
        &mut cells[at].1
    }

    /// The index's counters of `class` in `bucket` for the blocks of `bin`.
    fn bin_cell(&mut self, class: u32, bucket: u32, bin: Bin) -> &mut BinCell {
        if bucket > self.hot_bucket {
            self.cool();
            self.hot_bucket = bucket;
        }
        let cells = if bucket == self.hot_bucket {
            &mut self.hot_cells
        } else {
            &mut self.bin_cells
        };
        cells.entry(bin_cell_key(class, bucket, bin)).or_default()
    }

    /// Moves the latest bucket's counters by bin to the others.
    fn cool(&mut self) {
        for (key, cell) in self.hot_cells.drain() {
            self.bin_cells.entry(key).or_default().add(&cell);
        }
    }

    /// Counters by bin kept.
    fn bin_count(&self) -> usize {
        self.bin_cells.len() + self.hot_cells.len()
    }

    /// The index counts a block by its bin once it ended: freed in bucket `freed.0` after
    /// `freed.1` ns, or never.
    fn count_bin(&mut self, block: &Pending, bin: Bin, freed: Option<(u32, u64)>) {
        let class = block.class;
        let cell = self.bin_cell(class, block.bucket, bin);
        cell.allocs += 1;
        cell.alloc_bytes += block.size;
        if let Some((bucket, life)) = freed {
            cell.life_sum = cell.life_sum.saturating_add(life);
            let cell = self.bin_cell(class, bucket, bin);
            cell.frees += 1;
            cell.free_bytes += block.size;
        }
        let key = bin.key(class);
        let span = self.first_last_bins.entry(key).or_insert((u64::MAX, 0));
        span.0 = span.0.min(block.time);
        span.1 = span.1.max(block.time);
        // Live at the peak, which is the latest one yet: the peak's split is cleared whenever
        // the peak moves, so that what it holds at the end is the blocks live at the last.
        if block.events <= self.agg.totals.peak_events {
            let live = self.peak_bins.entry(key).or_default();
            live.0 += block.size;
            live.1 += 1;
        }
        // Live at the markers kept after its allocation, up to now.
        let from = self.marker_events.partition_point(|&e| e < block.events) as u32;
        let to = self.marker_events.len() as u32;
        if from < to {
            let step = self.marker_steps.entry((key, from)).or_default();
            step.0 += block.size as i64;
            step.1 += 1;
            if freed.is_some() {
                let step = self.marker_steps.entry((key, to)).or_default();
                step.0 -= block.size as i64;
                step.1 -= 1;
            }
        }
    }

    /// Halves the index's resolution: buckets `2j - 1` and `2j` become bucket `j`.
    fn coarsen(&mut self) {
        let Edges::Uniform(width) = self.agg.edges else {
            return;
        };
        self.agg.edges = Edges::Uniform(width * 2);
        let merge = |b: u32| b.div_ceil(2);
        self.cell_count = 0;
        for cells in &mut self.agg.cells {
            // In place: the merged cells never outnumber those read.
            let mut kept = 0;
            for read in 0..cells.len() {
                let (bucket, cell) = cells[read];
                let bucket = merge(bucket);
                if kept > 0 && cells[kept - 1].0 == bucket {
                    cells[kept - 1].1.add(&cell);
                } else {
                    cells[kept] = (bucket, cell);
                    kept += 1;
                }
            }
            cells.truncate(kept);
            self.cell_count += kept;
        }
        self.cool();
        self.hot_bucket = 0;
        let cells = std::mem::take(&mut self.bin_cells);
        self.bin_cells.reserve(cells.len() / 2);
        for (key, cell) in cells {
            let (class, bucket, bin) = of_bin_cell_key(key);
            self.bin_cell(class, merge(bucket), bin).add(&cell);
        }
        let mut peaks: Vec<BucketPeak> = Vec::with_capacity(self.agg.peaks.len() / 2 + 1);
        for (i, peak) in self.agg.peaks.iter().enumerate() {
            let bucket = merge(i as u32) as usize;
            if peaks.len() <= bucket {
                peaks.push(*peak);
            } else if peak.bytes > peaks[bucket].bytes {
                peaks[bucket] = *peak;
            }
        }
        self.agg.peaks = peaks;
        for pending in self.live.values_mut() {
            pending.bucket = merge(pending.bucket);
        }
        self.agg.buckets = self.agg.peaks.len().max(1);
    }

    fn bucket(&mut self, time: u64) -> u32 {
        let mut bucket = self.agg.edges.bucket(time);
        if self.index {
            while bucket >= INDEX_BUCKETS
                || self.cell_count > self.cell_limit
                || self.bin_count() > self.bin_limit
            {
                let (before, bins_before) = (self.cell_count, self.bin_count());
                self.coarsen();
                bucket = self.agg.edges.bucket(time);
                if self.cell_count * 4 > before * 3 {
                    // So many classes that halving the resolution barely helps: a higher limit,
                    // rather than coarsening again at each event.
                    self.cell_limit = self.cell_limit.max(self.cell_count * 2);
                }
                if self.bin_count() * 4 > bins_before * 3 {
                    self.bin_limit = self.bin_limit.max(self.bin_count() * 2);
                }
            }
            if self.agg.peaks.len() <= bucket {
                self.agg.peaks.resize(bucket + 1, BucketPeak::default());
            }
        }
        self.agg.buckets = self.agg.buckets.max(bucket + 1);
        bucket as u32
    }

    fn touch(&mut self, class: u32) {
        let slot = class as usize;
        if !self.is_dirty[slot] {
            self.is_dirty[slot] = true;
            self.dirty.push(class);
        }
    }

    /// Counts one event (in time order); returns the events so far.
    fn count(&mut self, timed: &Timed) -> u64 {
        let totals = &mut self.agg.totals;
        totals.events += 1;
        totals.last_time = timed.time;
        totals.events
    }

    fn track_peak(&mut self, time: u64, bucket: usize) {
        let (bytes, blocks) = self.now;
        let peak = &mut self.agg.peaks[bucket];
        if bytes > peak.bytes {
            *peak = BucketPeak {
                bytes,
                blocks,
                time,
            };
        }
        let totals = &mut self.agg.totals;
        if bytes > totals.peak.0 {
            totals.peak = (bytes, blocks);
            totals.peak_time = time;
            totals.peak_events = totals.events;
            if !self.peak_bins.is_empty() {
                if self.peak_bins.capacity() > 4096
                    && self.peak_bins.len() * 8 < self.peak_bins.capacity()
                {
                    self.peak_bins = HashMap::default();
                } else {
                    self.peak_bins.clear();
                }
            }
            for class in self.dirty.drain(..) {
                self.peak_live[class as usize] = self.current[class as usize];
                self.is_dirty[class as usize] = false;
            }
        }
    }

    /// A block's end: freed (`temporary` known) or overwritten (`None`).
    fn resolve(
        &mut self,
        _address: u64,
        block: Pending,
        temporary: Option<bool>,
        timed: &Timed,
        bucket: u32,
    ) {
        let life = timed.time.saturating_sub(block.time);
        let is_temporary = temporary.unwrap_or(false);
        if self.index {
            let class = block.class;
            let c = &mut self.current[class as usize];
            c.0 -= block.size;
            c.1 -= 1;
            self.touch(class);
            self.now.0 -= block.size;
            self.now.1 -= 1;
            let cell = self.cell(class, bucket);
            cell.frees += 1;
            cell.free_bytes += block.size;
            let cell = self.cell(class, block.bucket);
            cell.life_count += 1;
            cell.life_sum = cell.life_sum.saturating_add(life);
            if is_temporary {
                cell.temporary += 1;
                cell.temporary_bytes += block.size;
                self.agg.totals.temporary += 1;
            }
            let bin = Bin {
                size: bins::size_bin(block.size),
                life: bins::life_bin(life),
                temporary: is_temporary,
            };
            self.count_bin(&block, bin, Some((bucket, life)));
            return;
        }
        if !self
            .selection
            .outcome(Some(life), is_temporary, Some(timed.time))
        {
            return;
        }
        self.count_allocation(&block);
        let cell = self.cell(block.class, block.bucket);
        cell.life_count += 1;
        cell.life_sum = cell.life_sum.saturating_add(life);
        if is_temporary {
            cell.temporary += 1;
            cell.temporary_bytes += block.size;
            self.agg.totals.temporary += 1;
        }
        let cell = self.cell(block.class, bucket);
        cell.frees += 1;
        cell.free_bytes += block.size;
        self.agg.totals.frees += 1;
        for point in &self.scan_points {
            let live = match *point {
                Point::Time(t) => block.time <= t && timed.time > t,
                Point::Events(n) => block.events <= n && self.agg.totals.events > n,
            };
            if live {
                let entry =
                    &mut self.agg.points.get_mut(point).expect("a point")[block.class as usize];
                entry.0 += block.size;
                entry.1 += 1;
            }
        }
    }

    /// A scan counts an allocation once its block's outcome passed the selection.
    fn count_allocation(&mut self, block: &Pending) {
        self.first_last(block.class, block.time);
        let cell = self.cell(block.class, block.bucket);
        cell.allocs += 1;
        cell.alloc_bytes += block.size;
        let totals = &mut self.agg.totals;
        totals.allocations += 1;
        totals.allocated_bytes += block.size;
    }

    fn first_last(&mut self, class: u32, time: u64) {
        if let Some(entry) = self.agg.first_last.get_mut(class as usize) {
            entry.0 = entry.0.min(time);
            entry.1 = entry.1.max(time);
        }
    }

    /// The index as [`Builder::finish`] would give it if the events ended here, the pass going
    /// on (a live trace's); its classes are [`Builder::classes`]. The blocks live now count as
    /// never freed in the copy's bins, as they would at the end.
    pub fn snapshot(&self) -> Agg {
        let mut copy = Builder {
            agg: self.agg.clone(),
            index: self.index,
            classes: Classes::default(),
            fixed: self.fixed,
            selection: self.selection.clone(),
            scan_points: self.scan_points.clone(),
            stop_early: self.stop_early,
            live: HashMap::default(),
            cell_count: self.cell_count,
            cell_limit: self.cell_limit,
            current: self.current.clone(),
            now: self.now,
            peak_live: self.peak_live.clone(),
            dirty: self.dirty.clone(),
            is_dirty: self.is_dirty.clone(),
            labels_seen: self.labels_seen,
            bin_cells: self.bin_cells.clone(),
            hot_cells: self.hot_cells.clone(),
            hot_bucket: self.hot_bucket,
            bin_limit: self.bin_limit,
            peak_bins: self.peak_bins.clone(),
            first_last_bins: self.first_last_bins.clone(),
            marker_events: self.marker_events.clone(),
            marker_labels: self.marker_labels.clone(),
            marker_steps: self.marker_steps.clone(),
        };
        if self.index {
            for block in self.live.values() {
                copy.count_never(block);
            }
        }
        copy.finish().0
    }

    /// The classes interned so far.
    pub fn classes(&self) -> &Classes {
        &self.classes
    }

    /// Counts a block still live by its bin, as never freed.
    fn count_never(&mut self, block: &Pending) {
        let bin = Bin {
            size: bins::size_bin(block.size),
            life: NEVER,
            temporary: false,
        };
        self.count_bin(block, bin, None);
    }

    /// The aggregates, with the blocks still live counted as never freed.
    pub fn finish(mut self) -> (Agg, Classes) {
        for cells in &mut self.agg.cells {
            cells.shrink_to_fit();
        }
        let classes = self.fixed.map_or(self.agg.cells.len(), |c| c.list.len());
        if self.index {
            let live: Vec<Pending> = self.live.drain().map(|(_, p)| p).collect();
            for block in live {
                self.count_never(&block);
            }
            let mut peak: Vec<(u32, Bin, Live)> = self
                .peak_bins
                .drain()
                .map(|(key, live)| {
                    let (class, bin) = Bin::of_key(key);
                    (class, bin, live)
                })
                .collect();
            peak.sort_unstable_by_key(|&(class, bin, _)| (class, bin));
            let mut first_last: Vec<(u32, Bin, u64, u64)> = self
                .first_last_bins
                .drain()
                .map(|(key, (first, last))| {
                    let (class, bin) = Bin::of_key(key);
                    (class, bin, first, last)
                })
                .collect();
            first_last.sort_unstable_by_key(|&(class, bin, _, _)| (class, bin));
            let mut marker_steps: Vec<(u32, Bin, u32, i64, i64)> = self
                .marker_steps
                .drain()
                .filter(|(_, step)| *step != (0, 0))
                .map(|((key, marker), (bytes, blocks))| {
                    let (class, bin) = Bin::of_key(key);
                    (class, bin, marker, bytes, blocks)
                })
                .collect();
            marker_steps.sort_unstable_by_key(|&(class, bin, marker, _, _)| (class, bin, marker));
            self.agg.bin_totals = BinTotals {
                peak,
                first_last,
                marker_labels: std::mem::take(&mut self.marker_labels),
                marker_steps,
            };
            self.cool();
            let mut bins: Vec<Vec<(u32, Bin, BinCell)>> = vec![Vec::new(); self.agg.cells.len()];
            let mut counts = vec![0usize; self.agg.cells.len()];
            for key in self.bin_cells.keys() {
                counts[of_bin_cell_key(*key).0 as usize] += 1;
            }
            for (list, count) in bins.iter_mut().zip(counts) {
                list.reserve_exact(count);
            }
            for (key, cell) in self.bin_cells.drain() {
                let (class, bucket, bin) = of_bin_cell_key(key);
                bins[class as usize].push((bucket, bin, cell));
            }
            for list in &mut bins {
                list.sort_unstable_by_key(|&(bucket, bin, _)| (bucket, bin));
            }
            self.agg.bins = bins;
            for class in self.dirty.drain(..) {
                self.is_dirty[class as usize] = false;
            }
            self.agg.points.insert(
                Point::Events(self.agg.totals.peak_events),
                std::mem::take(&mut self.peak_live),
            );
            self.agg.totals.end = self.now;
            self.agg.end = std::mem::take(&mut self.current);
            self.agg.buckets = self.agg.buckets.max(self.agg.peaks.len());
        } else {
            let mut end = vec![(0u64, 0u64); classes];
            let live: Vec<Pending> = self.live.drain().map(|(_, p)| p).collect();
            for block in live {
                if !self.selection.outcome(None, false, None) {
                    continue;
                }
                self.count_allocation(&block);
                let e = &mut end[block.class as usize];
                e.0 += block.size;
                e.1 += 1;
                self.agg.totals.end.0 += block.size;
                self.agg.totals.end.1 += 1;
                for point in &self.scan_points {
                    let live = match *point {
                        Point::Time(t) => block.time <= t,
                        Point::Events(n) => block.events <= n,
                    };
                    if live {
                        let entry = &mut self.agg.points.get_mut(point).expect("a point")
                            [block.class as usize];
                        entry.0 += block.size;
                        entry.1 += 1;
                    }
                }
            }
            self.agg.end = end;
        }
        let classes = match self.fixed {
            Some(c) => c.clone(),
            None => self.classes,
        };
        (self.agg, classes)
    }
}

/// The pass is one visitor of the trace's replay.
impl Visitor for Builder<'_> {
    fn before(&mut self, timed: &Timed, _: &Accumulated) -> ControlFlow<()> {
        if self.past(timed) {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn alloc(&mut self, timed: &Timed, address: u64, block: &Block, _: Option<&Block>) {
        let events = self.count(timed);
        let (size, stack) = (block.size, block.stack);
        let totals = &mut self.agg.totals;
        if self.index {
            totals.allocations += 1;
            totals.allocated_bytes += size;
            totals.chunk_flags |= block.flags.is_some();
            totals.reallocs += u64::from(matches!(
                timed.event,
                Event::Alloc {
                    realloc_of: Some(_),
                    ..
                }
            ));
        }
        let class = match self.fixed {
            Some(classes) => classes.get(stack, timed.thread),
            None => {
                let class = self.classes.intern(stack, timed.thread);
                if class as usize == self.agg.cells.len() {
                    self.agg.cells.push(Vec::new());
                    self.current.push((0, 0));
                    self.peak_live.push((0, 0));
                    self.is_dirty.push(false);
                    self.agg.first_last.push((u64::MAX, 0));
                }
                Some(class)
            }
        };
        let bucket = self.bucket(timed.time);
        if let Some(old) = self.live.remove(&address) {
            // A block allocated over a live one: the old one ends here, unseen.
            self.resolve(address, old, None, timed, bucket);
        }
        let Some(class) = class else { return };
        if !self.selection.class(class)
            || !(self.selection.size.0..=self.selection.size.1).contains(&size)
            || !self
                .selection
                .address
                .is_none_or(|(lo, hi)| (lo..=hi).contains(&address))
            || !self.selection.chunk.passes(block.flags)
        {
            return;
        }
        self.live.insert(
            address,
            Pending {
                size,
                class,
                time: timed.time,
                events,
                bucket,
            },
        );
        if self.index {
            self.first_last(class, timed.time);
            let cell = self.cell(class, bucket);
            cell.allocs += 1;
            cell.alloc_bytes += size;
            let c = &mut self.current[class as usize];
            c.0 += size;
            c.1 += 1;
            self.touch(class);
            self.now.0 += size;
            self.now.1 += 1;
            self.track_peak(timed.time, bucket as usize);
        }
    }

    fn free(&mut self, timed: &Timed, address: u64, _: Option<&Block>, temporary: bool) {
        self.count(timed);
        if self.index {
            self.agg.totals.frees += 1;
        }
        let bucket = self.bucket(timed.time);
        if let Some(block) = self.live.remove(&address) {
            self.resolve(address, block, Some(temporary), timed, bucket);
        }
    }

    /// A mapping of the program's own: not a block, but an event of the run, whose time the
    /// run's length and the buckets cover (`/api/mappings` answers for the mappings).
    fn map(&mut self, timed: &Timed, _: u64, _: u64, _: &Mapping, _: &[(u64, u64, Mapping)]) {
        self.agg.totals.last_time = timed.time;
        self.agg.totals.mappings += 1;
        self.bucket(timed.time);
    }

    fn unmap(&mut self, timed: &Timed, _: u64, _: u64, _: &[(u64, u64, Mapping)]) {
        self.agg.totals.last_time = timed.time;
        self.bucket(timed.time);
    }

    fn mark(&mut self, timed: &Timed, label: u32) {
        let events = self.count(timed);
        self.bucket(timed.time);
        let totals = &mut self.agg.totals;
        totals.markers.push((timed.time, events, label));
        if self.index && !self.agg.marker_live.contains_key(&label) && self.labels_seen < 4096 {
            self.labels_seen += 1;
            self.agg.marker_live.insert(label, self.current.clone());
            self.marker_events.push(events);
            self.marker_labels.push(label);
        }
    }
}
