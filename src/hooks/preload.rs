//! The preloaded library's door (feature `preload`, for the `memprof-preload` member only): the C
//! library's allocation functions, which that library interposes and forwards to the C library's
//! own, report every block here.
//!
//! Blocks have no header in this mode: the table knows them by address. A pointer the table does
//! not hold (a block made before the library started recording, by the dynamic loader, or left
//! unsampled) is simply not found, and goes back to the C library as it came: nothing is read in
//! front of it, so no block is ever misread.
//!
//! The library's `mmap`, `munmap` and `mremap` report the program's own mappings here too
//! ([`mmap`], [`munmap`], [`mremap`]); memprof's own calls, made inside its reentrancy guard,
//! are not recorded.
//!
//! Not part of the crate's interface: hidden from its documentation, and only built with the
//! feature.

use super::Doors;
use crate::header::{BlockRef, Settings};
use crate::native::{self, MallocBlock};
use crate::record;
use std::ffi::c_void;

/// Starts the profiler: reads the configuration, opens the trace, installs the signals and the
/// at-exit report. The library's constructor calls it once, before recording. `malloc` is the C
/// library's own `malloc` the library forwards to: when glibc defines it, the trace records
/// the chunk flags of its blocks.
pub fn start(malloc: *const c_void) {
    crate::capture::trim::count_outside();
    super::PRELOADED.store(true, std::sync::atomic::Ordering::Relaxed);
    native::note_malloc(Some(malloc));
    record::start_now::<Doors>(Settings::default());
}

/// Builds, when the stack walk reads DWARF, its registry of the loaded modules now: the library
/// attached to a running process (`memprof attach`) calls it after [`start`], while the process
/// stands still, so that its threads' first walks do not capture nothing while one of them builds
/// it.
pub fn prepare_walks() {
    if crate::config::get().unwinder == crate::config::Unwinder::Dwarf {
        crate::guard::untracked(crate::capture::dwarf::prepare);
    }
}

/// Records a block of `size` bytes that the C library just returned at `address` (not null).
///
/// # Safety
///
/// `address` is a live block the C library's allocator (the `malloc` given to [`start`])
/// returned, not handed to the program yet.
#[inline(always)]
pub unsafe fn alloc(address: usize, size: usize) {
    // SAFETY: the caller's block, live through the call.
    let malloc = unsafe { MallocBlock::new(address as *const u8) };
    let _ = record::alloc::<Doors>(
        address,
        size,
        BlockRef::Headless,
        Settings::default(),
        malloc,
    );
}

/// Forgets the block at `address` (not null) before the C library frees it.
#[inline(always)]
pub fn free(address: usize) {
    // The C library's free reads the chunk's size word in front of the block once the table is
    // done: fetched now, the two cache misses of a long-lived block's free overlap.
    native::prefetch(address.wrapping_sub(8));
    let _ = record::free(address, BlockRef::Headless);
}

/// Reallocates the block at `old_address` (not null) to `new_size` bytes through `realloc`, which
/// returns the new block or null: the old block leaves the table before `realloc` may free it, so
/// that another thread given its address at once is never the one forgotten.
///
/// # Safety
///
/// `realloc` returns null or a live block of the C library's allocator (the `malloc` given to
/// [`start`]), not handed to the program yet.
#[inline(always)]
pub unsafe fn realloc(
    old_address: usize,
    new_size: usize,
    realloc: impl FnOnce() -> *mut u8,
) -> *mut u8 {
    // As in `free`: the C library reads the old chunk's size word after the table's work.
    native::prefetch(old_address.wrapping_sub(8));
    record::realloc::<Doors>(
        old_address,
        BlockRef::Headless,
        BlockRef::Headless,
        new_size,
        Settings::default(),
        || {
            let block = realloc();
            // SAFETY: the caller's promise: null or the C library's new block, live through
            // the path's call.
            (block, unsafe { MallocBlock::new(block) })
        },
    )
    .map_or(std::ptr::null_mut(), |(new, _)| new)
}

/// Records a mapping the program's `mmap` just made at `address`, `length` bytes rounded up to
/// whole pages, with `mmap`'s `prot` and `flags`.
#[inline(always)]
pub fn mmap(address: usize, length: usize, prot: i32, flags: i32) {
    record::mappings::mmap::<Doors>(address, length, prot as u32, flags as u32);
}

/// Unmaps `[address, address + length)` (`length` rounded up to whole pages) through `unmap`,
/// which returns whether it succeeded and what the program is to be given: the recorded pages
/// leave the live mappings before it runs, and come back if it fails.
#[inline(always)]
pub fn munmap<R>(address: usize, length: usize, unmap: impl FnOnce() -> (bool, R)) -> R {
    record::mappings::munmap(address, length, unmap)
}

/// Remaps `[old, old + old_length)` to `new_length` bytes (both rounded up to whole pages)
/// through `remap`, which returns the new address (`None`: it failed) and what the program is to
/// be given. `keeps_old`: the old range stays mapped (`MREMAP_DONTUNMAP`, or an old length of 0).
#[inline(always)]
pub fn mremap<R>(
    old: usize,
    old_length: usize,
    new_length: usize,
    keeps_old: bool,
    remap: impl FnOnce() -> (Option<usize>, R),
) -> R {
    record::mappings::mremap::<Doors, R>(old, old_length, new_length, keeps_old, remap)
}

/// Counts a change of memprof's own memory (`MemoryBreakdown::memprof_own`, negative when
/// freed): the library's own global allocator calls it for each of its blocks, which are all
/// memprof's (its tables, caches, reports), as `MemProf` counts what it allocates inside the
/// reentrancy guard. One relaxed atomic add; on the library's allocation path, allocates nothing.
#[inline]
pub fn own_memory(bytes: i64) {
    crate::memory::own_changed(bytes);
}

/// Writes `memprof: ` and `message` on stderr, as memprof's own warnings do: a failed write is
/// ignored, where `eprintln!` would panic (and abort, in a function the C library calls).
pub fn warn(message: std::fmt::Arguments<'_>) {
    crate::config::warn(message);
}

/// Notes the modules loaded now, so that the code of the library about to be unloaded can still be
/// named once it is gone (its path, load bias, segments and build id: the symbolizer reads its
/// file again). The library's `dlclose` calls it before the C library's; off the allocation path,
/// inside the reentrancy guard. Nothing when memprof is off.
pub fn before_dlclose() {
    if crate::config::get().enabled {
        crate::guard::untracked(crate::modules::note_loaded);
    }
}

/// Gives the settings (`MEMPROF_*` names and values) that [`start`] reads in place of the
/// process's environment: the library attached to a running process (`memprof attach`) takes
/// them from the command. False when the configuration was read already.
pub fn configure(pairs: Vec<(String, String)>) -> bool {
    crate::config::give(pairs)
}

/// In a child forked while the library was attached to its parent: the child is not the process
/// `memprof attach` attached to, so its exit writes no `MEMPROF_OUTPUT` file (those are the
/// parent's, written at its detach). Its trace is its parent's already, not written here. Only
/// stores a flag: the library's `fork` handler calls it in the child.
pub fn leave_child() {
    super::triggers::skip_exit_files();
}

/// Closes the trace (when one is written) as the exit would, saying where it went: the
/// library's `_exit` and `_Exit` call it in the process that started it, since the C library's
/// `_exit` ends the process without running exit handlers (a shell such as `dash` ends so).
/// `_exit` may be called from a signal handler that interrupted the C library's allocator: this
/// thread allocates nothing and waits for the trace's writer a bounded time, the trace has no
/// memory record, and the `MEMPROF_OUTPUT` files and the at-exit report are not written (they
/// need this thread to allocate).
pub fn before_exit() {
    crate::trace::close_before_exit();
}

/// Ends recording in a process the library was attached to, as its exit would: closes the trace
/// (its events, symbols and end record written) and writes the `MEMPROF_OUTPUT` files, which the
/// exit then leaves alone. Called once the library's functions are no longer bound. Returns the
/// trace's error, if closing it failed.
pub fn detach() -> std::io::Result<()> {
    crate::guard::untracked(|| {
        let closed = crate::trace::close_trace().map(drop);
        super::triggers::write_exit_files();
        closed
    })
}
