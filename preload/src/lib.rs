//! `libmemprof_preload.so`: memprof for a program that was never built with it.
//!
//! ```text
//! LD_PRELOAD=/path/to/libmemprof_preload.so MEMPROF_PRINT_AT_EXIT=1 ./program
//! memprof run -- ./program            # the same, with a trace and its summary
//! ```
//!
//! The library defines the C library's allocation functions (`malloc`, `calloc`, `realloc`,
//! `reallocarray`, `free`, `posix_memalign`, `aligned_alloc`, `memalign`, `valloc`, `pvalloc`,
//! `malloc_usable_size`), which the dynamic loader then binds every module of the program to, C++'s
//! `operator new` and `delete` included (libstdc++ calls them). Each forwards to the C library's
//! own (`__libc_malloc` and its siblings, bound at link time: there is no `dlsym` to bootstrap)
//! and reports the block to memprof's table, by address: blocks get no header, so a pointer
//! memprof never recorded (made before the library's constructor ran, by the dynamic loader, or
//! not sampled) is not found there and goes back to the C library untouched. Everything else is
//! the crate's: stacks, symbols, reports, exports, trace, sampling, signals, the `MEMPROF_*`
//! variables (docs/preload.md).
//!
//! It also defines `mmap`, `mmap64`, `munmap` and `mremap` (`mappings`): the program's own
//! mappings are recorded with their stacks, listed in the trace and its summary; and `dlclose`
//! (`dlclose`), which notes the modules loaded before a library goes, so that its code is still
//! named in reports.
//!
//! Loaded by `dlopen` into a process already running (`memprof attach`), it starts only when told
//! to, and redirects the modules' entries of those functions to its own (`attach`, `got`).
//!
//! The library's own allocations (memprof's tables, its reports) go to the C library directly
//! ([`Forward`]), never through the functions it defines.

mod attach;
mod dlclose;
mod exec;
mod exit;
mod follow;
mod forward;
mod got;
mod mappings;

use forward::{
    __libc_calloc, __libc_free, __libc_malloc, __libc_memalign, __libc_pvalloc, __libc_realloc,
    __libc_valloc,
};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

#[global_allocator]
static FORWARD: forward::Forward = forward::Forward;

/// Set by the constructor once memprof started: blocks made before are never recorded.
static READY: AtomicBool = AtomicBool::new(false);

/// Whether any allocation function was called once [`READY`]: a program whose own allocator is linked
/// into it never calls them, and the library says so at exit.
static SEEN: AtomicBool = AtomicBool::new(false);

/// Records a block the C library just returned, once the library is ready.
///
/// `block` is null or what one of the C library's own allocation functions just returned, not
/// given to the program yet (every caller here).
#[inline(always)]
fn recorded(block: *mut c_void, size: usize) -> *mut c_void {
    if !block.is_null() && READY.load(Relaxed) {
        seen();
        // SAFETY: a live block of the C library's allocator, as every caller passes, still only
        // this library's until it returns it.
        unsafe { memprof::preload::alloc(block as usize, size) };
    }
    block
}

/// Notes that the program calls these functions.
#[inline(always)]
fn seen() {
    if !SEEN.load(Relaxed) {
        SEEN.store(true, Relaxed);
    }
}

/// `malloc(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    imp_malloc(size)
}

/// What [`malloc`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) extern "C" fn imp_malloc(size: usize) -> *mut c_void {
    allocate(size)
}

/// What [`malloc`] does. The functions defined here call each other through these private
/// functions, never by their exported names: a call by name goes through the PLT to the first
/// `malloc` in the loader's search order, which may be another interposer's preloaded before
/// this library, and that one would see the program's one call twice (`realloc(NULL, n)` as a
/// `realloc` and a `malloc`).
#[inline(always)]
fn allocate(size: usize) -> *mut c_void {
    // SAFETY: the C library's own `malloc`, which any size may be given.
    recorded(unsafe { __libc_malloc(size) }, size)
}

/// `calloc(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    imp_calloc(count, size)
}

/// What [`calloc`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) extern "C" fn imp_calloc(count: usize, size: usize) -> *mut c_void {
    // SAFETY: the C library's own `calloc`, which checks the product for overflow.
    let block = unsafe { __libc_calloc(count, size) };
    recorded(block, count.wrapping_mul(size))
}

/// `free(3)`.
///
/// # Safety
/// `block` is null or a block of the C library's allocator not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(block: *mut c_void) {
    // SAFETY: the caller's arguments, as the function's.
    unsafe { imp_free(block) }
}

/// What [`free`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) unsafe extern "C" fn imp_free(block: *mut c_void) {
    if block.is_null() {
        return;
    }
    // Forgotten before it is freed: once freed, its address may go to another thread at once.
    if READY.load(Relaxed) {
        memprof::preload::free(block as usize);
    }
    // SAFETY: the caller's block, given back to the allocator that made it.
    unsafe { __libc_free(block) }
}

/// `realloc(3)`.
///
/// # Safety
/// `block` is null or a block of the C library's allocator not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(block: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: the caller's arguments, as the function's.
    unsafe { imp_realloc(block, size) }
}

/// What [`realloc`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) unsafe extern "C" fn imp_realloc(block: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: as the caller's.
    unsafe { reallocate(block, size) }
}

/// What [`realloc`] does (see [`allocate`]).
///
/// # Safety
/// As [`realloc`].
#[inline(always)]
unsafe fn reallocate(block: *mut c_void, size: usize) -> *mut c_void {
    if block.is_null() {
        return allocate(size);
    }
    if !READY.load(Relaxed) {
        // SAFETY: the caller's block.
        return unsafe { __libc_realloc(block, size) };
    }
    seen();
    if size == 0 {
        // The C library frees the block and returns null.
        memprof::preload::free(block as usize);
        // SAFETY: the caller's block.
        return unsafe { __libc_realloc(block, 0) };
    }
    // SAFETY: the caller's block; memprof forgets it before the call may free it. The closure
    // returns the C library's new block (or null), which memprof records before the program
    // has it.
    unsafe {
        memprof::preload::realloc(block as usize, size, || __libc_realloc(block, size).cast())
    }
    .cast()
}

/// `reallocarray(3)`.
///
/// # Safety
/// As [`realloc`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(
    block: *mut c_void,
    count: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: the caller's arguments, as the function's.
    unsafe { imp_reallocarray(block, count, size) }
}

/// What [`reallocarray`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) unsafe extern "C" fn imp_reallocarray(
    block: *mut c_void,
    count: usize,
    size: usize,
) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: as the caller's.
        Some(bytes) => unsafe { reallocate(block, bytes) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// `memalign(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    imp_memalign(align, size)
}

/// What [`memalign`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) extern "C" fn imp_memalign(align: usize, size: usize) -> *mut c_void {
    aligned(align, size)
}

/// What [`memalign`] does (see [`allocate`]).
#[inline(always)]
fn aligned(align: usize, size: usize) -> *mut c_void {
    // SAFETY: the C library's own `memalign`, which checks `align`.
    recorded(unsafe { __libc_memalign(align, size) }, size)
}

/// `aligned_alloc(3)`: the C library's `memalign`, as glibc's own is.
#[unsafe(no_mangle)]
pub extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    imp_aligned_alloc(align, size)
}

/// What [`aligned_alloc`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) extern "C" fn imp_aligned_alloc(align: usize, size: usize) -> *mut c_void {
    aligned(align, size)
}

/// `posix_memalign(3)`.
///
/// # Safety
/// `out` is valid for a write of a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    // SAFETY: the caller's arguments, as the function's.
    unsafe { imp_posix_memalign(out, align, size) }
}

/// What [`posix_memalign`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) unsafe extern "C" fn imp_posix_memalign(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    // SAFETY: a valid alignment, checked above.
    let block = unsafe { __libc_memalign(align, size) };
    if block.is_null() {
        return libc::ENOMEM;
    }
    // Recorded before the program may read it.
    recorded(block, size);
    // SAFETY: the caller gives a place for the pointer.
    unsafe { out.write(block) };
    0
}

/// `valloc(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn valloc(size: usize) -> *mut c_void {
    imp_valloc(size)
}

/// What [`valloc`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) extern "C" fn imp_valloc(size: usize) -> *mut c_void {
    // SAFETY: the C library's own `valloc`.
    recorded(unsafe { __libc_valloc(size) }, size)
}

/// `pvalloc(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn pvalloc(size: usize) -> *mut c_void {
    imp_pvalloc(size)
}

/// What [`pvalloc`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) extern "C" fn imp_pvalloc(size: usize) -> *mut c_void {
    // SAFETY: the C library's own `pvalloc`.
    recorded(unsafe { __libc_pvalloc(size) }, size)
}

/// `malloc_usable_size(3)`: the C library's answer, since its blocks are given out unchanged.
///
/// # Safety
/// `block` is null or a live block of the C library's allocator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(block: *mut c_void) -> usize {
    // SAFETY: the caller's arguments, as the function's.
    unsafe { imp_malloc_usable_size(block) }
}

/// What [`malloc_usable_size`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) unsafe extern "C" fn imp_malloc_usable_size(block: *mut c_void) -> usize {
    // SAFETY: as the caller's.
    unsafe { forward::malloc_usable_size(block) }
}

/// Sets the calling thread's `errno`.
fn set_errno(value: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's `errno`, valid for the thread's life.
    unsafe { *libc::__errno_location() = value };
}

/// The constructor: runs when the dynamic loader has loaded the program and its libraries, before
/// the program's own constructors, while the process has one thread. Loaded by `dlopen` into a
/// running process instead (`memprof attach`), it only notes that: `memprof_attach` starts
/// memprof then, with the settings the command gives (`attach`).
extern "C" fn init() {
    if attach::loaded_late() {
        attach::note_dlopened();
        return;
    }
    follow::apply();
    forward::resolve();
    exec::resolve();
    exit::resolve();
    dlclose::resolve();
    mappings::init();
    memprof::preload::start(__libc_malloc as *const c_void);
    READY.store(true, Relaxed);
    // SAFETY: `unseen` is an `extern "C" fn()` that does not unwind.
    unsafe { libc::atexit(unseen) };
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;

/// At exit: says so when the program's `malloc` is not the library's (an allocator linked into
/// the program), rather than leave an empty profile unexplained. A program that allocated nothing
/// through the C library (`true`) says nothing.
extern "C" fn unseen() {
    if memprof::Config::current().enabled
        && !SEEN.load(Relaxed)
        && let Some(module) = forward::own_allocator()
    {
        memprof::preload::warn(format_args!(
            "no allocation was recorded in process {}: its malloc is {module}'s, not \
             libmemprof_preload.so's (an allocator linked into the program)",
            std::process::id(),
        ));
    }
}
