//! Attach mode: the library loaded by `dlopen` into a process that is already running (`memprof
//! attach PID` has the process call `dlopen`, then [`memprof_attach`]), rather than preloaded.
//!
//! The program's modules were bound to the C library's `malloc` long before: [`memprof_attach`]
//! starts memprof with the settings the command passes (never the program's environment), then
//! rewrites the entries of the allocation functions in the global offset table of every loaded
//! module but this one (`got`), the C library's own included, and the entries of `dlopen`, so that
//! the modules loaded later are rewritten too. [`memprof_detach`] puts every entry back, closes
//! the trace and writes the exit files; the library stays mapped, since a thread may still be
//! inside one of its functions.
//!
//! The command that attached may end without detaching (killed, its terminal gone): the library
//! watches it ([`watch`]) and then detaches by itself, so the process never records, nor writes
//! its trace, for no one.
//!
//! Blocks made before the attach are not in memprof's table: their frees and reallocations go to
//! the C library untouched, as in the preloaded library from its start.
//!
//! An `exec` replaces the process's image, this library with it: the entries of `execve`,
//! `execv`, `execvp`, `execvpe` and `fexecve` are rewritten too, and detach first (the trace
//! closed whole, the files written), as the preloaded library closes its trace before an `exec`.

use crate::exec::Argv;
use crate::got;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering::Relaxed};

/// Set by the constructor when the library was loaded by `dlopen` into a running process.
static DLOPENED: AtomicBool = AtomicBool::new(false);

/// Where this copy of the library is: not attached yet, attached, detached.
static PHASE: AtomicU8 = AtomicU8::new(IDLE);
const IDLE: u8 = 0;
const ATTACHED: u8 = 1;
const DETACHED: u8 = 2;

/// The process attached to: a `vfork` child, which shares its memory, is another.
static ATTACHED_PID: AtomicU32 = AtomicU32::new(0);

/// What [`memprof_attach`] returns when it cannot attach (a count of entries otherwise).
const NOT_DLOPENED: c_int = -1;
const ALREADY: c_int = -2;
const OTHER_COPY: c_int = -3;
const NO_MALLOC: c_int = -4;
const BAD_SETTINGS: c_int = -5;
const COMMAND_GONE: c_int = -6;
const NO_TRACE: c_int = -7;

/// The settings' line naming the process of the command that attached (`memprof attach`'s own
/// id), which [`watch`] watches; not one of memprof's settings.
const COMMAND: &str = "memprof-attach-command";

/// How often the watch looks whether the library was detached already.
const WATCH_POLL_MS: c_int = 200;

/// Whether the library was loaded by `dlopen` after the program started, not preloaded: the
/// loader lists the modules in the order it loaded them, and a preloaded library comes before the
/// C library, which the program needs from its start.
pub(crate) fn loaded_late() -> bool {
    let own = own_base();
    // SAFETY: the C library's `malloc`, whose address is only looked up.
    let libc = got::base_of(crate::forward::__libc_malloc as *const () as usize);
    let mut order: Vec<usize> = Vec::new();
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: a valid `dl_phdr_info` for the call; `data` is the vector passed below.
        let (info, order) = unsafe { (&*info, &mut *(data as *mut Vec<usize>)) };
        order.push(info.dlpi_addr as usize);
        0
    }
    // SAFETY: `each` only pushes to `order`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut order).cast()) };
    let position = |base| order.iter().position(|&b| b == base);
    matches!((position(own), position(libc)), (Some(o), Some(l)) if o > l)
}

/// Notes, from the constructor, that the library was loaded late: it does nothing more until
/// [`memprof_attach`].
pub(crate) fn note_dlopened() {
    DLOPENED.store(true, Relaxed);
}

/// This library's load address.
fn own_base() -> usize {
    got::base_of(own_base as *const () as usize)
}

/// The functions redirected, with this library's own: `malloc` first. The addresses are those of
/// the library's private names for them (`imp_*`): the address of one of the library's exported functions, taken
/// here, is the one the loader bound the name to (the C library's, in a library loaded late).
/// The `exec` functions are left out where the C library's could not be found: the program's
/// own entries then stay as they were.
fn table() -> Vec<(&'static CStr, usize)> {
    let mut table = vec![
        (c"malloc", crate::imp_malloc as *const () as usize),
        (c"calloc", crate::imp_calloc as *const () as usize),
        (c"realloc", crate::imp_realloc as *const () as usize),
        (
            c"reallocarray",
            crate::imp_reallocarray as *const () as usize,
        ),
        (c"free", crate::imp_free as *const () as usize),
        (
            c"posix_memalign",
            crate::imp_posix_memalign as *const () as usize,
        ),
        (
            c"aligned_alloc",
            crate::imp_aligned_alloc as *const () as usize,
        ),
        (c"memalign", crate::imp_memalign as *const () as usize),
        (c"valloc", crate::imp_valloc as *const () as usize),
        (c"pvalloc", crate::imp_pvalloc as *const () as usize),
        (
            c"malloc_usable_size",
            crate::imp_malloc_usable_size as *const () as usize,
        ),
        (c"mmap", crate::mappings::imp_mmap as *const () as usize),
        (c"mmap64", crate::mappings::imp_mmap as *const () as usize),
        (c"munmap", crate::mappings::imp_munmap as *const () as usize),
        (c"mremap", crate::mappings::imp_mremap as *const () as usize),
        (c"dlopen", dlopen as *const () as usize),
        (c"execve", execve as *const () as usize),
        (c"execv", execv as *const () as usize),
        (c"execvp", execvp as *const () as usize),
        (c"execvpe", execvpe as *const () as usize),
        (c"fexecve", fexecve as *const () as usize),
        (c"_exit", underscore_exit as *const () as usize),
        (c"_Exit", underscore_exit as *const () as usize),
    ];
    table.retain(|(name, _)| crate::exec::found(name));
    table
}

/// Before the process's image is replaced: detaches, in the process attached to (not in a
/// `vfork` child, nor a forked one, which [`in_child`] detached at its fork). An `exec` that
/// fails leaves the process running detached.
fn before_exec() {
    if PHASE.load(Relaxed) == ATTACHED && std::process::id() == ATTACHED_PID.load(Relaxed) {
        memprof_detach();
    }
}

/// `execve(2)` while attached: detaches, then the C library's (found when attaching: this
/// library's own name for it is the preloaded library's `execve`).
///
/// # Safety
/// As the C library's.
unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    before_exec();
    // SAFETY: the caller's arguments.
    unsafe { crate::exec::forward_execve(path, argv, envp) }
}

/// `execv(3)` while attached, as [`execve`].
///
/// # Safety
/// As the C library's.
unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    before_exec();
    crate::exec::exec2(1, path, argv)
}

/// `execvp(3)` while attached, as [`execve`].
///
/// # Safety
/// As the C library's.
unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    before_exec();
    crate::exec::exec2(2, file, argv)
}

/// `execvpe(3)` while attached, as [`execve`].
///
/// # Safety
/// As the C library's.
unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    before_exec();
    // SAFETY: the caller's arguments.
    unsafe { crate::exec::forward_execvpe(file, argv, envp) }
}

/// `fexecve(3)` while attached, as [`execve`].
///
/// # Safety
/// As the C library's.
unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    before_exec();
    // SAFETY: the caller's arguments.
    unsafe { crate::exec::forward_fexecve(fd, argv, envp) }
}

/// `_exit(2)` and `_Exit` while attached: in the process attached to, the trace is closed as the
/// library's own `_exit` closes it (by its writer thread: `_exit` may come from a signal handler),
/// so that the command gets it whole; then the C library's `_exit`.
extern "C" fn underscore_exit(status: c_int) -> ! {
    if PHASE.load(Relaxed) == ATTACHED && std::process::id() == ATTACHED_PID.load(Relaxed) {
        memprof::preload::before_exit();
    }
    crate::exit::forward(status)
}

/// `dlopen(3)` while attached: the C library's, then the new modules' entries rewritten. Called
/// by the program's modules only through the entries [`memprof_attach`] rewrote.
///
/// # Safety
/// As the C library's.
unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    // SAFETY: the caller's arguments.
    let handle = unsafe { libc::dlopen(file, mode) };
    if !handle.is_null() && PHASE.load(Relaxed) == ATTACHED {
        memprof::untracked(|| got::patch(own_base(), &table()));
    }
    handle
}

/// Starts memprof in the running process this library was loaded into, with `settings`: lines
/// of `NAME=VALUE` (`MEMPROF_TRACE`, `MEMPROF_STACK_DEPTH`, ...), read in place of the process's
/// environment. Returns the number of entries rewritten (at least one for `malloc`), or a
/// negative number: -1 the library was preloaded, not loaded by `dlopen`; -2 attached already;
/// -3 another copy of the library is attached; -4 no module calls the C library's `malloc` (an
/// allocator of the program's own; nothing changed); -5 the settings are not text; -6 the command
/// named by the settings has ended already (nothing changed); -7 the trace the settings ask for
/// (`MEMPROF_TRACE`) could not be made (nothing changed).
///
/// # Safety
/// `settings` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memprof_attach(settings: *const c_char) -> c_int {
    if PHASE.load(Relaxed) != IDLE {
        return ALREADY;
    }
    if !DLOPENED.load(Relaxed) || crate::READY.load(Relaxed) {
        return NOT_DLOPENED;
    }
    let text = if settings.is_null() {
        ""
    } else {
        // SAFETY: the caller's NUL-terminated string.
        match unsafe { CStr::from_ptr(settings) }.to_str() {
            Ok(text) => text,
            Err(_) => return BAD_SETTINGS,
        }
    };
    let own = own_base();
    crate::exec::resolve_late();
    crate::exit::resolve_late();
    let table = table();
    if got::taken_by_another(own, &table) {
        return OTHER_COPY;
    }
    let mut command = None;
    let pairs: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .filter(|(name, value)| match *name == COMMAND {
            true => {
                command = value.trim().parse::<u32>().ok();
                false
            }
            false => true,
        })
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    let watched = match command.map(open_watch) {
        Some(Err(())) => return COMMAND_GONE,
        Some(Ok(fd)) => fd,
        None => None,
    };
    let traced = pairs.iter().any(|(name, _)| name == "MEMPROF_TRACE");
    if !memprof::preload::configure(pairs) {
        return ALREADY;
    }
    ATTACHED_PID.store(std::process::id(), Relaxed);
    PHASE.store(ATTACHED, Relaxed);
    crate::forward::resolve();
    crate::mappings::init();
    memprof::preload::start(crate::forward::__libc_malloc as *const c_void);
    if traced && !memprof::is_tracing() {
        // The trace asked for could not be made (no such directory, not the process's to write): nothing
        // is changed, rather than record for no one.
        let _ = memprof::preload::detach();
        PHASE.store(DETACHED, Relaxed);
        return NO_TRACE;
    }
    memprof::preload::prepare_walks();
    // SAFETY: registers a handler that only stores to atomics, run in a forked child.
    unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    crate::READY.store(true, Relaxed);
    let (changed, mallocs) = memprof::untracked(|| got::patch(own, &table));
    if mallocs == 0 {
        memprof::untracked(|| got::restore(own));
        let _ = memprof::preload::detach();
        PHASE.store(DETACHED, Relaxed);
        return NO_MALLOC;
    }
    if let (Some(command), Some(fd)) = (command, watched) {
        watch(command, fd);
    }
    changed as c_int
}

/// In a child forked while attached: the child is not the process the command attached to
/// (a pre-forking server's worker, say), and nobody reads it or detaches it. It stops recording at
/// once (the library's functions forward to the C library's, untouched), and its exit writes no
/// file over the parent's. Its entries stay rewritten: putting them back takes locks another
/// thread of the parent may have held at the fork.
extern "C" fn in_child() {
    if PHASE.load(Relaxed) == ATTACHED {
        PHASE.store(DETACHED, Relaxed);
        crate::READY.store(false, Relaxed);
        memprof::preload::leave_child();
    }
}

/// A pidfd of process `command` (the `memprof attach` that attaches), opened while it waits for
/// the attach to finish, so its id names it and no later process: `Ok(None)` when pidfds are not
/// to be had (an old kernel, a sandbox), `Err(())` when the command has ended already.
fn open_watch(command: u32) -> Result<Option<OwnedFd>, ()> {
    // SAFETY: `pidfd_open` with a process id and no flags; returns a new descriptor (closed on
    // exec) or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, command as libc::pid_t, 0) } as c_int;
    if fd >= 0 {
        // SAFETY: a descriptor just opened, owned by nothing else.
        return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }));
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::ESRCH) {
        return Err(());
    }
    memprof::preload::warn(format_args!(
        "attach: cannot watch the command (process {command}): {error}; if it ends without \
         detaching, this process records until it exits"
    ));
    Ok(None)
}

/// Detaches once process `command` (the `memprof attach` that attached, whose pidfd is `fd`)
/// has ended, if the library is still attached then: a thread waits on `fd`, looking every
/// [`WATCH_POLL_MS`] whether the command detached the library itself (then it ends).
fn watch(command: u32, fd: OwnedFd) {
    /// What the watching thread owns.
    struct Watch {
        fd: OwnedFd,
    }
    impl Watch {
        fn run(&self) {
            let mut ended = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            while PHASE.load(Relaxed) == ATTACHED {
                // SAFETY: one `pollfd`, live through the call.
                if unsafe { libc::poll(&mut ended, 1, WATCH_POLL_MS) } > 0 {
                    memprof_detach();
                    break;
                }
            }
        }
    }
    extern "C" fn watching(watch: *mut c_void) -> *mut c_void {
        // SAFETY: the box `watch` below gave this thread alone.
        let watch = unsafe { Box::from_raw(watch.cast::<Watch>()) };
        // From its first instruction: what the C library allocates for the thread's own
        // thread-locals is memprof's, not the program's.
        memprof::untracked(|| watch.run());
        std::ptr::null_mut()
    }
    let watch = Box::into_raw(Box::new(Watch { fd })).cast::<c_void>();
    let started = memprof::untracked(|| {
        // SAFETY: a zeroed `pthread_attr_t` set up by `pthread_attr_init` before use and
        // destroyed after; `watching` takes `watch`, owned by nothing else, when the thread
        // starts, and the attributes make the thread detached with a 2 MiB stack (detaching writes
        // the exports, which symbolizes).
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            libc::pthread_attr_init(&mut attr);
            libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
            libc::pthread_attr_setstacksize(&mut attr, 2 << 20);
            let mut thread: libc::pthread_t = 0;
            let started = libc::pthread_create(&mut thread, &attr, watching, watch);
            libc::pthread_attr_destroy(&mut attr);
            if started == 0 {
                libc::pthread_setname_np(thread, c"memprof-watch".as_ptr());
            }
            started
        }
    });
    if started != 0 {
        // SAFETY: no thread took the box: it is still this function's.
        drop(unsafe { Box::from_raw(watch.cast::<Watch>()) });
        memprof::preload::warn(format_args!(
            "attach: cannot watch the command (process {command}): {}",
            std::io::Error::from_raw_os_error(started)
        ));
    }
}

/// Detaches: puts back every entry [`memprof_attach`] rewrote, closes the trace and writes the
/// `MEMPROF_OUTPUT` files, as at exit. Returns the number of entries put back, or -1 when not
/// attached, -2 when the trace could not be closed (the entries are put back all the same).
#[unsafe(no_mangle)]
pub extern "C" fn memprof_detach() -> c_int {
    if PHASE
        .compare_exchange(ATTACHED, DETACHED, Relaxed, Relaxed)
        .is_err()
    {
        return -1;
    }
    let restored = memprof::untracked(|| got::restore(own_base()));
    match memprof::preload::detach() {
        Ok(()) => restored as c_int,
        Err(error) => {
            memprof::preload::warn(format_args!("detaching: the trace: {error}"));
            -2
        }
    }
}
