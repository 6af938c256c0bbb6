//! Overhead per allocation against a peer: an alloc+free pair, a realloc round trip and a block
//! grown by 255 reallocs, through plain `System`, through memprof and through dhat-rs, in the
//! same process and the same run, so the ratios hold on a noisy machine.
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
//! `MEMPROF_STACK_DEPTH=16 cargo bench -p memprof-bench --bench peers`

mod common;

use common::{at_depth, growth, pair, round_trip};
use divan::Bencher;
use std::alloc::System;

#[global_allocator]
static DHAT: dhat::Alloc = dhat::Alloc;

/// memprof over `System`, called directly.
static MEMPROF: memprof::MemProf = memprof::MemProf::new();

fn main() {
    let config = memprof::Config::current();
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
    [memprof::Config::current().stack_depth]
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

#[divan::bench(args = depth())]
fn realloc_growth_system(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || growth(&System)));
}

#[divan::bench(args = depth())]
fn realloc_growth_memprof(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || growth(&MEMPROF)));
}

#[divan::bench(args = depth())]
fn realloc_growth_dhat(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || growth(&DHAT)));
}
