//! A report names the function that allocated, in optimized builds above all: helpers shaped like
//! a program's (an allocation as the last thing a function does, `Box::new` in tail position,
//! closures, iterator chains, `Vec<String>`, `Box<[u8; N]>`, `Rc`, `Arc`, `HashMap`, a realloc as
//! the last call) each come out with, as their first frame after std's collection frame, the
//! helper itself at the line this source gives, and then its caller.
//!
//! Every site allocates a block of a size no other site uses, marked in the source by a comment
//! `// site: <function> <size>` on the line of the allocation (with a `?` after it when the
//! caller may lie past the report's depth); the test reads this file to know what each report
//! must say. `scripts/test.sh` runs it in release builds with both unwinders.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::ffi::c_void;
use std::hint::black_box;
use std::rc::Rc;
use std::sync::Arc;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

unsafe extern "C" {
    /// memprof's C ABI, as C code calls it.
    fn memprof_record_alloc(ptr: *mut c_void, size: usize);
}

/// What a site allocated, kept live until the snapshot.
type Kept = Box<dyn std::any::Any>;

#[inline(never)]
fn leak_string() {
    let s = String::with_capacity(5000); // site: leak_string 5000
    // The block escapes, or the optimizer may drop an allocation nothing uses.
    std::mem::forget(black_box(s));
}

#[inline(never)]
fn leak_vec() {
    let v = Vec::<u64>::with_capacity(626); // site: leak_vec 5008
    // The block escapes, or the optimizer may drop an allocation nothing uses.
    std::mem::forget(black_box(v));
}

#[inline(never)]
fn leak_zeroed() {
    let v = vec![0u8; 5016]; // site: leak_zeroed 5016
    // The block escapes, or the optimizer may drop an allocation nothing uses.
    std::mem::forget(black_box(v));
}

#[inline(never)]
fn leak_uninit_box() {
    let b = Box::<[u8; 5024]>::new_uninit(); // site: leak_uninit_box 5024
    // The block escapes, or the optimizer may drop an allocation nothing uses.
    std::mem::forget(black_box(b));
}

#[inline(never)]
fn boxed_array() -> Box<[u8; 5032]> {
    Box::new([1; 5032]) // site: boxed_array 5032
}

#[inline(never)]
fn closure() -> Vec<u32> {
    let make = |n: usize| Vec::<u32>::with_capacity(n); // site: closure::{{closure}} 5040
    make(black_box(1260))
}

/// The closure's caller lies past the report's depth, behind std's iterator adapters. `collect`
/// is not the last call: a call to a function that is not inlined, as the last thing a function
/// does, becomes a jump that leaves no frame of the caller for any unwinder to find.
#[inline(never)]
fn iterator_chain() -> Vec<String> {
    let strings = (0..3)
        .map(|i| String::with_capacity(5048 + i)) // site: iterator_chain::{{closure}} 5048 ?
        .collect(); // site: iterator_chain 72
    black_box(strings)
}

#[inline(never)]
fn strings() -> Vec<String> {
    let mut v = Vec::with_capacity(211); // site: strings 5064
    v.push(String::from("kept"));
    v
}

#[inline(never)]
fn rc() -> Rc<[u8; 5056]> {
    Rc::new([2; 5056]) // site: rc 5072
}

#[inline(never)]
fn arc() -> Arc<[u8; 5072]> {
    Arc::new([3; 5072]) // site: arc 5088
}

#[inline(never)]
fn hash_map() -> HashMap<u64, u64> {
    HashMap::with_capacity(300) // site: hash_map 8720
}

#[inline(never)]
fn grow(v: &mut Vec<u8>) {
    v.reserve_exact(black_box(5091)); // site: grow 5096
}

#[inline(never)]
fn grow_string(s: &mut String) {
    s.push_str(black_box(&"y".repeat(5100))); // site: grow_string 5101
}

#[inline(never)]
fn replace(v: &mut Vec<u16>) {
    *v = Vec::with_capacity(2556); // site: replace 5112
}

#[inline(never)]
fn c_abi(block: *mut u8) {
    // SAFETY: the block is the caller's, of at least that size.
    unsafe { memprof_record_alloc(block.cast(), 5120) }; // site: c_abi 5120
    black_box(block);
}

/// Runs every site once; every site's caller is this function.
#[inline(never)]
fn run_sites(kept: &mut Vec<Kept>) {
    leak_string();
    leak_vec();
    leak_zeroed();
    leak_uninit_box();
    kept.push(Box::new(boxed_array()));
    kept.push(Box::new(closure()));
    kept.push(Box::new(iterator_chain()));
    kept.push(Box::new(strings()));
    kept.push(Box::new(rc()));
    kept.push(Box::new(arc()));
    kept.push(Box::new(hash_map()));
    let mut v = vec![1u8; 5];
    grow(&mut v);
    kept.push(Box::new(v));
    let mut s = String::from("x");
    let five = black_box(5);
    grow_string(&mut s);
    kept.push(Box::new((s, five)));
    let mut w = Vec::with_capacity(3);
    replace(&mut w);
    kept.push(Box::new(w));
    // A block of a custom allocator (one the global allocator does not see), reported by hand.
    let layout = Layout::from_size_align(5120, 8).unwrap();
    // SAFETY: a layout of non-zero size; the block is never freed (kept to the end of the test).
    let block = unsafe { System.alloc(layout) };
    assert!(!block.is_null());
    c_abi(block);
}

/// One site read from this file: the function that allocated (after `release_frames::`), the
/// size of its block, the line of the allocation, and whether the report must show the caller.
#[derive(Debug)]
struct Site {
    function: String,
    size: u64,
    line: u32,
    caller_shown: bool,
}

fn sites() -> Vec<Site> {
    let source = include_str!("release_frames.rs");
    source
        .lines()
        .enumerate()
        .filter_map(|(index, line)| {
            let (_, marker) = line.split_once("// site: ")?;
            let mut words = marker.split_whitespace();
            Some(Site {
                function: words.next()?.to_owned(),
                size: words.next()?.parse().ok()?,
                line: index as u32 + 1,
                caller_shown: words.next() != Some("?"),
            })
        })
        .collect()
}

/// The function a frame string names: `file:line:col in 'function'`.
fn function(frame: &str) -> &str {
    frame
        .rsplit_once(" in '")
        .map_or("", |(_, f)| f.trim_end_matches('\''))
}

/// Whether a frame is the standard library's, by its function's path.
fn is_std(frame: &str) -> bool {
    let f = function(frame).trim_start_matches('<');
    ["alloc::", "core::", "std::", "hashbrown::"]
        .iter()
        .any(|p| f.starts_with(p))
}

#[test]
fn helpers_are_named_in_their_frames() {
    let expected = if option_env!("MEMPROF_EXPECT_FP").is_some() {
        memprof::Unwinder::FramePointer
    } else {
        memprof::Unwinder::Dwarf
    };
    let mut kept = Vec::new();
    run_sites(&mut kept);
    assert_eq!(memprof::Config::current().unwinder, expected);
    let sites = sites();
    assert_eq!(sites.len(), 16, "{sites:#?}");
    let snapshot = memprof::Snapshot::take();
    let options = memprof::ReportOptions::default().min_bytes(0).depth(8);
    let mut failures = Vec::new();
    memprof::with_symbolizer(|symbolizer| {
        for site in &sites {
            let contexts: Vec<Vec<String>> = snapshot
                .blocks
                .iter()
                .filter(|b| b.size == site.size)
                .map(|b| {
                    let stack = &snapshot.stack(b.stack).frames;
                    memprof::context_of(stack, symbolizer, &options)
                })
                .filter(|c| {
                    c.iter()
                        .any(|f| function(f).starts_with("release_frames::"))
                })
                .collect();
            let [context] = contexts.as_slice() else {
                failures.push(format!(
                    "{site:?}: {} blocks: {contexts:#?}",
                    contexts.len()
                ));
                continue;
            };
            // Std's frames first (the collection operation, collapsed to one), then the site at
            // its line, then its caller.
            let own: Vec<usize> = (0..context.len())
                .filter(|&i| !is_std(&context[i]))
                .collect();
            let wanted = format!("release_frames::{}", site.function);
            let caller = match site.function.split_once("::") {
                Some((outer, _)) => format!("release_frames::{outer}"),
                None => "release_frames::run_sites".to_owned(),
            };
            let at = format!("tests/release_frames.rs:{}:", site.line);
            let ok = own.first().is_some_and(|&i| {
                i <= 1 && function(&context[i]) == wanted && context[i].starts_with(&at)
            }) && match own.get(1) {
                Some(&i) => function(&context[i]) == caller,
                None => !site.caller_shown,
            };
            if !ok {
                failures.push(format!(
                    "{wanted} at {at} then {caller} expected: {context:#?}"
                ));
            }
        }
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    drop(kept);
}
