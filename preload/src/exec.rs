//! `exec`: the process's image is replaced and its exit handlers never run, so the trace is closed
//! first (its events, symbols and end record written) by the library's own `execve`, `execv`,
//! `execvp`, `execvpe` and `fexecve`, which then call the C library's. The new program, which
//! inherits `LD_PRELOAD`, starts a trace of its own (docs/preload.md).
//!
//! A forked child does not trace, and a `vfork` child shares its parent's memory: neither closes
//! anything, since the trace is the parent's ([`ORIGIN`]). An `exec` that fails leaves the process
//! running without its trace (it was closed), which the at-exit lines say. The C library's
//! variadic `execl`, `execle` and `execlp` call its `execve` directly, past the library: stable
//! Rust cannot define a variadic function, so their traces end as a killed process's do.

use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

/// The process that started the trace: only it closes it.
static ORIGIN: AtomicU32 = AtomicU32::new(0);

/// The C library's functions, found by [`resolve`]: `execve`, `execv`, `execvp`, `execvpe`,
/// `fexecve`, in that order; 0 where not found.
static REAL: [AtomicUsize; 5] = [const { AtomicUsize::new(0) }; 5];

const NAMES: [&std::ffi::CStr; 5] = [c"execve", c"execv", c"execvp", c"execvpe", c"fexecve"];

/// Finds the C library's functions and notes this process as the trace's. Called from the
/// constructor, where looking up may allocate.
pub(crate) fn resolve() {
    ORIGIN.store(std::process::id(), Relaxed);
    // `RTLD_NEXT` searches the modules loaded after this one.
    find(libc::RTLD_NEXT);
}

/// Finds the C library's functions in a library loaded late (`memprof attach`), which closes no
/// trace through them itself (`attach.rs` detaches before calling them): the program's modules,
/// loaded before this one, come first in the search.
pub(crate) fn resolve_late() {
    find(libc::RTLD_DEFAULT);
}

/// Looks the functions up from `handle`, a pseudo-handle; a function of this library's own (its
/// exported `exec` functions, should it be in the search) is not taken: calling it would call
/// itself.
fn find(handle: *mut std::ffi::c_void) {
    let own = crate::got::base_of(find as *const () as usize);
    for (slot, name) in REAL.iter().zip(NAMES) {
        // SAFETY: a NUL-terminated name, looked up from `handle`, a pseudo-handle.
        let found = unsafe { libc::dlsym(handle, name.as_ptr()) } as usize;
        let found = if crate::got::base_of(found) == own {
            0
        } else {
            found
        };
        slot.store(found, Relaxed);
    }
}

/// Whether this process started the trace: not a forked child, nor a `vfork` child, which
/// shares its parent's memory.
pub(crate) fn is_origin() -> bool {
    std::process::id() == ORIGIN.load(Relaxed)
}

/// Closes the trace before the process's image is replaced, in the process that started it.
fn before_exec() {
    if memprof::is_tracing()
        && is_origin()
        && let Err(error) = memprof::close_trace()
    {
        memprof::preload::warn(format_args!("closing the trace before exec: {error}"));
    }
}

/// Whether the C library's function `name` was found, when it is one of [`NAMES`]; `true` for
/// any other name.
pub(crate) fn found(name: &std::ffi::CStr) -> bool {
    NAMES
        .iter()
        .position(|&n| n == name)
        .is_none_or(|index| real(index) != 0)
}

/// The C library's function number `index` of [`NAMES`], or null.
fn real(index: usize) -> usize {
    REAL[index].load(Relaxed)
}

/// Fails as `exec` does when the C library's function could not be found.
fn not_found() -> c_int {
    // SAFETY: `__errno_location` returns the calling thread's `errno`.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

pub(crate) type Argv = *const *const c_char;

/// `execve(2)`.
///
/// # Safety
/// As the C library's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    before_exec();
    // SAFETY: the caller's arguments.
    unsafe { forward_execve(path, argv, envp) }
}

/// The C library's `execve`, or the system call.
///
/// # Safety
/// As `execve`.
pub(crate) unsafe fn forward_execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    match real(0) {
        // SAFETY: the system call itself, with the caller's arguments.
        0 => unsafe { libc::syscall(libc::SYS_execve, path, argv, envp) as c_int },
        found => {
            // SAFETY: `dlsym` found the C library's `execve`, of this signature.
            let f: unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int =
                unsafe { std::mem::transmute::<usize, _>(found) };
            // SAFETY: the caller's arguments.
            unsafe { f(path, argv, envp) }
        }
    }
}

/// `execv(3)`.
///
/// # Safety
/// As the C library's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    before_exec();
    exec2(1, path, argv)
}

/// `execvp(3)`.
///
/// # Safety
/// As the C library's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    before_exec();
    exec2(2, file, argv)
}

/// `execvpe(3)`.
///
/// # Safety
/// As the C library's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    before_exec();
    // SAFETY: the caller's arguments.
    unsafe { forward_execvpe(file, argv, envp) }
}

/// The C library's `execvpe`.
///
/// # Safety
/// As `execvpe`.
pub(crate) unsafe fn forward_execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    match real(3) {
        0 => not_found(),
        found => {
            // SAFETY: `dlsym` found the C library's `execvpe`, of this signature.
            let f: unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int =
                unsafe { std::mem::transmute::<usize, _>(found) };
            // SAFETY: the caller's arguments.
            unsafe { f(file, argv, envp) }
        }
    }
}

/// `fexecve(3)`.
///
/// # Safety
/// As the C library's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    before_exec();
    // SAFETY: the caller's arguments.
    unsafe { forward_fexecve(fd, argv, envp) }
}

/// The C library's `fexecve`.
///
/// # Safety
/// As `fexecve`.
pub(crate) unsafe fn forward_fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    match real(4) {
        0 => not_found(),
        found => {
            // SAFETY: `dlsym` found the C library's `fexecve`, of this signature.
            let f: unsafe extern "C" fn(c_int, Argv, Argv) -> c_int =
                unsafe { std::mem::transmute::<usize, _>(found) };
            // SAFETY: the caller's arguments.
            unsafe { f(fd, argv, envp) }
        }
    }
}

/// Calls the C library's two-argument `exec` function number `index` (`execv` 1, `execvp` 2).
pub(crate) fn exec2(index: usize, path: *const c_char, argv: Argv) -> c_int {
    match real(index) {
        0 => not_found(),
        found => {
            // SAFETY: `dlsym` found the C library's function, of this signature.
            let f: unsafe extern "C" fn(*const c_char, Argv) -> c_int =
                unsafe { std::mem::transmute::<usize, _>(found) };
            // SAFETY: the caller's arguments, passed on as they came.
            unsafe { f(path, argv) }
        }
    }
}
