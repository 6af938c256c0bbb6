//! The allocation scenario of dhat-rs's own heap test (`tests/heap.rs` there), counted with a
//! [`Scope`], for the test binaries that include this file.

use memprof::{Scope, ScopeStats};

/// Blocks allocated before the scope and freed or grown in it, a 1,000 B and a 200 B block, a
/// `reserve(200)` that makes the peak, and ten 1-byte temporaries. The figures are dhat-rs's,
/// which are the truth: the scope must count the code under test, and nothing of its own or of
/// its assertions.
pub fn dhat_heap_scenario() {
    let v1 = vec![1u32, 2, 3, 4];
    let v2 = vec![1u32, 2, 3, 4];
    let mut v3 = vec![1u32, 2, 3, 4];

    let scope = Scope::start();
    assert_eq!(scope.stats(), ScopeStats::default());
    // Allocated before, freed during: not the scope's.
    drop(v1);
    // Allocated before, grown during: a new block of 32 B.
    v3.push(5);
    let v5 = vec![0u8; 1000];
    let mut v6 = vec![0u8; 200];
    // 200 B freed, 400 B allocated: the peak, 32 + 1,000 + 400.
    v6.reserve(200);
    drop(v5);
    let mut x = 0usize;
    for i in 0..std::hint::black_box(10u8) {
        #[allow(
            clippy::useless_vec,
            reason = "the 1-byte block on the heap is the point"
        )]
        let v7 = vec![i];
        x += v7.as_ptr() as usize;
    }
    assert_ne!(x, 0);

    let stats = scope.stats();
    assert_eq!(
        (stats.allocated_blocks, stats.allocated_bytes),
        (14, 1642),
        "{stats:?}"
    );
    assert_eq!((stats.live_blocks, stats.live_bytes), (2, 432), "{stats:?}");
    assert_eq!(stats.peak_bytes, 1432, "{stats:?}");
    assert_eq!(
        (stats.freed_blocks, stats.freed_bytes),
        (12, 1210),
        "{stats:?}"
    );
    scope.assert_max_allocated_blocks(14);
    scope.assert_max_allocated_bytes(1642);
    scope.assert_max_live_bytes(432);
    scope.assert_max_peak_bytes(1432);
    // The assertions allocated nothing the scope counts.
    assert_eq!(scope.stats(), stats);

    // The tables of where the blocks came from add up to the counts, and making them counts
    // nothing.
    assert_eq!(report_totals(&scope.allocated_sites()), (14, 1642));
    assert_eq!(report_totals(&scope.live_sites()), (2, 432));
    assert_eq!(scope.stats(), stats);

    // So does a failing assertion's table. (Only one: the panic's own work, a backtrace
    // printed, is the thread's and would count in what follows.)
    let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scope.assert_max_live_bytes(0)
    }))
    .expect_err("432 B are live");
    let message = failure.downcast_ref::<String>().expect("a message");
    assert!(
        message.contains("measured 432 bytes in 2 blocks"),
        "{message}"
    );
    assert_eq!(table_totals(message), (2, 432), "{message}");
    drop((v2, v3, v6));
}

/// The blocks and bytes of a report's groups, added up.
fn report_totals(report: &memprof::Report) -> (u64, u64) {
    report.groups.iter().fold((0, 0), |(blocks, bytes), g| {
        (blocks + g.blocks, bytes + g.bytes)
    })
}

/// The sums of the Allocations and Total size columns of a failure message's table.
fn table_totals(message: &str) -> (u64, u64) {
    let mut totals = (0, 0);
    for row in message.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if let (Ok(blocks), Ok(bytes)) = (
            cells[1].replace(',', "").parse::<u64>(),
            cells[2].replace(',', "").parse::<u64>(),
        ) {
            totals.0 += blocks;
            totals.1 += bytes;
        }
    }
    totals
}
