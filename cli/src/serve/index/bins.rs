//! The bins of a block's size and lifetime, by which the index splits its counters
//! ([`Bin`], [`BinCell`]), and the index's figures under a filter on them: the size and
//! lifetime filters whose bounds fall on the bins' edges are answered from the index, exactly.
//!
//! Sizes: 0 to 7 bytes one bin each; from 8 on, four bins an octave: `2^e` alone, the sizes
//! between `2^e` and `1.5 * 2^e`, `1.5 * 2^e` alone, those between `1.5 * 2^e` and `2^(e+1)`.
//! Lifetimes (ns): 0 alone, then per decade `10^k` alone and those between `10^k` and
//! `10^(k+1)`; a bin of blocks never freed. The edge values have bins of their own so that a
//! bound on an edge is aligned whichever side it closes: `size_min=1024` and `size_max=1024`
//! both are, as are `size_max=1023` and `size_min=1025`.

use super::model::{Agg, Bin, BinCell, BinTotals, NEVER, Point, Tally, Weighed};
use std::collections::HashMap;

/// The size bin of `size`.
pub fn size_bin(size: u64) -> u8 {
    if size < 8 {
        return size as u8;
    }
    let e = 63 - size.leading_zeros();
    let base = 1u64 << e;
    let mid = base + (base >> 1);
    let sub = match size {
        s if s == base => 0,
        s if s < mid => 1,
        s if s == mid => 2,
        _ => 3,
    };
    (8 + (e - 3) * 4 + sub) as u8
}

/// The smallest and largest sizes of a size bin.
pub fn size_range(bin: u8) -> (u64, u64) {
    if bin < 8 {
        return (u64::from(bin), u64::from(bin));
    }
    let e = u32::from(bin - 8) / 4 + 3;
    let base = 1u64 << e;
    let mid = base + (base >> 1);
    match (bin - 8) % 4 {
        0 => (base, base),
        1 => (base + 1, mid - 1),
        2 => (mid, mid),
        _ => (mid + 1, base.wrapping_mul(2).wrapping_sub(1)),
    }
}

/// The lifetime bin of `life` ns.
pub fn life_bin(life: u64) -> u8 {
    if life == 0 {
        return 0;
    }
    let k = life.ilog10();
    if life == 10u64.pow(k) {
        (1 + 2 * k) as u8
    } else {
        (2 + 2 * k) as u8
    }
}

/// The shortest and longest lifetimes of a lifetime bin (not [`NEVER`]).
pub fn life_range(bin: u8) -> (u64, u64) {
    if bin == 0 {
        return (0, 0);
    }
    let k = u32::from(bin - 1) / 2;
    let decade = 10u64.pow(k);
    if bin % 2 == 1 {
        (decade, decade)
    } else {
        (
            decade + 1,
            decade.checked_mul(10).map_or(u64::MAX, |d| d - 1),
        )
    }
}

/// A size and lifetime filter on the bins' edges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinFilter {
    /// Size bins, inclusive.
    pub size: (u8, u8),
    /// Lifetime bins, inclusive (blocks never freed left out).
    pub life: Option<(u8, u8)>,
    /// Only blocks never freed.
    pub never: bool,
    /// Only temporary blocks.
    pub temporary: bool,
}

impl BinFilter {
    /// The filter when the inclusive size range and lifetime range fall on the bins' edges.
    pub fn aligned(
        size: (u64, u64),
        life: Option<(u64, u64)>,
        never: bool,
        temporary: bool,
    ) -> Option<BinFilter> {
        let bins = |lo: u64, hi: u64, bin: fn(u64) -> u8, range: fn(u8) -> (u64, u64)| {
            let (a, b) = (bin(lo), bin(hi));
            (range(a).0 == lo && range(b).1 == hi).then_some((a, b))
        };
        let size = bins(size.0, size.1, size_bin, size_range)?;
        let life = match life {
            None => None,
            Some((lo, hi)) => Some(bins(lo, hi, life_bin, life_range)?),
        };
        Some(BinFilter {
            size,
            life,
            never,
            temporary,
        })
    }

    /// Whether blocks of `bin` pass.
    pub fn passes(&self, bin: Bin) -> bool {
        (self.size.0..=self.size.1).contains(&bin.size)
            && self
                .life
                .is_none_or(|(lo, hi)| bin.life != NEVER && (lo..=hi).contains(&bin.life))
            && (!self.never || bin.life == NEVER)
            && (!self.temporary || bin.temporary)
    }
}

/// The edges a bound may take to be answered from the index, for the API and the page: sizes
/// from 1 byte to 1 TiB, lifetimes from 1 ns to 1000 s.
pub fn edges() -> (Vec<u64>, Vec<u64>) {
    let mut sizes = vec![0, 1, 2, 3, 4, 5, 6, 7];
    for e in 3..=40 {
        sizes.push(1 << e);
        sizes.push((1 << e) + (1 << (e - 1)));
    }
    let lives = (0..=12).map(|k| 10u64.pow(k)).collect();
    (sizes, lives)
}

/// Adds the counters `counters` of bin `bin` into a [`Tally`].
fn add_to(counters: &BinCell, bin: Bin, cell: &mut Tally) {
    cell.allocs += counters.allocs;
    cell.alloc_bytes += counters.alloc_bytes;
    cell.frees += counters.frees;
    cell.free_bytes += counters.free_bytes;
    if bin.temporary {
        cell.temporary += counters.allocs;
        cell.temporary_bytes += counters.alloc_bytes;
    }
    if bin.life != NEVER {
        cell.life_count += counters.life_count;
    }
    cell.life_sum = cell.life_sum.saturating_add(counters.life_sum);
}

impl Agg {
    /// The index's aggregates of the blocks `filter` passes: its buckets, the live heap at the
    /// end, at the peak and at the markers it keeps, the first and last allocations.
    pub fn filtered(&self, filter: &BinFilter) -> Agg {
        let classes = self.cells.len();
        let mut cells = Vec::with_capacity(classes);
        let mut end = vec![(0.0f64, 0.0f64); classes];
        for (class, bins) in self.bins.iter().enumerate() {
            let mut out: Vec<(u32, Tally)> = Vec::new();
            for &(bucket, bin, counters) in bins {
                if !filter.passes(bin) {
                    continue;
                }
                if out.last().is_none_or(|(b, _)| *b != bucket) {
                    out.push((bucket, Tally::default()));
                }
                let cell = &mut out.last_mut().expect("a cell").1;
                add_to(&counters, bin, cell);
                if bin.life == NEVER {
                    end[class].0 += counters.alloc_bytes;
                    end[class].1 += counters.allocs;
                }
            }
            cells.push(out);
        }
        let mut peak = vec![(0.0f64, 0.0f64); classes];
        for &(class, bin, (bytes, blocks)) in &self.bin_totals.peak {
            if filter.passes(bin) {
                peak[class as usize].0 += bytes;
                peak[class as usize].1 += blocks;
            }
        }
        let mut first_last = vec![(u64::MAX, 0u64); classes];
        for &(class, bin, first, last) in &self.bin_totals.first_last {
            if filter.passes(bin) {
                let entry = &mut first_last[class as usize];
                entry.0 = entry.0.min(first);
                entry.1 = entry.1.max(last);
            }
        }
        let markers = &self.bin_totals.marker_labels;
        let mut steps: HashMap<u32, Vec<Weighed>> = HashMap::new();
        for &(class, bin, marker, bytes, blocks) in &self.bin_totals.marker_steps {
            if filter.passes(bin) {
                let at = &mut steps
                    .entry(class)
                    .or_insert_with(|| vec![(0.0, 0.0); markers.len() + 1])[marker as usize];
                at.0 += bytes;
                at.1 += blocks;
            }
        }
        let mut marker_live: HashMap<u32, Vec<Weighed>> = markers
            .iter()
            .map(|&label| (label, vec![(0.0, 0.0); classes]))
            .collect();
        for (class, steps) in steps {
            let (mut bytes, mut blocks) = (0.0f64, 0.0f64);
            for (&label, step) in markers.iter().zip(steps) {
                bytes += step.0;
                blocks += step.1;
                marker_live.get_mut(&label).expect("a marker")[class as usize] =
                    (bytes.max(0.0), blocks.max(0.0));
            }
        }
        let mut points = HashMap::new();
        points.insert(Point::Events(self.totals.peak_events), peak);
        Agg {
            edges: self.edges.clone(),
            buckets: self.buckets,
            cells,
            peaks: Vec::new(),
            points,
            marker_live,
            end,
            totals: self.totals.clone(),
            first_last,
            bins: Vec::new(),
            bin_totals: BinTotals::default(),
        }
    }
}

#[cfg(test)]
mod tests;
