//! A helper whose last act is a call into the standard library is named in its blocks' stacks,
//! in optimized builds above all: `grow` ends in `Vec::reserve`, which an optimized build turns
//! into a jump to `RawVec`'s out-of-line growth function, leaving no frame of `grow` on the stack
//! when the allocator runs. Its caller's return address follows `call grow`, which is how memprof
//! recovers it. Checked in the context of one stack, in the report's groups (`log_allocations`
//! and the other reports group stacks the same way) and in the folded export (one call-site model
//! for every export). `scripts/test.sh` runs it in release builds with both unwinders.

use std::hint::black_box;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// The size the grown block gets: 7 bytes, then room for 4321 more.
const GROWN: u64 = 7 + 4321;

/// Ends in a call (no `black_box` here, which would keep a frame for its slot): an optimized
/// build jumps to the growth function.
#[inline(never)]
fn grow(v: &mut Vec<u8>, additional: usize) {
    v.reserve(additional);
}

/// Grows a vector through `grow`, and keeps it.
#[inline(never)]
fn build() -> Vec<u8> {
    let mut v = black_box(vec![1u8; 7]);
    grow(&mut v, black_box(4321));
    black_box(v)
}

/// The function a frame string names: `file:line:col in 'function'`.
fn function(frame: &str) -> &str {
    frame
        .rsplit_once(" in '")
        .map_or("", |(_, f)| f.trim_end_matches('\''))
}

/// Whether a function is the standard library's, by its path.
fn is_std(function: &str) -> bool {
    let f = function.trim_start_matches('<');
    ["alloc::", "core::", "std::", "hashbrown::"]
        .iter()
        .any(|p| f.starts_with(p))
}

#[test]
fn tail_call_frames() {
    let kept = build();
    assert_eq!(kept.capacity() as u64, GROWN);
    let snapshot = memprof::Snapshot::take();
    let stacks: Vec<_> = snapshot
        .blocks
        .iter()
        .filter(|b| b.size == GROWN)
        .map(|b| b.stack)
        .collect();
    let [stack] = stacks.as_slice() else {
        panic!("one block of {GROWN} bytes expected: {stacks:?}");
    };
    let options = memprof::ReportOptions::default().min_bytes(0).depth(8);
    let (context, report, folded) = memprof::with_symbolizer(|symbolizer| {
        let context = memprof::context_of(&snapshot.stack(*stack).frames, symbolizer, &options);
        let report = memprof::Report::live(&snapshot, symbolizer, &options);
        let mut folded = Vec::new();
        let export = memprof::ExportOptions::default();
        memprof::export::write(
            memprof::export::Format::Folded,
            &snapshot,
            symbolizer,
            &export,
            &mut folded,
        )
        .unwrap();
        (context, report, String::from_utf8(folded).unwrap())
    });
    // Std's frames first, then `grow`, then its caller.
    let own: Vec<&str> = context
        .iter()
        .map(|f| function(f))
        .filter(|f| !is_std(f))
        .collect();
    assert_eq!(
        own.get(..2),
        Some(&["tail_call_frames::grow", "tail_call_frames::build"][..]),
        "{context:#?}"
    );
    // The report's group of the block has the same context.
    let group = report
        .groups
        .iter()
        .find(|g| g.bytes >= GROWN && g.context.iter().any(|f| f.contains("build")))
        .unwrap_or_else(|| panic!("no group of `build` in {:#?}", report.groups));
    assert_eq!(group.context, context, "{:#?}", report.groups);
    // The folded export's line of the block: `build;grow;...` (outermost first) with its bytes.
    let line = folded
        .lines()
        .find(|l| {
            l.rsplit_once(' ')
                .is_some_and(|(_, bytes)| bytes.parse::<u64>().is_ok_and(|b| b >= GROWN))
                && l.contains("tail_call_frames::build")
        })
        .unwrap_or_else(|| panic!("no line of `build` in:\n{folded}"));
    let frames: Vec<&str> = line.rsplit_once(' ').unwrap().0.split(';').collect();
    let build = frames
        .iter()
        .position(|f| f.contains("tail_call_frames::build"))
        .unwrap();
    assert!(
        frames
            .get(build + 1)
            .is_some_and(|f| f.contains("tail_call_frames::grow")),
        "`grow` after `build` expected in: {line}"
    );
    drop(kept);
}
