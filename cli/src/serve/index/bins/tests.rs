//! The bins' edges, and the index's answers by bin against a scan's on a synthetic trace.

use super::super::{Edges, IndexBuilder, Point, Scan, Selection};
use super::*;
use memprof_trace::{ChunkEncoder, Header, Trace};

#[test]
fn each_value_falls_within_its_bin_and_the_bins_follow_each_other() {
    let mut next = 0u64;
    for bin in 0..=251u8 {
        let (lo, hi) = size_range(bin);
        assert_eq!(lo, next, "size bin {bin}");
        assert!(lo <= hi);
        assert_eq!((size_bin(lo), size_bin(hi)), (bin, bin));
        next = hi.wrapping_add(1);
    }
    assert_eq!(next, 0, "the size bins cover every u64");
    let mut next = 0u64;
    for bin in 0..NEVER {
        let (lo, hi) = life_range(bin);
        assert_eq!(lo, next, "life bin {bin}");
        assert_eq!((life_bin(lo), life_bin(hi)), (bin, bin));
        next = hi.wrapping_add(1);
    }
    assert_eq!(next, 0, "the life bins cover every u64");
    // The edges the summary lists are aligned on both sides, as are the values beside them.
    let (sizes, lives) = edges();
    for &e in &sizes {
        assert!(
            BinFilter::aligned((e, e), None, false, false).is_some(),
            "{e}"
        );
        assert!(BinFilter::aligned((e + 1, u64::MAX), None, false, false).is_some());
        assert!(BinFilter::aligned((0, e.saturating_sub(1)), None, false, false).is_some());
    }
    for &e in &lives {
        assert!(BinFilter::aligned((0, u64::MAX), Some((e, e)), false, false).is_some());
        assert!(BinFilter::aligned((0, u64::MAX), Some((e + 1, u64::MAX)), false, false).is_some());
    }
    for (size, life) in [
        ((1000, u64::MAX), None),
        ((0, 1000), None),
        ((0, u64::MAX), Some((1500, u64::MAX))),
        ((0, u64::MAX), Some((0, 2_000_000))),
    ] {
        assert_eq!(
            BinFilter::aligned(size, life, false, false),
            None,
            "{size:?} {life:?}"
        );
    }
}

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A trace of three threads over six stacks: sizes around the bins' edges and anywhere,
/// lifetimes over many decades, temporary blocks, reallocations, blocks allocated over live
/// ones, blocks never freed, and markers.
fn synthetic_trace(path: &std::path::Path, seed: u64, events: usize) {
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let mut definitions = ChunkEncoder::new(0);
    for stack in 0..6u32 {
        definitions.stack(stack, [0x1000 + u64::from(stack)].into_iter());
    }
    for thread in 1..=3u32 {
        definitions.thread(thread, u64::from(thread) + 100, "t");
    }
    for label in 0..4u32 {
        definitions.label(label, &format!("m{label}"));
    }
    definitions.finish(None, &mut out).unwrap();
    let mut threads: Vec<ChunkEncoder> = (1..=3).map(ChunkEncoder::new).collect();
    let mut live: Vec<u64> = Vec::new();
    let mut time = 0u64;
    let mut next_address = 0x10_0000u64;
    let mut written = 0;
    for i in 0..events {
        time += match rng.below(10) {
            0 => rng.below(5_000_000),
            1..=3 => rng.below(20_000),
            _ => rng.below(300),
        };
        let thread = rng.below(3) as usize;
        let stack = rng.below(6) as u32;
        let size = match rng.below(4) {
            0 => {
                let e = 3 + rng.below(20);
                let edge = if rng.below(2) == 0 {
                    1 << e
                } else {
                    (1 << e) + (1 << (e - 1))
                };
                edge + rng.below(3) - 1
            }
            1 => rng.below(8),
            _ => rng.below(100_000),
        };
        let encoder = &mut threads[thread];
        match rng.below(20) {
            0..=8 => {
                next_address += 16;
                encoder.alloc(time, next_address, size, stack);
                live.push(next_address);
            }
            9 => {
                // Temporary: freed by its thread before anything else.
                next_address += 16;
                encoder.alloc(time, next_address, size, stack);
                encoder.free(time + rng.below(50), next_address);
                time += 50;
            }
            10 if !live.is_empty() => {
                let old = live.swap_remove(rng.below(live.len() as u64) as usize);
                next_address += 16;
                encoder.realloc(time, time, old, next_address, size, stack);
                live.push(next_address);
            }
            11 if !live.is_empty() => {
                // Over a live block, which the trace never shows freed.
                let at = live[rng.below(live.len() as u64) as usize];
                encoder.alloc(time, at, size, stack);
            }
            12 if i % 97 == 0 => encoder.mark(time, rng.below(4) as u32),
            _ if !live.is_empty() && rng.below(5) != 0 => {
                let at = live.swap_remove(rng.below(live.len() as u64) as usize);
                encoder.free(time, at);
            }
            _ => {}
        }
        written += 1;
        if written % 5000 == 0 {
            for encoder in &mut threads {
                encoder.finish(None, &mut out).unwrap();
            }
        }
    }
    for encoder in &mut threads {
        encoder.finish(None, &mut out).unwrap();
    }
    let mut end = ChunkEncoder::new(0);
    end.end(events as u64, 0);
    end.finish(None, &mut out).unwrap();
    std::fs::write(path, out).unwrap();
}

fn random_filter(rng: &mut Rng) -> BinFilter {
    let pick = |rng: &mut Rng, bins: u8| {
        let a = rng.below(u64::from(bins)) as u8;
        let b = rng.below(u64::from(bins)) as u8;
        (a.min(b), a.max(b))
    };
    // Mostly the bins the trace's sizes and lifetimes fall in, sometimes all of them.
    let size = if rng.below(4) == 0 {
        (0, 251)
    } else {
        pick(rng, 80)
    };
    let life = match rng.below(3) {
        0 => None,
        _ => Some(pick(rng, NEVER)),
    };
    BinFilter {
        size,
        life,
        never: rng.below(6) == 0,
        temporary: rng.below(6) == 0,
    }
}

/// The index's figures by bin equal those of a scan whose selection has the bins' bounds, for
/// random filters: every bucket's counters, the live heap at the peak, at each marker kept and at
/// the end, the first and last allocations; with the resolution halved many times over, by the
/// length of the run and by the limit on cells by bin.
#[test]
fn the_index_by_bin_answers_as_a_scan_does() {
    let dir = std::env::temp_dir().join(format!("memprof-bins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (seed, bin_limit) in [(7u64, usize::MAX), (11, 300)] {
        let path = dir.join(format!("synthetic-{seed}.mptrace"));
        synthetic_trace(&path, seed, 20_000);
        let trace = Trace::open(&path).unwrap();
        let mut builder = IndexBuilder::new(0);
        builder.bin_limit = bin_limit;
        trace.visit(&mut builder, &mut |_| {}).unwrap();
        let (index, classes) = builder.finish();
        let Edges::Uniform(width) = index.edges else {
            panic!("the index's edges are uniform")
        };
        assert!(width > 1024, "the index coarsened");
        assert!(!index.bin_totals.marker_labels.is_empty());
        let edges: Vec<u64> = (0..index.buckets as u64).map(|i| i * width).collect();
        let mut points = vec![Point::Events(index.totals.peak_events)];
        for &label in &index.bin_totals.marker_labels {
            let &(_, events, _) = index.totals.markers.iter().find(|m| m.2 == label).unwrap();
            points.push(Point::Events(events));
        }
        // The whole index, by bin, is the index.
        let all = index.filtered(&BinFilter {
            size: (0, 251),
            life: None,
            never: false,
            temporary: false,
        });
        assert_eq!(all.cells, index.cells);
        assert_eq!(all.end, index.end);
        assert_eq!(all.first_last, index.first_last);
        assert_eq!(all.marker_live, index.marker_live);
        assert_eq!(all.points, index.points);
        let mut rng = Rng(seed);
        let mut selected = 0;
        for _ in 0..16 {
            let filter = random_filter(&mut rng);
            let selection = Selection {
                classes: None,
                size: (size_range(filter.size.0).0, size_range(filter.size.1).1),
                life: filter
                    .life
                    .map(|(lo, hi)| (life_range(lo).0, life_range(hi).1)),
                never: filter.never,
                temporary: filter.temporary,
                freed_in: None,
                address: None,
                chunk: Default::default(),
            };
            let mut scan = Scan::new(&classes, edges.clone(), selection, points.clone(), 0);
            trace.visit(&mut scan, &mut |_| {}).unwrap();
            let (scan, _) = scan.finish();
            let got = index.filtered(&filter);
            assert_eq!(got.cells, scan.cells, "{filter:?}");
            assert_eq!(got.end, scan.end, "{filter:?}");
            assert_eq!(
                got.points[&points[0]], scan.points[&points[0]],
                "the peak, {filter:?}"
            );
            for (label, point) in index.bin_totals.marker_labels.iter().zip(&points[1..]) {
                assert_eq!(
                    got.marker_live[label], scan.points[point],
                    "marker {label}, {filter:?}"
                );
            }
            for (class, (a, b)) in got.first_last.iter().zip(&scan.first_last).enumerate() {
                if !scan.cells[class].is_empty() {
                    assert_eq!(a, b, "class {class}, {filter:?}");
                }
            }
            selected += usize::from(got.cells.iter().any(|c| !c.is_empty()));
        }
        assert!(selected >= 8, "{selected} filters of 16 selected something");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What the bins cost on a real trace, against keeping exact sizes instead of size bins:
/// `MEMPROF_BINS_TRACE=TRACE cargo test --release -p memprof-cli --bin memprof -- --ignored
/// --nocapture what_the_bins_cost` (docs/viewer.md has the figures).
#[test]
#[ignore = "a measurement on a trace given by MEMPROF_BINS_TRACE"]
fn what_the_bins_cost() {
    use memprof_trace::{Block, Timed, Visitor};
    use std::collections::HashSet;
    let path = std::env::var("MEMPROF_BINS_TRACE").expect("MEMPROF_BINS_TRACE=TRACE");
    let trace = Trace::open(&path).unwrap();
    let start = std::time::Instant::now();
    let mut builder = IndexBuilder::new(0);
    trace.visit(&mut builder, &mut |_| {}).unwrap();
    let (index, classes) = builder.finish();
    let built = start.elapsed();
    let Edges::Uniform(width) = index.edges else {
        panic!("uniform")
    };
    let cells: usize = index.cells.iter().map(Vec::len).sum();
    let bins: usize = index.bins.iter().map(Vec::len).sum();

    /// Distinct (class, size), and (class, bucket, exact size, lifetime bin, temporary).
    struct Sizes<'a> {
        classes: &'a super::super::Classes,
        width: u64,
        live: HashMap<u64, (u32, u64, u64, u64)>,
        sizes: HashSet<(u32, u64)>,
        exact: HashSet<(u32, u64, u64, u8, bool)>,
        binned: HashSet<(u32, u64, Bin)>,
    }
    impl Sizes<'_> {
        fn end(
            &mut self,
            (class, size, time, bucket): (u32, u64, u64, u64),
            end: Option<(u64, bool)>,
        ) {
            let (life, temporary) = match end {
                Some((t, temporary)) => (life_bin(t - time), temporary),
                None => (NEVER, false),
            };
            let bin = Bin {
                size: size_bin(size),
                life,
                temporary,
            };
            // The allocation's bucket, and the free's.
            let freed = end.map(|(t, _)| t.div_ceil(self.width));
            for bucket in [Some(bucket), freed].into_iter().flatten() {
                self.exact.insert((class, bucket, size, life, temporary));
                self.binned.insert((class, bucket, bin));
            }
        }
    }
    impl Visitor for Sizes<'_> {
        fn alloc(&mut self, timed: &Timed, address: u64, block: &Block, _: Option<&Block>) {
            let class = self.classes.get(block.stack, timed.thread).unwrap();
            self.sizes.insert((class, block.size));
            let entry = (
                class,
                block.size,
                timed.time,
                timed.time.div_ceil(self.width),
            );
            if let Some(old) = self.live.insert(address, entry) {
                self.end(old, Some((timed.time, false)));
            }
        }
        fn free(&mut self, timed: &Timed, address: u64, _: Option<&Block>, temporary: bool) {
            if let Some(old) = self.live.remove(&address) {
                self.end(old, Some((timed.time, temporary)));
            }
        }
    }
    let mut sizes = Sizes {
        classes: &classes,
        width,
        live: HashMap::new(),
        sizes: HashSet::new(),
        exact: HashSet::new(),
        binned: HashSet::new(),
    };
    trace.visit(&mut sizes, &mut |_| {}).unwrap();
    for block in std::mem::take(&mut sizes.live).into_values() {
        sizes.end(block, None);
    }
    println!(
        "{} events, index built in {built:?}: {} classes, {} buckets of {width} ns, {cells} cells, \
         {bins} cells by bin; distinct (class, size) {}; (class, bucket, size, lifetime bin) {}; \
         (class, bucket, bin) {}",
        index.totals.events,
        classes.list.len(),
        index.buckets,
        sizes.sizes.len(),
        sizes.exact.len(),
        sizes.binned.len(),
    );
    assert_eq!(
        sizes.binned.len(),
        bins,
        "one cell per (class, bucket, bin)"
    );
}
