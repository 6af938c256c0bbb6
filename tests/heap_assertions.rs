//! Heap assertions from several tests of one binary running in parallel (under `cargo test`,
//! which runs a binary's tests on threads; and in one test that runs scoped workers on threads of
//! its own, whatever the runner): each scope sees its own thread's allocations only, exactly, and
//! a failing assertion says where the blocks came from.

#[path = "scope_scenario/mod.rs"]
mod scope_scenario;

mod common;

use common::{frame, stack};
use memprof::{Frame, Report, ReportOptions, ReturnAddress, Scope, Snapshot};
use std::collections::HashMap;
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

/// A known snapshot: three call sites of a program, one of them two stacks that print alike.
#[inline(never)]
fn synthetic_snapshot() -> (Snapshot, HashMap<ReturnAddress, Vec<Frame>>) {
    let vec = "/rustc/0/library/alloc/src/vec/mod.rs";
    let mut symbols = HashMap::new();
    for (address, frames) in [
        (
            0x10,
            vec![frame("__rustc::__rust_alloc", "src/alloc.rs", 3, 1)],
        ),
        (0x20, vec![frame("alloc::vec::Vec<T,A>::push", vec, 20, 9)]),
        (0x30, vec![frame("app::build_index", "src/index.rs", 12, 5)]),
        (0x31, vec![frame("app::build_index", "src/index.rs", 12, 5)]),
        (0x40, vec![frame("app::parse", "src/parse.rs", 7, 2)]),
        (0x50, vec![frame("app::main", "src/main.rs", 30, 0)]),
    ] {
        symbols.insert(ReturnAddress(address), frames);
    }
    let stacks = vec![
        stack(&[0x10, 0x20, 0x30, 0x50], 200, 160_000),
        stack(&[0x10, 0x20, 0x31, 0x50], 10, 8_000),
        stack(&[0x10, 0x40, 0x50], 3, 3_000),
    ];
    let blocks = common::blocks(&[(0, 800, 120), (1, 800, 2), (2, 1000, 3)]);
    (Snapshot::from_parts(blocks, stacks, 0), symbols)
}

/// The report's grouping: memprof's `Report::live`.
#[inline(never)]
fn group(snapshot: &Snapshot, symbols: &mut HashMap<ReturnAddress, Vec<Frame>>) -> Report {
    Report::live(snapshot, symbols, &ReportOptions::default().min_bytes(0))
}

/// The report's two renderings.
#[inline(never)]
fn render(report: &Report) -> (Vec<u8>, Vec<u8>) {
    let mut markdown = Vec::new();
    report.write_markdown(&mut markdown).unwrap();
    let mut tsv = Vec::new();
    report.write_tsv(&mut tsv).unwrap();
    (markdown, tsv)
}

/// Set in the child that checks the baseline with deep stacks.
const DEEP: &str = "MEMPROF_TEST_HEAP_ASSERTIONS_DEEP";

/// What memprof's report over a known snapshot allocates, per phase, against its baseline
/// (`tests/memprof/report_synthetic.txt`), exactly, while the other tests of this binary allocate
/// on their threads.
///
/// The report's allocations are made deep in memprof's own code, whose frames a report leaves
/// out and a walk does not count as the program's: at the default depth a walk can stop inside
/// them, before this file's frames (and stop elsewhere before the walks know which code is
/// whose), so the sites would be named by the standard library's code in the middle. So the
/// check runs in this binary run again with `MEMPROF_STACK_DEPTH=64`, every test of it on
/// libtest's threads at once; `MEMPROF_BLESS` passes through.
#[test]
fn a_report_over_a_synthetic_snapshot_keeps_its_baseline() {
    if std::env::var_os(DEEP).is_none() {
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .env(DEEP, "1")
            .env("MEMPROF_STACK_DEPTH", "64")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success()
                && stdout
                    .contains("test a_report_over_a_synthetic_snapshot_keeps_its_baseline ... ok"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    let scope = Scope::start();
    let (snapshot, mut symbols) = synthetic_snapshot();
    let report = group(&snapshot, &mut symbols);
    let (markdown, tsv) = render(&report);
    scope.assert_baseline("report_synthetic");
    // What was measured is the report it should be.
    assert_eq!(report.groups.len(), 2);
    assert_eq!(
        (report.groups[0].blocks, report.groups[0].bytes),
        (122, 97_600)
    );
    let markdown = String::from_utf8(markdown).unwrap();
    assert!(markdown.contains("| 122 | 97,600 |"), "{markdown}");
    assert!(String::from_utf8(tsv).unwrap().starts_with("2\n"));
}
