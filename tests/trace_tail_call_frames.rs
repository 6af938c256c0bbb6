//! A trace names a helper whose last act is a call into the standard library, as the live
//! reports do (tests/tail_call_frames.rs): in an optimized build `grow` jumps to `RawVec`'s
//! growth function and leaves no frame, and its caller's return address follows `call grow`.
//! The trace carries, beside each address's symbols, the function its direct call went to and
//! that function's code (`CALLEE` records, format 1.4), and its readers
//! (`Trace::recovered_callee`, which the `memprof` command's reports, exports and viewer use)
//! add the function where the younger frame lies outside it. Before, a trace blamed the block on
//! `build`. `scripts/test.sh` runs it in release builds.

#![cfg(feature = "trace")]

mod common;

use memprof_trace::{Reader, Record, Trace};
use std::collections::HashMap;
use std::hint::black_box;
use std::process::{Command, Stdio};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// The size the grown block gets: 7 bytes, then room for 4321 more.
const GROWN: u64 = 7 + 4321;

/// Ends in a call: an optimized build jumps to the growth function.
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

/// Whether a function is the standard library's, by its path.
fn is_std(function: &str) -> bool {
    let f = function.trim_start_matches('<');
    ["alloc::", "core::", "std::", "hashbrown::"]
        .iter()
        .any(|p| f.starts_with(p))
}

#[test]
fn trace_tail_call_frames() {
    if std::env::var_os("MEMPROF_TEST_TRACE_CHILD").is_some() {
        let kept = build();
        assert_eq!(kept.capacity() as u64, GROWN);
        memprof::close_trace().unwrap().expect("a trace was open");
        drop(kept);
        return;
    }
    let path = std::env::temp_dir().join(format!(
        "memprof-trace-tail-call-{}.mptrace",
        std::process::id()
    ));
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "trace_tail_call_frames", "--nocapture"])
        .env("MEMPROF_TEST_TRACE_CHILD", "1")
        .env("MEMPROF_TRACE", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(child, Duration::from_secs(120), "the traced child");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // The stack of the grown block, as the trace defines it.
    let bytes = std::fs::read(&path).unwrap();
    let mut reader = Reader::new(&bytes[..]).unwrap();
    let mut stacks = HashMap::new();
    let mut grown = Vec::new();
    let mut callees = 0;
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            match record.unwrap() {
                Record::Stack { id, frames } => {
                    stacks.insert(id, frames);
                }
                Record::Realloc { size, stack, .. } | Record::Alloc { size, stack, .. }
                    if size == GROWN =>
                {
                    grown.push(stack);
                }
                Record::Callee { .. } => callees += 1,
                _ => {}
            }
        }
    }
    assert!(callees > 0, "no CALLEE record in the trace");
    let [stack] = grown.as_slice() else {
        panic!("one block of {GROWN} bytes expected: {grown:?}");
    };
    let addresses = &stacks[stack];

    // Its functions, innermost first, as a reader of the trace names them.
    let trace = Trace::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut functions = Vec::new();
    for (index, &address) in addresses.iter().enumerate() {
        let younger = index.checked_sub(1).map(|i| addresses[i]);
        if let Some(callee) = trace.recovered_callee(address, younger) {
            functions.push(callee.function.clone().unwrap_or_default());
        }
        for frame in &trace.symbols()[&address] {
            functions.push(frame.function.clone().unwrap_or_default());
        }
    }
    let own: Vec<&str> = functions
        .iter()
        .map(String::as_str)
        .filter(|f| {
            let bare = f.trim_start_matches('<');
            !f.is_empty() && !is_std(f) && !bare.starts_with("memprof::") && !bare.starts_with("__")
        })
        .collect();
    assert_eq!(
        own.get(..2),
        Some(
            &[
                "trace_tail_call_frames::grow",
                "trace_tail_call_frames::build"
            ][..]
        ),
        "{functions:#?}"
    );
}
