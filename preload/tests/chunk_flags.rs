//! glibc's chunk flags in a trace of a C program under `libmemprof_preload.so`
//! (`docs/trace-format.md`, `BLOCK_FLAGS`): blocks of 1 MiB (`malloc`, `calloc`,
//! `posix_memalign`, a `realloc` that grew a small block) are mapped by glibc itself, small blocks
//! of the main thread come from the main arena and those of a second thread from another; the
//! trace says so of every one, and knows the flags of every block it recorded.

mod support;

use memprof_trace::{ChunkFlags, Trace, Visitor};

#[test]
fn the_trace_knows_each_blocks_mapping_and_arena() {
    let dir = support::scratch("chunk_flags");
    let program = support::compile(
        &dir,
        &["chunk_flags.c"],
        "chunk_flags",
        &["-O0", "-pthread"],
    );
    let trace_path = dir.join("t.mptrace");
    let mut command = support::clean_command(&program);
    command
        .env("LD_PRELOAD", support::library())
        .env("MEMPROF_TRACE", &trace_path)
        // A new arena for the second thread, glibc's default.
        .env_remove("MALLOC_ARENA_MAX")
        .env_remove("GLIBC_TUNABLES")
        // glibc's threshold is 128 KiB at first, and rises to the size of any mapped block freed:
        // memprof's own frees (through the same allocator) may take it past 1 MiB, and the large
        // blocks would then come from the arena, rightly recorded so. Set, it stays put.
        .env("MALLOC_MMAP_THRESHOLD_", "131072");
    let output = support::run_ok(&mut command, "the chunk-flags program");
    let stdout = String::from_utf8(output.stdout).unwrap();

    let trace = Trace::open(&trace_path).unwrap();
    struct Nothing;
    impl Visitor for Nothing {}
    let end = trace.visit(&mut Nothing, &mut |_| {}).unwrap();

    let main = ChunkFlags {
        mmapped: false,
        main_arena: true,
    };
    // glibc leaves `NON_MAIN_ARENA` clear on the blocks it maps itself, whichever thread asked.
    let mapped = ChunkFlags {
        mmapped: true,
        main_arena: true,
    };
    let other = ChunkFlags {
        mmapped: false,
        main_arena: false,
    };
    let mut counts = [0; 3];
    for line in stdout.lines() {
        let (class, address) = line.split_once(' ').unwrap();
        let address: u64 = address.parse().unwrap();
        let (expected, count) = match class {
            "main" => (main, &mut counts[0]),
            "mapped" => (mapped, &mut counts[1]),
            "other" => (other, &mut counts[2]),
            _ => panic!("unexpected line {line:?}"),
        };
        *count += 1;
        let block = end.heap.live.get(address).unwrap_or_else(|| {
            panic!("the {class} block at {address:#x} is not live in the trace")
        });
        assert_eq!(
            block.flags,
            Some(expected),
            "the {class} block at {address:#x}"
        );
    }
    assert_eq!(counts, [5, 5, 4], "{stdout}");

    // Every block the trace recorded has its flags; the second thread's small blocks come from
    // another arena than the main thread's.
    let unknown = end.heap.live.values().filter(|b| b.flags.is_none()).count();
    assert_eq!(unknown, 0, "blocks without flags");
    let threads: Vec<u32> = end.heap.live.values().map(|b| b.thread).collect();
    let main_thread = *threads.iter().min().unwrap();
    for block in end.heap.live.values() {
        let flags = block.flags.unwrap();
        if !flags.mmapped {
            assert_eq!(
                flags.main_arena,
                block.thread == main_thread,
                "a small block of thread {}",
                block.thread
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
