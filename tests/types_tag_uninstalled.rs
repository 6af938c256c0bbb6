//! Without memprof as the global allocator, tagging does nothing and costs next to nothing.

use std::hint::black_box;
use std::time::Instant;

struct Foo {
    id: u64,
}

#[test]
fn tags_are_free_when_memprof_is_not_installed() {
    const CALLS: u64 = 1_000_000;
    let foo = Box::new(Foo { id: 3 });
    let started = Instant::now();
    for _ in 0..CALLS {
        memprof::tag(black_box(&foo));
    }
    let per_call = started.elapsed().as_nanos() as f64 / CALLS as f64;
    let foo = memprof::tagged(foo);
    eprintln!("memprof::tag without memprof installed: {per_call:.1} ns per call");
    // Nothing was recorded, so nothing was registered: the call returned before any work.
    assert_eq!(memprof::HeapStats::get().total_blocks, 0);
    assert!(memprof::types::tag_names().is_empty());
    assert_eq!(foo.id, 3);
}
