//! A report over many distinct deep stacks, every group under the threshold, holds little memory:
//! its grouping does not make the strings of every stack's context.
//!
//! The report runs on a synthetic snapshot (50,000 distinct stacks, 64 frames deep, one 16-byte
//! block each) under a counting allocator (not memprof), which gives the report's peak.

use memprof::{Frame, LiveBlock, ReportOptions, ReturnAddress, Snapshot, StackId, StackSummary};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes in use and their peak.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator as it came; the counters only watch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const STACKS: usize = 50_000;
const DEPTH: usize = 64;

/// Frame `level` of stack `index`: one of two call sites per level, chosen by a bit of `index`,
/// as a recursion that takes one of two paths at each level.
fn address(index: usize, level: usize) -> usize {
    0x1000 + (level * 2 + ((index >> (level % 16)) & 1)) * 16
}

#[test]
fn a_report_over_many_deep_stacks_stays_small() {
    let mut symbols: HashMap<ReturnAddress, Vec<Frame>> = HashMap::new();
    for level in 0..DEPTH {
        for side in 0..2 {
            let at = ReturnAddress(0x1000 + (level * 2 + side) * 16);
            symbols.insert(
                at,
                vec![Frame {
                    function: Some(format!(
                        "app::tree::descend_{}_{level}",
                        ["left", "right"][side]
                    )),
                    file: Some("src/tree/descend.rs".into()),
                    line: 100 + level as u32,
                    column: 9 + side as u32,
                }],
            );
        }
    }
    let stacks: Vec<StackSummary> = (0..STACKS)
        .map(|index| StackSummary {
            frames: (0..DEPTH)
                .map(|level| ReturnAddress(address(index, level)))
                .collect(),
            allocated_blocks: 1,
            allocated_bytes: 16,
            ..StackSummary::default()
        })
        .collect();
    let blocks: Vec<LiveBlock> = (0..STACKS)
        .map(|index| LiveBlock {
            address: 0x1000_0000 + index * 16,
            size: 16,
            stack: StackId(index as u32),
            tag: 0,
        })
        .collect();
    let snapshot = Snapshot::from_parts(blocks, stacks, 0);
    let options = ReportOptions::default().depth(DEPTH).min_bytes(1024);

    let before = IN_USE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let report = memprof::Report::live(&snapshot, &mut symbols, &options);
    let grown = PEAK.load(Ordering::Relaxed) - before;

    assert!(report.groups.is_empty(), "{} groups", report.groups.len());
    // The stacks' contexts as strings would take about 200 MB; as numbers, about 15 MB.
    assert!(
        grown < 64 << 20,
        "a report of {STACKS} stacks {DEPTH} deep, none shown, grew the heap by {} MB",
        grown >> 20
    );
}
