//! A query's scan: one pass over the trace for a query the index cannot answer, with the query's
//! own bucket edges and moments and its selection of blocks. Its classes are the index's: it
//! interns none. It counts an allocation once its block's outcome (its lifetime, whether it was
//! temporary, when it was freed) is known to pass the selection.

use super::model::{Agg, Classes, Edges, Point};
use super::pass::{Pass, Pending};
use memprof_trace::{Accumulated, Block, ChunkFlags, Mapping, Timed, Visitor};
use std::ops::ControlFlow;

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

/// The pass of a query's scan.
#[derive(Debug)]
pub struct Scan<'a> {
    pass: Pass,
    /// The index's classes.
    classes: &'a Classes,
    selection: Selection,
    /// The moments it keeps the live heap at.
    points: Vec<Point>,
    /// A scan that only needs its points stops after the last of them.
    stop_early: bool,
}

impl<'a> Scan<'a> {
    /// A scan with its bucket edges (sorted), its selection and the moments to keep, of a trace
    /// sampled every `sample_interval` bytes (0: every allocation recorded).
    pub fn new(
        classes: &'a Classes,
        edges: Vec<u64>,
        selection: Selection,
        points: Vec<Point>,
        sample_interval: u64,
    ) -> Scan<'a> {
        Scan {
            pass: Pass::new(
                Edges::Explicit(edges),
                classes.list.len(),
                &points,
                sample_interval,
            ),
            classes,
            selection,
            points,
            stop_early: false,
        }
    }

    /// A scan for the live heap at `points` only: it stops after the last of them.
    pub fn points_only(
        classes: &'a Classes,
        selection: Selection,
        points: Vec<Point>,
        sample_interval: u64,
    ) -> Scan<'a> {
        let mut scan = Scan::new(classes, Vec::new(), selection, points, sample_interval);
        scan.stop_early = true;
        scan
    }

    /// Whether a points-only scan has passed every point: `next` is not needed.
    fn past(&self, next: &Timed) -> bool {
        self.stop_early
            && self.points.iter().all(|point| match *point {
                Point::Time(t) => next.time > t,
                Point::Events(n) => self.pass.agg.totals.events >= n,
            })
    }

    /// Counts a block live at the points `live` tells.
    fn count_at_points(&mut self, block: &Pending, live: impl Fn(&Point) -> bool) {
        let (bytes, blocks) = self.pass.weight(block.size);
        for point in &self.points {
            if live(point) {
                let entry = &mut self.pass.agg.points.get_mut(point).expect("a point")
                    [block.class as usize];
                entry.0 += bytes;
                entry.1 += blocks;
            }
        }
    }

    /// Counts the allocation of a block whose outcome passed the selection.
    fn count_allocation(&mut self, block: &Pending) {
        self.pass
            .count_allocation(block.class, block.bucket, block.size, block.time);
        let totals = &mut self.pass.agg.totals;
        totals.allocations += 1;
        totals.allocated_bytes += block.size;
    }

    /// A block's end: freed (`temporary` known) or overwritten (`None`).
    fn resolve(&mut self, block: Pending, temporary: Option<bool>, timed: &Timed, bucket: u32) {
        let life = timed.time.saturating_sub(block.time);
        let is_temporary = temporary.unwrap_or(false);
        if !self
            .selection
            .outcome(Some(life), is_temporary, Some(timed.time))
        {
            return;
        }
        self.count_allocation(&block);
        self.pass.count_end(&block, bucket, life, is_temporary);
        self.pass.agg.totals.frees += 1;
        let events = self.pass.agg.totals.events;
        self.count_at_points(&block, |point| match *point {
            Point::Time(t) => block.time <= t && timed.time > t,
            Point::Events(n) => block.events <= n && events > n,
        });
    }

    /// The aggregates, with the blocks still live counted as never freed, and the classes they
    /// count.
    pub fn finish(mut self) -> (Agg, &'a Classes) {
        self.pass.shrink();
        let mut end = vec![(0.0f64, 0.0f64); self.classes.list.len()];
        for block in self.pass.take_live() {
            if !self.selection.outcome(None, false, None) {
                continue;
            }
            self.count_allocation(&block);
            let (bytes, blocks) = self.pass.weight(block.size);
            let e = &mut end[block.class as usize];
            e.0 += bytes;
            e.1 += blocks;
            let totals = &mut self.pass.agg.totals;
            totals.end.0 += block.size;
            totals.end.1 += 1;
            self.count_at_points(&block, |point| match *point {
                Point::Time(t) => block.time <= t,
                Point::Events(n) => block.events <= n,
            });
        }
        self.pass.agg.end = end;
        (self.pass.agg, self.classes)
    }
}

/// A scan is one visitor of the trace's replay.
impl Visitor for Scan<'_> {
    fn before(&mut self, timed: &Timed, _: &Accumulated) -> ControlFlow<()> {
        if self.past(timed) {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn alloc(&mut self, timed: &Timed, address: u64, block: &Block, _: Option<&Block>) {
        let events = self.pass.count(timed);
        let size = block.size;
        let class = self.classes.get(block.stack, timed.thread);
        let bucket = self.pass.bucket(timed.time);
        if let Some(old) = self.pass.live.remove(&address) {
            // A block allocated over a live one: the old one ends here, unseen.
            self.resolve(old, None, timed, bucket);
        }
        let Some(class) = class else { return };
        let selection = &self.selection;
        if !selection.class(class)
            || !(selection.size.0..=selection.size.1).contains(&size)
            || !selection
                .address
                .is_none_or(|(lo, hi)| (lo..=hi).contains(&address))
            || !selection.chunk.passes(block.flags)
        {
            return;
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
    }

    fn free(&mut self, timed: &Timed, address: u64, _: Option<&Block>, temporary: bool) {
        self.pass.count(timed);
        let bucket = self.pass.bucket(timed.time);
        if let Some(block) = self.pass.live.remove(&address) {
            self.resolve(block, Some(temporary), timed, bucket);
        }
    }

    /// A mapping of the program's own: an event of the run, not a block.
    fn map(&mut self, timed: &Timed, _: u64, _: u64, _: &Mapping, _: &[(u64, u64, Mapping)]) {
        self.pass.count_mapping(timed, true);
        self.pass.bucket(timed.time);
    }

    fn unmap(&mut self, timed: &Timed, _: u64, _: u64, _: &[(u64, u64, Mapping)]) {
        self.pass.count_mapping(timed, false);
        self.pass.bucket(timed.time);
    }

    fn mark(&mut self, timed: &Timed, label: u32) {
        let events = self.pass.count(timed);
        self.pass.bucket(timed.time);
        self.pass.count_marker(timed, events, label);
    }
}
