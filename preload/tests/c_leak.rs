//! A C program built with `-O2 -g -fomit-frame-pointer` under the library: its leak of
//! `LEAK_COUNT` blocks of `LEAK_SIZE` bytes is one group of the TSV log at exit, whose first frame
//! names the leaking function and its exact file and line (DWARF unwinding, no frame pointers);
//! every C allocation function works through the library (the program checks its own results:
//! alignment, zeroed memory, `errno`, `EINVAL`, `malloc_usable_size`) and the block each leaks is
//! in the log with the size it asked for.

mod support;

use support::*;

const SOURCE: &str = "alloc_functions.c";

#[test]
fn c_leak_and_every_allocation_function() {
    let dir = scratch("c_leak");
    let program = compile(
        &dir,
        &[SOURCE],
        "alloc_functions",
        &["-O2", "-g", "-fomit-frame-pointer"],
    );
    let output = run_ok(
        preloaded(&program).env("MEMPROF_STACK_DEPTH", "3"),
        "alloc_functions",
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "ok\n",
        "{}",
        both(&output)
    );
    let log = tsv_log(&output.stderr);
    let shown = show(&log);

    // (function, marker of its allocating line, blocks, bytes)
    let expected = [
        ("leak_blocks", "LEAK_LINE", 37, 37 * 1000),
        ("leak_calloc", "CALLOC_LINE", 1, 3330),
        ("leak_realloc", "REALLOC_LINE", 1, 5000),
        ("leak_reallocarray", "REALLOCARRAY_LINE", 1, 861),
        ("leak_posix_memalign", "POSIX_MEMALIGN_LINE", 1, 1234),
        ("leak_aligned_alloc", "ALIGNED_ALLOC_LINE", 1, 1280),
        ("leak_memalign", "MEMALIGN_LINE", 1, 2222),
        ("leak_valloc", "VALLOC_LINE", 1, 3333),
        ("leak_pvalloc", "PVALLOC_LINE", 1, 4444),
    ];
    for (function, marker, count, bytes) in expected {
        let line = line_of(SOURCE, marker);
        let groups = groups_at(&log, &format!("'{function}'"));
        assert_eq!(
            groups.len(),
            1,
            "{function}: one group expected in\n{shown}"
        );
        let group = groups[0];
        assert_eq!(
            (group.count, group.bytes),
            (count, bytes),
            "{function}'s leak in\n{shown}"
        );
        assert!(
            group.frames[0].contains(&format!("{SOURCE}:{line}")),
            "{function}'s first frame is not {SOURCE}:{line}:\n{shown}"
        );
        assert!(
            group.frames.iter().skip(1).any(|f| f.contains("'main'")),
            "{function}'s context does not reach main:\n{shown}"
        );
    }
    // Freed blocks, and the block `realloc(block, 0)` freed, are not live.
    for gone in ["realloc_to_zero", "freed_blocks"] {
        assert!(
            log.iter()
                .all(|g| g.frames.iter().all(|f| !f.contains(gone))),
            "{gone} has live blocks:\n{shown}"
        );
    }
}
