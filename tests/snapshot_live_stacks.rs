//! A snapshot of the live heap holds the stacks of its live blocks, not every stack seen: after
//! thousands of distinct stacks whose blocks are all freed, a report costs what is live.

use std::hint::black_box;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Distinct call paths made and freed.
const PATHS: u64 = 4096;

/// Goes 12 frames down through two functions chosen by the bits of `path`, then calls `f`.
#[inline(never)]
fn left(depth: u32, path: u64, f: &mut dyn FnMut()) {
    match (depth, path & 1) {
        (0, _) => f(),
        (_, 0) => left(black_box(depth - 1), path >> 1, f),
        _ => right(black_box(depth - 1), path >> 1, f),
    }
    black_box(());
}

/// The other half of [`left`].
#[inline(never)]
fn right(depth: u32, path: u64, f: &mut dyn FnMut()) {
    match (depth, path & 1) {
        (0, _) => f(),
        (_, 0) => left(black_box(depth - 1), path >> 1, f),
        _ => right(black_box(depth - 1), path >> 1, f),
    }
    black_box(());
}

#[inline(never)]
fn kept(n: u64) -> Box<[u64; 5]> {
    black_box(Box::new([n; 5]))
}

#[test]
fn a_live_snapshot_holds_the_live_stacks_only() {
    // Stacks 32 frames deep, so that the call paths are told apart: set before the profiler
    // starts, in a child running this test again.
    if std::env::var("MEMPROF_STACK_DEPTH").as_deref() != Ok("32") {
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_live_snapshot_holds_the_live_stacks_only",
                "--nocapture",
            ])
            .env("MEMPROF_STACK_DEPTH", "32")
            .output()
            .unwrap();
        assert!(output.status.success(), "the child failed: {output:?}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("1 passed"), "{stdout}");
        return;
    }
    let live: Vec<Box<[u64; 5]>> = (0..3).map(kept).collect();
    let mut gone = Vec::new();
    for path in 0..PATHS {
        left(12, path, &mut || gone.push(black_box(Box::new(path))));
    }
    drop(black_box(gone));

    let snapshot = memprof::Snapshot::take();
    let all = memprof::Snapshot::take_all();
    // The three blocks of `kept`, and whatever the harness keeps live (its threads' names, the
    // vector of `live`): a handful of stacks, not the thousands seen.
    assert!(
        snapshot.stacks.len() < 50,
        "{} stacks in a snapshot of {} live blocks",
        snapshot.stacks.len(),
        snapshot.blocks.len()
    );
    assert!(all.stacks.len() as u64 > PATHS, "{}", all.stacks.len());
    assert_eq!(snapshot.blocks.len(), all.blocks.len());
    // Every live block names a stack of the snapshot, with its live counts and what it
    // allocated over the run, as the snapshot of every stack has them.
    for block in &snapshot.blocks {
        let stack = snapshot.stack(block.stack);
        let twin = all
            .blocks
            .iter()
            .find(|b| b.address == block.address)
            .map(|b| all.stack(b.stack))
            .expect("the same block in both");
        assert_eq!(stack, twin);
    }
    let ours = live.iter().map(|b| &**b as *const _ as usize);
    for address in ours {
        let block = snapshot.blocks.iter().find(|b| b.address == address);
        let stack = snapshot.stack(block.expect("a live block is in the snapshot").stack);
        assert_eq!((stack.live_blocks, stack.live_bytes), (3, 120));
        assert_eq!((stack.allocated_blocks, stack.allocated_bytes), (3, 120));
    }

    // A diff of two live snapshots: the stack whose blocks were all freed in between shrinks to
    // nothing, though the later snapshot no longer holds it.
    drop(black_box(live));
    let later = memprof::Snapshot::take();
    let diff = later.diff(&snapshot);
    let shrunk: Vec<_> = diff
        .stacks
        .iter()
        .filter(|d| (d.live_blocks, d.live_bytes) == (-3, -120))
        .collect();
    assert_eq!(shrunk.len(), 1, "{diff:#?}");
}
