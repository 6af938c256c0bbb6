//! Overhead per allocation: an alloc+free pair and a realloc round trip through plain `System`
//! and through memprof, at several call depths, in the same run so the ratios hold on a noisy
//! machine. The capture depth comes from `MEMPROF_STACK_DEPTH`; the walker from the build
//! (`RUSTFLAGS="-C force-frame-pointers=yes"` for the frame-pointer walk).
//!
//! `cargo bench --bench overhead`

use divan::{Bencher, black_box};
use std::alloc::{GlobalAlloc, Layout, System};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

const DEPTHS: [usize; 3] = [5, 16, 32];
const LAYOUT: Layout = match Layout::from_size_align(64, 8) {
    Ok(layout) => layout,
    Err(_) => panic!("valid layout"),
};

fn main() {
    println!(
        "memprof: unwinder {:?}, stack depth {}",
        memprof::config::get().unwinder,
        memprof::config::get().stack_depth
    );
    divan::main();
}

/// Calls `f` from `depth` frames further down the stack.
#[inline(never)]
fn at_depth(depth: usize, f: &mut dyn FnMut()) {
    if depth == 0 {
        f();
    } else {
        at_depth(black_box(depth - 1), f);
        black_box(());
    }
}

fn pair(allocator: &dyn GlobalAlloc) {
    // SAFETY: a non-zero-size layout, freed once by the allocator that made it.
    unsafe {
        let p = allocator.alloc(black_box(LAYOUT));
        allocator.dealloc(black_box(p), LAYOUT);
    }
}

fn round_trip(allocator: &dyn GlobalAlloc) {
    // SAFETY: as in `pair`; the realloc'd block is freed with its new size.
    unsafe {
        let p = allocator.alloc(black_box(LAYOUT));
        let q = allocator.realloc(p, LAYOUT, black_box(256));
        allocator.dealloc(q, Layout::from_size_align_unchecked(256, 8));
    }
}

#[divan::bench(args = DEPTHS)]
fn alloc_free_system(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || pair(&System)));
}

#[divan::bench(args = DEPTHS)]
fn alloc_free_memprof(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || pair(&GLOBAL)));
}

#[divan::bench(args = DEPTHS)]
fn realloc_system(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || round_trip(&System)));
}

#[divan::bench(args = DEPTHS)]
fn realloc_memprof(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || round_trip(&GLOBAL)));
}
