//! Exact live-object counts per type, inferred from allocation stacks with no code change: boxed
//! values, `Vec` buffers, `Arc` allocations and a `HashMap` table. Run in a default build (legacy
//! symbols, types from the DWARF instance names) and with `-C symbol-mangling-version=v0` (types
//! from the symbols).

use std::collections::HashMap;
use std::sync::Arc;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[derive(Clone)]
struct Foo {
    id: u64,
    weight: u32,
}

#[derive(Clone)]
struct Bar {
    bytes: [u8; 24],
}

struct Baz {
    value: u64,
}

const FOOS: usize = 3000;
const BAR_BUFFERS: usize = 2000;
const BAZES: usize = 1000;
const MAP_ENTRIES: u64 = 500;

// One block per `Foo`: the objects counted are the boxes.
#[allow(clippy::vec_box)]
#[inline(never)]
fn make_foos() -> Vec<Box<Foo>> {
    (0..FOOS as u64)
        .map(|id| Box::new(Foo { id, weight: 1 }))
        .collect()
}

/// Bar buffers made four ways: `with_capacity`, growth by `push`, `vec!` and `collect`.
#[inline(never)]
fn make_bar_buffers() -> Vec<Vec<Bar>> {
    let bar = Bar { bytes: [7; 24] };
    let mut buffers = Vec::with_capacity(BAR_BUFFERS);
    for i in 0..BAR_BUFFERS {
        let buffer = match i % 4 {
            0 => {
                let mut v = Vec::with_capacity(3);
                v.push(bar.clone());
                v
            }
            1 => {
                let mut v = Vec::new();
                for _ in 0..(i % 9 + 1) {
                    v.push(bar.clone());
                }
                v
            }
            2 => vec![bar.clone(); 5],
            _ => (0..4).map(|_| bar.clone()).collect(),
        };
        buffers.push(buffer);
    }
    buffers
}

#[inline(never)]
fn make_bazes() -> Vec<Arc<Baz>> {
    (0..BAZES as u64)
        .map(|value| Arc::new(Baz { value }))
        .collect()
}

#[inline(never)]
fn make_map() -> HashMap<u64, Foo> {
    let mut map = HashMap::new();
    for id in 0..MAP_ENTRIES {
        map.insert(id, Foo { id, weight: 2 });
    }
    map
}

fn parse(log: &str) -> HashMap<String, u64> {
    let mut lines = log.lines();
    let count: usize = lines
        .next()
        .expect("a first line")
        .parse()
        .expect("a count");
    let rows: HashMap<String, u64> = lines
        .map(|line| {
            let (n, name) = line.split_once('\t').expect("count \\t name");
            (name.to_owned(), n.parse().expect("a number"))
        })
        .collect();
    assert_eq!(rows.len(), count, "{log}");
    rows
}

#[test]
fn live_objects_are_counted_per_inferred_type() {
    let foos = make_foos();
    let bars = make_bar_buffers();
    let bazes = make_bazes();
    let map = make_map();

    let mut out = Vec::new();
    memprof::log_object_counts(&mut out).unwrap();
    let log = String::from_utf8(out).unwrap();
    let counts = parse(&log);
    let count = |name: &str| counts.get(name).copied().unwrap_or(0);

    assert_eq!(count(std::any::type_name::<Foo>()), FOOS as u64, "{log}");
    assert_eq!(
        count(std::any::type_name::<[Bar]>()),
        BAR_BUFFERS as u64,
        "{log}"
    );
    assert_eq!(
        count(std::any::type_name::<Arc<Baz>>()),
        BAZES as u64,
        "{log}"
    );
    assert_eq!(
        count(std::any::type_name::<HashMap<u64, Foo>>()),
        1,
        "{log}"
    );
    // The outer vectors: one buffer each of boxes, of vectors and of `Arc`s.
    assert_eq!(count(std::any::type_name::<[Box<Foo>]>()), 1, "{log}");
    assert_eq!(count(std::any::type_name::<[Vec<Bar>]>()), 1, "{log}");
    assert_eq!(count(std::any::type_name::<[Arc<Baz>]>()), 1, "{log}");

    let total: u64 = foos.iter().map(|f| f.id + u64::from(f.weight)).sum::<u64>()
        + bars
            .iter()
            .map(|b| b.len() as u64 + u64::from(b[0].bytes[0]))
            .sum::<u64>()
        + bazes.iter().map(|b| b.value).sum::<u64>()
        + map
            .values()
            .map(|f| f.id + u64::from(f.weight))
            .sum::<u64>();
    assert!(total > 0);
}
