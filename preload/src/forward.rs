//! The C library's own allocator, which the functions the library defines forward to, and which
//! the library's own allocations use directly ([`Forward`]).

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

// glibc's names for its allocator, which a program's `malloc` cannot replace.
unsafe extern "C" {
    pub(crate) fn __libc_malloc(size: usize) -> *mut c_void;
    pub(crate) fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
    pub(crate) fn __libc_realloc(block: *mut c_void, size: usize) -> *mut c_void;
    pub(crate) fn __libc_free(block: *mut c_void);
    pub(crate) fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    pub(crate) fn __libc_valloc(size: usize) -> *mut c_void;
    pub(crate) fn __libc_pvalloc(size: usize) -> *mut c_void;
}

/// The alignment `malloc` gives every block on the 64-bit targets.
const MALLOC_ALIGN: usize = 16;

/// The library's own allocator: the C library's, never through the functions it defines, so
/// memprof's tables and reports are neither recorded nor looked up. What it holds is memprof's
/// own memory, counted as such ([`memprof::preload::own_memory`]) for the resident-memory
/// breakdown, as the crate counts what it allocates inside its reentrancy guard.
pub(crate) struct Forward;

/// Counts `bytes` more (or less) of memprof's own memory when `block` is not null.
#[inline]
fn count(block: *mut u8, bytes: i64) -> *mut u8 {
    if !block.is_null() {
        memprof::preload::own_memory(bytes);
    }
    block
}

// SAFETY: every block comes from the C library's allocator with the layout's alignment (`malloc`
// aligns to 16, `memalign` to more), and goes back to it.
unsafe impl GlobalAlloc for Forward {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: any size and a power-of-two alignment are valid arguments.
        let block = unsafe {
            if layout.align() <= MALLOC_ALIGN {
                __libc_malloc(layout.size()).cast()
            } else {
                __libc_memalign(layout.align(), layout.size()).cast()
            }
        };
        count(block, layout.size() as i64)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            // SAFETY: `calloc` with a count of one.
            let block = unsafe { __libc_calloc(1, layout.size()).cast() };
            count(block, layout.size() as i64)
        } else {
            // SAFETY: as `alloc`; the block is `layout.size()` bytes long when not null.
            unsafe {
                let block = self.alloc(layout);
                if !block.is_null() {
                    block.write_bytes(0, layout.size());
                }
                block
            }
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        count(block, -(layout.size() as i64));
        // SAFETY: the caller gives back a block of `alloc`.
        unsafe { __libc_free(block.cast()) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            // SAFETY: a block of `alloc` made by `malloc`, which `realloc` keeps aligned to 16.
            let new = unsafe { __libc_realloc(block.cast(), new_size).cast() };
            return count(new, new_size as i64 - layout.size() as i64);
        }
        // SAFETY: the caller's layout with the new size, which it promises is valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a new block, the old one's bytes copied into it, the old one given back.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                new.copy_from_nonoverlapping(block, layout.size().min(new_size));
                self.dealloc(block, layout);
            }
            new
        }
    }
}

/// The C library's `malloc_usable_size`, which the library's own definition hides from `dlsym`'s
/// default search; 0 until [`resolve`].
static USABLE_SIZE: AtomicUsize = AtomicUsize::new(0);

/// Finds the C library's functions that have no `__libc_` name. Called from the constructor
/// (looking them up may allocate) and again by the first caller that comes before it.
pub(crate) fn resolve() {
    // SAFETY: a NUL-terminated name; `RTLD_NEXT` searches the modules loaded after this one.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, c"malloc_usable_size".as_ptr()) };
    USABLE_SIZE.store(found as usize, Relaxed);
}

/// The C library's `malloc_usable_size` of `block`; 0 when it cannot be found.
///
/// # Safety
/// `block` is null or a live block of the C library's allocator.
pub(crate) unsafe fn malloc_usable_size(block: *mut c_void) -> usize {
    if USABLE_SIZE.load(Relaxed) == 0 {
        resolve();
    }
    match USABLE_SIZE.load(Relaxed) {
        0 => 0,
        found => {
            // SAFETY: `dlsym` found the C library's `malloc_usable_size`, of this signature.
            let function: unsafe extern "C" fn(*mut c_void) -> usize =
                unsafe { std::mem::transmute::<usize, _>(found) };
            // SAFETY: the caller's block.
            unsafe { function(block) }
        }
    }
}

/// The module whose `malloc` the program's symbols are bound to, when it is not this library.
pub(crate) fn own_allocator() -> Option<String> {
    // SAFETY: a NUL-terminated name, looked up in the default search order.
    let bound = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()) };
    if bound.is_null() {
        return None;
    }
    // Compared by module: the address of this library's own `malloc`, taken here, would be the
    // one the loader bound, like any exported function's.
    let (module, name) = module_of(bound)?;
    let (own, _) = module_of(own_allocator as *const c_void)?;
    if module == own {
        return None;
    }
    Some(match name.as_str() {
        "" => "the program".to_owned(),
        name => name.to_owned(),
    })
}

/// The base address and file name of the module holding `address`.
fn module_of(address: *const c_void) -> Option<(usize, String)> {
    // SAFETY: `info` is written by `dladdr` before it is read, when it returns non-zero.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `dladdr` only reads the loader's tables for `address`.
    if unsafe { libc::dladdr(address, &mut info) } == 0 {
        return None;
    }
    let name = if info.dli_fname.is_null() {
        String::new()
    } else {
        // SAFETY: `dladdr` gives a NUL-terminated name that lives as long as the module.
        unsafe { CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned()
    };
    Some((info.dli_fbase as usize, name))
}
