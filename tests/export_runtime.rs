//! The exports show the program's frames the way the reports do: the runtime below `main` and
//! below a thread's closure is trimmed, so `main` (or the closure) is the root of every stack.

mod common;

use memprof::export::{self, CallSites, ExportOptions};
use memprof::{Frame, ReturnAddress, Snapshot};
use std::collections::HashMap;

use common::{frame, stack};

/// One stack of the main thread, one of a spawned thread whose closure is inlined into std's
/// `__rust_begin_short_backtrace`, each down to the C library's start.
fn synthetic() -> (Snapshot, HashMap<ReturnAddress, Vec<Frame>>) {
    let core = "/rustc/0/library/core/src/ops/function.rs";
    let std = "/rustc/0/library/std/src/rt.rs";
    let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
    let mut symbols = HashMap::new();
    let mut add = |address: usize, frames: Vec<Frame>| {
        symbols.insert(ReturnAddress(address), frames);
    };
    add(
        0x10,
        vec![frame("__rustc::__rust_alloc", "src/main.rs", 3, 1)],
    );
    add(0x20, vec![frame("app::build", "src/main.rs", 7, 5)]);
    add(0x30, vec![frame("app::main", "src/main.rs", 12, 5)]);
    add(
        0x40,
        vec![
            frame("core::ops::function::FnOnce::call_once", core, 250, 5),
            frame(
                "std::sys::backtrace::__rust_begin_short_backtrace",
                std,
                160,
                18,
            ),
        ],
    );
    add(
        0x50,
        vec![frame("std::rt::lang_start_internal", std, 175, 25)],
    );
    add(0x60, vec![frame("main", "target/release/app", 0, 0)]);
    add(0x70, vec![frame("__libc_start_main_impl", libc, 0, 0)]);
    add(
        0x80,
        vec![
            frame("app::spawn::{{closure}}", "src/main.rs", 20, 9),
            frame(
                "std::sys::backtrace::__rust_begin_short_backtrace",
                std,
                160,
                18,
            ),
        ],
    );
    add(0x90, vec![frame("start_thread", libc, 0, 0)]);
    add(0xa0, vec![frame("clone3", libc, 0, 0)]);
    let stacks = vec![
        stack(&[0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70], 1, 1000),
        stack(&[0x10, 0x80, 0x90, 0xa0], 1, 500),
    ];
    let blocks = common::blocks(&[(0, 1000, 1), (1, 500, 1)]);
    (Snapshot::from_parts(blocks, stacks, 0), symbols)
}

#[test]
fn exports_stop_at_the_program_entry() {
    let (snapshot, mut symbols) = synthetic();
    let options = ExportOptions::default().depth(64);
    let sites = CallSites::build(&snapshot, &mut symbols, &options);
    let names: Vec<Vec<&str>> = sites
        .sites
        .iter()
        .map(|site| {
            site.locations
                .iter()
                .flat_map(|&l| &sites.locations[l].frames)
                .map(|f| f.function.as_deref().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(
        names,
        [
            vec!["app::build", "app::main"],
            vec!["app::spawn::{{closure}}"]
        ]
    );
    let mut folded = Vec::new();
    export::write(
        export::Format::Folded,
        &snapshot,
        &mut symbols,
        &options,
        &mut folded,
    )
    .unwrap();
    let folded = String::from_utf8(folded).unwrap();
    assert_eq!(
        folded.lines().collect::<Vec<_>>(),
        ["app::main;app::build 1000", "app::spawn::{{closure}} 500"],
        "{folded}"
    );
}
