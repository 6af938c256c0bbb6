//! Sampling (`MemProf::sample_interval`): reports are unbiased estimates, marked as such, and frees
//! of blocks that were never sampled leave the table alone.

mod common;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new().sample_interval(8192);

#[inline(never)]
#[allow(clippy::vec_box, reason = "the boxes are the allocations under test")]
fn many_small() -> Vec<Box<[u8; 64]>> {
    let boxes = (0..300_000).map(|_| Box::new([0u8; 64])).collect();
    std::hint::black_box(boxes)
}

#[inline(never)]
fn few_large() -> Vec<Vec<u8>> {
    let buffers = (0..50).map(|_| vec![1u8; 1 << 20]).collect();
    std::hint::black_box(buffers)
}

/// Relative error of an estimate.
fn error(estimate: u64, truth: u64) -> f64 {
    (estimate as f64 - truth as f64).abs() / truth as f64
}

#[test]
fn sampled_reports_estimate_without_bias() {
    let before = memprof::HeapStats::get();
    let small = many_small();
    let large = few_large();

    // 300,000 boxes of 64 bytes: about 2,300 samples; the estimate is within 6% (about 3 standard
    // deviations). Blocks of 1 MiB are sampled with probability ~1 and stand for themselves.
    let small_groups = common::groups_mentioning("sampling::many_small", 16);
    let (blocks, bytes) = small_groups
        .iter()
        .filter(|g| g.context.iter().any(|f| f.contains("Box")))
        .fold((0, 0), |(b, s), g| (b + g.blocks, s + g.bytes));
    assert!(
        error(blocks, 300_000) < 0.06,
        "{blocks} blocks: {small_groups:#?}"
    );
    assert!(error(bytes, 300_000 * 64) < 0.06, "{bytes} bytes");
    let large_groups = common::groups_mentioning("sampling::few_large", 16);
    let large_bytes: u64 = large_groups.iter().map(|g| g.bytes).sum();
    assert!(error(large_bytes, 50 << 20) < 0.01, "{large_groups:#?}");

    let stats = memprof::HeapStats::get();
    let truth = 300_000 * 64 + (50 << 20);
    assert!(
        error(stats.live_bytes - before.live_bytes, truth) < 0.06,
        "{stats:?}"
    );
    // Far fewer blocks are held than were allocated.
    let snapshot = memprof::Snapshot::take();
    assert_eq!(snapshot.sample_interval, 8192);
    assert!(snapshot.blocks.len() < 10_000, "{}", snapshot.blocks.len());

    // The Markdown report says its numbers are estimates.
    let mut markdown = Vec::new();
    memprof::pretty_log_allocations(&mut markdown).unwrap();
    let markdown = String::from_utf8(markdown).unwrap();
    assert!(
        markdown.contains("Estimates: one allocation in every 8,192 bytes"),
        "{markdown}"
    );
    // ... and how many sampled blocks they rest on.
    assert!(markdown.contains("sampled live blocks"), "{markdown}");

    // Frees of sampled and unsampled blocks alike: the live estimate goes back to where it was.
    drop(small);
    drop(large);
    let after = memprof::HeapStats::get();
    assert!(common::groups_mentioning("sampling::many_small", 16).is_empty());
    assert!(
        after.live_bytes <= before.live_bytes + 64 * 1024,
        "{before:?} -> {after:?}"
    );
    assert!(
        error(after.total_bytes - before.total_bytes, truth) < 0.06,
        "{after:?}"
    );
}
