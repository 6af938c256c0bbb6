//! What the index's pass and a query's scan share: the aggregates being built, the blocks live
//! during the pass (with the bucket and moment of their allocation), and the counting of events
//! and of a class's counters in a bucket. Each of the two passes holds one and adds its own
//! figures ([`super::build`], [`super::scan`]).

use super::model::{Agg, BinTotals, Edges, Point, Tally, Totals, Weighed, weight};
use memprof_trace::{AddressHasher, Timed};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// A live block during the pass.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pending {
    pub(super) size: u64,
    pub(super) class: u32,
    pub(super) time: u64,
    /// Events replayed up to and with its allocation.
    pub(super) events: u64,
    pub(super) bucket: u32,
}

/// The blocks live during a pass, by address.
pub(super) type LiveBlocks = HashMap<u64, Pending, BuildHasherDefault<AddressHasher>>;

/// The core of a pass: its aggregates, its live blocks and how many cells it made.
#[derive(Debug)]
pub(super) struct Pass {
    pub(super) agg: Agg,
    pub(super) live: LiveBlocks,
    /// Cells in [`Agg::cells`].
    pub(super) cell_count: usize,
}

impl Pass {
    /// A pass over buckets ending at `edges`, counting `classes` classes from the start (more
    /// as they are found), keeping the live heap per class at `points`, and weighing the blocks
    /// of a trace sampled every `sample_interval` bytes (0: none).
    pub(super) fn new(
        edges: Edges,
        classes: usize,
        points: &[Point],
        sample_interval: u64,
    ) -> Pass {
        let mut at = HashMap::new();
        for point in points {
            at.insert(*point, vec![(0.0, 0.0); classes]);
        }
        Pass {
            agg: Agg {
                edges,
                buckets: 1,
                cells: vec![Vec::new(); classes],
                peaks: Vec::new(),
                points: at,
                marker_live: HashMap::new(),
                end: Vec::new(),
                totals: Totals {
                    sample_interval,
                    ..Totals::default()
                },
                first_last: vec![(u64::MAX, 0); classes],
                bins: Vec::new(),
                bin_totals: BinTotals::default(),
            },
            live: HashMap::default(),
            cell_count: 0,
        }
    }

    /// The same pass without its live blocks (a copy to finish as if the events ended here).
    pub(super) fn copy_without_live(&self) -> Pass {
        Pass {
            agg: self.agg.clone(),
            live: HashMap::default(),
            cell_count: self.cell_count,
        }
    }

    /// What a recorded block of `size` bytes counts for, `(bytes, blocks)`.
    #[inline]
    pub(super) fn weight(&self, size: u64) -> Weighed {
        weight(size, self.agg.totals.sample_interval)
    }

    /// The counters of `class` in `bucket`, made when new.
    pub(super) fn cell(&mut self, class: u32, bucket: u32) -> &mut Tally {
        let cells = &mut self.agg.cells[class as usize];
        let at = match cells.last() {
            Some((b, _)) if *b == bucket => cells.len() - 1,
            Some((b, _)) if *b > bucket => match cells.binary_search_by_key(&bucket, |(b, _)| *b) {
                Ok(at) => at,
                Err(at) => {
                    cells.insert(at, (bucket, Tally::default()));
                    self.cell_count += 1;
                    at
                }
            },
            _ => {
                cells.push((bucket, Tally::default()));
                self.cell_count += 1;
                cells.len() - 1
            }
        };
        &mut cells[at].1
    }

    /// Counts one event (in time order); returns the events so far.
    pub(super) fn count(&mut self, timed: &Timed) -> u64 {
        let totals = &mut self.agg.totals;
        totals.events += 1;
        totals.last_time = timed.time;
        totals.events
    }

    /// Takes `bucket` as one in use; returns it.
    pub(super) fn in_use(&mut self, bucket: usize) -> u32 {
        self.agg.buckets = self.agg.buckets.max(bucket + 1);
        bucket as u32
    }

    /// The bucket of an event at `time`, in use from now.
    pub(super) fn bucket(&mut self, time: u64) -> u32 {
        let bucket = self.agg.edges.bucket(time);
        self.in_use(bucket)
    }

    /// Counts an allocation of `size` bytes by `class` at `time`, in its bucket.
    pub(super) fn count_allocation(&mut self, class: u32, bucket: u32, size: u64, time: u64) {
        if let Some(entry) = self.agg.first_last.get_mut(class as usize) {
            entry.0 = entry.0.min(time);
            entry.1 = entry.1.max(time);
        }
        let (bytes, blocks) = self.weight(size);
        let cell = self.cell(class, bucket);
        cell.allocs += blocks;
        cell.alloc_bytes += bytes;
    }

    /// Counts a block's end: its free in `bucket`, its lifetime `life` (and whether it was
    /// temporary) in the bucket of its allocation.
    pub(super) fn count_end(&mut self, block: &Pending, bucket: u32, life: u64, temporary: bool) {
        let (bytes, blocks) = self.weight(block.size);
        let cell = self.cell(block.class, bucket);
        cell.frees += blocks;
        cell.free_bytes += bytes;
        let cell = self.cell(block.class, block.bucket);
        cell.life_count += 1;
        cell.life_sum = cell.life_sum.saturating_add(life);
        if temporary {
            cell.temporary += blocks;
            cell.temporary_bytes += bytes;
            self.agg.totals.temporary += 1;
        }
    }

    /// Counts a mapping made (`made`) or removed: an event of the run, whose time the run's
    /// length covers, not a block.
    pub(super) fn count_mapping(&mut self, timed: &Timed, made: bool) {
        self.agg.totals.last_time = timed.time;
        self.agg.totals.mappings += u64::from(made);
    }

    /// Counts a marker after `events` events.
    pub(super) fn count_marker(&mut self, timed: &Timed, events: u64, label: u32) {
        self.agg.totals.markers.push((timed.time, events, label));
    }

    /// The blocks still live, taken out of the pass.
    pub(super) fn take_live(&mut self) -> Vec<Pending> {
        self.live.drain().map(|(_, p)| p).collect()
    }

    /// Frees the cells' spare room, once the pass is over.
    pub(super) fn shrink(&mut self) {
        for cells in &mut self.agg.cells {
            cells.shrink_to_fit();
        }
    }
}
