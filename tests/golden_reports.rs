//! The Markdown and TSV renderers against golden files built from a synthetic snapshot.

mod common;

use memprof::{Frame, LiveBlock, Report, ReportOptions, ReturnAddress, Snapshot, StackId};
use std::collections::HashMap;

use common::{frame, stack};

/// Four call sites: one above a thousand blocks, one with backticks in its frame, one below the
/// default `min_bytes`, and two raw stacks that print the same context (one group).
fn synthetic() -> (Snapshot, HashMap<ReturnAddress, Vec<Frame>>) {
    let mut symbols = HashMap::new();
    let alloc = "/rustc/0/library/alloc/src/alloc.rs";
    symbols.insert(
        ReturnAddress(0x10),
        vec![frame("memprof::hooks::record_alloc", "src/hooks.rs", 75, 9)],
    );
    symbols.insert(
        ReturnAddress(0x20),
        vec![frame("__rustc::__rust_alloc", "src/main.rs", 3, 1)],
    );
    symbols.insert(
        ReturnAddress(0x30),
        vec![
            frame(
                "alloc::raw_vec::RawVecInner<A>::try_allocate_in",
                alloc,
                10,
                5,
            ),
            frame("alloc::vec::Vec<T>::with_capacity", alloc, 20, 9),
        ],
    );
    symbols.insert(
        ReturnAddress(0x40),
        vec![frame("app::build_index", "src/index.rs", 12, 5)],
    );
    symbols.insert(
        ReturnAddress(0x41),
        vec![frame("app::build_index", "src/index.rs", 12, 5)],
    );
    symbols.insert(
        ReturnAddress(0x50),
        vec![frame("app::main", "src/main.rs", 30, 0)],
    );
    symbols.insert(
        ReturnAddress(0x60),
        vec![frame("app::Parser::`quoted`", "src/``parse``.rs", 7, 0)],
    );
    symbols.insert(
        ReturnAddress(0x70),
        vec![frame("app::tiny", "src/tiny.rs", 0, 0)],
    );
    let stacks = vec![
        stack(&[0x10, 0x20, 0x30, 0x40, 0x50], 2000, 16_000_000),
        stack(&[0x10, 0x20, 0x30, 0x41, 0x50], 10, 80_000),
        stack(&[0x10, 0x20, 0x60, 0x50], 3, 3000),
        stack(&[0x10, 0x20, 0x70, 0x50], 1, 100),
        stack(&[0x10, 0x20, 0x99], 1, 2048),
    ];
    let blocks = common::blocks(&[
        (0, 8000, 1200),
        (1, 8000, 2),
        (2, 1000, 3),
        (3, 100, 1),
        (4, 2048, 1),
    ]);
    (Snapshot::from_parts(blocks, stacks, 0), symbols)
}

fn render(options: &ReportOptions) -> (String, String) {
    let (snapshot, mut symbols) = synthetic();
    let report = Report::live(&snapshot, &mut symbols, options);
    let mut markdown = Vec::new();
    report.write_markdown(&mut markdown).unwrap();
    let mut tsv = Vec::new();
    report.write_tsv(&mut tsv).unwrap();
    (
        String::from_utf8(markdown).unwrap(),
        String::from_utf8(tsv).unwrap(),
    )
}

#[test]
fn default_options() {
    let (markdown, tsv) = render(&ReportOptions::default());
    common::golden("report_default.md", &markdown);
    common::golden("report_default.tsv", &tsv);
}

#[test]
fn everything_shown() {
    let (markdown, tsv) = render(&ReportOptions::default().min_bytes(0).depth(1));
    common::golden("report_all_depth1.md", &markdown);
    common::golden("report_all_depth1.tsv", &tsv);
}

#[test]
fn nothing_above_the_cut() {
    let (markdown, tsv) = render(&ReportOptions::default().min_bytes(u64::MAX));
    assert_eq!(
        markdown,
        "| Allocations | Total size | Context |\n|------------:|-----------:|---------|\n"
    );
    assert_eq!(tsv, "0\n");
}

#[test]
fn diff_between_snapshots() {
    let (later, mut symbols) = synthetic();
    // The earlier snapshot: the big site had 200 blocks fewer, the backticked one 3 more, and the
    // `???` site did not exist yet.
    let mut blocks: Vec<LiveBlock> = later
        .blocks
        .iter()
        .filter(|b| b.stack != StackId(4))
        .skip(200)
        .copied()
        .collect();
    for i in 0..3 {
        blocks.push(LiveBlock {
            address: 0x9000_0000 + i * 0x1000,
            size: 1000,
            stack: StackId(2),
            tag: 0,
        });
    }
    let earlier = Snapshot::from_parts(blocks, later.stacks.clone(), 0);
    let diff = memprof::DiffReport::new(
        &later.diff(&earlier),
        &mut symbols,
        &ReportOptions::default(),
    );
    let mut markdown = Vec::new();
    diff.write_markdown(&mut markdown).unwrap();
    let mut tsv = Vec::new();
    diff.write_tsv(&mut tsv).unwrap();
    common::golden("diff_default.md", &String::from_utf8(markdown).unwrap());
    common::golden("diff_default.tsv", &String::from_utf8(tsv).unwrap());
}
