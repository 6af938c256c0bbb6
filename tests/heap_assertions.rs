//! Heap assertions from several tests of one binary running in parallel (under `cargo test`,
//! which runs a binary's tests on threads; and in one test that runs scoped workers on threads of
//! its own, whatever the runner): each scope sees its own thread's allocations only, exactly, and
//! a failing assertion says where the blocks came from.

#[path = "scope_scenario/mod.rs"]
mod scope_scenario;

use memprof::Scope;
use std::sync::Barrier;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn allocate_blocks(count: usize, size: usize) -> Vec<Vec<u8>> {
    let mut blocks = Vec::with_capacity(count);
    for _ in 0..count {
        blocks.push(vec![0u8; size]);
    }
    std::hint::black_box(blocks)
}

fn exact_counts_while_others_allocate(count: usize, size: usize) {
    let scope = Scope::start();
    for _ in 0..50 {
        drop(allocate_blocks(count, size));
    }
    let kept = allocate_blocks(count, size);
    let stats = scope.stats();
    // 51 rounds, each the outer vector plus `count` buffers; 50 rounds freed.
    assert_eq!(stats.allocated_blocks, 51 * (count as u64 + 1));
    assert_eq!(
        stats.allocated_bytes,
        51 * (count * size + count * 24) as u64
    );
    assert_eq!(stats.live_blocks, count as u64 + 1);
    assert_eq!(stats.live_bytes, (count * size + count * 24) as u64);
    assert_eq!(stats.peak_bytes, stats.live_bytes);
    scope.assert_max_allocated_blocks(51 * (count as u64 + 1));
    scope.assert_max_live_bytes(stats.live_bytes);
    drop(kept);
    scope.assert_no_leaks();
}

#[test]
fn first_of_three_in_parallel() {
    exact_counts_while_others_allocate(10, 100);
}

#[test]
fn second_of_three_in_parallel() {
    exact_counts_while_others_allocate(7, 1000);
}

#[test]
fn workers_on_threads_at_once() {
    let start = Barrier::new(4);
    std::thread::scope(|s| {
        for worker in 0..4 {
            let start = &start;
            s.spawn(move || {
                start.wait();
                exact_counts_while_others_allocate(3 + worker, 64 << worker);
            });
        }
    });
}

#[test]
fn a_leak_is_reported_with_its_site() {
    let scope = Scope::start();
    let leaked = allocate_blocks(3, 5000);
    let stats = scope.stats();
    assert_eq!((stats.live_blocks, stats.live_bytes), (4, 15_072));

    let failure =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scope.assert_no_leaks()))
            .expect_err("the leak must fail the assertion");
    let message = failure
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert!(
        message.contains("expected no block still live"),
        "{message}"
    );
    assert!(
        message.contains("measured 15072 bytes in 4 blocks"),
        "{message}"
    );
    assert!(
        message.contains("| Allocations | Total size | Context |"),
        "{message}"
    );
    let row = message
        .lines()
        .find(|l| l.contains("15,000"))
        .unwrap_or_else(|| panic!("{message}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[1..3], ["3", "15,000"], "{row}");
    assert!(
        row.contains("in 'heap_assertions::allocate_blocks'"),
        "{row}"
    );

    let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scope.assert_max_allocated_bytes(100)
    }))
    .expect_err("too many bytes");
    let message = failure.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("expected at most 100 bytes allocated in this scope, measured "),
        "{message}"
    );

    // Freeing the leak frees exactly its bytes for the scope (the panics above allocated too).
    let before = scope.stats();
    drop(leaked);
    let after = scope.stats();
    assert_eq!(before.live_bytes - after.live_bytes, 15_072);
    assert_eq!(after.freed_blocks - before.freed_blocks, 4);
}

/// dhat-rs's heap test, counted by a scope on a libtest thread while the other tests run.
#[test]
fn dhat_heap_scenario_counts_exactly() {
    scope_scenario::dhat_heap_scenario();
}
