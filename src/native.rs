//! What memprof needs from the C library and the processor beyond std: background threads that
//! can be started from the allocation path or a fork handler, an at-exit hook, the thread's id,
//! and (for trace mode) the clock.

#[cfg(feature = "trace")]
pub(crate) mod clock;
// Without trace mode the blocks are passed down the path, and their flags never read.
#[cfg_attr(not(feature = "trace"), allow(dead_code))]
mod malloc_chunk;

pub(crate) use malloc_chunk::{MallocBlock, note_malloc};

use std::ffi::{CStr, c_void};

/// The body of a thread started by [`spawn`]: the function pointer passed as its argument.
extern "C" fn run(body: *mut c_void) -> *mut c_void {
    // SAFETY: `spawn` passes a `fn()` cast to a pointer, and nothing else.
    let body: fn() = unsafe { std::mem::transmute::<*mut c_void, fn()>(body) };
    let _ = std::panic::catch_unwind(body);
    std::ptr::null_mut()
}

/// Starts a detached thread named `name` (at most 15 bytes) that runs `body`. A plain `pthread`
/// rather than a `std::thread`: it is started from the allocation path when the profiler starts,
/// where the Rust runtime may not be ready, or in a forked child's `fork` handler, where only what
/// the C library makes safe after `fork` may run; creating it allocates nothing through the
/// global allocator and takes no lock of the Rust runtime. A panic in `body` ends the thread only.
/// Returns the error number when it cannot.
pub(crate) fn spawn(name: &CStr, stack: usize, body: fn()) -> Result<(), i32> {
    // SAFETY: `attr` is initialized before use and destroyed after; `run` takes the function
    // pointer passed by value as its argument. The name is NUL-terminated and short enough.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        libc::pthread_attr_setstacksize(&mut attr, stack);
        let mut thread: libc::pthread_t = 0;
        let error = libc::pthread_create(&mut thread, &attr, run, body as *mut c_void);
        libc::pthread_attr_destroy(&mut attr);
        if error != 0 {
            return Err(error);
        }
        libc::pthread_setname_np(thread, name.as_ptr());
    }
    Ok(())
}

/// Sleeps while `word` holds `value` (or until woken by [`wake`]; it may also return early, so
/// the caller looks again): a Linux futex, which allocates nothing.
#[cfg(feature = "preload")]
pub(crate) fn wait_while(word: &std::sync::atomic::AtomicU32, value: u32) {
    // SAFETY: `FUTEX_WAIT_PRIVATE` reads the aligned 32-bit word `word` points to, which lives
    // through the call; a null timeout waits without a limit.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            value,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// Wakes every thread sleeping in [`wait_while`] on `word`: a system call, no lock.
#[cfg(feature = "preload")]
pub(crate) fn wake(word: &std::sync::atomic::AtomicU32) {
    // SAFETY: `FUTEX_WAKE_PRIVATE` only uses `word`'s address as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

/// Registers `f` to run at exit (also through `std::process::exit`); `false` when it cannot.
pub(crate) fn at_exit(f: extern "C" fn()) -> bool {
    // SAFETY: `f` is an `extern "C" fn()`; the caller's functions never unwind.
    unsafe { libc::atexit(f) == 0 }
}

/// The calling thread's id in the operating system.
#[cfg(feature = "trace")]
pub(crate) fn thread_id() -> u64 {
    // SAFETY: `gettid` takes no argument and cannot fail.
    unsafe { libc::gettid() as u64 }
}

/// The signal set holding `SIGPIPE` alone.
fn sigpipe_set() -> libc::sigset_t {
    // SAFETY: `sigemptyset` initializes the set before `sigaddset` adds to it; both only write
    // into the set given.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        set
    }
}

/// Blocks `SIGPIPE` in the calling thread only: a write of its into a pipe whose reader went away
/// fails with `EPIPE` and leaves the signal pending on it, whatever the program's action for
/// `SIGPIPE` is. `false` when it cannot.
#[cfg(feature = "trace")]
pub(crate) fn block_sigpipe() -> bool {
    let set = sigpipe_set();
    // SAFETY: a valid set; the old mask is not asked for.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) == 0 }
}

/// Runs `write`, memprof's own write to the program's stderr, with `SIGPIPE` blocked on the
/// calling thread, and takes the one its failure with `EPIPE` raised: a stderr nobody reads any
/// more (the program's output piped into `head`) loses memprof's lines, and never kills the
/// program, which would then end by a signal it did not get without memprof. A `SIGPIPE` the
/// thread had blocked already is left as it was (it may be the program's), and so is one sent
/// to the process while the write was not failing. Async-signal-safe.
pub(crate) fn without_sigpipe<T>(write: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    let set = sigpipe_set();
    // SAFETY: `old` is written by the call before it is read.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set, and a valid place for the old mask.
    let blocked = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) } == 0;
    let result = write();
    // SAFETY: `old` holds the mask the call above gave.
    if blocked && unsafe { libc::sigismember(&old, libc::SIGPIPE) } == 0 {
        if let Err(error) = &result
            && error.kind() == std::io::ErrorKind::BrokenPipe
        {
            take_pending_sigpipe();
        }
        // SAFETY: the thread's mask as it was.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    }
    result
}

/// Takes `flock`'s lock on `file` without waiting: exclusive (`exclusive`) or shared. An error
/// (`WouldBlock`) when another open file holds a lock that excludes it, or when the file system
/// has none.
#[cfg(feature = "trace")]
pub(crate) fn try_flock(file: &std::fs::File, exclusive: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let kind = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // SAFETY: an open descriptor, borrowed for the call.
    match unsafe { libc::flock(file.as_raw_fd(), kind | libc::LOCK_NB) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Takes a `SIGPIPE` pending (and blocked, [`block_sigpipe`]) on the calling thread, without
/// waiting: it is never delivered.
pub(crate) fn take_pending_sigpipe() {
    let set = sigpipe_set();
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid set and timeout; the signal's details are not asked for.
    unsafe {
        libc::sigtimedwait(&set, std::ptr::null_mut(), &now);
    }
}

/// `count` zeroed words in a fresh anonymous private mapping, never unmapped: memory that does not
/// come from any allocator, so that the allocation path may take it while the thread holds (or
/// interrupted a holder of) the C library's allocator's locks. `mmap` is a system call: no lock,
/// async-signal-safe. `None` when the mapping cannot be made.
#[cfg(feature = "trace")]
pub(crate) fn map_words(count: usize) -> Option<&'static [std::sync::atomic::AtomicU64]> {
    let bytes = count.checked_mul(std::mem::size_of::<u64>())?;
    // SAFETY: a new anonymous mapping, at an address the kernel chooses, touches no memory of
    // the program; the result is checked before use.
    let address = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if address == libc::MAP_FAILED || address.is_null() {
        return None;
    }
    // SAFETY: the mapping is `bytes` long, readable and writable, page-aligned (more than an
    // `AtomicU64` needs) and zero-filled (zero is a valid `AtomicU64`, which has the layout of a
    // `u64`); nothing else refers to it, and it is never unmapped, so it lives for `'static`. Its
    // words are only ever accessed atomically.
    Some(unsafe {
        std::slice::from_raw_parts(address.cast::<std::sync::atomic::AtomicU64>(), count)
    })
}

/// Whether the thread of this process whose operating-system id is `tid` has ended: a signal 0
/// sent to it finds no such thread. Its id may have been given to a new thread since: then it
/// reads as running.
#[cfg(feature = "trace")]
pub(crate) fn thread_ended(tid: u64) -> bool {
    let Ok(tid) = libc::pid_t::try_from(tid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the thread exists; `getpid` cannot fail.
    let sent = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) };
    sent == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// The process id and user id of the process at the other end of the connected Unix socket `fd`,
/// as the kernel noted them when it connected (`SO_PEERCRED`): for the control channel, which
/// answers only its own user.
pub(crate) fn peer_credentials(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<(u32, u32)> {
    use std::os::fd::AsRawFd;
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut length = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `credentials` is a valid `ucred` of `length` bytes for `getsockopt` to fill; `fd`
    // is a descriptor borrowed for the call.
    let result = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut credentials as *mut libc::ucred).cast(),
            &mut length,
        )
    };
    if result != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((credentials.pid as u32, credentials.uid))
}

/// The process's effective user id (the one `SO_PEERCRED` tells of a peer).
pub(crate) fn user_id() -> u32 {
    // SAFETY: `geteuid` takes no argument and cannot fail.
    unsafe { libc::geteuid() }
}

/// Writes the one byte `byte` to the descriptor `fd` (a non-blocking pipe's write end), ignoring
/// failure: a full pipe already holds a request. Async-signal-safe, allocates nothing, takes no
/// lock; for the signal handlers and the allocation path's [`crate::alarm`].
pub(crate) fn write_byte(fd: i32, byte: u8) {
    if fd < 0 {
        return;
    }
    // SAFETY: `write` reads one byte from `byte`, a valid one-byte buffer; a descriptor that is
    // not open, or not writable, makes it fail, which is ignored.
    unsafe {
        libc::write(fd, (&byte as *const u8).cast(), 1);
    }
}

/// glibc's allocator statistics (`mallinfo2`, over all arenas): bytes in chunks it mapped one by
/// one (`hblkhd`), in use in the arenas (`uordblks`) and free there (`fordblks`). `None` where the C library is not glibc.
pub(crate) fn allocator_statistics() -> Option<AllocatorStatistics> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallinfo2` takes no argument and returns a plain structure; it takes the
        // arenas' locks, so it must not run on the allocation path, where this is never called.
        let info = unsafe { libc::mallinfo2() };
        Some(AllocatorStatistics {
            mapped: info.hblkhd as u64,
            in_use: info.uordblks as u64,
            free: info.fordblks as u64,
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// What [`allocator_statistics`] returns, in bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AllocatorStatistics {
    /// In chunks mapped one by one (`hblkhd`), all in use.
    pub mapped: u64,
    /// In use in the arenas, chunk headers included (`uordblks`).
    pub in_use: u64,
    /// Free in the arenas (`fordblks`).
    pub free: u64,
}

/// Calls `line` with each line of the file at `path` (without its newline), in order, until it
/// returns `false` or the file ends; a line longer than `buffer` is given cut to its length.
/// Reads with the bare `open` and `read` system calls into `buffer`: no allocation, no stdio, no
/// lock, so the allocation path may use it (once per thread: [`crate::capture::fp`]'s stack
/// bounds, from `/proc/self/maps`). `false` when the file cannot be opened or read.
pub(crate) fn read_lines(
    path: &CStr,
    buffer: &mut [u8],
    mut line: impl FnMut(&[u8]) -> bool,
) -> bool {
    // SAFETY: `path` is NUL-terminated; the descriptor is checked before use.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    // `buffer[..filled]` holds what was read and not given yet; `skipping` while the rest of an
    // over-long line is read past.
    let mut filled = 0;
    let mut skipping = false;
    let ok = loop {
        let free = &mut buffer[filled..];
        if free.is_empty() {
            // A line longer than the buffer: give its start, read past the rest.
            if !skipping && !line(buffer) {
                break true;
            }
            skipping = true;
            filled = 0;
            continue;
        }
        // SAFETY: `read` writes at most `free.len()` bytes into `free`, which is valid for writes
        // of that many; a closed or unreadable descriptor makes it fail, which is checked.
        let read = unsafe { libc::read(fd, free.as_mut_ptr().cast(), free.len()) };
        if read < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            break false;
        }
        if read == 0 {
            // The last line, when the file does not end with a newline.
            if filled > 0 && !skipping {
                line(&buffer[..filled]);
            }
            break true;
        }
        filled += read as usize;
        let mut start = 0;
        while let Some(at) = buffer[start..filled].iter().position(|&b| b == b'\n') {
            let end = start + at;
            let given = skipping || line(&buffer[start..end]);
            skipping = false;
            start = end + 1;
            if !given {
                // SAFETY: `fd` was opened above and is closed once.
                unsafe { libc::close(fd) };
                return true;
            }
        }
        if skipping {
            filled = 0;
        } else {
            buffer.copy_within(start..filled, 0);
            filled -= start;
        }
    };
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    ok
}

/// The calling thread's soft stack size limit (`RLIMIT_STACK`) in bytes; `None` when unlimited.
/// A bare system call: no allocation, no lock.
pub(crate) fn stack_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes the limit into `limit`, a valid local.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut limit) } == 0;
    (ok && limit.rlim_cur != libc::RLIM_INFINITY)
        .then(|| usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX))
}

/// Whether the calling thread runs on its alternate signal stack (`sigaltstack`), in a handler
/// installed with `SA_ONSTACK`. A bare system call: no allocation, no lock, async-signal-safe.
pub(crate) fn on_signal_stack() -> bool {
    // SAFETY: with no new stack, `sigaltstack` only writes the current one into `current`, a
    // valid local.
    unsafe {
        let mut current: libc::stack_t = std::mem::zeroed();
        libc::sigaltstack(std::ptr::null(), &mut current) == 0
            && current.ss_flags & libc::SS_ONSTACK != 0
    }
}

/// The name this process's program was started by: the last part of the path given to `exec`
/// (the kernel's `AT_EXECFN`), so a link's own name and a script's name rather than its
/// interpreter's; else the file name of the executable; else `"unknown"`. What `%e` expands to.
/// Allocates: call off the allocation path.
pub(crate) fn program_name() -> String {
    // SAFETY: `getauxval` only reads the auxiliary vector the kernel gave the process.
    let given = unsafe { libc::getauxval(libc::AT_EXECFN) } as *const libc::c_char;
    let given = (!given.is_null())
        // SAFETY: `AT_EXECFN` is the address of a NUL-terminated string the kernel put on the
        // process's initial stack, which lives as long as the process.
        .then(|| unsafe { CStr::from_ptr(given) }.to_bytes())
        .and_then(|path| path.rsplit(|&b| b == b'/').next())
        .filter(|name| !name.is_empty())
        .map(|name| String::from_utf8_lossy(name).into_owned());
    given
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Asks the processor to bring the cache line at `address` in, without waiting for it: a hint,
/// which never faults and reads nothing the program sees, whatever the address (a stale one
/// costs a wasted fetch). Does nothing on targets without the instruction.
#[inline(always)]
pub(crate) fn prefetch(address: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` needs SSE, which every x86_64 processor has; a prefetch of any address
    // is valid: it neither faults nor changes memory.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}
