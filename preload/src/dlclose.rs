//! `dlclose`: the code of a library the program unloads stays in the stacks of the blocks it
//! allocated, and reports name it after it is gone. So the library's own `dlclose` has memprof
//! note the modules loaded (paths, load biases, segments, build ids) before it calls the C
//! library's, which may unload the library and the ones it alone needed: the symbolizer reads
//! their files again to name that code (docs/preload.md).
//!
//! Libraries the C library unloads by itself, past its exported `dlclose` (its name-service and
//! character-set modules), are not seen here.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The C library's `dlclose`, found by [`resolve`] (or at the first call); 0 until then.
static REAL: AtomicUsize = AtomicUsize::new(0);

/// Finds the C library's `dlclose`. Called from the constructor, where looking up may allocate.
pub(crate) fn resolve() {
    // SAFETY: a NUL-terminated name; `RTLD_NEXT` searches the modules loaded after this one.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlclose".as_ptr()) };
    REAL.store(found as usize, Relaxed);
}

/// `dlclose(3)`.
///
/// # Safety
/// As the C library's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    if REAL.load(Relaxed) == 0 {
        // Called before the constructor ran (from another library's constructor).
        resolve();
    }
    memprof::preload::before_dlclose();
    match REAL.load(Relaxed) {
        // No `dlclose` to forward to: the library stays loaded, as `dlclose` of an invalid
        // handle leaves everything.
        0 => -1,
        found => {
            // SAFETY: `dlsym` found the C library's `dlclose`, of this signature.
            let f: unsafe extern "C" fn(*mut c_void) -> c_int =
                unsafe { std::mem::transmute::<usize, _>(found) };
            // SAFETY: the caller's handle.
            unsafe { f(handle) }
        }
    }
}
