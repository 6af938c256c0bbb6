//! The crate rule on synthetic frames, and the table made of a synthetic snapshot.

use super::*;
use crate::address::StackId;
use crate::snapshot::{LiveBlock, StackSummary};

const REGISTRY: &str = "/home/u/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f";
const RAW_VEC: &str = "/rustc/abc/library/alloc/src/raw_vec/mod.rs";
const STD_MAP: &str = "/rustc/abc/library/std/src/collections/hash/map.rs";

fn frame(function: &str, file: &str, line: u32) -> Frame {
    Frame {
        function: Some(function.into()),
        file: Some(file.into()),
        line,
        column: 0,
    }
}

fn registry(directory: &str, function: &str) -> Frame {
    frame(function, &format!("{REGISTRY}/{directory}/src/lib.rs"), 10)
}

/// The frames below the program's: std's runtime calling `main`.
fn runtime() -> Vec<Frame> {
    vec![
        frame(
            "std::sys::backtrace::__rust_begin_short_backtrace",
            "/rustc/abc/library/std/src/sys/backtrace.rs",
            152,
        ),
        frame(
            "std::rt::lang_start_internal",
            "/rustc/abc/library/std/src/rt.rs",
            1,
        ),
        frame("main", "/usr/bin/app", 0),
        frame("__libc_start_main", "/usr/lib/libc.so.6", 0),
    ]
}

/// memprof's frames and the allocator's at the top, then `frames`, then the runtime.
fn stack(frames: Vec<Frame>) -> Vec<Frame> {
    let mut all = vec![
        frame(
            "memprof::record::alloc",
            concat!(env!("CARGO_MANIFEST_DIR"), "/src/record.rs"),
            1,
        ),
        frame(
            "<memprof::hooks::MemProf<A> as core::alloc::global::GlobalAlloc>::alloc",
            "",
            0,
        ),
        // The shim rustc makes for `#[global_allocator]`, placed at the static's line.
        frame("__rustc::__rust_alloc", "src/main.rs", 5),
        frame(
            "alloc::alloc::alloc",
            "/rustc/abc/library/alloc/src/alloc.rs",
            1,
        ),
        frame("<alloc::raw_vec::RawVecInner>::finish_grow", RAW_VEC, 555),
    ];
    all.extend(frames);
    all.extend(runtime());
    all
}

fn name(frames: &[Frame], caller: bool) -> String {
    let refs: Vec<&Frame> = frames.iter().collect();
    crate_of(&refs, &vec![None; refs.len()], caller)
}

fn main_frame() -> Frame {
    frame("app::main", "src/main.rs", 40)
}

#[test]
fn a_dependency_is_named_by_its_registry_directory() {
    let frames = stack(vec![
        frame(
            "alloc::vec::Vec<T,A>::push",
            "/rustc/abc/library/alloc/src/vec/mod.rs",
            1,
        ),
        registry(
            "serde_json-1.0.140",
            "serde_json::de::Deserializer<R>::parse_str",
        ),
        frame("my_cache::Cache::load", "my_cache/src/lib.rs", 12),
        main_frame(),
    ]);
    assert_eq!(name(&frames, false), "serde_json");
    assert_eq!(name(&frames, true), "my_cache ← serde_json");
    // A crate whose name has a `-` is named as its paths name it.
    let frames = stack(vec![registry(
        "regex-lite-0.1.9",
        "regex_lite::pikevm::Cache::new",
    )]);
    assert_eq!(name(&frames, false), "regex_lite");
}

#[test]
fn std_collections_are_their_callers() {
    // std's own hashbrown (vendored, under /rust/deps/) is the standard library's: the row is
    // the crate that used std's HashMap.
    let frames = stack(vec![
        frame(
            "hashbrown::raw::RawTableInner::fallible_with_capacity",
            "/rust/deps/hashbrown-0.15.5/src/raw/mod.rs",
            1,
        ),
        frame(
            "std::collections::hash::map::HashMap<K,V,S>::insert",
            STD_MAP,
            1,
        ),
        frame("my_cache::Cache::index", "my_cache/src/lib.rs", 30),
        main_frame(),
    ]);
    assert_eq!(name(&frames, false), "my_cache");
    // The program's own crate is its own caller: the row reads alone.
    assert_eq!(name(&frames, true), "my_cache");
    // hashbrown from the registry is a crate of its own, though its path is std's vendored one's.
    let frames = stack(vec![
        registry(
            "hashbrown-0.17.1",
            "hashbrown::raw::RawTable<T,A>::reserve_rehash",
        ),
        frame("my_cache::Cache::index", "my_cache/src/lib.rs", 30),
        main_frame(),
    ]);
    assert_eq!(name(&frames, false), "hashbrown");
}

#[test]
fn an_inlined_generic_is_the_crate_whose_code_it_is() {
    // One return address: hashbrown's generic `insert`, inlined with its `reserve_rehash` into
    // the program's function. The inlined frames are hashbrown's, whatever their caller.
    let inlined = stack(vec![
        registry(
            "hashbrown-0.17.1",
            "hashbrown::raw::RawTable<T,A>::reserve_rehash",
        ),
        registry(
            "hashbrown-0.17.1",
            "hashbrown::map::HashMap<K,V,S,A>::insert",
        ),
        frame("my_cache::Cache::put", "my_cache/src/lib.rs", 50),
        main_frame(),
    ]);
    assert_eq!(name(&inlined, false), "hashbrown");
    assert_eq!(name(&inlined, true), "my_cache ← hashbrown");
    // The other way: std's generic `Vec::push` inlined into a dependency's code is the
    // dependency's, and a program's type as the generic argument changes nothing.
    let frames = stack(vec![
        frame(
            "alloc::vec::Vec<T,A>::push",
            "/rustc/abc/library/alloc/src/vec/mod.rs",
            1,
        ),
        registry(
            "regex-lite-0.1.9",
            "regex_lite::compile::Compiler::add<my_cache::Key>",
        ),
        main_frame(),
    ]);
    assert_eq!(name(&frames, false), "regex_lite");
    // A generic instance without debug information: by its path, not its argument's.
    let frames = stack(vec![
        frame(
            "serde_json::de::from_str<my_cache::Entry>",
            "/usr/bin/app",
            0,
        ),
        main_frame(),
    ]);
    assert_eq!(name(&frames, false), "serde_json");
    // A program's generic inlined into a dependency is the program's frame: derived code.
    let frames = stack(vec![
        frame(
            "<my_cache::Entry as serde::de::Deserialize>::deserialize",
            "my_cache/src/lib.rs",
            8,
        ),
        registry(
            "serde_json-1.0.140",
            "serde_json::de::from_str<my_cache::Entry>",
        ),
        main_frame(),
    ]);
    assert_eq!(name(&frames, false), "my_cache");
}

#[test]
fn function_paths() {
    let cases = [
        ("serde_json::de::from_str", Some("serde_json")),
        ("serde_json::de::from_str::{{closure}}", Some("serde_json")),
        (
            "<serde_json::value::Value as core::clone::Clone>::clone",
            Some("serde_json"),
        ),
        (
            "<alloc::vec::Vec<T> as serde::de::Deserialize>::deserialize",
            Some("serde"),
        ),
        (
            "<&mut serde_json::de::Deserializer<R> as serde::de::Deserializer>::deserialize_any",
            Some("serde_json"),
        ),
        ("<u64 as serde::ser::Serialize>::serialize", Some("serde")),
        ("<[my_app::Item] as core::fmt::Debug>::fmt", Some("my_app")),
        ("<regex_lite::Regex>::new", Some("regex_lite")),
        ("<(my_app::A, u8) as core::fmt::Debug>::fmt", Some("my_app")),
        (
            "<fn() -> u8 as core::ops::FnOnce<()>>::call_once",
            Some("core"),
        ),
        (
            "<core::iter::Map<I,F> as core::iter::Iterator>::next",
            Some("core"),
        ),
        ("serde_json[1a2b3c]::de::from_str", Some("serde_json")),
        ("main", None),
        ("u64", None),
        ("", None),
    ];
    for (function, expected) in cases {
        assert_eq!(path_crate(function), expected, "{function}");
    }
}

#[test]
fn c_frames_are_their_shared_objects() {
    // With debug information: the module the resolver gives.
    let frames = stack(vec![
        frame("sqlite3Malloc", "/build/sqlite3.c", 100),
        main_frame(),
    ]);
    let refs: Vec<&Frame> = frames.iter().collect();
    let modules: Vec<Option<&str>> = frames
        .iter()
        .map(|f| (f.function.as_deref() == Some("sqlite3Malloc")).then_some("libsqlite3.so.0"))
        .collect();
    assert_eq!(crate_of(&refs, &modules, false), "libsqlite3.so.0");
    assert_eq!(crate_of(&refs, &modules, true), "app ← libsqlite3.so.0");
    // Without: the module's path, which the frame holds; a C++ name is not a Rust path.
    let frames = stack(vec![
        frame("foo_alloc", "/usr/lib/libfoo.so.1", 0),
        main_frame(),
    ]);
    assert_eq!(name(&frames, false), "libfoo.so.1");
    let frames = stack(vec![
        frame("mylib::Cache::put(int)", "/usr/lib/libmy.so", 0),
        main_frame(),
    ]);
    assert_eq!(name(&frames, false), "libmy.so");
}

/// A trace without symbols names each frame by its module alone: the preloaded library's frames
/// at the top are memprof's, passed over, not a crate holding every block.
#[test]
fn frames_named_by_their_module_alone() {
    let module = |path: &str| Frame {
        function: None,
        file: Some(path.into()),
        line: 0,
        column: 0,
    };
    let preload = "/root/.cache/memprof/libmemprof_preload-b5647cc05bd795ee.so";
    let frames = vec![
        module(preload),
        module(preload),
        module("/usr/bin/python3.11"),
        module("/usr/bin/python3.11"),
        module("/lib/x86_64-linux-gnu/libc.so.6"),
    ];
    assert_eq!(name(&frames, false), "python3.11");
    let frames = vec![
        module("/tmp/memprof-attach-x/libmemprof_preload.so"),
        module("/lib/x86_64-linux-gnu/libc.so.6"),
    ];
    assert_eq!(name(&frames, false), "libc.so.6");
}

#[test]
fn std_alone_unknown_and_no_own_frame() {
    // Only std's frames between the allocator and the runtime: std's runtime allocating.
    let frames = stack(vec![frame(
        "std::rt::init",
        "/rustc/abc/library/std/src/rt.rs",
        1,
    )]);
    assert_eq!(name(&frames, false), STD);
    // Nothing known of the frames below std's.
    let frames = stack(vec![Frame::default(), Frame::default()]);
    assert_eq!(name(&frames, false), UNKNOWN);
    // No frame recorded at all (a walk that captured nothing): unknown too, not std's.
    assert_eq!(crate_of(&[], &[], false), UNKNOWN);
    assert_eq!(crate_of(&[], &[], true), UNKNOWN);
    // A dependency's thread, no frame of the program's.
    let mut frames = stack(vec![registry(
        "serde_json-1.0.140",
        "serde_json::to_string",
    )]);
    frames.truncate(frames.len() - runtime().len());
    assert_eq!(name(&frames, true), "(no own frame) ← serde_json");
    // A path dependency of the workspace is the program's own.
    let frames = stack(vec![
        frame("my_cache::Cache::new", "/work/app/my_cache/src/lib.rs", 3),
        main_frame(),
    ]);
    assert_eq!(name(&frames, true), "my_cache");
    // A git dependency is not.
    let frames = stack(vec![
        frame(
            "gitdep::make",
            "/home/u/.cargo/git/checkouts/gitdep-0123/abcdef0/src/lib.rs",
            3,
        ),
        main_frame(),
    ]);
    assert_eq!(name(&frames, true), "app ← gitdep");
}

#[test]
fn rows_sum_to_the_snapshot_and_print() {
    let address = |n: usize| ReturnAddress(0x1000 * n);
    let own = frame("app::main", "src/main.rs", 40);
    let mut resolver: HashMap<ReturnAddress, Vec<Frame>> = HashMap::new();
    resolver.insert(
        address(1),
        vec![
            registry("serde_json-1.0.140", "serde_json::to_string"),
            own.clone(),
        ],
    );
    resolver.insert(
        address(2),
        vec![
            registry("regex-lite-0.1.9", "regex_lite::Regex::new"),
            own.clone(),
        ],
    );
    resolver.insert(address(3), vec![own.clone()]);
    let summary = |frames: Vec<ReturnAddress>, allocated_blocks, allocated_bytes| StackSummary {
        frames,
        allocated_blocks,
        allocated_bytes,
        ..StackSummary::default()
    };
    let block = |address, size, stack| LiveBlock {
        address,
        size,
        stack: StackId(stack),
        tag: 0,
    };
    let snapshot = Snapshot::from_parts(
        vec![
            block(0x10, 100, 0),
            block(0x20, 300, 1),
            block(0x30, 50, 1),
            block(0x40, 7, 3),
        ],
        vec![
            summary(vec![address(1)], 2, 140),
            summary(vec![address(2)], 3, 1350),
            summary(vec![address(3)], 1, 8),
            summary(vec![address(9)], 1, 7),
        ],
        0,
    );
    let rows = rows(&snapshot, &mut resolver, false);
    let total = total(&rows);
    let live: u64 = snapshot.blocks.iter().map(|b| b.size).sum();
    assert_eq!(total.live_bytes, live);
    assert_eq!(total.live_blocks, snapshot.blocks.len() as u64);
    let mut out = Vec::new();
    write_markdown(&rows, 0, &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "\
| Crate          | Live bytes | Live blocks | Allocated bytes | Allocated blocks |
|----------------|-----------:|------------:|----------------:|-----------------:|
| ` regex_lite ` |        350 |           2 |           1,350 |                3 |
| ` serde_json ` |        100 |           1 |             140 |                2 |
| ` (unknown) `  |          7 |           1 |               7 |                1 |
| ` app `        |          0 |           0 |               8 |                1 |
| **total**      |        457 |           4 |           1,505 |                7 |
"
    );
    let mut out = Vec::new();
    write_tsv(&rows, &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "5\n\
         regex_lite\t350\t2\t1350\t3\n\
         serde_json\t100\t1\t140\t2\n\
         (unknown)\t7\t1\t7\t1\n\
         app\t0\t0\t8\t1\n\
         (total)\t457\t4\t1505\t7\n"
    );
    let by_caller = super::rows(&snapshot, &mut resolver, true);
    let names: Vec<&str> = by_caller.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["app ← regex_lite", "app ← serde_json", "(unknown)", "app"]
    );
}
