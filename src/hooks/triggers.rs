//! What makes memprof act on its own: the end of the program (the at-exit log and the
//! `MEMPROF_OUTPUT` files), signals (toggling recording, writing a dump on demand) and the HTTP
//! endpoint of `MEMPROF_HTTP` (feature `http`), whose thread is started here; and the control
//! signal of `memprof attach` (`MEMPROF_CONTROL_SIGNAL`), whose handler wakes the dump thread,
//! which starts the control channel's thread (`crate::control`).
//!
//! A signal handler may do almost nothing safely, so the handlers here only flip an atomic
//! (toggle) or write one byte to a pipe (dump); a background thread reads the pipe and writes the
//! dump from ordinary code, while the program runs on.
//!
//! The dump thread and the at-exit writer write the same files: they take turns
//! ([`dumps::Turn`]), and the exit writer, which waits for a dump in progress, keeps its turn
//! until the process ends, so its files are the last ones. A forked child gets a pipe and a dump
//! thread of its own (from the `pthread_atfork` child handler), so the dump signal sent to the
//! child writes the child's heap.
//!
//! The dump itself ([`dumps::dump`]) is below this module and below `watch`, which decides on
//! the dumps on growth and near the limit: this module calls both, and neither calls it.

use super::dumps::{self, Turn};
use super::watch;
use crate::alarm;
use crate::config::{Config, warn};
use crate::guard;
use crate::header::Settings;
use crate::native;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The write end of the dump pipe; -1 until the dump thread runs.
static DUMP_PIPE: AtomicI32 = AtomicI32::new(-1);

/// The read end of the dump pipe, which the dump thread reads; -1 until it runs.
static DUMP_READ: AtomicI32 = AtomicI32::new(-1);

/// How long the at-exit writer waits for a dump in progress before it writes anyway.
const EXIT_WAIT: Duration = Duration::from_secs(30);

/// Stack of the dump thread and the HTTP endpoint's first thread: a report symbolizes and
/// formats, which needs more than a small thread stack.
const DUMP_THREAD_STACK: usize = 2 << 20;

/// Sets up what `config` asks for. Runs once, when the profiler starts, inside the guard.
pub(crate) fn install(config: &Config, settings: Settings) {
    if (config.print_at_exit || config.output.is_some()) && !native::at_exit(at_exit) {
        warn(format_args!("cannot register the at-exit report"));
    }
    if let Some(signal) = config.toggle_signal {
        handle(signal, on_toggle, "MEMPROF_TOGGLE_SIGNAL");
    }
    let watched = watch::install(config, settings);
    let control = config
        .control_signal
        .filter(|_| !super::PRELOADED.load(Ordering::Relaxed));
    let wanted = config.dump_signal.is_some() || watched || control.is_some();
    if wanted && start_dump_thread(true) {
        // SAFETY: `in_forked_child` is an `extern "C" fn()` that never unwinds; no prepare or
        // parent handler is registered.
        if unsafe { libc::pthread_atfork(None, None, Some(in_forked_child)) } != 0 {
            warn(format_args!(
                "MEMPROF_DUMP_SIGNAL: cannot register the fork handler; a forked child's dumps \
                 go to its parent"
            ));
        }
        if let Some(signal) = config.dump_signal {
            handle(signal, on_dump, "MEMPROF_DUMP_SIGNAL");
        }
        // Read, so that the mark is kept in the program's file by any linker that drops what
        // nothing uses: the mark is there exactly when this handler may be.
        if let Some(signal) = control
            && std::hint::black_box(&CONTROL_MARK)[0] != 0
        {
            handle(signal, on_control, "MEMPROF_CONTROL_SIGNAL");
        }
    }
    if let Some(address) = config.http {
        start_http(address);
    }
}

/// Starts the thread that binds `MEMPROF_HTTP`'s address and starts the endpoint's workers: the
/// allocation path that starts the profiler only creates it, and binds no socket.
#[cfg(feature = "http")]
fn start_http(address: std::net::SocketAddr) {
    fn http_thread() {
        guard::untracked(crate::http::serve_configured);
    }
    if let Err(error) = native::spawn(c"memprof-http", DUMP_THREAD_STACK, http_thread) {
        warn(format_args!(
            "MEMPROF_HTTP={address}: cannot start the endpoint's thread: {}",
            std::io::Error::from_raw_os_error(error)
        ));
    }
}

#[cfg(not(feature = "http"))]
fn start_http(address: std::net::SocketAddr) {
    warn(format_args!(
        "MEMPROF_HTTP={address} needs memprof built with the `http` feature; no endpoint"
    ));
}

/// Set once the exit files were written (at exit, or when the library attached to a running
/// process detaches): they are written once.
static EXIT_WRITTEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes the exit files now, before the process ends (the preloaded library detached from a
/// running process); the exit then writes nothing.
#[cfg(feature = "preload")]
pub(crate) fn write_exit_files() {
    at_exit();
}

/// Makes the exit write nothing: the process is a child forked while the preloaded library was
/// attached to its parent, whose files they are.
#[cfg(feature = "preload")]
pub(crate) fn skip_exit_files() {
    EXIT_WRITTEN.store(true, Ordering::Release);
}

/// Writes what the configuration asks for at exit: the TSV log to stderr, the output files.
extern "C" fn at_exit() {
    if EXIT_WRITTEN.swap(true, Ordering::AcqRel) {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        let config = crate::config::get();
        match Turn::take(Some(Instant::now() + EXIT_WAIT)) {
            // Kept until the process ends: a dump asked for from now on waits, and writes nothing
            // over the exit files.
            Some(turn) => std::mem::forget(turn),
            None => warn(format_args!(
                "a dump is still being written after {} s; writing the exit files anyway",
                EXIT_WAIT.as_secs()
            )),
        }
        if config.print_at_exit
            && let Err(error) = crate::native::without_sigpipe(|| {
                crate::report::log_allocations(&mut std::io::stderr().lock())
            })
        {
            warn(format_args!("writing the report at exit failed: {error}"));
        }
        if let Some(spec) = &config.output {
            dumps::write(spec, config.dump_keep);
        }
    });
}

extern "C" fn on_toggle(_signal: libc::c_int) {
    if crate::record::is_paused() {
        crate::record::resume();
    } else {
        crate::record::pause();
    }
}

/// What `memprof attach` looks for in a program's file before it sends the control signal (a
/// signal nobody handles would end the program): a section of its own, allocated, so that
/// `strip` keeps it, holding this text. `docs/attach.md`.
#[used]
// SAFETY: a section name of memprof's own, which no other symbol uses.
#[unsafe(link_section = ".memprof.control")]
static CONTROL_MARK: [u8; 24] = *b"memprof control 1\0\0\0\0\0\0\0";

/// The byte the control signal writes to the dump pipe.
const CONTROL: u8 = 3;

/// The control signal: wakes the dump thread, which starts the control channel's thread.
extern "C" fn on_control(_signal: libc::c_int) {
    native::write_byte(DUMP_PIPE.load(Ordering::Relaxed), CONTROL);
}

extern "C" fn on_dump(_signal: libc::c_int) {
    let fd = DUMP_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = 1u8;
        // SAFETY: `write` is async-signal-safe; `fd` is the pipe's write end, open for the life of
        // the process (a forked child replaces it before any signal can reach the child's
        // handler with the new one), and `byte` a valid one-byte buffer. A full pipe just drops
        // this request, since a dump is pending anyway.
        unsafe {
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
    }
}

/// The `pthread_atfork` child handler: the child inherited the parent's pipe, whose reader is the
/// parent's dump thread, and no dump thread of its own. It gets both, so that the dump signal
/// writes the child's heap; and the turn at writing, which a parent's thread may have held.
extern "C" fn in_forked_child() {
    Turn::reset_in_child();
    let write_end = DUMP_PIPE.swap(-1, Ordering::Relaxed);
    let read_end = DUMP_READ.swap(-1, Ordering::Relaxed);
    alarm::set_pipe(-1);
    if write_end < 0 {
        return;
    }
    // SAFETY: both are the child's copies of the parent's pipe, which nothing else in the child
    // uses now that `DUMP_PIPE` no longer names it.
    unsafe {
        libc::close(write_end);
        libc::close(read_end);
    }
    start_dump_thread(false);
}

/// Starts the thread that writes a dump for each byte on a new dump pipe, and publishes the pipe;
/// `loud` says on stderr why it could not (not in a forked child, where another thread of the
/// parent may have held the lock of stderr).
fn start_dump_thread(loud: bool) -> bool {
    let mut fds = [-1; 2];
    // SAFETY: `fds` is a valid array of two descriptors for `pipe2` to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        if loud {
            warn(format_args!(
                "cannot create the dump thread's pipe; no dumps"
            ));
        }
        return false;
    }
    let [read_end, write_end] = fds;
    // SAFETY: `read_end` is the descriptor `pipe2` just returned; the reader blocks, and only the
    // writer (the signal handler) must never block.
    unsafe {
        libc::fcntl(read_end, libc::F_SETFL, 0);
    }
    // `dump_thread` reads the read end from `DUMP_READ`.
    DUMP_READ.store(read_end, Ordering::Relaxed);
    if let Err(error) = native::spawn(c"memprof-dump", DUMP_THREAD_STACK, dump_thread) {
        DUMP_READ.store(-1, Ordering::Relaxed);
        // SAFETY: the pipe's descriptors, which no thread reads or writes.
        unsafe {
            libc::close(read_end);
            libc::close(write_end);
        }
        if loud {
            warn(format_args!(
                "cannot start the dump thread, no dumps: {}",
                std::io::Error::from_raw_os_error(error)
            ));
        }
        return false;
    }
    DUMP_PIPE.store(write_end, Ordering::Relaxed);
    alarm::set_pipe(write_end);
    true
}

/// The dump thread: a dump for each byte 1 (the dump signal) read from the pipe whose read end
/// is in `DUMP_READ` when it starts; for the heap alarm's byte, and when the wait for one times
/// out ([`watch::timeout`]), the dumps on growth and near the limit ([`watch::check`]).
fn dump_thread() {
    let read_end = DUMP_READ.load(Ordering::Relaxed);
    guard::untracked(watch::start);
    let mut byte = 0u8;
    loop {
        let timeout = watch::timeout().map_or(-1, |t| t.as_millis() as libc::c_int);
        let mut ready = libc::pollfd {
            fd: read_end,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `ready` is one valid `pollfd`.
        match unsafe { libc::poll(&mut ready, 1, timeout) } {
            0 => {
                guard::untracked(watch::check);
                continue;
            }
            -1 if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {
                continue;
            }
            -1 => return,
            _ => {}
        }
        // SAFETY: reads at most one byte into `byte` from the pipe's read end, which only this
        // thread reads.
        let n = unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) };
        match (n, byte) {
            (1, alarm::WAKE) => guard::untracked(watch::check),
            (1, CONTROL) => guard::untracked(crate::control::open),
            (1, _) => guard::untracked(dumps::dump),
            (-1, _)
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return,
        }
    }
}

/// Installs `handler` for `signal`; says so on stderr when it cannot.
fn handle(signal: libc::c_int, handler: extern "C" fn(libc::c_int), variable: &str) {
    // SAFETY: `action` is fully initialized (zeroed, then the handler, the flags and an empty
    // mask) before `sigaction` reads it; both handlers only do async-signal-safe work (an atomic
    // operation, a `write`).
    let installed = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(signal, &action, std::ptr::null_mut()) == 0
    };
    if !installed {
        warn(format_args!(
            "{variable}: cannot handle signal {signal}; ignored"
        ));
    }
}
