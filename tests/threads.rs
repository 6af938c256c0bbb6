//! More threads than cores allocating and freeing at once: no deadlock, no lost free, totals
//! balance.

use memprof::HeapStats;
use std::sync::Barrier;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

const THREADS: usize = 6;
const ROUNDS: usize = 50_000;
const KEPT: usize = 100;

#[inline(never)]
fn churn(seed: usize) -> Vec<Vec<u8>> {
    let mut kept = Vec::with_capacity(KEPT);
    for i in 0..ROUNDS {
        let size = 16 + (seed * 31 + i * 7) % 512;
        let block = vec![1u8; size];
        if i % (ROUNDS / KEPT) == 0 {
            kept.push(block);
        }
    }
    kept
}

#[test]
fn threads_balance() {
    let barrier = Barrier::new(THREADS);
    let before = HeapStats::get();
    let kept: Vec<Vec<Vec<u8>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    churn(t)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let kept_bytes: u64 = kept.iter().flatten().map(|b| b.capacity() as u64).sum();
    let during = HeapStats::get();
    assert!(during.total_blocks - before.total_blocks >= (THREADS * ROUNDS) as u64);
    // Live now: at least what the threads kept (plus the small vectors holding them).
    assert!(during.live_blocks >= before.live_blocks + (THREADS * KEPT) as u64);
    assert!(during.live_bytes >= before.live_bytes + kept_bytes);

    // The snapshot agrees with itself: per-stack live counts sum to the totals.
    let snapshot = memprof::Snapshot::take();
    let per_stack: u64 = snapshot.stacks.iter().map(|s| s.live_bytes).sum();
    assert_eq!(per_stack, snapshot.stats.live_bytes);
    assert_eq!(snapshot.blocks.len() as u64, snapshot.stats.live_blocks);

    drop(kept);
    drop(snapshot);
    let after = HeapStats::get();
    // Everything the threads allocated is freed: the live heap is back where it started, give or
    // take the scoped threads' own bookkeeping (a few small blocks std keeps per thread).
    assert!(
        after.live_blocks <= before.live_blocks + 2 * THREADS as u64,
        "{before:?} -> {after:?}"
    );
    assert!(
        after.live_bytes <= before.live_bytes + 4096,
        "{before:?} -> {after:?}"
    );
}
