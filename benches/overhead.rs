//! Overhead per allocation: an alloc+free pair, a realloc round trip and a block grown by 255
//! reallocs through plain `System` and through memprof, at several call depths, in the same run so the ratios hold on a noisy
//! machine. The capture depth comes from `MEMPROF_STACK_DEPTH`; the walker from the build
//! (`RUSTFLAGS="-C force-frame-pointers=yes"` for the frame-pointer walk).
//!
//! `cargo bench -p memprof-bench --bench overhead`

mod common;

use common::{at_depth, growth, pair, round_trip};
use divan::Bencher;
use std::alloc::System;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

const DEPTHS: [usize; 3] = [5, 16, 32];

fn main() {
    println!(
        "memprof: unwinder {:?}, stack depth {}",
        memprof::Config::current().unwinder,
        memprof::Config::current().stack_depth
    );
    divan::main();
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

#[divan::bench(args = DEPTHS)]
fn realloc_growth_system(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || growth(&System)));
}

#[divan::bench(args = DEPTHS)]
fn realloc_growth_memprof(bencher: Bencher, depth: usize) {
    bencher.bench_local(|| at_depth(depth, &mut || growth(&GLOBAL)));
}
