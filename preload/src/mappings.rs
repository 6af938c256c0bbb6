//! The C library's mapping functions: `mmap`, `mmap64`, `munmap`, `mremap`, made as the system
//! calls they are and reported to memprof, which records the program's own mappings with their
//! stacks (bytehound's `/mmaps`), so that memory outside the heap is not invisible.
//!
//! They make the system call themselves (`syscall(2)`, which returns -1 and sets `errno` on
//! failure; these functions then return `MAP_FAILED` or -1 as glibc's wrappers do): glibc's own
//! `__mmap` is private to it. Only the program's calls come here: glibc's allocator and the
//! dynamic loader map memory through glibc's internal functions, never through these symbols.
//! memprof's own calls (the trace writer, the symbolizer's files) do come here, bound within this
//! library, and are not recorded: they are made inside memprof's reentrancy guard.
//!
//! `mremap` is variadic in C (`new_address`, read only with `MREMAP_FIXED`), and stable Rust cannot
//! define a variadic function. It is defined with five fixed arguments: on x86-64 and aarch64
//! (the System V and AAPCS64 calling conventions) a variadic argument of integer class is passed
//! in the same register as the fifth fixed one would be, and a caller that passes only four leaves
//! a register unset whose value is never used (the kernel reads it only with `MREMAP_FIXED`).

use std::ffi::{c_int, c_long, c_void};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The page size, read by the constructor ([`init`]); 4096 until then.
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// Reads the page size. Called from the library's constructor.
pub(crate) fn init() {
    // SAFETY: `sysconf` only reads the auxiliary vector for this name.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 && (page as usize).is_power_of_two() {
        PAGE.store(page as usize, Relaxed);
    }
}

/// `length` rounded up to whole pages, as the kernel counts it.
fn pages(length: usize) -> usize {
    let page = PAGE.load(Relaxed);
    length.saturating_add(page - 1) & !(page - 1)
}

/// Whether the library records now (its constructor ran).
fn ready() -> bool {
    crate::READY.load(Relaxed)
}

/// `mmap(2)`.
///
/// # Safety
/// As the system call's: a mapping over pages in use (`MAP_FIXED`) is the caller's to make.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    address: *mut c_void,
    length: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    // SAFETY: the caller's arguments, as the function's.
    unsafe { imp_mmap(address, length, prot, flags, fd, offset) }
}

/// What [`mmap`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) unsafe extern "C" fn imp_mmap(
    address: *mut c_void,
    length: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    // SAFETY: the system call with the caller's arguments; it returns -1 and sets `errno` on
    // failure.
    let mapped = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            address,
            length,
            c_long::from(prot),
            c_long::from(flags),
            c_long::from(fd),
            offset,
        )
    };
    if mapped == -1 {
        return libc::MAP_FAILED;
    }
    if ready() {
        memprof::preload::mmap(mapped as usize, pages(length), prot, flags);
    }
    mapped as *mut c_void
}

/// `mmap64(2)`: `mmap` on the 64-bit targets, where `off_t` is 64 bits already.
///
/// # Safety
/// As [`mmap`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    address: *mut c_void,
    length: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off64_t,
) -> *mut c_void {
    // SAFETY: the caller's arguments, as the function's.
    unsafe { imp_mmap64(address, length, prot, flags, fd, offset) }
}

/// What [`mmap64`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) unsafe extern "C" fn imp_mmap64(
    address: *mut c_void,
    length: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off64_t,
) -> *mut c_void {
    // SAFETY: as the caller's.
    unsafe { imp_mmap(address, length, prot, flags, fd, offset) }
}

/// `munmap(2)`.
///
/// # Safety
/// As the system call's: the pages are the caller's to give up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(address: *mut c_void, length: usize) -> c_int {
    // SAFETY: the caller's arguments, as the function's.
    unsafe { imp_munmap(address, length) }
}

/// What [`munmap`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) unsafe extern "C" fn imp_munmap(address: *mut c_void, length: usize) -> c_int {
    let call = || {
        // SAFETY: the system call with the caller's arguments.
        let result = unsafe { libc::syscall(libc::SYS_munmap, address, length) };
        (result == 0, result as c_int)
    };
    let page = PAGE.load(Relaxed);
    // What the kernel refuses (an unaligned address, a zero length) changes nothing recorded.
    if !ready() || length == 0 || !(address as usize).is_multiple_of(page) {
        return call().1;
    }
    memprof::preload::munmap(address as usize, pages(length), call)
}

/// `mremap(2)`, with `new_address` as a fixed fifth argument (see the module's documentation).
///
/// # Safety
/// As the system call's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_length: usize,
    new_length: usize,
    flags: c_int,
    new_address: *mut c_void,
) -> *mut c_void {
    // SAFETY: the caller's arguments, as the function's.
    unsafe { imp_mremap(old, old_length, new_length, flags, new_address) }
}

/// What [`mremap`] does, under a name of the library's own: the address `attach` points the
/// rewritten entries to (the exported name's would be the one the loader bound).
#[inline(always)]
pub(crate) unsafe extern "C" fn imp_mremap(
    old: *mut c_void,
    old_length: usize,
    new_length: usize,
    flags: c_int,
    new_address: *mut c_void,
) -> *mut c_void {
    // Read only with MREMAP_FIXED, when the caller passed it.
    let new_address = if flags & libc::MREMAP_FIXED != 0 {
        new_address
    } else {
        std::ptr::null_mut()
    };
    let call = || {
        // SAFETY: the system call with the caller's arguments.
        let result = unsafe {
            libc::syscall(
                libc::SYS_mremap,
                old,
                old_length,
                new_length,
                c_long::from(flags),
                new_address,
            )
        };
        match result {
            -1 => (None, libc::MAP_FAILED),
            new => (Some(new as usize), new as *mut c_void),
        }
    };
    let page = PAGE.load(Relaxed);
    if !ready() || !(old as usize).is_multiple_of(page) {
        return call().1;
    }
    let keeps_old = old_length == 0 || flags & libc::MREMAP_DONTUNMAP != 0;
    memprof::preload::mremap(
        old as usize,
        pages(old_length),
        pages(new_length),
        keeps_old,
        call,
    )
}
