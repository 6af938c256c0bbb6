//! The preloaded library's door (feature `preload`, for the `memprof-preload` member only): the C
//! library's allocation functions, which that library interposes and forwards to the C library's
//! own, report every block here.
//!
//! Blocks have no header in this mode: the table knows them by address. A pointer the table does
//! not hold (a block made before the library started recording, by the dynamic loader, or left
//! unsampled) is simply not found, and goes back to the C library as it came: nothing is read in
//! front of it, so no block is ever misread.
//!
//! Not part of the crate's interface: hidden from its documentation, and only built with the
//! feature.

use super::Doors;
use crate::header::{BlockRef, Settings};
use crate::record;

/// Starts the profiler: reads the configuration, opens the trace, installs the signals and the
/// at-exit report. The library's constructor calls it once, before recording.
pub fn start() {
    record::start_now::<Doors>(Settings::default());
}

/// Records a block of `size` bytes that the C library just returned at `address` (not null).
#[inline(always)]
pub fn alloc(address: usize, size: usize) {
    let _ = record::alloc::<Doors>(address, size, BlockRef::Headless, Settings::default());
}

/// Forgets the block at `address` (not null) before the C library frees it.
#[inline(always)]
pub fn free(address: usize) {
    let _ = record::free(address, BlockRef::Headless);
}

/// Reallocates the block at `old_address` (not null) to `new_size` bytes through `realloc`, which
/// returns the new block or null: the old block leaves the table before `realloc` may free it, so
/// that another thread given its address at once is never the one forgotten.
#[inline(always)]
pub fn realloc(old_address: usize, new_size: usize, realloc: impl FnOnce() -> *mut u8) -> *mut u8 {
    record::realloc::<Doors>(
        old_address,
        BlockRef::Headless,
        BlockRef::Headless,
        new_size,
        Settings::default(),
        realloc,
    )
    .map_or(std::ptr::null_mut(), |(new, _)| new)
}
