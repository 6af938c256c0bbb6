//! `object_size` and `log_object_sizes` against heaps of known shape: a tree whose size is the sum
//! of its blocks, a shared object counted once, and a cycle that ends.

use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::size_of;
use std::rc::Rc;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

struct Shared {
    data: [u64; 6],
}

// Each child in a block of its own: the sizes are sums of blocks.
#[allow(clippy::vec_box)]
struct Node {
    children: Vec<Box<Node>>,
    shared: Option<Rc<Shared>>,
    payload: [u64; 3],
}

struct Leaf {
    values: [u64; 5],
}

struct Link {
    next: RefCell<Option<Rc<Link>>>,
    payload: [u64; 2],
}

/// A tree `depth` levels deep with `fanout` children per inner node; every leaf holds `shared`.
#[inline(never)]
fn tree(depth: u32, fanout: usize, shared: &Rc<Shared>) -> Box<Node> {
    let mut children = Vec::with_capacity(if depth == 0 { 0 } else { fanout });
    if depth > 0 {
        for _ in 0..fanout {
            children.push(tree(depth - 1, fanout, shared));
        }
    }
    Box::new(Node {
        shared: (depth == 0).then(|| shared.clone()),
        children,
        payload: [u64::from(depth); 3],
    })
}

/// The bytes of the tree's own blocks: each node, and each non-empty children buffer.
fn tree_bytes(node: &Node) -> u64 {
    let buffer = node.children.capacity() * size_of::<Box<Node>>();
    size_of::<Node>() as u64
        + buffer as u64
        + node.children.iter().map(|c| tree_bytes(c)).sum::<u64>()
}

/// The leaves that hold the shared value.
fn sharers(node: &Node) -> usize {
    usize::from(node.shared.is_some()) + node.children.iter().map(|c| sharers(c)).sum::<usize>()
}

/// An `Rc`'s block: two counters, then the value.
fn rc_block<T>() -> u64 {
    (2 * size_of::<usize>() + size_of::<T>()) as u64
}

fn sizes() -> HashMap<String, u64> {
    let mut out = Vec::new();
    memprof::log_object_sizes(&mut out).unwrap();
    let log = String::from_utf8(out).unwrap();
    let mut lines = log.lines();
    let count: usize = lines.next().unwrap().parse().unwrap();
    let rows: HashMap<String, u64> = lines
        .map(|l| {
            let (bytes, name) = l.split_once('\t').unwrap();
            (name.to_owned(), bytes.parse().unwrap())
        })
        .collect();
    assert_eq!(rows.len(), count, "{log}");
    rows
}

#[test]
fn sizes_follow_pointers_and_count_each_byte_once() {
    let shared = Rc::new(Shared { data: [9; 6] });
    let root = tree(3, 3, &shared);
    let expected = tree_bytes(&root) + rc_block::<Shared>();
    // 40 nodes, 13 buffers, one shared block reached from 27 leaves.
    assert_eq!(sharers(&root), 27);
    assert_eq!(
        expected,
        40 * size_of::<Node>() as u64 + 13 * 3 * 8 + rc_block::<Shared>()
    );
    // From the `Box` on the stack, and from the node in its own block.
    assert_eq!(memprof::object_size(&root), expected);
    assert_eq!(memprof::object_size(&*root), expected);
    // A subtree: its own nodes, and the shared block once.
    let child = &root.children[1];
    assert_eq!(
        memprof::object_size(&**child),
        tree_bytes(child) + rc_block::<Shared>()
    );
    // The shared value alone: its block, which points nowhere.
    assert_eq!(memprof::object_size(&shared), rc_block::<Shared>());

    // A cycle of two `Rc`s ends, and counts both blocks.
    let a = Rc::new(Link {
        next: RefCell::new(None),
        payload: [1, 2],
    });
    let b = Rc::new(Link {
        next: RefCell::new(Some(a.clone())),
        payload: [3, 4],
    });
    *a.next.borrow_mut() = Some(b.clone());
    assert_eq!(memprof::object_size(&a), 2 * rc_block::<Link>());
    assert_eq!(memprof::object_size(&b), 2 * rc_block::<Link>());

    // Per type: every `Node` reaches its subtree, so the type's bytes are the whole tree once.
    let sizes = sizes();
    assert_eq!(
        sizes.get(std::any::type_name::<Node>()).copied(),
        Some(expected),
        "{sizes:?}"
    );
    assert_eq!(
        sizes.get(std::any::type_name::<Rc<Link>>()).copied(),
        Some(2 * rc_block::<Link>()),
        "{sizes:?}"
    );
    assert_eq!(
        sizes.get(std::any::type_name::<Rc<Shared>>()).copied(),
        Some(rc_block::<Shared>()),
        "{sizes:?}"
    );

    // A `HashMap` points into the middle of its table (at the control bytes): the table is
    // found all the same, and the boxes in it.
    let map: HashMap<u64, Box<Leaf>> = (0..50)
        .map(|i| (i, Box::new(Leaf { values: [i; 5] })))
        .collect();
    let map_bytes = memprof::object_size(&map);
    // The table is found from the map on the stack, and the fifty boxes from the table: the
    // table holds at least its fifty (key, box) entries.
    assert!(
        map_bytes >= 50 * (size_of::<Leaf>() + size_of::<(u64, Box<Leaf>)>()) as u64,
        "{map_bytes}"
    );
    // The table is the map's only block, and it is typed as the map: the type's bytes are the
    // same table and boxes.
    let per_type = crate::sizes();
    assert_eq!(
        per_type
            .get(std::any::type_name::<HashMap<u64, Box<Leaf>>>())
            .copied(),
        Some(map_bytes),
        "{per_type:?}"
    );
    assert_eq!(map[&7].values[0], 7);

    // A value that owns no heap memory.
    assert_eq!(memprof::object_size(&7u64), 0);

    let total: u64 =
        shared.data.iter().sum::<u64>() + root.payload[0] + a.payload[1] + b.payload[0];
    assert_eq!(total, 54 + 3 + 2 + 3);
    b.next.borrow_mut().take();
}
