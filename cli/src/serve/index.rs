//! The viewer's aggregates of a trace: per-class counters over time buckets, and the live heap
//! per class at chosen moments. One pass over the events builds them, either once for the whole
//! trace (the index, [`build`]: uniform buckets that coarsen as the run grows, no filter, the
//! peak and the markers captured) or for one query the index cannot answer (a scan, [`scan`]: the
//! query's own bucket edges and moments, with its filter). Both passes share one core ([`pass`])
//! and give one model ([`model`]), so both answer through the same lookups.
//!
//! A class is an allocating (stack, thread) pair: the filters on threads and on a stack's frames
//! select whole classes, so the index answers them exactly. The index also splits each class's
//! counters by the blocks' size and lifetime bins ([`bins`]), so that size and lifetime bounds
//! on the bins' edges select whole bins, which it answers exactly too. A bucket `i` holds the
//! events with `edge(i - 1) < time <= edge(i)`, so the heap after every event at or before
//! `edge(i)` is the sum of buckets `0..=i`.

mod bins;
mod build;
mod model;
mod pass;
mod scan;

pub use bins::{BinFilter, edges as bin_edges};
pub use build::IndexBuilder;
pub use model::{Agg, Cell, Classes, Edges, Live, Point, Tally, Totals, Weighed};
pub use scan::{ChunkFilter, Scan, Selection};
