//! Tests of the DWARF walk as a whole: the frames it finds, checked against symbolization of the
//! test binary, against framehop alone and against the frame-pointer walk; plus a benchmark.

use super::registry::Registry;
use super::*;
use crate::modules;
use std::hint::black_box;

/// Function names of each address (innermost inlined first), symbolized from the test binary.
fn names(addresses: &[ReturnAddress]) -> Vec<Vec<String>> {
    let exe = std::env::current_exe().unwrap();
    let loader = addr2line::Loader::new(&exe).unwrap();
    let modules = modules::loaded();
    let main = modules.iter().find(|m| m.path == exe).unwrap();
    addresses
        .iter()
        .map(|a| {
            let mut out = Vec::new();
            if !main.contains(a.lookup_address()) {
                return out;
            }
            let probe = (a.lookup_address() - main.bias) as u64;
            if let Ok(mut frames) = loader.find_frames(probe) {
                while let Ok(Some(frame)) = frames.next() {
                    if let Some(function) = frame.function {
                        out.push(function.demangle().unwrap().into_owned());
                    }
                }
            }
            if out.is_empty()
                && let Some(symbol) = loader.find_symbol(probe)
            {
                out.push(format!("{:#}", rustc_demangle::demangle(symbol)));
            }
            out
        })
        .collect()
}

/// Where the first frame whose names include `needle` sits.
fn position(names: &[Vec<String>], needle: &str) -> Option<usize> {
    names
        .iter()
        .position(|frame| frame.iter().any(|name| name.ends_with(needle)))
}

#[inline(never)]
fn chain_outer(out: &mut [ReturnAddress]) -> usize {
    black_box(chain_middle(black_box(out)))
}

#[inline(never)]
fn chain_middle(out: &mut [ReturnAddress]) -> usize {
    black_box(chain_inner(black_box(out)))
}

#[inline(never)]
fn chain_inner(out: &mut [ReturnAddress]) -> usize {
    black_box(walk(black_box(out), Budget::unlimited()))
}

/// Calls `f` from `depth` extra frames down.
#[inline(never)]
fn nest<R>(depth: usize, f: &mut dyn FnMut() -> R) -> R {
    if depth == 0 {
        black_box(f())
    } else {
        black_box(nest(black_box(depth - 1), f))
    }
}

#[test]
fn finds_three_callers_in_order() {
    let mut out = [ReturnAddress(0); 64];
    let n = chain_outer(&mut out);
    let names = names(&out[..n]);
    let inner = position(&names, "chain_inner").expect("chain_inner");
    let middle = position(&names, "chain_middle").expect("chain_middle");
    let outer = position(&names, "chain_outer").expect("chain_outer");
    let test = position(&names, "finds_three_callers_in_order").expect("the test");
    assert!(
        inner < middle && middle < outer && outer < test,
        "{names:#?}"
    );
    assert!(inner <= 1, "walk's caller comes first: {names:#?}");
}

#[test]
fn the_rule_cache_agrees_with_framehop() {
    // From several depths and twice each (the second walk runs on cached rules), through
    // this test's frames, the harness's and the C library's, up to the thread's start.
    for depth in [0, 3, 17, 40] {
        for _ in 0..2 {
            let mut cached = [ReturnAddress(0); 128];
            let mut reference = [ReturnAddress(0); 128];
            let (n, m) = nest(depth, &mut || {
                (
                    walk(&mut cached, Budget::unlimited()),
                    walk_with_framehop(&mut reference),
                )
            });
            assert!(n > depth + 3, "{n} frames at depth {depth}");
            assert_eq!(n, m, "depth {depth}");
            // The first frame returns to the closure, from two different calls.
            assert_eq!(cached[1..n], reference[1..m], "depth {depth}");
        }
    }
}

#[test]
fn deeper_calls_add_exactly_their_frames() {
    let mut walks = [[ReturnAddress(0); 128]; 2];
    let mut lengths = [0; 2];
    // From one call site, so that only the nesting differs.
    for ((depth, out), n) in [3, 8].into_iter().zip(&mut walks).zip(&mut lengths) {
        *n = nest(depth, &mut || walk(out, Budget::unlimited()));
    }
    let ([a, b], [shallow, deep]) = (lengths, &walks);
    assert!(a > 5 && b < deep.len(), "{a} {b}");
    assert_eq!(b, a + 5);
    // The closure and `nest`'s call of it, then 4 or 9 identical recursive calls of `nest`,
    // then the same frames from this test out.
    assert_eq!(shallow[..2], deep[..2]);
    assert_eq!(shallow[2..a], deep[7..b]);
    assert!(shallow[..a].iter().chain(&deep[..b]).all(|r| r.0 != 0));
}

#[test]
fn every_frame_is_in_a_module_and_the_walk_ends_at_the_thread_start() {
    let mut out = [ReturnAddress(0); 256];
    let n = walk(&mut out, Budget::unlimited());
    assert!(n > 3 && n < out.len(), "{n}");
    let modules = modules::loaded();
    for address in &out[..n] {
        assert!(
            modules.iter().any(|m| m.contains(address.lookup_address())),
            "{address:x?} in no module"
        );
    }
}

#[test]
fn agrees_with_frame_pointers_where_they_are_kept() {
    // std and the test harness keep frame pointers, this crate's code in a default build need
    // not: the frame-pointer walk skips or stops early, but the return addresses it does
    // find in code are real ones, so they are among the DWARF walk's, in the same order.
    let mut dwarf = [ReturnAddress(0); 256];
    let mut fp = [ReturnAddress(0); 256];
    let n = walk(&mut dwarf, Budget::unlimited());
    let m = super::super::fp::walk(&mut fp, Budget::unlimited());
    let dwarf = &dwarf[..n];
    let modules = modules::loaded();
    let in_code: Vec<_> = fp[..m]
        .iter()
        .filter(|a| {
            modules
                .iter()
                .any(|module| module.contains(a.lookup_address()))
        })
        .collect();
    let shared: Vec<_> = in_code.iter().filter(|a| dwarf.contains(a)).collect();
    assert!(
        in_code.is_empty() || !shared.is_empty(),
        "{dwarf:x?} vs {in_code:x?}"
    );
    let positions: Vec<_> = shared
        .iter()
        .filter_map(|a| dwarf.iter().position(|d| d == **a))
        .collect();
    assert!(positions.is_sorted(), "{dwarf:x?} vs {in_code:x?}");
}

thread_local! {
    /// The stack captured by the first call of `compare` on this thread.
    static FROM_C: std::cell::RefCell<Vec<ReturnAddress>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

extern "C" fn compare(a: *const libc::c_void, b: *const libc::c_void) -> libc::c_int {
    FROM_C.with_borrow_mut(|seen| {
        if seen.is_empty() {
            let mut out = [ReturnAddress(0); 64];
            let n = walk(&mut out, Budget::unlimited());
            seen.extend_from_slice(&out[..n]);
        }
    });
    // SAFETY: qsort passes pointers to elements of the `u32` array being sorted.
    unsafe { (*a.cast::<u32>()).cmp(&*b.cast::<u32>()) as libc::c_int }
}

#[test]
fn walks_through_c_code() {
    let mut values = [5u32, 3, 9, 1, 7, 2, 8];
    // SAFETY: `values` is a valid array of `len` elements of the given size, and `compare`
    // compares two of them.
    unsafe {
        libc::qsort(
            values.as_mut_ptr().cast(),
            values.len(),
            size_of::<u32>(),
            Some(compare),
        );
    }
    assert_eq!(values, [1, 2, 3, 5, 7, 8, 9]);
    let names = names(&FROM_C.take());
    let compare = position(&names, "compare");
    let test = position(&names, "walks_through_c_code");
    assert!(compare.is_none() || compare < test, "{names:#?}");
    // qsort's own frames (in libc, no names from the test binary) sit between.
    assert!(test.is_some_and(|t| t >= 2), "{names:#?}");
}

#[test]
fn works_on_other_threads_and_during_thread_exit() {
    struct WalkOnDrop;
    impl Drop for WalkOnDrop {
        fn drop(&mut self) {
            let mut out = [ReturnAddress(0); 16];
            // Whatever state the thread's locals are in, this must not panic.
            let _ = black_box(walk(&mut out, Budget::unlimited()));
        }
    }
    thread_local! {
        static ON_EXIT: std::cell::RefCell<Option<WalkOnDrop>> =
            const { std::cell::RefCell::new(None) };
    }
    let names = std::thread::spawn(|| {
        let mut out = [ReturnAddress(0); 64];
        let n = chain_outer(&mut out);
        ON_EXIT.with(|s| *s.borrow_mut() = Some(WalkOnDrop));
        names(&out[..n])
    })
    .join()
    .unwrap();
    assert!(position(&names, "chain_inner") < position(&names, "chain_outer"));
    assert!(position(&names, "chain_outer").is_some(), "{names:#?}");
}

#[test]
fn a_small_thread_stack_does_not_overflow() {
    // A thread's first walk makes its cache and evaluates call-frame programs for every frame
    // (its rule cache is empty), with gimli's fixed-size scratch space on the stack: optimized,
    // that fits in 128 KiB; unoptimized, the walk declines rather than overflow.
    let n = std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(|| {
            let mut out = [ReturnAddress(0); 64];
            nest(5, &mut || walk(&mut out, Budget::unlimited()))
        })
        .unwrap()
        .join()
        .unwrap();
    if cfg!(debug_assertions) {
        assert_eq!(n, 0);
    } else {
        assert!(n > 5, "{n}");
    }
}

#[test]
fn an_empty_buffer_gets_nothing() {
    assert_eq!(walk(&mut [], Budget::unlimited()), 0);
}

/// `cargo test --release -- --ignored --nocapture bench`: nanoseconds per walk.
#[test]
#[ignore]
fn bench_walk() {
    let start = std::time::Instant::now();
    drop(black_box(Registry::build()));
    println!("registry build: {:?}", start.elapsed());
    let (n, elapsed) = std::thread::spawn(|| {
        let mut out = [ReturnAddress(0); 64];
        let start = std::time::Instant::now();
        let n = walk(&mut out, Budget::unlimited());
        (n, start.elapsed())
    })
    .join()
    .unwrap();
    println!("first walk of a thread: {n} frames in {elapsed:?}");
    // The best of several rounds: the machine may be busy with other work.
    let per_walk = |iterations: u32, f: &mut dyn FnMut() -> usize| {
        let mut best = f64::INFINITY;
        let mut n = 0;
        for _ in 0..20 {
            let start = std::time::Instant::now();
            for _ in 0..iterations {
                n = f();
            }
            best = best.min(start.elapsed().as_nanos() as f64 / f64::from(iterations));
        }
        (n, best)
    };
    for (depth, frames) in [(0, 10), (30, 30), (60, 64)] {
        let mut out = vec![ReturnAddress(0); frames];
        let (n, dwarf) = nest(depth, &mut || {
            per_walk(10_000, &mut || {
                black_box(walk(black_box(&mut out), Budget::unlimited()))
            })
        });
        let (m, fp) = nest(depth, &mut || {
            per_walk(10_000, &mut || {
                black_box(super::super::fp::walk(
                    black_box(&mut out),
                    Budget::unlimited(),
                ))
            })
        });
        println!(
            "dwarf: {n:>3} frames {dwarf:>6.1} ns/walk   (fp: {m:>3} frames {fp:>5.1} ns/walk)"
        );
    }
}
