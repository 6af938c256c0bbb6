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

/// The bound for each step: generous for unoptimized test builds, where the scan is ~10× slower.
const BOUND: Duration = Duration::from_secs(20);

#[test]
fn a_million_blocks_in_seconds() {
    let chains = build();
    let items = (CHAINS * CHAIN) as u64;
    assert!(memprof::HeapStats::get().live_blocks > items);

    let started = Instant::now();
    let (heap, typing) = memprof::object_graph::Heap::scan();
    let scanned = started.elapsed();
    let item = std::any::type_name::<Item>();
    let of_item = memprof::object_graph::blocks_of(&heap, &typing, item).len() as u64;
    assert_eq!(of_item, items);
    // Every item but the last of each chain points to the next one; the buffer to each head.
    assert!(heap.reference_count() as u64 >= items - CHAINS as u64 + CHAINS as u64);

    let started = Instant::now();
    let sizes = heap.sizes(&typing);
    let sized = started.elapsed();
    let item_bytes = sizes.iter().find(|r| r.name == item).map(|r| r.value);
    assert_eq!(item_bytes, Some(items * size_of::<Item>() as u64));

    let started = Instant::now();
    let graph = heap.graph(&typing, item, 10, 5);
    let graphed = started.elapsed();
    assert_eq!(graph.targets.len(), 10);

    eprintln!(
        "{} blocks, {} references: scan {scanned:?}, sizes {sized:?}, graph {graphed:?}",
        heap.snapshot.blocks.len(),
        heap.reference_count()
    );
    for (step, took) in [("scan", scanned), ("sizes", sized), ("graph", graphed)] {
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
