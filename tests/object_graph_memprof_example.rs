//! MemProf's own example of an object graph, in Rust: a root holds an `A`, the `A` holds a
//! `Vec<B>`, and each `B` holds a `Box<C>`. The graph of `C` must show the `C`s, the `Vec`'s
//! buffer pointing to each (level 0), the `A` pointing to the buffer (level 1) and the root
//! pointing to the `A` (level 2), and nothing else.
//!
//! The scan is conservative: a stale word left in a live block by a value moved out of it can
//! equal the address of a block freed since and reused. Each type here has a size the test
//! harness does not use (the padding fields), so none of its blocks takes over such an address.

use std::collections::BTreeSet;
use std::mem::{offset_of, size_of};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

struct C {
    value: u64,
    padding: [u8; 200],
}

struct B {
    id: u64,
    c: Box<C>,
    padding: [u8; 72],
}

struct A {
    serial: u64,
    bs: Vec<B>,
    padding: [u8; 136],
}

struct Root {
    label: u64,
    a: Box<A>,
    padding: [u8; 264],
}

const BS: u64 = 4;

#[inline(never)]
fn build() -> Box<Root> {
    let bs: Vec<B> = (0..BS)
        .map(|id| B {
            id,
            c: Box::new(C {
                value: id * 10,
                padding: [0; 200],
            }),
            padding: [0; 72],
        })
        .collect();
    Box::new(Root {
        label: 1,
        a: Box::new(A {
            serial: 2,
            bs,
            padding: [0; 136],
        }),
        padding: [0; 264],
    })
}

/// One edge line: (from, from's type, field offset, level, to).
type Edge = (usize, String, u64, u64, usize);

fn parse(graph: &str) -> (BTreeSet<(usize, String)>, BTreeSet<Edge>) {
    let hex = |s: &str| usize::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap();
    let mut lines = graph.lines();
    assert_eq!(lines.next(), Some("graph LR"), "{graph}");
    let mut nodes = BTreeSet::new();
    let mut edges = BTreeSet::new();
    for line in lines {
        let line = line.strip_prefix("  ").expect("indented");
        let (node, rest) = line.split_once("[\"").expect("a node");
        let (label, rest) = rest.split_once("\"]").expect("a label");
        let (address, name) = label.split_once(' ').expect("address and type");
        assert_eq!(hex(node), hex(address), "{line}");
        let name = name.replace("#lt;", "<").replace("#gt;", ">");
        if rest.is_empty() {
            nodes.insert((hex(node), name));
        } else {
            let rest = rest.strip_prefix(" --@(field ").expect("an edge");
            let (field, rest) = rest.split_once("),").unwrap();
            let (level, to) = rest.split_once("--> ").unwrap();
            edges.insert((
                hex(node),
                name,
                field.parse().unwrap(),
                level.parse().unwrap(),
                hex(to),
            ));
        }
    }
    (nodes, edges)
}

#[test]
fn graph_of_c_shows_its_referrers_level_by_level() {
    let root = build();
    let mut out = Vec::new();
    memprof::pretty_log_object_graph::<C>(&mut out).unwrap();
    let graph = String::from_utf8(out).unwrap();
    let (nodes, edges) = parse(&graph);

    let a: &A = &root.a;
    let buffer = a.bs.as_ptr() as usize;
    let a_block = a as *const A as usize;
    let root_block = &*root as *const Root as usize;
    let name = |n: &str| n.to_owned();

    let expected_nodes: BTreeSet<(usize, String)> =
        a.bs.iter()
            .map(|b| (&*b.c as *const C as usize, name(std::any::type_name::<C>())))
            .collect();
    assert_eq!(nodes, expected_nodes, "{graph}");

    let mut expected: BTreeSet<Edge> =
        a.bs.iter()
            .enumerate()
            .map(|(i, b)| {
                (
                    buffer,
                    name(std::any::type_name::<[B]>()),
                    (i * size_of::<B>() + offset_of!(B, c)) as u64,
                    0,
                    &*b.c as *const C as usize,
                )
            })
            .collect();
    // The buffer pointer sits somewhere inside the `Vec` field (its layout is std's own): take the
    // field the graph reports, checked to lie within `A::bs`.
    let vec_field = edges
        .iter()
        .find(|e| e.0 == a_block && e.3 == 1)
        .map(|e| e.2)
        .unwrap_or_else(|| panic!("no level-1 edge from A:\n{graph}"));
    let bs_field = offset_of!(A, bs) as u64;
    assert!(
        (bs_field..bs_field + size_of::<Vec<B>>() as u64).contains(&vec_field)
            && vec_field % size_of::<usize>() as u64 == 0,
        "{graph}"
    );
    expected.insert((
        a_block,
        name(std::any::type_name::<A>()),
        vec_field,
        1,
        buffer,
    ));
    expected.insert((
        root_block,
        name(std::any::type_name::<Root>()),
        offset_of!(Root, a) as u64,
        2,
        a_block,
    ));
    assert_eq!(edges, expected, "{graph}");

    let sum: u64 = root.label
        + a.serial
        + a.bs
            .iter()
            .map(|b| b.id + b.c.value + u64::from(b.padding[0] + b.c.padding[0]))
            .sum::<u64>()
        + u64::from(root.padding[0] + a.padding[0]);
    assert_eq!(sum, 1 + 2 + (0..BS).map(|i| i * 11).sum::<u64>());
}
