//! Overhead per allocation against a peer: an alloc+free pair and a realloc round trip through
//! plain `System`, through memprof and through dhat-rs, in the same process and the same run, so
//! the ratios hold on a noisy machine.
//!
//! dhat-rs only records what passes through the global allocator, so it is this binary's global
//! allocator, with its heap profiler running for the whole run. memprof records into its process
//! table whoever calls it, so it is called directly, the way `benches/overhead.rs` calls its
//! global instance.
//!
//! The call depth of the measured allocation equals memprof's capture depth
//! (`MEMPROF_STACK_DEPTH`, default 5), so "depth 32" means memprof walks 32 frames of the caller;
//! dhat-rs always walks the whole stack. `scripts/compare.py` runs it at depths 5, 16 and 32, in
//! a default build (DWARF unwinder) and a frame-pointer build.
//!
//! `MEMPROF_STACK_DEPTH=16 cargo bench --bench peers`

use divan::{Bencher, black_box};
use std::alloc::{GlobalAlloc, Layout, System};

#[global_allocator]
static DHAT: dhat::Alloc = dhat::Alloc;

/// memprof over `System`, called directly.
static MEMPROF: memprof::MemProf = memprof::MemProf::new();

const LAYOUT: Layout = match Layout::from_size_align(64, 8) {
    Ok(layout) => layout,
    Err(_) => panic!("valid layout"),
};

fn main() {
    let config = memprof::config::get();
    println!(
        "memprof: unwinder {:?}, stack depth {}",
        config.unwinder, config.stack_depth
    );
    let profiler = dhat::Profiler::builder()
        .file_name(std::env::temp_dir().join("peers-dhat-heap.json"))
        .build();
    divan::main();
    drop(profiler);
}

/// The call depth of every bench: memprof's capture depth.
fn depth() -> [usize; 1] {
    [memprof::config::get().stack_depth]
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

#[divan::bench(args = depth())]
fn alloc_free_system(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || pair(&System)));
}

#[divan::bench(args = depth())]
fn alloc_free_memprof(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || pair(&MEMPROF)));
}

#[divan::bench(args = depth())]
fn alloc_free_dhat(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || pair(&DHAT)));
}

#[divan::bench(args = depth())]
fn realloc_system(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || round_trip(&System)));
}

#[divan::bench(args = depth())]
fn realloc_memprof(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || round_trip(&MEMPROF)));
}

#[divan::bench(args = depth())]
fn realloc_dhat(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || round_trip(&DHAT)));
}
