//! The trace writer: a background thread that opens the destination (`destination`) and each
//! round hands the threads' buffers to the sink ([`Sink`]), which writes them as chunks; and the
//! close that has it write what is left, the symbols and the end record. The writer thread runs
//! inside the reentrancy guard for its whole life, so nothing it allocates is recorded; so does
//! the close.
//!
//! Only the writer thread touches the destination, and only it takes the trace's state: the close
//! (at exit, or `close_trace`) asks the writer to close and waits for its answer, and gives the
//! trace up when the writer has been waiting on its destination for [`CLOSE_PATIENCE`] in all
//! since the close began: a destination that stopped reading (a TCP peer, a FIFO's reader) or a
//! connect that does not complete never holds the program's exit for longer. The writer thread
//! blocks `SIGPIPE` for itself, so a FIFO whose reader went away is an error it reports, never a
//! signal that ends the program (sockets are written with `MSG_NOSIGNAL`, as std does).
//!
//! Imports run one way: this module uses the sink and the destination, the sink the destination.

#![forbid(unsafe_code)]

use super::destination::{Destination, Waiting, check_reader, connect, in_use, opens_existing};
use super::sink::Sink;
use crate::config::warn;
use crate::guard::Guard;
use crate::native::{self, clock};
use crate::record::buffer;
use crate::record::trace_tap::ON;
use memprof_trace::Header;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// How often the writer looks for full buffers.
const POLL: Duration = Duration::from_millis(5);

/// How long a round of the writer spends symbolizing the return addresses of new stacks, in the
/// background, before it goes back to the buffers (checked after each address; the first address
/// of a module also reads the module's debug information, however long that takes).
const SYMBOL_BUDGET: Duration = Duration::from_millis(10);

/// How old the trace is before the writer symbolizes in the background: reading a module's debug
/// information first takes the writer from the buffers for as long as that lasts, so a process
/// that ends soon without closing its trace (`_exit`, a signal) would lose the events of every
/// buffer that filled meanwhile. The same bound as the writing out of buffers not full
/// (`sink::PARTLY_EVERY`).
const SYMBOLS_AFTER: Duration = Duration::from_secs(1);

/// How the target of a trace streamed to `memprof attach` begins (`attach://PID`).
pub(crate) const ATTACH_PREFIX: &str = "attach://";

/// Stack of the writer thread: symbolizing at close needs more than a small stack.
const WRITER_STACK: usize = 2 << 20;

/// How long, in all, the close lets the writer wait on its destination (writes, a connect, a
/// FIFO's open) before it gives the trace up.
const CLOSE_PATIENCE: Duration = Duration::from_secs(3);

/// The trace's state.
enum State {
    /// Not started, or in a forked child.
    Idle,
    /// Started; the destination is not open yet.
    Pending(Box<Sink>),
    /// Writing.
    Open(Box<Sink>),
    /// Closed, or failed.
    Closed,
}

/// The trace's state: taken by the writer thread only (and by `start`, before it runs).
static STATE: Mutex<State> = Mutex::new(State::Idle);

/// Where the trace goes, as expanded: for the close's warnings and its check of a FIFO.
static TARGET: Mutex<String> = Mutex::new(String::new());

/// [`IDLE`], [`RUNNING`] or [`DONE`]: the trace's state as the close sees it, without the lock
/// the writer holds while it writes.
static PHASE: AtomicU8 = AtomicU8::new(IDLE);
/// No trace started.
const IDLE: u8 = 0;
/// The writer thread runs.
const RUNNING: u8 = 1;
/// Closed, failed or given up.
const DONE: u8 = 2;

/// Whether the writer opened its destination.
static OPENED: AtomicBool = AtomicBool::new(false);

/// A close is asked of the writer thread.
static CLOSING: AtomicBool = AtomicBool::new(false);

/// The close's answer, once the writer gave it: `None` until then; an answer taken already is
/// `Some(Ok(None))`.
static ANSWER: Mutex<Option<io::Result<Option<PathBuf>>>> = Mutex::new(None);
/// Signalled when [`ANSWER`] is set.
static ANSWERED: Condvar = Condvar::new();

/// Set in a forked child: the state may have been held by the parent's writer thread.
static FORKED: AtomicBool = AtomicBool::new(false);

/// Expands the trace's destination: `%p`, `%t`, `%e` in a path, as `MEMPROF_OUTPUT` does.
fn expand(spec: &str, now: Duration) -> String {
    let program = native::program_name();
    crate::export::expand_path(spec, std::process::id(), now, &program)
}

/// The trace's header, for a trace that starts now.
fn header(now: Duration, sample_interval: u64) -> Header {
    let config = crate::config::get();
    let executable = std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    Header::new(std::process::id(), now.as_nanos() as u64, executable).with_settings(
        sample_interval,
        config.stack_depth as u32,
        config.stack_skip as u32,
    )
}

/// The time since the epoch.
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

/// Starts the trace and its writer thread; `false` when the thread cannot start.
pub(crate) fn start(spec: &str, sample_interval: u64) -> bool {
    let now = since_epoch();
    let origin = clock::origin();
    let config = crate::config::get();
    let header = header(now, sample_interval);
    let mut target = expand(spec, now);
    // A path without `%p` that another process writes its trace to now (a parent whose child
    // inherited `MEMPROF_TRACE`, or the other way round): this process writes beside it.
    if !spec.contains("%p") && !opens_existing(&target) && in_use(&target) {
        let own = format!("{target}.{}", std::process::id());
        warn(format_args!(
            "MEMPROF_TRACE: {target} is being written by another process (the path has no %p); \
             this process writes its trace to {own}"
        ));
        target = own;
    }
    set_target(&target);
    let sink = match Sink::new(target.clone(), header, origin, config.trace_symbols) {
        Ok(sink) => sink,
        Err(error) => {
            warn(format_args!(
                "MEMPROF_TRACE: cannot start zstd ({error}); no trace"
            ));
            return false;
        }
    };
    let mut sink = Box::new(sink);
    // A new file is made now, its header written: a process that ends at once (`_exit`, a
    // signal) before the writer's first round leaves a trace that reads as one, not an empty
    // file. FIFOs and TCP peers, whose opening may wait, are the writer thread's to open.
    let state = if opens_existing(&target) {
        State::Pending(sink)
    } else {
        match connect(&target).and_then(|destination| sink.open(destination)) {
            Ok(()) => {
                OPENED.store(true, Ordering::Release);
                State::Open(sink)
            }
            Err(error) => {
                warn(format_args!(
                    "MEMPROF_TRACE: cannot write {target}: {error}; no trace"
                ));
                *STATE.lock().unwrap_or_else(PoisonError::into_inner) = State::Closed;
                PHASE.store(DONE, Ordering::Release);
                return false;
            }
        }
    };
    match run(state) {
        Ok(()) => true,
        Err(error) => {
            warn(format_args!("MEMPROF_TRACE: {error}; no trace"));
            false
        }
    }
}

/// Starts the trace now on `stream`, the connection of `memprof attach` (`crate::control`),
/// named `target`: `preamble`, then the trace's header are written before this returns, and the
/// events are recorded from before `preamble` is sent: what the command does once it reads it
/// (tell the user, who makes the program allocate) is in the trace. An error when this process
/// is tracing already, or has traced (one trace per process).
pub(crate) fn start_on(
    stream: std::os::unix::net::UnixStream,
    target: String,
    sample_interval: u64,
    preamble: &[u8],
) -> io::Result<()> {
    if FORKED.load(Ordering::Relaxed) || PHASE.load(Ordering::Acquire) != IDLE {
        let now = TARGET
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let message = match PHASE.load(Ordering::Acquire) {
            RUNNING => format!("this process is tracing already, to {now}"),
            _ => format!(
                "this process has written its trace already (to {now}); memprof writes one \
                 trace per process"
            ),
        };
        return Err(io::Error::other(message));
    }
    let header = header(since_epoch(), sample_interval);
    let config = crate::config::get();
    let mut sink = Box::new(Sink::new(
        target.clone(),
        header,
        clock::origin(),
        config.trace_symbols,
    )?);
    // On before the command hears of it; off again should the trace not start after all.
    ON.store(true, Ordering::Release);
    let started = (|| {
        (&stream).write_all(preamble)?;
        sink.open(Destination::Socket(stream))?;
        OPENED.store(true, Ordering::Release);
        set_target(&target);
        run(State::Open(sink)).map_err(io::Error::other)
    })();
    if started.is_err() {
        ON.store(false, Ordering::Release);
    }
    started
}

/// Notes where the trace goes, for the close.
fn set_target(target: &str) {
    *TARGET.lock().unwrap_or_else(PoisonError::into_inner) = target.to_owned();
}

/// Publishes the trace's `state` and starts the writer thread; an error when it cannot start.
fn run(state: State) -> Result<(), String> {
    *STATE.lock().unwrap_or_else(PoisonError::into_inner) = state;
    PHASE.store(RUNNING, Ordering::Release);
    if let Err(error) = native::spawn(c"memprof-trace", WRITER_STACK, writer_thread) {
        *STATE.lock().unwrap_or_else(PoisonError::into_inner) = State::Closed;
        PHASE.store(DONE, Ordering::Release);
        return Err(format!(
            "cannot start the writer thread ({})",
            io::Error::from_raw_os_error(error)
        ));
    }
    if !native::at_exit(close_at_exit) {
        warn(format_args!(
            "MEMPROF_TRACE: cannot register the at-exit close; the trace ends at its last full \
             chunk"
        ));
    }
    Ok(())
}

/// After `fork`, in the child: the trace is the parent's.
pub(crate) fn forget_in_child() {
    FORKED.store(true, Ordering::Relaxed);
}

extern "C" fn close_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        crate::guard::untracked(|| say_closed(close().as_ref().map(Option::as_deref)))
    });
}

/// How long a program that ends by `_exit` waits for the writer to finish the trace: `_exit`
/// may be called from a signal handler, which may have interrupted this thread holding a lock
/// the writer then needs, and the process must end all the same.
#[cfg(feature = "preload")]
const EXIT_PATIENCE: Duration = Duration::from_secs(10);

/// Set by [`close_before_exit`]: the writer says where the trace went itself, and leaves the
/// trace's memory record out (measuring it takes the C library allocator's locks, which the
/// thread ending the process may hold, and holds the live table still, which it may be inside).
static CLOSED_BY_EXIT: AtomicBool = AtomicBool::new(false);

/// Closes the trace before the process ends by `_exit`, which runs no exit handler, as the exit
/// would, without its memory record. This thread may be in a signal handler that interrupted the
/// C library's allocator, holding its lock: it allocates nothing and takes no lock, but asks the
/// writer thread to close the trace and waits for it, at most [`EXIT_PATIENCE`] (a destination
/// that keeps the writer waiting, [`CLOSE_PATIENCE`]); the writer says where the trace went.
#[cfg(feature = "preload")]
pub(crate) fn close_before_exit() {
    if FORKED.load(Ordering::Relaxed) || PHASE.load(Ordering::Acquire) != RUNNING {
        return;
    }
    CLOSED_BY_EXIT.store(true, Ordering::Release);
    CLOSING.store(true, Ordering::Release);
    let began = std::time::Instant::now();
    let waited = Waiting::total();
    while PHASE.load(Ordering::Acquire) != DONE {
        // A destination that keeps the writer waiting is given up as the close gives it up.
        let stalled = Waiting::total().saturating_sub(waited) >= CLOSE_PATIENCE.as_millis() as u64;
        if stalled || began.elapsed() >= EXIT_PATIENCE {
            give_up();
            let lost = buffer::unwritten() + buffer::LOST.load(Ordering::Relaxed);
            warn(format_args!(
                "MEMPROF_TRACE: the trace was not closed within {} s of _exit ({}); given up, \
                 {lost} events not written",
                began.elapsed().as_secs(),
                if stalled {
                    "its destination kept the writer waiting"
                } else {
                    "its writer did not finish"
                }
            ));
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Says on stderr where the trace went, or why closing it failed.
fn say_closed(closed: Result<Option<&std::path::Path>, &io::Error>) {
    match closed {
        // `memprof attach` says where its trace went.
        Ok(Some(path)) if path.to_string_lossy().starts_with(ATTACH_PREFIX) => {}
        Ok(Some(path)) if path.to_string_lossy().starts_with("tcp://") => {
            warn(format_args!("trace sent to {}", path.display()))
        }
        Ok(Some(path)) => warn(format_args!("trace written to {}", path.display())),
        Ok(None) => {}
        Err(error) => warn(format_args!(
            "MEMPROF_TRACE: closing the trace failed: {error}"
        )),
    }
}

/// The writer thread.
fn writer_thread() {
    let _guard = Guard::enter();
    let _answer = AnswerAtEnd;
    // Its writes into a FIFO whose reader went away fail with `EPIPE`, and the signal stays
    // pending on this thread, never delivered.
    native::block_sigpipe();
    // The first round at once: the module list reaches the file before the program may end.
    let mut first = true;
    let started = std::time::Instant::now();
    loop {
        if !CLOSING.load(Ordering::Acquire) && !std::mem::take(&mut first) {
            std::thread::sleep(POLL);
        }
        if FORKED.load(Ordering::Relaxed) || PHASE.load(Ordering::Acquire) == DONE {
            return;
        }
        let closing = CLOSING.load(Ordering::Acquire);
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        let result = match &mut *state {
            State::Idle | State::Closed => return,
            State::Pending(sink) if !opens_existing(sink.target()) => {
                // A new file, made under the state's lock.
                let target = sink.target().to_owned();
                connect(&target).and_then(|d| install(&mut state, d))
            }
            State::Pending(sink) => {
                // Opened without holding the state: a FIFO's `open` waits for a reader, a TCP
                // peer may be slow to answer.
                let target = sink.target().to_owned();
                drop(state);
                let destination = connect(&target);
                state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
                if PHASE.load(Ordering::Acquire) == DONE {
                    return;
                }
                destination.and_then(|d| install(&mut state, d))
            }
            State::Open(sink) if closing => {
                let by_exit = CLOSED_BY_EXIT.load(Ordering::Acquire);
                let result = sink.close(!by_exit);
                if by_exit {
                    say_closed(result.as_ref().map(|path| Some(path.as_path())));
                    // The process ends, by a thread that may hold the lock of the allocator's
                    // arena the sink's memory came from: it is never given back.
                    std::mem::forget(std::mem::replace(&mut *state, State::Closed));
                    PHASE.store(DONE, Ordering::Release);
                    return;
                }
                if let Err(error) = &result {
                    fail(&mut state, error);
                }
                *state = State::Closed;
                PHASE.store(DONE, Ordering::Release);
                answer(result.map(Some));
                return;
            }
            State::Open(sink) => sink.drain(false).and_then(|()| {
                if started.elapsed() >= SYMBOLS_AFTER {
                    sink.symbols(Some(SYMBOL_BUDGET))
                } else {
                    Ok(())
                }
            }),
        };
        if let Err(error) = result {
            fail(&mut state, &error);
            return;
        }
    }
}

/// Gives the close its answer, and wakes it.
fn answer(result: io::Result<Option<PathBuf>>) {
    let mut slot = ANSWER.lock().unwrap_or_else(PoisonError::into_inner);
    if slot.is_none() {
        *slot = Some(result);
    }
    ANSWERED.notify_all();
}

/// Ends the writer thread's life, however it ends: a close waiting has its answer (no trace,
/// when the writer failed before), and none waits for a writer that is gone.
struct AnswerAtEnd;

impl Drop for AnswerAtEnd {
    fn drop(&mut self) {
        PHASE.store(DONE, Ordering::Release);
        answer(Ok(None));
    }
}

/// Stops tracing after a write failed.
fn fail(state: &mut State, error: &io::Error) {
    super::ON.store(false, Ordering::Relaxed);
    let target = match state {
        State::Pending(sink) | State::Open(sink) => sink.target().to_owned(),
        _ => String::new(),
    };
    warn(format_args!(
        "MEMPROF_TRACE: cannot write {target}: {error}; tracing stops"
    ));
    *state = State::Closed;
    PHASE.store(DONE, Ordering::Release);
}

/// Makes a pending trace open on `destination`, its header written.
fn install(state: &mut State, destination: Destination) -> io::Result<()> {
    if let State::Pending(sink) = state {
        sink.open(destination)?;
        OPENED.store(true, Ordering::Release);
        let State::Pending(sink) = std::mem::replace(state, State::Closed) else {
            unreachable!("matched above")
        };
        *state = State::Open(sink);
    }
    Ok(())
}

/// Closes the trace: what is left of every thread's events, the symbols, the end record,
/// written by the writer thread, which this waits for. `None` when no trace was open. A FIFO
/// nobody reads yet is given up at once; a destination the writer has waited on for
/// [`CLOSE_PATIENCE`] since the close began is given up then, an error naming it and the events
/// not written.
pub(crate) fn close() -> io::Result<Option<PathBuf>> {
    if FORKED.load(Ordering::Relaxed) || PHASE.load(Ordering::Acquire) != RUNNING {
        return Ok(None);
    }
    let target = TARGET
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let target = target.as_str();
    // A FIFO that nobody reads yet: given up at once.
    if !OPENED.load(Ordering::Acquire)
        && !target.starts_with("tcp://")
        && opens_existing(target)
        && let Err(error) = check_reader(target)
    {
        give_up();
        warn(format_args!(
            "MEMPROF_TRACE: cannot write {target}: {error}; tracing stops"
        ));
        return Err(error);
    }
    let waited = Waiting::total();
    CLOSING.store(true, Ordering::Release);
    let patience = CLOSE_PATIENCE.as_millis() as u64;
    let mut slot = ANSWER.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if let Some(answer) = slot.as_mut() {
            return std::mem::replace(answer, Ok(None));
        }
        if Waiting::total().saturating_sub(waited) >= patience {
            drop(slot);
            give_up();
            let lost = buffer::unwritten() + buffer::LOST.load(Ordering::Relaxed);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{target} kept the trace waiting for {} s; given up, {lost} events \
                     not written",
                    CLOSE_PATIENCE.as_secs()
                ),
            ));
        }
        slot = ANSWERED
            .wait_timeout(slot, Duration::from_millis(20))
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// Stops tracing without the writer: it finds the trace done when its destination lets it go.
fn give_up() {
    super::ON.store(false, Ordering::Relaxed);
    PHASE.store(DONE, Ordering::Release);
}
