//! The C ABI: C code and custom allocators report their blocks, and anyone (C, a debugger) can ask
//! for a report. Declared in `include/memprof.h`.
//!
//! Blocks reported here join the same live table as the Rust allocations, with the C caller's
//! stack, so they appear in every report. They only work while memprof is the global allocator of
//! the program, or once any allocation has started it.
//!
//! A reported block must be real memory, readable for its whole size until its free is recorded:
//! the object-graph reports (`log_object_sizes`, `pretty_log_object_graph`) read every live block
//! of the table, these included, looking for pointers, and a made-up or already unmapped address
//! crashes them.

// The functions here are `pub` for C, which finds them by their unmangled names, not for Rust.
#![allow(unreachable_pub)]

use super::Doors;
use crate::header::{BlockRef, Settings};
use crate::native::MallocBlock;
use crate::record;
use std::ffi::{c_int, c_void};
use std::fs::File;
use std::io::{self, Write};
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;

/// Records a block of `size` bytes that the caller allocated at `ptr`, which must stay readable
/// until its free is recorded (the object-graph scanner reads it). A null `ptr` is ignored.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn memprof_record_alloc(ptr: *mut c_void, size: usize) {
    if !ptr.is_null() {
        // Whose block it is, the caller does not say: its chunk flags are not read.
        let _ = record::alloc::<Doors>(
            ptr as usize,
            size,
            BlockRef::Headless,
            Settings::default(),
            MallocBlock::NONE,
        );
    }
}

/// Records that the block at `ptr` is about to be freed. Unknown or null pointers are ignored.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn memprof_record_free(ptr: *mut c_void) {
    if !ptr.is_null() {
        let _ = record::free(ptr as usize, BlockRef::Headless);
    }
}

/// Records a successful reallocation of the block that was at `old_address` (0 for none) to
/// `new_ptr` with `new_size` bytes. The old block is named by its address: after `realloc` its
/// pointer may no longer be used.
#[unsafe(no_mangle)]
pub extern "C" fn memprof_record_realloc(
    old_address: usize,
    new_ptr: *mut c_void,
    new_size: usize,
) {
    if new_ptr.is_null() {
        return;
    }
    let _ = record::realloc::<Doors>(
        old_address,
        BlockRef::Headless,
        BlockRef::Headless,
        new_size,
        Settings::default(),
        || (new_ptr.cast(), MallocBlock::NONE),
    );
}

/// Writes to the open file descriptor `fd`, without closing it.
fn write_to_fd(fd: c_int, write: impl FnOnce(&mut File) -> io::Result<()>) -> c_int {
    if fd < 0 {
        return -1;
    }
    // SAFETY: the caller promises `fd` is an open descriptor for the duration of the call; wrapping
    // it in `ManuallyDrop` keeps the `File` from closing a descriptor it does not own.
    let mut file = ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
    match write(&mut file).and_then(|()| file.flush()) {
        Ok(()) => 0,
        Err(_) => -1,
    }
}

/// Writes the Markdown report (`pretty_log_allocations`) to `fd`. Returns 0, or -1 on error.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn memprof_write_report(fd: c_int) -> c_int {
    write_to_fd(fd, crate::report::pretty_log_allocations)
}

/// Writes the TSV log (`log_allocations`) to `fd`. Returns 0, or -1 on error.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn memprof_write_log(fd: c_int) -> c_int {
    write_to_fd(fd, crate::report::log_allocations)
}
