//! Live objects per type for a program shaped like a user's, checked type by type against what its
//! source allocates: `Vec<String>` and `Vec<Vec<u8>>` (whose buffers grow through one folded
//! `RawVec::grow_one` in optimized builds), boxed arrays, zeroed buffers, boxed slices, `Rc`,
//! `Arc` and a `HashMap`. Run in the debug build and in release builds with both unwinders: a
//! type the program does not have must never appear, whatever the optimizer merged.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

struct Doc {
    id: u64,
    body: String,
}

const WORDS: usize = 300;
const LINES: usize = 200;
const PAGES: usize = 40;
const ZEROED: usize = 30;
const SLICES: usize = 20;
const RCS: usize = 50;
const ARCS: usize = 60;
const KEYS: usize = 100;

/// `Vec<String>` grown by `push`: one buffer of `String`s and a byte buffer per word.
#[inline(never)]
fn make_words() -> Vec<String> {
    let mut words = Vec::new();
    for i in 0..WORDS {
        words.push(format!("word {i}"));
    }
    words
}

/// `Vec<Vec<u8>>` grown by `push`: one buffer of `Vec<u8>`s and a `[u8]` per line.
#[inline(never)]
fn make_lines() -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    for i in 0..LINES {
        lines.push(vec![b'x'; 10 + i % 7]);
    }
    lines
}

/// `Box<[u8; 4096]>` values.
#[allow(clippy::vec_box)]
#[inline(never)]
fn make_pages() -> Vec<Box<[u8; 4096]>> {
    let mut pages = Vec::with_capacity(PAGES);
    for i in 0..PAGES {
        let mut page = Box::new([0u8; 4096]);
        page[i] = 1;
        pages.push(page);
    }
    pages
}

/// `vec![0u8; N]`: zeroed byte buffers.
#[inline(never)]
fn make_zeroed() -> Vec<Vec<u8>> {
    let mut buffers = Vec::with_capacity(ZEROED);
    for i in 0..ZEROED {
        buffers.push(vec![0u8; 8192 + i]);
    }
    buffers
}

/// `Box<[u32]>` collected from an iterator.
#[inline(never)]
fn make_slices() -> Vec<Box<[u32]>> {
    let mut slices = Vec::with_capacity(SLICES);
    for i in 0..SLICES {
        slices.push((0..(i as u32 + 5)).collect::<Box<[u32]>>());
    }
    slices
}

#[inline(never)]
fn make_rcs() -> Vec<Rc<Doc>> {
    let mut docs = Vec::with_capacity(RCS);
    for id in 0..RCS as u64 {
        docs.push(Rc::new(Doc {
            id,
            body: format!("rc {id}"),
        }));
    }
    docs
}

#[inline(never)]
fn make_arcs() -> Vec<Arc<Doc>> {
    let mut docs = Vec::with_capacity(ARCS);
    for id in 0..ARCS as u64 {
        docs.push(Arc::new(Doc {
            id,
            body: format!("arc {id}"),
        }));
    }
    docs
}

#[inline(never)]
fn make_map() -> HashMap<String, u64> {
    let mut map = HashMap::new();
    for i in 0..KEYS {
        map.insert(format!("key {i}"), i as u64);
    }
    map
}

/// Live objects per type, measured without recording the measurement's own blocks.
fn counts() -> HashMap<String, i64> {
    memprof::pause();
    let mut out = Vec::new();
    memprof::log_object_counts(&mut out).unwrap();
    let log = String::from_utf8(out).unwrap();
    let counts = log
        .lines()
        .skip(1)
        .map(|line| {
            let (n, name) = line.split_once('\t').expect("count \\t name");
            (name.to_owned(), n.parse().expect("a number"))
        })
        .collect();
    memprof::resume();
    counts
}

fn name<T: ?Sized>() -> String {
    std::any::type_name::<T>().to_owned()
}

#[test]
fn every_type_is_the_one_the_source_allocates() {
    let before = counts();
    let words = make_words();
    let lines = make_lines();
    let pages = make_pages();
    let zeroed = make_zeroed();
    let slices = make_slices();
    let rcs = make_rcs();
    let arcs = make_arcs();
    let map = make_map();
    let after = counts();

    memprof::pause();
    let mut created: HashMap<String, i64> = HashMap::new();
    for (name, &n) in &after {
        let delta = n - before.get(name).copied().unwrap_or(0);
        if delta != 0 {
            created.insert(name.clone(), delta);
        }
    }
    let strings = WORDS + RCS + ARCS + KEYS;
    let mut expected: HashMap<String, i64> = [
        (name::<[String]>(), 1),
        (name::<String>(), strings),
        (name::<[Vec<u8>]>(), 2),
        (name::<[u8]>(), LINES + ZEROED),
        (name::<[u8; 4096]>(), PAGES),
        (name::<[Box<[u8; 4096]>]>(), 1),
        (name::<[u32]>(), SLICES),
        (name::<[Box<[u32]>]>(), 1),
        (name::<Rc<Doc>>(), RCS),
        (name::<[Rc<Doc>]>(), 1),
        (name::<Arc<Doc>>(), ARCS),
        (name::<[Arc<Doc>]>(), 1),
        (name::<HashMap<String, u64>>(), 1),
    ]
    .into_iter()
    .map(|(name, n)| (name, n as i64))
    .collect();
    let mut report = String::new();
    let mut names: Vec<&String> = created.keys().chain(expected.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let got = created.get(name).copied().unwrap_or(0);
        let want = expected.get(name).copied().unwrap_or(0);
        if got != want {
            report.push_str(&format!("{name}: {got} live, the source made {want}\n"));
        }
    }
    expected.clear();
    memprof::resume();
    assert!(
        report.is_empty(),
        "types that disagree with the source:\n{report}"
    );

    let total = words.iter().map(String::len).sum::<usize>()
        + lines.iter().map(Vec::len).sum::<usize>()
        + pages.iter().map(|p| p[0] as usize).sum::<usize>()
        + zeroed.iter().map(Vec::len).sum::<usize>()
        + slices.iter().map(|s| s.len()).sum::<usize>()
        + rcs
            .iter()
            .map(|d| d.id as usize + d.body.len())
            .sum::<usize>()
        + arcs
            .iter()
            .map(|d| d.id as usize + d.body.len())
            .sum::<usize>()
        + map.values().sum::<u64>() as usize;
    assert!(total > 0);
}
