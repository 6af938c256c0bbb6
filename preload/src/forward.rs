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
/// memprof's tables and reports are neither recorded nor looked up.
pub(crate) struct Forward;

// SAFETY: every block comes from the C library's allocator with the layout's alignment (`malloc`
// aligns to 16, `memalign` to more), and goes back to it.
unsafe impl GlobalAlloc for Forward {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: any size and a power-of-two alignment are valid arguments.
        unsafe {
            if layout.align() <= MALLOC_ALIGN {
                __libc_malloc(layout.size()).cast()
            } else {
                __libc_memalign(layout.align(), layout.size()).cast()
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            // SAFETY: `calloc` with a count of one.
            unsafe { __libc_calloc(1, layout.size()).cast() }
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

    unsafe fn dealloc(&self, block: *mut u8, _: Layout) {
        // SAFETY: the caller gives back a block of `alloc`.
        unsafe { __libc_free(block.cast()) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            // SAFETY: a block of `alloc` made by `malloc`, which `realloc` keeps aligned to 16.
            return unsafe { __libc_realloc(block.cast(), new_size).cast() };
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

/// The module whose `malloc` the program's symbols are bound to, when it is not this library's.
pub(crate) fn own_allocator() -> Option<String> {
    // SAFETY: a NUL-terminated name, looked up in the default search order.
    let bound = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()) };
    if bound.is_null() {
        return None;
    }
    // SAFETY: `info` is written by `dladdr` before it is read, when it returns non-zero.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `bound` is an address; `dladdr` only reads the loader's tables.
    if unsafe { libc::dladdr(bound, &mut info) } == 0 || info.dli_fname.is_null() {
        return Some("another module".to_owned());
    }
    // This library's own module, found from a function it does not export: `crate::malloc`'s
    // address, taken here, would be the one the loader binds `malloc` to (the GOT's), which is
    // the program's own when it defines one, and would compare equal to `bound`.
    // SAFETY: `own` is written by `dladdr` before it is read, when it returns non-zero.
    let mut own: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: the address of a function of this library; `dladdr` only reads the loader's tables.
    let found = unsafe { libc::dladdr(own_allocator as *const c_void, &mut own) };
    if found != 0 && std::ptr::eq(own.dli_fbase, info.dli_fbase) {
        return None;
    }
    // SAFETY: `dladdr` gives a NUL-terminated name that lives as long as the module.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
    Some(match name.as_ref() {
        "" => "the program".to_owned(),
        name => name.to_owned(),
    })
}
