//! Shared by the CLI's tests: a trace written event by event with the format's encoder, so every
//! figure a command or the viewer's API reports on it is known; and the `memprof` binary run.

#![allow(dead_code)]

use memprof_trace::{ChunkEncoder, Compressor, Header, SymbolFrame};
use std::process::{Command, Output};

pub const LEAKY: u64 = 0x1000;
pub const TEMP: u64 = 0x2000;

/// The trace, and the offset of each chunk in it. Two threads (1 `main`, 2 `worker`), two
/// stacks (`app::leaky` at src/app.rs:10, `app::temp` at :20), a marker `m` at 700 ns:
///
/// | ns        | thread | event                                  |
/// |-----------|--------|----------------------------------------|
/// | 100       | 1      | alloc 0xa100, 1000 bytes, leaky        |
/// | 200       | 1      | alloc 0xa200, 10 bytes, temp           |
/// | 300       | 1      | free 0xa200 (temporary, lived 100)     |
/// | 400       | 1      | alloc 0xa200, 20 bytes, temp           |
/// | 500       | 1      | alloc 0xa300, 1000 bytes, leaky        |
/// | 550       | 2      | alloc 0xb000, 5000 bytes, leaky (peak) |
/// | 600       | 1      | free 0xa200 (lived 200)                |
/// | 650       | 2      | free 0xb000 (temporary, lived 100)     |
/// | 700       | 1      | marker `m`                             |
/// | 2,000,700 | 1      | free 0xa300 (temporary, 2,000,200)     |
///
/// 0xa100 is never freed. The worker's chunk comes first in the file.
pub fn known_trace() -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let mut offsets = Vec::new();
    let mut chunk = |encoder: &mut ChunkEncoder, out: &mut Vec<u8>| {
        offsets.push(out.len());
        encoder
            .finish(Some(&mut Compressor::new(3).unwrap()), out)
            .unwrap();
    };
    let mut definitions = ChunkEncoder::new(0);
    definitions.stack(0, [LEAKY + 1].into_iter());
    definitions.stack(7, [TEMP + 1].into_iter());
    definitions.thread(1, 100, "main");
    definitions.thread(2, 101, "worker");
    definitions.label(3, "m");
    chunk(&mut definitions, &mut out);
    let mut worker = ChunkEncoder::new(2);
    worker.alloc(550, 0xb000, 5000, 0);
    worker.free(650, 0xb000);
    chunk(&mut worker, &mut out);
    let mut main = ChunkEncoder::new(1);
    main.alloc(100, 0xa100, 1000, 0);
    main.alloc(200, 0xa200, 10, 7);
    main.free(300, 0xa200);
    main.alloc(400, 0xa200, 20, 7);
    main.alloc(500, 0xa300, 1000, 0);
    main.free(600, 0xa200);
    main.mark(700, 3);
    main.free(2_000_700, 0xa300);
    chunk(&mut main, &mut out);
    let mut symbols = ChunkEncoder::new(0);
    for (address, function, line) in [(LEAKY + 1, "app::leaky", 10), (TEMP + 1, "app::temp", 20)] {
        symbols.symbol(
            address,
            &[SymbolFrame {
                function: Some(function.into()),
                file: Some("src/app.rs".into()),
                line,
                column: 5,
            }],
        );
    }
    symbols.end(10, 0);
    chunk(&mut symbols, &mut out);
    (out, offsets)
}

/// Runs the `memprof` binary of this package with `args`.
pub fn memprof_cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `memprof args`, which must succeed; returns its standard output.
pub fn stdout_of(args: &[&str]) -> String {
    let output = memprof_cli(args);
    assert!(
        output.status.success(),
        "memprof {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A commit of Rust's repository, as the standard library's debug information names its files.
const RUSTC: &str = "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library";

/// A trace whose stacks are shaped like a real Rust program's: memprof's own frames and the
/// allocator's on top, then a collection operation of the standard library (its files under
/// `/rustc/<commit>/library/`), the program's functions, and the runtime below `main` (std's
/// `lang_start`, the C library's start). One thread, sites and events:
///
/// | site   | context (innermost first)                           | events (ns, address, bytes)      |
/// |--------|-----------------------------------------------------|----------------------------------|
/// | `init` | `std::rt::lang_start_internal`, `main` (before main) | 100 alloc 0xa000 64, never freed |
/// | `build`| `Vec::with_capacity`, `app::build`, `app::main`     | 200 alloc 0xa100 1000; 400 alloc 0xa300 500; 600 free 0xa300 |
/// | `load` | `Vec::with_capacity`, `app::load`, `app::main`      | 300 alloc 0xa200 4000; 500 free 0xa200 |
/// | `grow` | `Vec::push`, `app::grow`, `app::main`               | 700 alloc 0xa400 3000            |
/// | `tiny` | `Box::new`, `app::tiny`, `app::main`                | 800 alloc 0xa500 10              |
///
/// A marker `loaded` at 450 ns. Between `loaded` and the end, `grow` grew by 3000 bytes, `tiny`
/// by 10, `load` shrank by 4000 and `build` by 500. The `build` stack has 14 frames: 4 above its
/// context (memprof's, the allocator's, `RawVec`'s) and 7 below it (the runtime).
pub fn named_trace() -> Vec<u8> {
    named_trace_of(false)
}

/// [`named_trace`] with two more stacks of the `build` site that show the same frames as its
/// first and differ only in frames left out: stack 5 has one more of memprof's frames above
/// (`memprof::hooks::c_abi::malloc`, 5 above, 7 below), stack 6 another runtime below `main`
/// (`__libc_start_call_main` at another address, no `_start`: 4 above, 6 below). Events after
/// the others: 900 alloc 0xa600 200 bytes (stack 5), 1000 alloc 0xa700 300 bytes (stack 6), both
/// never freed. Over the run the three stacks allocated 2000 bytes in 4 blocks, 1500 bytes in 3
/// blocks live at the end.
pub fn hidden_frames_trace() -> Vec<u8> {
    named_trace_of(true)
}

fn named_trace_of(hidden_variants: bool) -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let chunk = |encoder: &mut ChunkEncoder, out: &mut Vec<u8>| {
        encoder
            .finish(Some(&mut Compressor::new(3).unwrap()), out)
            .unwrap();
    };
    let frame = |function: &str, file: &str, line: u32| SymbolFrame {
        function: Some(function.into()),
        file: Some(file.into()),
        line,
        column: if line == 0 { 0 } else { 9 },
    };
    let std_file = |path: &str| format!("{RUSTC}/{path}");
    let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
    let symbols: Vec<(u64, Vec<SymbolFrame>)> = vec![
        (
            0x100,
            vec![frame(
                "memprof::record::alloc",
                "/src/memprof/src/record.rs",
                50,
            )],
        ),
        (
            0x110,
            vec![frame(
                "<memprof::hooks::global_alloc::MemProf<A> as core::alloc::global::GlobalAlloc>::alloc",
                "/src/memprof/src/hooks/global_alloc.rs",
                80,
            )],
        ),
        (0x120, vec![frame("__rustc::__rust_alloc", "/bin/app", 0)]),
        (
            0x130,
            vec![
                frame(
                    "alloc::raw_vec::RawVecInner<A>::try_allocate_in",
                    &std_file("alloc/src/raw_vec/mod.rs"),
                    476,
                ),
                frame(
                    "alloc::vec::Vec<T>::with_capacity",
                    &std_file("alloc/src/vec/mod.rs"),
                    480,
                ),
            ],
        ),
        (
            0x140,
            vec![
                frame(
                    "alloc::raw_vec::RawVec<T,A>::grow_one",
                    &std_file("alloc/src/raw_vec/mod.rs"),
                    340,
                ),
                frame(
                    "alloc::vec::Vec<T,A>::push",
                    &std_file("alloc/src/vec/mod.rs"),
                    992,
                ),
            ],
        ),
        (
            0x150,
            vec![frame(
                "alloc::boxed::Box<T>::new",
                &std_file("alloc/src/boxed.rs"),
                286,
            )],
        ),
        (0x200, vec![frame("app::build", "src/app.rs", 10)]),
        (0x300, vec![frame("app::load", "src/app.rs", 20)]),
        (0x500, vec![frame("app::grow", "src/app.rs", 30)]),
        (0x600, vec![frame("app::tiny", "src/app.rs", 40)]),
        (0x210, vec![frame("app::main", "src/main.rs", 5)]),
        (
            0x220,
            vec![frame(
                "core::ops::function::FnOnce::call_once",
                &std_file("core/src/ops/function.rs"),
                250,
            )],
        ),
        (
            0x230,
            vec![frame(
                "std::sys::backtrace::__rust_begin_short_backtrace",
                &std_file("std/src/sys/backtrace.rs"),
                152,
            )],
        ),
        (
            0x240,
            vec![frame(
                "std::rt::lang_start::{{closure}}",
                &std_file("std/src/rt.rs"),
                199,
            )],
        ),
        (
            0x250,
            vec![frame(
                "std::rt::lang_start_internal",
                &std_file("std/src/rt.rs"),
                175,
            )],
        ),
        (0x260, vec![frame("main", "/bin/app", 0)]),
        (0x270, vec![frame("__libc_start_call_main", libc, 0)]),
        (0x280, vec![frame("_start", "/bin/app", 0)]),
        (
            0x400,
            vec![frame("std::rt::init", &std_file("std/src/rt.rs"), 100)],
        ),
        (
            0x118,
            vec![frame(
                "memprof::hooks::c_abi::malloc",
                "/src/memprof/src/hooks/c_abi.rs",
                40,
            )],
        ),
        (0x275, vec![frame("__libc_start_call_main", libc, 0)]),
    ];
    let above = [0x100, 0x110, 0x120];
    let below_main = [0x220, 0x230, 0x240, 0x250, 0x260, 0x270, 0x280];
    let stack = |top: &[u64], program: &[u64], below: &[u64]| -> Vec<u64> {
        [top, program, below].concat()
    };
    let mut stacks = vec![
        stack(
            &[0x100, 0x110, 0x120, 0x400],
            &[],
            &[0x250, 0x260, 0x270, 0x280],
        ),
        stack(
            &[above[0], above[1], above[2], 0x130],
            &[0x200, 0x210],
            &below_main,
        ),
        stack(
            &[above[0], above[1], above[2], 0x130],
            &[0x300, 0x210],
            &below_main,
        ),
        stack(
            &[above[0], above[1], above[2], 0x140],
            &[0x500, 0x210],
            &below_main,
        ),
        stack(
            &[above[0], above[1], above[2], 0x150],
            &[0x600, 0x210],
            &below_main,
        ),
    ];
    if hidden_variants {
        stacks.push(stack(
            &[above[0], 0x118, above[1], above[2], 0x130],
            &[0x200, 0x210],
            &below_main,
        ));
        stacks.push(stack(
            &[above[0], above[1], above[2], 0x130],
            &[0x200, 0x210],
            &[0x220, 0x230, 0x240, 0x250, 0x260, 0x275],
        ));
    }
    let mut definitions = ChunkEncoder::new(0);
    for (id, frames) in stacks.iter().enumerate() {
        definitions.stack(id as u32, frames.iter().copied());
    }
    definitions.thread(1, 100, "main");
    definitions.label(1, "loaded");
    chunk(&mut definitions, &mut out);
    let mut main = ChunkEncoder::new(1);
    main.alloc(100, 0xa000, 64, 0);
    main.alloc(200, 0xa100, 1000, 1);
    main.alloc(300, 0xa200, 4000, 2);
    main.alloc(400, 0xa300, 500, 1);
    main.mark(450, 1);
    main.free(500, 0xa200);
    main.free(600, 0xa300);
    main.alloc(700, 0xa400, 3000, 3);
    main.alloc(800, 0xa500, 10, 4);
    if hidden_variants {
        main.alloc(900, 0xa600, 200, 5);
        main.alloc(1000, 0xa700, 300, 6);
    }
    chunk(&mut main, &mut out);
    let mut symbol_chunk = ChunkEncoder::new(0);
    for (address, frames) in &symbols {
        symbol_chunk.symbol(*address, frames);
    }
    symbol_chunk.end(9, 0);
    chunk(&mut symbol_chunk, &mut out);
    out
}

/// A page of the mappings trace.
pub const PAGE: u64 = 4096;

/// A trace with the program's own mappings (format 1.1's `MMAP`, `MUNMAP`), one thread `main`.
/// Stacks: 0 `app::alloc` (a block), 1 `app::map_big`, 2 `app::map_small`.
///
/// | ns  | event                                                        |
/// |-----|--------------------------------------------------------------|
/// | 100 | alloc 0xa000, 100 bytes, stack 0                             |
/// | 200 | mmap 0x10000, 3 pages, stack 1                               |
/// | 300 | mmap 0x40000, 1 page, stack 2                                |
/// | 400 | munmap 0x11000, 1 page (splits the first: peak 4 pages)      |
/// | 500 | mmap 0x50000, 8 pages, stack 2 (peak 11 pages, 0.0000005 s)  |
/// | 600 | munmap 0x50000, 8 pages                                      |
pub fn mappings_trace() -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(7, 0, "/bin/maps".into())
        .write_to(&mut out)
        .unwrap();
    let mut compressor = Compressor::new(3).unwrap();
    let mut defs = ChunkEncoder::new(0);
    for (id, address) in [(0u32, 0x1001u64), (1, 0x2001), (2, 0x3001)] {
        defs.stack(id, [address].into_iter());
    }
    defs.thread(1, 100, "main");
    defs.finish(Some(&mut compressor), &mut out).unwrap();
    let mut events = ChunkEncoder::new(1);
    events.alloc(100, 0xa000, 100, 0);
    events.mmap(200, 0x10000, 3 * PAGE, 1, 3, 0x22);
    events.mmap(300, 0x40000, PAGE, 2, 3, 0x22);
    events.munmap(400, 0x11000, PAGE);
    events.mmap(500, 0x50000, 8 * PAGE, 2, 3, 0x22);
    events.munmap(600, 0x50000, 8 * PAGE);
    events.finish(Some(&mut compressor), &mut out).unwrap();
    let mut symbols = ChunkEncoder::new(0);
    for (address, function) in [
        (0x1001u64, "app::alloc"),
        (0x2001, "app::map_big"),
        (0x3001, "app::map_small"),
    ] {
        symbols.symbol(
            address,
            &[SymbolFrame {
                function: Some(function.into()),
                file: Some("src/app.rs".into()),
                line: 1,
                column: 1,
            }],
        );
    }
    symbols.end(1, 0);
    symbols.finish(Some(&mut compressor), &mut out).unwrap();
    out
}

/// A trace with glibc's chunk flags (format 1.3), every figure known. Two threads (1 `main`,
/// 2 `worker`), two stacks (`app::small` at src/app.rs:10, `app::big` at :20):
///
/// | ns  | thread | event                                         | flags              |
/// |-----|--------|-----------------------------------------------|--------------------|
/// | 100 | 1      | alloc 0xa000, 64 bytes, small                 | main arena         |
/// | 200 | 1      | alloc 0xa100, 64 bytes, small                 | main arena         |
/// | 300 | 1      | alloc 0x7f00_0000_0010, 1 MiB, big            | mmapped            |
/// | 400 | 1      | free 0xa100                                   |                    |
/// | 500 | 1      | realloc 0xa000 → 0x7f00_0020_0010, 2 MiB, big | mmapped            |
/// | 600 | 2      | alloc 0x7e00_0000_1000, 64 bytes, small       | other arena        |
/// | 700 | 2      | alloc 0x7e00_0000_1100, 128 bytes, small      | other arena        |
/// | 800 | 2      | alloc 0x7f00_0040_0010, 1 MiB, big            | mmapped            |
///
/// Mapped blocks have `NON_MAIN_ARENA` clear, as glibc leaves it: they count in `arena=main`.
pub fn flagged_trace() -> Vec<u8> {
    use memprof_trace::ChunkFlags;
    let main = Some(ChunkFlags {
        mmapped: false,
        main_arena: true,
    });
    let mapped = Some(ChunkFlags {
        mmapped: true,
        main_arena: true,
    });
    let other = Some(ChunkFlags {
        mmapped: false,
        main_arena: false,
    });
    let mut out = Vec::new();
    Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let chunk = |encoder: &mut ChunkEncoder, out: &mut Vec<u8>| {
        encoder
            .finish(Some(&mut Compressor::new(3).unwrap()), out)
            .unwrap();
    };
    let mut definitions = ChunkEncoder::new(0);
    definitions.stack(0, [LEAKY + 1].into_iter());
    definitions.stack(1, [TEMP + 1].into_iter());
    definitions.thread(1, 100, "main");
    definitions.thread(2, 101, "worker");
    chunk(&mut definitions, &mut out);
    let mut first = ChunkEncoder::new(1);
    first.alloc(100, 0xa000, 64, 0);
    first.chunk_flags(main);
    first.alloc(200, 0xa100, 64, 0);
    first.chunk_flags(main);
    first.alloc(300, 0x7f00_0000_0010, 1 << 20, 1);
    first.chunk_flags(mapped);
    first.free(400, 0xa100);
    first.realloc(500, 500, 0xa000, 0x7f00_0020_0010, 2 << 20, 1);
    first.chunk_flags(mapped);
    chunk(&mut first, &mut out);
    let mut second = ChunkEncoder::new(2);
    second.alloc(600, 0x7e00_0000_1000, 64, 0);
    second.chunk_flags(other);
    second.alloc(700, 0x7e00_0000_1100, 128, 0);
    second.chunk_flags(other);
    second.alloc(800, 0x7f00_0040_0010, 1 << 20, 1);
    second.chunk_flags(mapped);
    chunk(&mut second, &mut out);
    let mut symbols = ChunkEncoder::new(0);
    for (address, function, line) in [(LEAKY + 1, "app::small", 10), (TEMP + 1, "app::big", 20)] {
        symbols.symbol(
            address,
            &[SymbolFrame {
                function: Some(function.into()),
                file: Some("src/app.rs".into()),
                line,
                column: 5,
            }],
        );
    }
    symbols.end(9, 0);
    chunk(&mut symbols, &mut out);
    out
}

/// Return addresses of [`churn_trace`]'s two stacks.
pub const CHURN: u64 = 0x3000;
pub const KEEP: u64 = 0x4000;

/// A churning loop that heaptrack's rule calls not temporary. One thread, two stacks,
/// `app::churn` (src/app.rs:30) and `app::keep` (:40); for each `i` of 0..1000, at
/// `t = i * 20 µs`: alloc 0x10000, 64 bytes, churn; at `t + 1 µs` alloc `0x100000 + i * 0x1000`,
/// 4096 bytes, keep (never freed); at `t + 8 µs` free 0x10000. Every churn block lives 8 µs
/// and is freed after another allocation of its thread: 1000 short-lived allocations (64,000
/// bytes) under any bound of 8 µs or more, none under less, and no temporary one; keep's 1000
/// blocks (4,096,000 bytes) live to the end.
pub fn churn_trace() -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(43, 1_700_000_000_000_000_000, "/bin/churn".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let chunk = |encoder: &mut ChunkEncoder, out: &mut Vec<u8>| {
        encoder
            .finish(Some(&mut Compressor::new(3).unwrap()), out)
            .unwrap();
    };
    let mut definitions = ChunkEncoder::new(0);
    definitions.stack(0, [CHURN + 1].into_iter());
    definitions.stack(1, [KEEP + 1].into_iter());
    definitions.thread(1, 100, "main");
    chunk(&mut definitions, &mut out);
    let mut main = ChunkEncoder::new(1);
    for i in 0..1000u64 {
        let t = 1000 + i * 20_000;
        main.alloc(t, 0x10000, 64, 0);
        main.alloc(t + 1000, 0x100000 + i * 0x1000, 4096, 1);
        main.free(t + 8000, 0x10000);
    }
    chunk(&mut main, &mut out);
    let mut symbols = ChunkEncoder::new(0);
    for (address, function, line) in [(CHURN + 1, "app::churn", 30), (KEEP + 1, "app::keep", 40)] {
        symbols.symbol(
            address,
            &[SymbolFrame {
                function: Some(function.into()),
                file: Some("src/app.rs".into()),
                line,
                column: 5,
            }],
        );
    }
    symbols.end(3000, 0);
    chunk(&mut symbols, &mut out);
    out
}
