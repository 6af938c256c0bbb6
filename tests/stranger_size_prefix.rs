//! Blocks of the wrapped allocator freed through memprof (which `GlobalAlloc` forbids, but
//! programs do): an allocator that keeps `[size][u64::MAX]` (a size and an in-use mark) in front
//! of its blocks gets each back at its own address and layout, even at an address where that
//! size passes memprof's size check.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// Bytes the test allocator keeps in front of its blocks.
const PREFIX: usize = 16;

/// Bytes of the arena the test's strangers are placed in.
const ARENA: usize = 16 << 20;

/// An allocator over `System` that writes `[size][u64::MAX]` in front of every block, and hands
/// out blocks of its arena at chosen addresses, whose free it remembers instead of doing.
struct Prefixed {
    arena: AtomicUsize,
    freed: AtomicUsize,
    freed_size: AtomicUsize,
}

/// Bytes in front of a block of `layout`: the prefix, or its alignment if more.
fn pad(layout: Layout) -> usize {
    layout.align().max(PREFIX)
}

fn prefixed(layout: Layout) -> Layout {
    Layout::from_size_align(layout.size() + pad(layout), pad(layout)).unwrap()
}

/// Writes the allocator's prefix in front of `ptr`, a block of `size` bytes.
unsafe fn write_prefix(ptr: *mut u8, size: usize) {
    // SAFETY: the caller's block has `PREFIX` bytes of its allocator's in front.
    unsafe {
        ptr.sub(PREFIX).cast::<u64>().write_unaligned(size as u64);
        ptr.sub(8).cast::<u64>().write_unaligned(u64::MAX);
    }
}

// SAFETY: blocks are `System`'s, `pad` bytes in (aligned as asked), taken back from there with
// the same layout; blocks of the arena are never reused.
unsafe impl GlobalAlloc for Prefixed {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: a valid layout, `pad` bytes longer and as aligned.
        unsafe {
            let base = System.alloc(prefixed(layout));
            if base.is_null() {
                return base;
            }
            let ptr = base.add(pad(layout));
            write_prefix(ptr, layout.size());
            ptr
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let arena = self.arena.load(SeqCst);
        if arena != 0 && (arena..arena + ARENA).contains(&(ptr as usize)) {
            self.freed.store(ptr as usize, SeqCst);
            self.freed_size.store(layout.size(), SeqCst);
            return;
        }
        // SAFETY: `ptr` came from `alloc` with `layout`.
        unsafe { System.dealloc(ptr.sub(pad(layout)), prefixed(layout)) }
    }
}

#[global_allocator]
static GLOBAL: memprof::MemProf<Prefixed> = memprof::MemProf::wrap(Prefixed {
    arena: AtomicUsize::new(0),
    freed: AtomicUsize::new(0),
    freed_size: AtomicUsize::new(0),
});

/// Whether memprof's size check (the size in the low 48 bits, a hash of the address above)
/// passes for a plain size at `address`: when the hash is 0.
fn size_check_passes(address: usize) -> bool {
    (address as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48 == 0
}

#[test]
fn a_size_and_an_in_use_mark_never_pass_for_a_header() {
    // Make sure recording started, so that blocks under 64 KiB carry headers.
    drop(std::hint::black_box(vec![1u8; 10]));
    let layout = Layout::from_size_align(40, 8).unwrap();
    // SAFETY: the arena is `System`'s, never freed; the test's strangers lie inside it, each with
    // its prefix in front, and are handed to memprof as the wrapped allocator's blocks.
    unsafe {
        let arena = System.alloc(Layout::from_size_align(ARENA, 4096).unwrap()) as usize;
        assert_ne!(arena, 0);
        GLOBAL.inner().arena.store(arena, SeqCst);
        let chosen: Vec<usize> = (arena + 4096..arena + ARENA - 4096)
            .step_by(16)
            .filter(|&a| size_check_passes(a))
            .take(8)
            .collect();
        assert!(chosen.len() >= 4, "{chosen:x?}");
        for (i, &address) in chosen.iter().enumerate() {
            let ptr = address as *mut u8;
            write_prefix(ptr, layout.size());
            if i % 2 == 0 {
                GLOBAL.dealloc(ptr, layout);
            } else {
                // A realloc moves it into a block of memprof's and frees it.
                let moved = GLOBAL.realloc(ptr, layout, 80);
                assert!(!moved.is_null());
                GLOBAL.dealloc(moved, Layout::from_size_align(80, 8).unwrap());
            }
            assert_eq!(
                (
                    GLOBAL.inner().freed.load(SeqCst),
                    GLOBAL.inner().freed_size.load(SeqCst)
                ),
                (address, layout.size()),
                "the block at {address:#x} was freed at the wrong address or layout"
            );
        }
    }
    // memprof's own blocks still go back as they should.
    let kept: Vec<Vec<u8>> = (0..1000).map(|i| vec![i as u8; i % 200 + 1]).collect();
    assert_eq!(
        kept.iter().map(Vec::len).sum::<usize>(),
        (0..1000).map(|i| i % 200 + 1).sum()
    );
}
