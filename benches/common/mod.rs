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
