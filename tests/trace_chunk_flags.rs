//! glibc's chunk flags in a trace of `MemProf::new()` (over `System`, glibc's `malloc`): blocks
//! above glibc's mmap threshold (1 MiB, allocated, grown by `realloc` and aligned) are mapped by
//! glibc itself; small ones (with memprof's header in front) come from the main arena on the
//! process's main thread and from another arena on a second thread (or the main one, when glibc
//! hands that thread an arena already made). The trace says so of each, and knows the flags of
//! every block it recorded.
//!
//! Its own `main` (`harness = false`): the default harness runs a test on a thread of its own,
//! whose blocks would not be the main arena's.

#[cfg(feature = "trace")]
#[global_allocator]
static GLOBAL: memprof::MemProf =
    memprof::MemProf::new().trace("/tmp/memprof-trace-chunk-flags-%p.mptrace");

/// Answers a test runner's `--list` as the default harness would: one test, none ignored.
fn listed() -> bool {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--list") {
        return false;
    }
    if !args.iter().any(|a| a == "--ignored") {
        println!("trace_chunk_flags: test");
    }
    true
}

#[cfg(not(feature = "trace"))]
fn main() {
    listed();
}

#[cfg(feature = "trace")]
fn main() {
    if listed() {
        return;
    }
    use memprof_trace::{ChunkFlags, Trace, Visitor};
    use std::alloc::{Layout, alloc, dealloc};

    const SMALL: usize = 64;
    const BIG: usize = 1 << 20;
    // glibc's threshold rises to the size of any mapped block freed (memprof's own, say): set,
    // it stays at glibc's first value, 128 KiB.
    // SAFETY: `mallopt` only sets the allocator's parameter.
    let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) };
    assert_eq!(set, 1);
    assert!(memprof::is_tracing());

    let small: Vec<Box<[u8; SMALL]>> = (0..4).map(|i| Box::new([i as u8; SMALL])).collect();
    let big = vec![1u8; BIG];
    let mut grown = vec![2u8; SMALL];
    grown.resize(2 * BIG, 3);
    let aligned_layout = Layout::from_size_align(BIG, 4096).unwrap();
    // SAFETY: a valid layout of a non-zero size; freed below with it.
    let aligned = unsafe { alloc(aligned_layout) };
    assert!(!aligned.is_null());
    let (other, other_big) = std::thread::spawn(|| {
        let other: Vec<Box<[u8; SMALL]>> = (0..4).map(|i| Box::new([i as u8; SMALL])).collect();
        (other, vec![4u8; BIG])
    })
    .join()
    .unwrap();

    let address = |p: *const u8| p as u64;
    let main_arena = ChunkFlags {
        mmapped: false,
        main_arena: true,
    };
    // glibc leaves `NON_MAIN_ARENA` clear on the blocks it maps itself, whichever thread asked.
    let mapped = ChunkFlags {
        mmapped: true,
        main_arena: true,
    };
    let other_arena = ChunkFlags {
        mmapped: false,
        main_arena: false,
    };
    let mut expected: Vec<(u64, ChunkFlags, &str)> = Vec::new();
    for b in &small {
        expected.push((address(b.as_ptr()), main_arena, "small, main thread"));
    }
    expected.push((address(big.as_ptr()), mapped, "1 MiB"));
    expected.push((address(grown.as_ptr()), mapped, "grown to 2 MiB"));
    expected.push((address(aligned), mapped, "1 MiB aligned to 4 KiB"));
    // glibc gives a new thread an arena of its own, unless it hands it one already made (the
    // main one too, when a loaded machine made it reuse arenas): the main arena's memory is the
    // program's break, below `sbrk(0)`, and the others' are mappings above it.
    // SAFETY: `sbrk(0)` only reads the current break.
    let brk = unsafe { libc::sbrk(0) } as u64;
    for b in &other {
        let flags = match address(b.as_ptr()) < brk {
            true => main_arena,
            false => other_arena,
        };
        expected.push((address(b.as_ptr()), flags, "small, second thread"));
    }
    expected.push((address(other_big.as_ptr()), mapped, "1 MiB, second thread"));

    let path = memprof::close_trace().unwrap().expect("a trace was open");
    let trace = Trace::open(&path).unwrap();
    struct Nothing;
    impl Visitor for Nothing {}
    let end = trace.visit(&mut Nothing, &mut |_| {}).unwrap();
    for (address, flags, what) in &expected {
        let block =
            end.heap.live.get(*address).unwrap_or_else(|| {
                panic!("the block {what} at {address:#x} is not live in the trace")
            });
        assert_eq!(
            block.flags,
            Some(*flags),
            "the block {what} at {address:#x}"
        );
    }
    let unknown = end.heap.live.values().filter(|b| b.flags.is_none()).count();
    assert_eq!(unknown, 0, "blocks of the trace without flags");

    drop((small, big, grown, other, other_big));
    // SAFETY: the block allocated above with this layout.
    unsafe { dealloc(aligned, aligned_layout) };
    std::fs::remove_file(&path).unwrap();
    println!(
        "trace_chunk_flags: {} blocks' flags as glibc set them",
        expected.len()
    );
}
