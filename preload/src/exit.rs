//! `_exit` and `_Exit`: the process ends without running its exit handlers, so the trace that
//! the exit would close is closed first (its last events, symbols and end record written) by the
//! library's own `_exit` and `_Exit`, which then call the C library's. A shell such as `dash`
//! ends every run so, as do programs that must not run their parent's handlers in a child.
//!
//! Only in the process that started the trace (`exec::is_origin`): a forked child's trace is
//! its parent's, and a `vfork` child shares its parent's memory, so neither closes anything.
//! Attached to a running process (`memprof attach`), the library's own entries for them
//! (`attach.rs`) close the trace the same way.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The C library's `_exit`, found by [`resolve`]; 0 when not found.
static REAL: AtomicUsize = AtomicUsize::new(0);

/// Finds the C library's `_exit` (`_Exit` is the same function). Called from the constructor.
pub(crate) fn resolve() {
    find(libc::RTLD_NEXT);
}

/// Finds the C library's `_exit` in a library loaded late (`memprof attach`): the program's
/// modules, loaded before this one, come first in the search.
pub(crate) fn resolve_late() {
    find(libc::RTLD_DEFAULT);
}

/// Looks `_exit` up from `handle`, a pseudo-handle; this library's own is not taken.
fn find(handle: *mut std::ffi::c_void) {
    // SAFETY: a NUL-terminated name, looked up from a pseudo-handle.
    let found = unsafe { libc::dlsym(handle, c"_exit".as_ptr()) } as usize;
    if crate::got::base_of(found) != crate::got::base_of(find as *const () as usize) {
        REAL.store(found, Relaxed);
    }
}

/// Ends the process with `status` after closing its trace.
fn end(status: c_int) -> ! {
    // Nothing to do when no trace is open, which the call finds out.
    if crate::exec::is_origin() {
        memprof::preload::before_exit();
    }
    forward(status)
}

/// The C library's `_exit`, or the `exit_group` system call.
pub(crate) fn forward(status: c_int) -> ! {
    match REAL.load(Relaxed) {
        0 => {}
        found => {
            // SAFETY: `dlsym` found the C library's `_exit`, of this signature.
            let f: extern "C" fn(c_int) -> ! = unsafe { std::mem::transmute::<usize, _>(found) };
            f(status)
        }
    }
    // SAFETY: `exit_group` ends every thread of the process; it does not return.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    // Never reached; `exit_group` does not return.
    std::process::abort()
}

/// `_exit(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn _exit(status: c_int) -> ! {
    end(status)
}

/// `_Exit(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn _Exit(status: c_int) -> ! {
    end(status)
}
