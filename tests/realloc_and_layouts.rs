//! realloc moves, grows and shrinks; zero-size values; over-aligned layouts; frees of blocks the
//! table never saw.
//!
//! Counts are this thread's ([`Scope`]): libtest's main thread may allocate while the test runs,
//! which the process's totals (`HeapStats`) would count.

use memprof::{Scope, Snapshot};
use std::alloc::{GlobalAlloc, Layout, System};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// The recorded size of the live block at `ptr`, if any.
fn recorded(ptr: *mut u8) -> Option<u64> {
    let address = ptr as usize;
    let snapshot = Snapshot::take();
    snapshot
        .blocks
        .binary_search_by_key(&address, |b| b.address)
        .ok()
        .map(|i| snapshot.blocks[i].size)
}

#[test]
fn realloc_layouts_and_unknown_frees() {
    // SAFETY: every layout has a non-zero size, every pointer is freed once with the layout it was
    // allocated with, and the unknown block is freed by the allocator that made it (`GLOBAL`
    // forwards to `System`); this holds for the whole test.
    unsafe {
        // Growth and shrink, through realloc: the old block goes, the new one carries the new size.
        let layout = Layout::from_size_align(100, 8).unwrap();
        let scope = Scope::start();
        let a = GLOBAL.alloc(layout);
        assert_eq!(recorded(a), Some(100));
        let b = GLOBAL.realloc(a, layout, 1 << 20);
        assert_eq!(recorded(b), Some(1 << 20));
        if a != b {
            assert_eq!(recorded(a), None, "a moved block leaves its old address");
        }
        let c = GLOBAL.realloc(b, Layout::from_size_align(1 << 20, 8).unwrap(), 10);
        assert_eq!(recorded(c), Some(10));
        let after = scope.stats();
        assert_eq!(
            after.allocated_blocks, 3,
            "a realloc counts as an allocation"
        );
        assert_eq!(after.allocated_bytes, 100 + (1 << 20) + 10);
        GLOBAL.dealloc(c, Layout::from_size_align(10, 8).unwrap());
        assert_eq!(recorded(c), None);

        // Over-aligned layouts keep their alignment and are recorded with their size.
        let big = Layout::from_size_align(3000, 4096).unwrap();
        let p = GLOBAL.alloc_zeroed(big);
        assert_eq!(p as usize % 4096, 0);
        assert_eq!(recorded(p), Some(3000));
        let q = GLOBAL.realloc(p, big, 9000);
        assert_eq!(q as usize % 4096, 0);
        assert_eq!(recorded(q), Some(9000));
        GLOBAL.dealloc(q, Layout::from_size_align(9000, 4096).unwrap());
        assert_eq!(recorded(q), None);

        // A block the table never saw (made by the wrapped allocator directly): freeing it through
        // the profiler changes nothing, and neither does a realloc of it, except for the new block.
        let stats = scope.stats();
        let stranger = System.alloc(layout);
        assert_eq!(recorded(stranger), None);
        GLOBAL.dealloc(stranger, layout);
        let now = scope.stats();
        assert_eq!(
            (now.live_blocks, now.live_bytes),
            (stats.live_blocks, stats.live_bytes)
        );
        let stranger = System.alloc(layout);
        let moved = GLOBAL.realloc(stranger, layout, 200);
        assert_eq!(recorded(moved), Some(200));
        GLOBAL.dealloc(moved, Layout::from_size_align(200, 8).unwrap());
    }

    // Zero-size values never reach the allocator; a zero-size block reported through the C ABI
    // is recorded with size 0.
    let scope = Scope::start();
    let units: Vec<()> = vec![(); 1_000_000];
    let unit = Box::new(());
    assert_eq!(units.len(), 1_000_000);
    drop((units, unit));
    assert_eq!(scope.stats().allocated_blocks, 0);
    let mut place = 0u64;
    let zero = (&mut place as *mut u64).cast();
    // SAFETY: the C ABI's own functions, declared as `include/memprof.h` declares them; `zero`
    // is a live address of this frame.
    unsafe { memprof_record_alloc(zero, 0) };
    assert_eq!(recorded(zero.cast()), Some(0));
    // SAFETY: as above.
    unsafe { memprof_record_free(zero) };
    assert_eq!(recorded(zero.cast()), None);
}

unsafe extern "C" {
    fn memprof_record_alloc(ptr: *mut std::ffi::c_void, size: usize);
    fn memprof_record_free(ptr: *mut std::ffi::c_void);
}
