//! The stack walk stops as soon as it holds the frames a report shows, and the report still shows
//! all of them: allocations made through std's collections, formatting, sorting and smart
//! pointers, deep in the program, each come out with the full depth and with the program's own
//! function that allocated, from stacks shorter than the walk's margin.

use memprof::{Frame, Resolve};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hint::black_box;
use std::rc::Rc;
use std::sync::Arc;

/// What a site allocated, kept live until the snapshot.
type Kept = Box<dyn std::any::Any>;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Frames of `nest` below each site: more than any walk's margin, so no stack ends early.
const NESTING: usize = 40;

#[inline(never)]
fn nest(levels: usize, f: &mut dyn FnMut()) {
    if levels == 0 {
        f();
    } else {
        nest(black_box(levels - 1), f);
        black_box(());
    }
}

/// A type of the program's own, formatted by std: its `fmt` is named after a std trait.
struct Label(u64);

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:>200}", self.0)
    }
}

#[inline(never)]
fn site_box() -> Kept {
    Box::new(black_box([7u64; 9]))
}

#[inline(never)]
fn site_vec_push() -> Kept {
    let mut v = Vec::new();
    for i in 0..1000u32 {
        v.push(black_box(i));
    }
    Box::new(v)
}

#[inline(never)]
fn site_format() -> Kept {
    Box::new(format!("{}-{}", black_box(12345), black_box("abc")))
}

#[inline(never)]
fn site_display() -> Kept {
    Box::new(format!("{}", Label(black_box(42))))
}

#[inline(never)]
fn site_hash_map() -> Kept {
    let map: HashMap<u64, u64> = (0..500).map(|i| (black_box(i), i)).collect();
    Box::new(map)
}

#[inline(never)]
fn site_btree_map() -> Kept {
    let mut map = BTreeMap::new();
    for i in 0..500u64 {
        map.insert(black_box(i * 7919 % 500), i);
    }
    Box::new(map)
}

#[inline(never)]
fn site_clone() -> Kept {
    let names: Vec<String> = (0..20).map(|i| format!("name {i}")).collect();
    Box::new(black_box(&names).clone())
}

#[inline(never)]
fn site_sort() -> Kept {
    let mut v: Vec<String> = (0..300).map(|i| (i * 7919 % 300).to_string()).collect();
    v.sort();
    Box::new(v)
}

#[inline(never)]
fn site_shared() -> Kept {
    Box::new((
        Rc::new(black_box([1u8; 40])),
        Arc::new(black_box([2u8; 40])),
    ))
}

#[inline(never)]
fn site_deque() -> Kept {
    let mut q = VecDeque::new();
    for i in 0..300u16 {
        q.push_back(black_box(i));
    }
    Box::new(q)
}

#[inline(never)]
fn site_repeat() -> Kept {
    Box::new(black_box("abc").repeat(100))
}

/// A site's function name, and the site.
type Site = (&'static str, fn() -> Kept);

/// Each site with its function's name.
const SITES: &[Site] = &[
    ("site_box", site_box),
    ("site_vec_push", site_vec_push),
    ("site_format", site_format),
    ("site_display", site_display),
    ("site_hash_map", site_hash_map),
    ("site_btree_map", site_btree_map),
    ("site_clone", site_clone),
    ("site_sort", site_sort),
    ("site_shared", site_shared),
    ("site_deque", site_deque),
    ("site_repeat", site_repeat),
];

fn name(frame: &Frame) -> &str {
    frame.function.as_deref().unwrap_or("?")
}

#[test]
fn reports_show_the_full_depth_from_short_walks() {
    let mut kept = Vec::new();
    for (_, site) in SITES {
        nest(NESTING, &mut || kept.push(site()));
    }
    let config = memprof::Config::current();
    let depth = config.stack_depth;
    let snapshot = memprof::Snapshot::take();
    let mut seen = vec![0usize; SITES.len()];
    let mut walked = Vec::new();
    let options = memprof::ReportOptions::default().depth(depth);
    memprof::with_symbolizer(|symbolizer| {
        for stack in &snapshot.stacks {
            let expanded: Vec<Vec<Frame>> = stack
                .frames
                .iter()
                .map(|&a| symbolizer.resolve(a).to_vec())
                .collect();
            let frames: Vec<&Frame> = expanded.iter().flatten().collect();
            if !frames.iter().any(|f| name(f).ends_with("stack_trim::nest")) {
                continue;
            }
            let shown = memprof::context_of(&stack.frames, symbolizer, &options);
            let all: Vec<&str> = frames.iter().map(|f| name(f)).collect();
            // The walk had enough for the report: the full depth is shown.
            assert_eq!(shown.len(), depth, "shown {shown:#?} of {all:#?}");
            // ... and stopped before its margin.
            assert!(
                stack.frames.len() < config.capture_depth(),
                "{} frames walked: {all:#?}",
                stack.frames.len()
            );
            walked.push(stack.frames.len());
            // The site that allocated is among the frames shown, right after std's.
            if let Some(site) = SITES
                .iter()
                .position(|(site, _)| shown.iter().any(|f| f.ends_with(&format!("::{site}'"))))
            {
                seen[site] += 1;
            }
        }
    });
    for ((site, _), seen) in SITES.iter().zip(&seen) {
        assert!(
            *seen > 0,
            "no stack of {site} shows it within {depth} frames"
        );
    }
    eprintln!(
        "raw frames walked per stack: {walked:?} (margin {})",
        config.capture_depth()
    );
    drop(kept);
}
