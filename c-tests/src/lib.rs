//! The C side of memprof's C ABI tests: a tiny pool allocator written in C that reports every block
//! it hands out.

use std::ffi::{c_int, c_void};

unsafe extern "C" {
    /// Allocates `count` nodes of `size` bytes and the array that holds them, all through the pool.
    pub fn c_make_nodes(count: c_int, size: usize) -> *mut *mut c_void;
    /// Grows every node to `size` bytes with the pool's realloc.
    pub fn c_grow_nodes(nodes: *mut *mut c_void, count: c_int, size: usize);
    /// Frees the nodes and their array.
    pub fn c_free_nodes(nodes: *mut *mut c_void, count: c_int);
    /// Calls `memprof_write_report(fd)` from C.
    pub fn c_write_report(fd: c_int) -> c_int;
    /// Calls `memprof_write_log(fd)` from C.
    pub fn c_write_log(fd: c_int) -> c_int;
}
