//! What makes memprof act on its own: the end of the program (the at-exit log and the
//! `MEMPROF_OUTPUT` files) and signals (toggling recording, writing a dump on demand).
//!
//! A signal handler may do almost nothing safely, so the handlers here only flip an atomic
//! (toggle) or write one byte to a pipe (dump); a background thread reads the pipe and writes the
//! dump from ordinary code, while the program runs on.

use crate::config::Config;
use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};

/// The write end of the dump pipe; -1 until the dump thread runs.
static DUMP_PIPE: AtomicI32 = AtomicI32::new(-1);

/// Sets up what `config` asks for. Runs once, when the profiler starts, inside the guard.
pub fn install(config: &Config) {
    if config.print_at_exit || config.output.is_some() {
        // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds.
        if unsafe { libc::atexit(at_exit) } != 0 {
            eprintln!("memprof: cannot register the at-exit report");
        }
    }
    if let Some(signal) = config.toggle_signal {
        handle(signal, on_toggle, "MEMPROF_TOGGLE_SIGNAL");
    }
    if let Some(signal) = config.dump_signal
        && start_dump_thread()
    {
        handle(signal, on_dump, "MEMPROF_DUMP_SIGNAL");
    }
}

/// Writes what the configuration asks for at exit: the TSV log to stderr, the output files.
extern "C" fn at_exit() {
    let config = crate::config::get();
    if config.print_at_exit {
        let mut stderr = std::io::stderr().lock();
        if let Err(error) = crate::report::log_allocations(&mut stderr) {
            let _ = writeln!(
                stderr,
                "memprof: writing the report at exit failed: {error}"
            );
        }
    }
    if let Some(spec) = &config.output {
        crate::export::write_outputs(spec);
    }
}

/// Writes the dump: the `MEMPROF_OUTPUT` files, or the Markdown report on stderr.
fn dump() {
    match &crate::config::get().output {
        Some(spec) => crate::export::write_outputs(spec),
        None => {
            let mut stderr = std::io::stderr().lock();
            if let Err(error) = crate::report::pretty_log_allocations(&mut stderr) {
                let _ = writeln!(stderr, "memprof: writing the dump failed: {error}");
            }
        }
    }
}

extern "C" fn on_toggle(_signal: libc::c_int) {
    if super::is_paused() {
        super::resume();
    } else {
        super::pause();
    }
}

extern "C" fn on_dump(_signal: libc::c_int) {
    let fd = DUMP_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = 1u8;
        // SAFETY: `write` is async-signal-safe; `fd` is the pipe's write end, open for the life of
        // the process, and `byte` a valid one-byte buffer. A full pipe just drops this request,
        // since a dump is pending anyway.
        unsafe {
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
    }
}

/// Starts the thread that writes a dump for each byte on the dump pipe.
fn start_dump_thread() -> bool {
    let mut fds = [-1; 2];
    // SAFETY: `fds` is a valid array of two descriptors for `pipe2` to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        eprintln!("memprof: MEMPROF_DUMP_SIGNAL: cannot create a pipe; no dumps");
        return false;
    }
    let [read_end, write_end] = fds;
    // The reader blocks; only the writer (the signal handler) must never block.
    // SAFETY: `read_end` is the descriptor `pipe2` just returned.
    unsafe {
        libc::fcntl(read_end, libc::F_SETFL, 0);
    }
    let spawned = std::thread::Builder::new()
        .name("memprof-dump".into())
        .spawn(move || {
            let mut byte = 0u8;
            loop {
                // SAFETY: reads at most one byte into `byte` from the pipe's read end, which
                // this thread owns for the life of the process.
                let n = unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) };
                match n {
                    1 => dump(),
                    -1 if std::io::Error::last_os_error().kind()
                        == std::io::ErrorKind::Interrupted => {}
                    _ => return,
                }
            }
        });
    match spawned {
        Ok(_) => {
            DUMP_PIPE.store(write_end, Ordering::Relaxed);
            true
        }
        Err(error) => {
            eprintln!("memprof: MEMPROF_DUMP_SIGNAL: cannot start the dump thread: {error}");
            false
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
        eprintln!("memprof: {variable}: cannot handle signal {signal}; ignored");
    }
}
