//! Heap assertions while the table keeps the heap's peak per stack: the table's own work on the
//! free path (copying the per-stack counts when the heap comes down from a new peak, into a
//! vector that grows with the number of stacks) must not count in the scope.

#[path = "scope_scenario/mod.rs"]
mod scope_scenario;

use std::hint::black_box;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new().track_peak(true);

/// Ten 1-byte blocks into `v`, each from a call site, so a stack, of its own.
macro_rules! ten_sites {
    ($v:ident) => {
        $v.push(Box::new(black_box(0u8)));
        $v.push(Box::new(black_box(1u8)));
        $v.push(Box::new(black_box(2u8)));
        $v.push(Box::new(black_box(3u8)));
        $v.push(Box::new(black_box(4u8)));
        $v.push(Box::new(black_box(5u8)));
        $v.push(Box::new(black_box(6u8)));
        $v.push(Box::new(black_box(7u8)));
        $v.push(Box::new(black_box(8u8)));
        $v.push(Box::new(black_box(9u8)));
    };
}

/// A hundred blocks from a hundred call sites.
macro_rules! hundred_sites {
    ($v:ident) => {
        ten_sites!($v);
        ten_sites!($v);
        ten_sites!($v);
        ten_sites!($v);
        ten_sites!($v);
        ten_sites!($v);
        ten_sites!($v);
        ten_sites!($v);
        ten_sites!($v);
        ten_sites!($v);
    };
}

#[test]
#[allow(
    clippy::vec_init_then_push,
    reason = "each push is a call site, so a stack, of its own"
)]
fn scope_with_peak() {
    // A new peak, and a free that copies the per-stack counts at it.
    let stats = memprof::HeapStats::get();
    let ballast = black_box(vec![
        0u8;
        (stats.peak_bytes - stats.live_bytes) as usize + 4096
    ]);
    drop(black_box(Box::new(0u8)));
    // Then far more new stacks than that copy holds, and growth enough that the scenario's first
    // free, inside its scope, copies the counts again into a vector that must grow.
    let mut kept: Vec<Box<u8>> = Vec::with_capacity(1000);
    hundred_sites!(kept);
    hundred_sites!(kept);
    hundred_sites!(kept);
    hundred_sites!(kept);
    hundred_sites!(kept);
    hundred_sites!(kept);
    hundred_sites!(kept);
    hundred_sites!(kept);
    hundred_sites!(kept);
    hundred_sites!(kept);
    scope_scenario::dhat_heap_scenario();
    drop((kept, ballast));
}
