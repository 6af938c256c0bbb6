//! `memprof summary` on a trace with the program's own mappings (the preloaded library's `MMAP`
//! and `MUNMAP` records): made over the run, their peak, live at the end and the largest live at
//! the end by site; and on a trace without them, no word of mappings.

mod support;

use memprof_trace::{ChunkEncoder, Compressor, Header, SymbolFrame};
use support::{known_trace, stdout_of};

const PAGE: u64 = 4096;

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
fn trace() -> Vec<u8> {
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

#[test]
fn the_summary_lists_mappings() {
    let dir = std::env::temp_dir().join(format!("memprof-cli-maps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("maps.mptrace");
    std::fs::write(&path, trace()).unwrap();
    let summary = stdout_of(&["summary", path.to_str().unwrap()]);
    for line in [
        "allocations: 1 (100 bytes), frees: 0, markers: 0",
        "mappings: 3 made (49152 bytes), 2 unmaps; peak: 45056 bytes mapped at 0.000000 s",
        "mapped at end: 12288 bytes in 3 mappings",
    ] {
        assert!(summary.lines().any(|l| l == line), "{line:?} in\n{summary}");
    }
    let largest = summary
        .split("\nlargest mappings at the end:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        largest.starts_with(
            "        8192  bytes in 2 mappings\n              src/app.rs:1:1 in 'app::map_big'\n        4096  bytes in 1 mappings\n              src/app.rs:1:1 in 'app::map_small'\n"
        ),
        "{summary}"
    );
    // Sites that only mapped are not among the allocations.
    let most = summary.split("\nmost allocations:\n").nth(1).unwrap();
    let most = most.split("\n\n").next().unwrap();
    assert!(!most.contains("map_"), "{summary}");

    // Without mappings, the summary says nothing of them.
    let (bytes, _) = known_trace();
    let known = dir.join("known.mptrace");
    std::fs::write(&known, bytes).unwrap();
    let summary = stdout_of(&["summary", known.to_str().unwrap()]);
    assert!(!summary.contains("mapp"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}
