//! A heap of a million blocks is scanned, sized and graphed in seconds.

use std::mem::size_of;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

struct Item {
    next: Option<Box<Item>>,
    value: u64,
}

const CHAINS: usize = 1000;
const CHAIN: usize = 1000;

/// `CHAINS` linked lists of `CHAIN` items each (short enough to drop without deep recursion).
#[inline(never)]
fn build() -> Vec<Option<Box<Item>>> {
    (0..CHAINS)
        .map(|c| {
            let mut head = None;
            for i in 0..CHAIN {
                head = Some(Box::new(Item {
                    next: head,
                    value: (c * CHAIN + i) as u64,
                }));
            }
            head
        })
        .collect()
}

/// A bound that only catches a scan gone wrong (quadratic, or stuck): the figures are printed,
/// and measured in earnest by the benchmarks.
const BOUND: Duration = Duration::from_secs(20);

#[test]
fn a_million_blocks_in_seconds() {
    let chains = build();
    let items = (CHAINS * CHAIN) as u64;
    assert!(memprof::HeapStats::get().live_blocks > items);

    let item = std::any::type_name::<Item>();
    let log = |f: fn(&mut Vec<u8>) -> std::io::Result<()>| {
        let started = Instant::now();
        let mut out = Vec::new();
        f(&mut out).unwrap();
        (String::from_utf8(out).unwrap(), started.elapsed())
    };
    let value_of = |log: &str| -> Option<u64> {
        log.lines().find_map(|line| {
            let (value, name) = line.split_once('\t')?;
            (name == item).then(|| value.parse().unwrap())
        })
    };

    let (counts, counted) = log(memprof::log_object_counts);
    assert_eq!(value_of(&counts), Some(items));

    // Scanning the heap for pointers, then sizing every type.
    let (sizes, sized) = log(memprof::log_object_sizes);
    assert_eq!(value_of(&sizes), Some(items * size_of::<Item>() as u64));

    // Scanning the heap again, then the graph of ten items and who points to them.
    let (graph, graphed) = log(memprof::pretty_log_object_graph::<Item>);
    let targets = graph
        .lines()
        .filter(|l| !l.contains("-->") && l.contains(item))
        .count();
    assert_eq!(targets, 10, "{graph}");
    // Every item but the last of each chain points to the next one: each target has a referrer.
    assert!(
        graph.lines().filter(|l| l.contains("-->")).count() >= 10,
        "{graph}"
    );

    eprintln!(
        "{} live blocks: counts {counted:?}, scan and sizes {sized:?}, scan and graph {graphed:?}",
        memprof::HeapStats::get().live_blocks
    );
    for (step, took) in [("counts", counted), ("sizes", sized), ("graph", graphed)] {
        assert!(took < BOUND, "{step} took {took:?}");
    }
    // Walk one chain to its end: every item is there.
    let mut length = 0;
    let mut item = chains[0].as_deref();
    while let Some(i) = item {
        length += 1;
        assert_eq!(i.value, (CHAIN - length) as u64);
        item = i.next.as_deref();
    }
    assert_eq!(length, CHAIN);
}
