//! The index of a whole trace: one pass over every event with no filter, its buckets uniform and
//! coarsening as the run grows (so that its memory stays bounded), its classes interned as they
//! allocate, the heap per class at the peak and at the first marker of each label, the highest
//! live bytes within each bucket, and the counters split by bin ([`super::bins`]).

use super::bins;
use super::model::{
    Agg, Bin, BinCell, BinTotals, BucketPeak, Classes, Edges, Live, NEVER, Point, Weighed,
};
use super::pass::{Pass, Pending};
use memprof_trace::{AddressHasher, Block, Event, Mapping, Timed, Visitor};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Buckets the index has at most.
const INDEX_BUCKETS: usize = 4096;
/// Cells the index keeps before it halves its resolution (72 bytes each).
const INDEX_CELLS: usize = 3 << 20;
/// Cells split by size and lifetime the index keeps before it halves its resolution (56 bytes
/// each).
const INDEX_BINS: usize = 4 << 20;
/// Marker labels whose heap the index keeps.
const MARKER_LABELS: usize = 4096;

type ByKey<T> = HashMap<u64, T, BuildHasherDefault<AddressHasher>>;

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

/// The index's counters by bin while the pass runs: how many, and the live heap at the peak of
/// the blocks resolved since the peak, the first and last allocations, the events of the markers
/// kept and the steps of the live heap there. A block counts by its bin once it ended.
#[derive(Clone, Debug, Default)]
struct ByBin {
    /// The counters by (class, bucket, bin), by [`bin_cell_key`]: a block's allocation counts in
    /// its bucket when it ends, often long after, so that a map rather than the sorted lists
    /// takes them; [`ByBin::finish`] sorts them into [`Agg::bins`].
    cells: ByKey<BinCell>,
    /// Those of the latest bucket, `hot_bucket`, apart: most blocks end in the bucket they began
    /// in, and this small map stays in the cache.
    hot_cells: ByKey<BinCell>,
    hot_bucket: u32,
    peak: ByKey<Weighed>,
    first_last: ByKey<(u64, u64)>,
    marker_events: Vec<u64>,
    marker_labels: Vec<u32>,
    marker_steps: HashMap<(u64, u32), Weighed>,
}

impl ByBin {
    /// The counters of `class` in `bucket` for the blocks of `bin`.
    fn cell(&mut self, class: u32, bucket: u32, bin: Bin) -> &mut BinCell {
        if bucket > self.hot_bucket {
            self.cool();
            self.hot_bucket = bucket;
        }
        let cells = if bucket == self.hot_bucket {
            &mut self.hot_cells
        } else {
            &mut self.cells
        };
        cells.entry(bin_cell_key(class, bucket, bin)).or_default()
    }

    /// Moves the latest bucket's counters to the others.
    fn cool(&mut self) {
        for (key, cell) in self.hot_cells.drain() {
            self.cells.entry(key).or_default().add(&cell);
        }
    }

    /// Counters kept.
    fn len(&self) -> usize {
        self.cells.len() + self.hot_cells.len()
    }

    /// Counts a block that ended, weighing `(bytes, blocks)`: freed in bucket `freed.0` after
    /// `freed.1` ns, or never; the peak so far is after `peak_events` events.
    fn count(
        &mut self,
        block: &Pending,
        (bytes, blocks): Weighed,
        bin: Bin,
        freed: Option<(u32, u64)>,
        peak_events: u64,
    ) {
        let class = block.class;
        let cell = self.cell(class, block.bucket, bin);
        cell.allocs += blocks;
        cell.alloc_bytes += bytes;
        if let Some((bucket, life)) = freed {
            cell.life_count += 1;
            cell.life_sum = cell.life_sum.saturating_add(life);
            let cell = self.cell(class, bucket, bin);
            cell.frees += blocks;
            cell.free_bytes += bytes;
        }
        let key = bin.key(class);
        let span = self.first_last.entry(key).or_insert((u64::MAX, 0));
        span.0 = span.0.min(block.time);
        span.1 = span.1.max(block.time);
        // Live at the peak, which is the latest one yet: the peak's split is cleared whenever
        // the peak moves, so that what it holds at the end is the blocks live at the last.
        if block.events <= peak_events {
            let live = self.peak.entry(key).or_default();
            live.0 += bytes;
            live.1 += blocks;
        }
        // Live at the markers kept after its allocation, up to now.
        let from = self.marker_events.partition_point(|&e| e < block.events) as u32;
        let to = self.marker_events.len() as u32;
        if from < to {
            let step = self.marker_steps.entry((key, from)).or_default();
            step.0 += bytes;
            step.1 += blocks;
            if freed.is_some() {
                let step = self.marker_steps.entry((key, to)).or_default();
                step.0 -= bytes;
                step.1 -= blocks;
            }
        }
    }

    /// The peak moved: what was live at the last one is not.
    fn clear_peak(&mut self) {
        if !self.peak.is_empty() {
            if self.peak.capacity() > 4096 && self.peak.len() * 8 < self.peak.capacity() {
                self.peak = HashMap::default();
            } else {
                self.peak.clear();
            }
        }
    }

    /// Merges the buckets as `merge` maps them.
    fn coarsen(&mut self, merge: impl Fn(u32) -> u32) {
        self.cool();
        self.hot_bucket = 0;
        let cells = std::mem::take(&mut self.cells);
        self.cells.reserve(cells.len() / 2);
        for (key, cell) in cells {
            let (class, bucket, bin) = of_bin_cell_key(key);
            self.cell(class, merge(bucket), bin).add(&cell);
        }
    }

    /// Sets the index's counters by bin, sorted, and its figures by bin at the peak and markers.
    fn finish(&mut self, agg: &mut Agg) {
        let classes = agg.cells.len();
        let mut peak: Vec<(u32, Bin, Weighed)> = self
            .peak
            .drain()
            .map(|(key, live)| {
                let (class, bin) = Bin::of_key(key);
                (class, bin, live)
            })
            .collect();
        peak.sort_unstable_by_key(|&(class, bin, _)| (class, bin));
        let mut first_last: Vec<(u32, Bin, u64, u64)> = self
            .first_last
            .drain()
            .map(|(key, (first, last))| {
                let (class, bin) = Bin::of_key(key);
                (class, bin, first, last)
            })
            .collect();
        first_last.sort_unstable_by_key(|&(class, bin, _, _)| (class, bin));
        let mut marker_steps: Vec<(u32, Bin, u32, f64, f64)> = self
            .marker_steps
            .drain()
            .filter(|(_, step)| *step != (0.0, 0.0))
            .map(|((key, marker), (bytes, blocks))| {
                let (class, bin) = Bin::of_key(key);
                (class, bin, marker, bytes, blocks)
            })
            .collect();
        marker_steps.sort_unstable_by_key(|&(class, bin, marker, _, _)| (class, bin, marker));
        agg.bin_totals = BinTotals {
            peak,
            first_last,
            marker_labels: std::mem::take(&mut self.marker_labels),
            marker_steps,
        };
        self.cool();
        let mut bins: Vec<Vec<(u32, Bin, BinCell)>> = vec![Vec::new(); classes];
        let mut counts = vec![0usize; classes];
        for key in self.cells.keys() {
            counts[of_bin_cell_key(*key).0 as usize] += 1;
        }
        for (list, count) in bins.iter_mut().zip(counts) {
            list.reserve_exact(count);
        }
        for (key, cell) in self.cells.drain() {
            let (class, bucket, bin) = of_bin_cell_key(key);
            bins[class as usize].push((bucket, bin, cell));
        }
        for list in &mut bins {
            list.sort_unstable_by_key(|&(bucket, bin, _)| (bucket, bin));
        }
        agg.bins = bins;
    }
}

/// The pass that builds the index of a whole trace.
#[derive(Debug)]
pub struct IndexBuilder {
    pass: Pass,
    classes: Classes,
    /// Cells, and cells by bin, kept before the resolution halves (the bins' tests lower the
    /// second).
    cell_limit: usize,
    pub(super) bin_limit: usize,
    /// The running heap per class (weighted), whole (recorded, which finds the peak as the
    /// reports find it; and weighted), and the peak's copy.
    current: Vec<Weighed>,
    now: Live,
    now_weighed: Weighed,
    peak_live: Vec<Weighed>,
    /// The classes whose heap changed since the peak.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    labels_seen: usize,
    by_bin: ByBin,
}

impl IndexBuilder {
    /// The index of a whole trace sampled every `sample_interval` bytes (0: every allocation
    /// recorded), before its first event.
    pub fn new(sample_interval: u64) -> IndexBuilder {
        IndexBuilder {
            pass: Pass::new(Edges::Uniform(1024), 0, &[], sample_interval),
            classes: Classes::default(),
            cell_limit: INDEX_CELLS,
            bin_limit: INDEX_BINS,
            current: Vec::new(),
            now: (0, 0),
            now_weighed: (0.0, 0.0),
            peak_live: Vec::new(),
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            labels_seen: 0,
            by_bin: ByBin::default(),
        }
    }

    /// The classes interned so far.
    pub fn classes(&self) -> &Classes {
        &self.classes
    }

    /// Halves the index's resolution: buckets `2j - 1` and `2j` become bucket `j`.
    fn coarsen(&mut self) {
        let agg = &mut self.pass.agg;
        let Edges::Uniform(width) = agg.edges else {
            return;
        };
        agg.edges = Edges::Uniform(width * 2);
        let merge = |b: u32| b.div_ceil(2);
        self.pass.cell_count = 0;
        for cells in &mut agg.cells {
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
            self.pass.cell_count += kept;
        }
        self.by_bin.coarsen(merge);
        let mut peaks: Vec<BucketPeak> = Vec::with_capacity(agg.peaks.len() / 2 + 1);
        for (i, peak) in agg.peaks.iter().enumerate() {
            let bucket = merge(i as u32) as usize;
            if peaks.len() <= bucket {
                peaks.push(*peak);
            } else if peak.bytes > peaks[bucket].bytes {
                peaks[bucket] = *peak;
            }
        }
        agg.peaks = peaks;
        for pending in self.pass.live.values_mut() {
            pending.bucket = merge(pending.bucket);
        }
        agg.buckets = agg.peaks.len().max(1);
    }

    /// The bucket of an event at `time`, after halving the resolution as often as the limits
    /// on buckets and cells ask.
    fn bucket(&mut self, time: u64) -> u32 {
        let mut bucket = self.pass.agg.edges.bucket(time);
        while bucket >= INDEX_BUCKETS
            || self.pass.cell_count > self.cell_limit
            || self.by_bin.len() > self.bin_limit
        {
            let (before, bins_before) = (self.pass.cell_count, self.by_bin.len());
            self.coarsen();
            bucket = self.pass.agg.edges.bucket(time);
            if self.pass.cell_count * 4 > before * 3 {
                // So many classes that halving the resolution barely helps: a higher limit,
                // rather than coarsening again at each event.
                self.cell_limit = self.cell_limit.max(self.pass.cell_count * 2);
            }
            if self.by_bin.len() * 4 > bins_before * 3 {
                self.bin_limit = self.bin_limit.max(self.by_bin.len() * 2);
            }
        }
        let peaks = &mut self.pass.agg.peaks;
        if peaks.len() <= bucket {
            peaks.resize(bucket + 1, BucketPeak::default());
        }
        self.pass.in_use(bucket)
    }

    fn touch(&mut self, class: u32) {
        let slot = class as usize;
        if !self.is_dirty[slot] {
            self.is_dirty[slot] = true;
            self.dirty.push(class);
        }
    }

    fn track_peak(&mut self, time: u64, bucket: usize) {
        let (bytes, blocks) = self.now;
        let agg = &mut self.pass.agg;
        let peak = &mut agg.peaks[bucket];
        if bytes > peak.bytes {
            *peak = BucketPeak {
                bytes,
                blocks,
                time,
                weighed: self.now_weighed,
            };
        }
        let totals = &mut agg.totals;
        if bytes > totals.peak.0 {
            totals.peak = (bytes, blocks);
            totals.peak_time = time;
            totals.peak_events = totals.events;
            self.by_bin.clear_peak();
            for class in self.dirty.drain(..) {
                self.peak_live[class as usize] = self.current[class as usize];
                self.is_dirty[class as usize] = false;
            }
        }
    }

    /// A block's end: freed (`temporary` known) or overwritten (`None`).
    fn resolve(&mut self, block: Pending, temporary: Option<bool>, timed: &Timed, bucket: u32) {
        let life = timed.time.saturating_sub(block.time);
        let is_temporary = temporary.unwrap_or(false);
        let class = block.class;
        let weight = self.pass.weight(block.size);
        let c = &mut self.current[class as usize];
        c.0 -= weight.0;
        c.1 -= weight.1;
        self.touch(class);
        self.now.0 -= block.size;
        self.now.1 -= 1;
        self.now_weighed.0 -= weight.0;
        self.now_weighed.1 -= weight.1;
        self.pass.count_end(&block, bucket, life, is_temporary);
        let bin = Bin {
            size: bins::size_bin(block.size),
            life: bins::life_bin(life),
            temporary: is_temporary,
        };
        let peak_events = self.pass.agg.totals.peak_events;
        self.by_bin
            .count(&block, weight, bin, Some((bucket, life)), peak_events);
    }

    /// Counts a block still live by its bin, as never freed.
    fn count_never(&mut self, block: &Pending) {
        let bin = Bin {
            size: bins::size_bin(block.size),
            life: NEVER,
            temporary: false,
        };
        let peak_events = self.pass.agg.totals.peak_events;
        let weight = self.pass.weight(block.size);
        self.by_bin.count(block, weight, bin, None, peak_events);
    }

    /// The index as [`IndexBuilder::finish`] would give it if the events ended here, the pass
    /// going on (a live trace's); its classes are [`IndexBuilder::classes`]. The blocks live now
    /// count as never freed in the copy's bins, as they would at the end.
    pub fn snapshot(&self) -> Agg {
        let mut copy = IndexBuilder {
            pass: self.pass.copy_without_live(),
            classes: Classes::default(),
            cell_limit: self.cell_limit,
            bin_limit: self.bin_limit,
            current: self.current.clone(),
            now: self.now,
            now_weighed: self.now_weighed,
            peak_live: self.peak_live.clone(),
            dirty: self.dirty.clone(),
            is_dirty: self.is_dirty.clone(),
            labels_seen: self.labels_seen,
            by_bin: self.by_bin.clone(),
        };
        for block in self.pass.live.values() {
            copy.count_never(block);
        }
        copy.into_agg()
    }

    /// The index and its classes, with the blocks still live counted as never freed.
    pub fn finish(mut self) -> (Agg, Classes) {
        let classes = std::mem::take(&mut self.classes);
        (self.into_agg(), classes)
    }

    fn into_agg(mut self) -> Agg {
        self.pass.shrink();
        for block in self.pass.take_live() {
            self.count_never(&block);
        }
        let agg = &mut self.pass.agg;
        self.by_bin.finish(agg);
        agg.points.insert(
            Point::Events(agg.totals.peak_events),
            std::mem::take(&mut self.peak_live),
        );
        agg.totals.end = self.now;
        agg.end = std::mem::take(&mut self.current);
        agg.buckets = agg.buckets.max(agg.peaks.len());
        self.pass.agg
    }
}

/// The index's pass is one visitor of the trace's replay.
impl Visitor for IndexBuilder {
    fn alloc(&mut self, timed: &Timed, address: u64, block: &Block, _: Option<&Block>) {
        let events = self.pass.count(timed);
        let (size, stack) = (block.size, block.stack);
        let totals = &mut self.pass.agg.totals;
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
        let class = self.classes.intern(stack, timed.thread);
        if class as usize == self.pass.agg.cells.len() {
            self.pass.agg.cells.push(Vec::new());
            self.current.push((0.0, 0.0));
            self.peak_live.push((0.0, 0.0));
            self.is_dirty.push(false);
            self.pass.agg.first_last.push((u64::MAX, 0));
        }
        let bucket = self.bucket(timed.time);
        if let Some(old) = self.pass.live.remove(&address) {
            // A block allocated over a live one: the old one ends here, unseen.
            self.resolve(old, None, timed, bucket);
        }
        self.pass.live.insert(
            address,
            Pending {
                size,
                class,
                time: timed.time,
                events,
                bucket,
            },
        );
        self.pass.count_allocation(class, bucket, size, timed.time);
        let weight = self.pass.weight(size);
        let c = &mut self.current[class as usize];
        c.0 += weight.0;
        c.1 += weight.1;
        self.touch(class);
        self.now.0 += size;
        self.now.1 += 1;
        self.now_weighed.0 += weight.0;
        self.now_weighed.1 += weight.1;
        self.track_peak(timed.time, bucket as usize);
    }

    fn free(&mut self, timed: &Timed, address: u64, _: Option<&Block>, temporary: bool) {
        self.pass.count(timed);
        self.pass.agg.totals.frees += 1;
        let bucket = self.bucket(timed.time);
        if let Some(block) = self.pass.live.remove(&address) {
            self.resolve(block, Some(temporary), timed, bucket);
        }
    }

    /// A mapping of the program's own: not a block, but an event of the run, whose time the
    /// run's length and the buckets cover (`/api/mappings` answers for the mappings).
    fn map(&mut self, timed: &Timed, _: u64, _: u64, _: &Mapping, _: &[(u64, u64, Mapping)]) {
        self.pass.count_mapping(timed, true);
        self.bucket(timed.time);
    }

    fn unmap(&mut self, timed: &Timed, _: u64, _: u64, _: &[(u64, u64, Mapping)]) {
        self.pass.count_mapping(timed, false);
        self.bucket(timed.time);
    }

    fn mark(&mut self, timed: &Timed, label: u32) {
        let events = self.pass.count(timed);
        self.bucket(timed.time);
        self.pass.count_marker(timed, events, label);
        if !self.pass.agg.marker_live.contains_key(&label) && self.labels_seen < MARKER_LABELS {
            self.labels_seen += 1;
            self.pass
                .agg
                .marker_live
                .insert(label, self.current.clone());
            self.by_bin.marker_events.push(events);
            self.by_bin.marker_labels.push(label);
        }
    }
}
