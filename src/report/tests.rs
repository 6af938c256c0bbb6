//! The per-type logs and the mermaid object graph, rendered from a synthetic heap and compared
//! with golden files (`MEMPROF_BLESS=1` rewrites them).
//!
//! The heap: three `app::C` objects in a `Vec<app::B>` buffer, owned by an `app::A`; a fourth `C`
//! in a `HashMap` table that also points back to the `A`; a `String`; blocks of unknown type
//! (one in a cycle through the `A` and the table); and a block tagged `app::Tagged` explicitly.

// Shared with the integration tests, where its function is `pub`.
#[allow(unreachable_pub)]
#[path = "../../tests/common/golden.rs"]
mod golden;

use super::ReportOptions;
use super::mermaid;
use super::types::{trace, write, write_trace};
use crate::address::ReturnAddress;
use crate::address::StackId;
use crate::frames::Frame;
use crate::object_graph::{Heap, Reference};
use crate::snapshot::{LiveBlock, Snapshot, StackSummary};
use crate::types::{self, Typing};
use std::collections::HashMap;
use std::sync::Arc;

const BOXED: &str = "/rustc/abc/library/alloc/src/boxed.rs";
const RAW_VEC: &str = "/rustc/abc/library/alloc/src/raw_vec/mod.rs";

/// A synthetic frame with a function, a file and a position.
fn frame(function: &str, file: &str, line: u32, column: u32) -> Frame {
    Frame {
        function: Some(function.into()),
        file: Some(file.into()),
        line,
        column,
    }
}

type Resolver = HashMap<ReturnAddress, Vec<Frame>>;

fn resolver() -> Resolver {
    let main = frame("app::main", "src/main.rs", 40, 5);
    let entries = [
        (
            0x1000,
            vec![
                frame("alloc::boxed::box_new_uninit", BOXED, 248, 18),
                frame("<alloc::boxed::Box<app::C>>::new", BOXED, 286, 19),
                frame("app::make_c", "src/main.rs", 10, 5),
            ],
        ),
        (
            0x1100,
            vec![
                frame(
                    "<alloc::raw_vec::RawVecInner>::finish_grow",
                    RAW_VEC,
                    555,
                    28,
                ),
                frame(
                    "<alloc::raw_vec::RawVec<app::B>>::grow_one",
                    RAW_VEC,
                    188,
                    29,
                ),
                frame(
                    "<alloc::vec::Vec<app::B>>::push",
                    "/rustc/abc/library/alloc/src/vec/mod.rs",
                    992,
                    22,
                ),
                frame("app::make_bs", "src/main.rs", 15, 9),
            ],
        ),
        (
            0x1200,
            vec![
                frame("<alloc::boxed::Box<app::A>>::new", BOXED, 286, 19),
                frame("app::make_a", "src/main.rs", 20, 5),
            ],
        ),
        (
            0x1300,
            vec![
                frame("<alloc::raw_vec::RawVec<u8>>::reserve", RAW_VEC, 340, 29),
                frame(
                    "<alloc::string::String>::push_str",
                    "/rustc/abc/library/alloc/src/string.rs",
                    1102,
                    18,
                ),
                frame("app::name", "src/main.rs", 25, 7),
            ],
        ),
        (
            0x1400,
            vec![
                frame(
                    "<hashbrown::raw::RawTable<(u64, app::C)>>::reserve_rehash::<h>",
                    "/rust/deps/hashbrown-0.16.1/src/raw/mod.rs",
                    1013,
                    24,
                ),
                frame(
                    "<std::collections::hash::map::HashMap<u64, app::C>>::insert",
                    "/rustc/abc/library/std/src/collections/hash/map.rs",
                    1296,
                    19,
                ),
                frame("app::index", "src/main.rs", 30, 11),
            ],
        ),
        (0x1500, vec![frame("app::raw_block", "src/main.rs", 35, 13)]),
        (
            0x1600,
            vec![
                frame("<alloc::boxed::Box<app::C>>::new", BOXED, 286, 19),
                frame("app::make_c_elsewhere", "src/main.rs", 50, 5),
            ],
        ),
        (0x2000, vec![main]),
        (0x2001, vec![frame("app::main", "src/main.rs", 41, 5)]),
    ];
    entries
        .into_iter()
        .map(|(address, frames)| (ReturnAddress(address), frames))
        .collect()
}

/// The blocks, their stacks and the references between them.
fn heap() -> Heap {
    let stack = |frames: &[usize], allocated_blocks: u64| StackSummary {
        frames: frames.iter().map(|&a| ReturnAddress(a)).collect(),
        allocated_blocks,
        allocated_bytes: allocated_blocks * 64,
        ..StackSummary::default()
    };
    let stacks = vec![
        stack(&[0x1000, 0x2000], 10), // 0: app::C
        stack(&[0x1100, 0x2000], 4),  // 1: [app::B]
        stack(&[0x1200, 0x2000], 1),  // 2: app::A
        stack(&[0x1300, 0x2000], 6),  // 3: String
        stack(&[0x1400, 0x2000], 3),  // 4: HashMap<u64, app::C>
        stack(&[0x1500, 0x2000], 7),  // 5: unknown
        stack(&[0x1600, 0x2001], 2),  // 6: app::C, elsewhere
    ];
    let block = |address: usize, size: u64, stack: u32, tag: u32| LiveBlock {
        address,
        size,
        stack: StackId(stack),
        tag,
    };
    let blocks = vec![
        block(0x10000, 32, 0, 0),
        block(0x10100, 32, 0, 0),
        block(0x10200, 32, 0, 0),
        block(0x10300, 32, 6, 0),
        block(0x20000, 96, 1, 0),
        block(0x30000, 48, 2, 0),
        block(0x40000, 24, 3, 0),
        block(0x50000, 160, 4, 0),
        block(0x60000, 96, 5, 0),
        block(0x60100, 96, 5, 0),
        block(0x60200, 40, 5, 0),
        block(0x70000, 64, 5, 1),
    ];
    let reference = |from, offset, to| Reference { from, offset, to };
    let references = [
        reference(0x20000, 8, 0x10000),
        reference(0x20000, 40, 0x10100),
        reference(0x20000, 72, 0x10200),
        reference(0x30000, 16, 0x20000),
        reference(0x30000, 32, 0x40000),
        reference(0x30000, 40, 0x60000),
        reference(0x50000, 8, 0x30000),
        reference(0x50000, 64, 0x10300),
        reference(0x60000, 0, 0x50000),
        reference(0x60200, 0, 0x60000),
        reference(0x70000, 8, 0x10000),
    ];
    Heap::from_parts(Snapshot::from_parts(blocks, stacks, 0), &references)
}

const TAGS: &[&str] = &["app::Tagged"];
const TAG_COUNTS: &[(u32, StackId, u64)] = &[(1, StackId(5), 1)];

fn typed() -> (Heap, Typing, Vec<Option<Arc<str>>>) {
    let heap = heap();
    let stack_types = types::infer_stacks(&heap.snapshot, &mut resolver(), |_| true);
    let typing = Typing::new(&heap.snapshot, &stack_types, TAGS);
    (heap, typing, stack_types)
}

fn render(f: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
    let mut out = Vec::new();
    f(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn object_counts() {
    let (_, typing, _) = typed();
    golden::golden(
        "types_counts.tsv",
        &render(|out| write(&typing.counts(), out)),
    );
}

#[test]
fn object_sizes() {
    let (heap, typing, _) = typed();
    golden::golden(
        "types_sizes.tsv",
        &render(|out| write(&heap.sizes(&typing), out)),
    );
}

#[test]
fn tallies_over_the_run() {
    let (heap, _, stack_types) = typed();
    let rows = types::tallies(&heap.snapshot, &stack_types, TAGS, TAG_COUNTS);
    golden::golden("types_tallies.tsv", &render(|out| write(&rows, out)));
}

#[test]
fn contexts_of_one_type() {
    let (heap, _, stack_types) = typed();
    let trace = |min_count| {
        trace(
            &heap.snapshot,
            &stack_types,
            TAGS,
            TAG_COUNTS,
            "app::C",
            &mut resolver(),
            &ReportOptions::default(),
            min_count,
        )
    };
    golden::golden(
        "types_trace.tsv",
        &render(|out| write_trace(&trace(1), out)),
    );
    golden::golden(
        "types_trace_min3.tsv",
        &render(|out| write_trace(&trace(3), out)),
    );
}

#[test]
fn graph_of_c() {
    let (heap, typing, _) = typed();
    let graph = heap.graph(&typing, "app::C", 10, 5);
    golden::golden(
        "object_graph_c.mmd",
        &render(|out| mermaid::write(&graph, out)),
    );
}

#[test]
fn graph_of_c_limited() {
    let (heap, typing, _) = typed();
    let graph = heap.graph(&typing, "app::C", 2, 1);
    golden::golden(
        "object_graph_c_limit2_level1.mmd",
        &render(|out| mermaid::write(&graph, out)),
    );
}

#[test]
fn graph_of_an_unknown_type_and_of_a_generic_one() {
    let (heap, typing, _) = typed();
    let unknown = heap.graph(&typing, "(unknown, 96 B)", 0, 0);
    let map = heap.graph(
        &typing,
        "std::collections::hash::map::HashMap<u64, app::C>",
        0,
        0,
    );
    let both = render(|out| {
        mermaid::write(&unknown, out)?;
        mermaid::write(&map, out)
    });
    golden::golden("object_graph_unknown_and_map.mmd", &both);
}
