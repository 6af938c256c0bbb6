//! What the per-allocation benches share: the measured operations and a way to run them deeper in
//! the stack.

use divan::black_box;
use std::alloc::{GlobalAlloc, Layout};

/// The layout of every measured allocation.
pub const LAYOUT: Layout = match Layout::from_size_align(64, 8) {
    Ok(layout) => layout,
    Err(_) => panic!("valid layout"),
};

/// Calls `f` from `depth` frames further down the stack.
#[inline(never)]
pub fn at_depth(depth: usize, f: &mut dyn FnMut()) {
    if depth == 0 {
        f();
    } else {
        at_depth(black_box(depth - 1), f);
        black_box(());
    }
}

/// One allocation and its free.
pub fn pair(allocator: &dyn GlobalAlloc) {
    // SAFETY: a non-zero-size layout, freed once by the allocator that made it.
    unsafe {
        let p = allocator.alloc(black_box(LAYOUT));
        allocator.dealloc(black_box(p), LAYOUT);
    }
}

/// An allocation, its growth by `realloc`, and its free.
pub fn round_trip(allocator: &dyn GlobalAlloc) {
    // SAFETY: as in `pair`; the realloc'd block is freed with its new size.
    unsafe {
        let p = allocator.alloc(black_box(LAYOUT));
        let q = allocator.realloc(p, LAYOUT, black_box(256));
        allocator.dealloc(q, Layout::from_size_align_unchecked(256, 8));
    }
}

/// A block grown by `realloc` from 16 bytes to 4 KiB in steps of 16 bytes (255 reallocs), as a
/// string or vector that is appended to grows when it cannot reserve ahead, then freed.
pub fn growth(allocator: &dyn GlobalAlloc) {
    // SAFETY: as in `pair`; each realloc passes the block's current layout and a non-zero size,
    // and the block is freed with its last size.
    unsafe {
        let mut size = 16;
        let mut p = allocator.alloc(Layout::from_size_align_unchecked(size, 8));
        while size < 4096 {
            let layout = Layout::from_size_align_unchecked(size, 8);
            size += 16;
            p = allocator.realloc(black_box(p), layout, size);
        }
        allocator.dealloc(p, Layout::from_size_align_unchecked(size, 8));
    }
}
