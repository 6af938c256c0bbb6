//! Trace mode: every allocation, reallocation and free, with its time, thread and stack, written
//! to a file (or a FIFO, or a TCP peer) while the program runs, for tools to analyse afterwards.
//!
//! `MEMPROF_TRACE=path` (or [`MemProf::trace`](crate::MemProf::trace)) turns it on, beside the live
//! table, in a build with the cargo feature `trace`. The file format (`docs/trace-format.md`),
//! its encoder, decoder and replay are the `memprof-trace` crate's, shared with the `memprof`
//! command; here are the recorder's pieces:
//!
//! - `buffer`: the allocation path's half, per-thread buffers of raw events;
//! - `writer`: the background thread that turns full buffers into compressed chunks, defines
//!   stacks, modules, threads and labels before their first use, and at close adds the symbols;
//! - `symbols`: offline symbolization (`OfflineSymbolizer`), from the binaries a trace's module
//!   records name, with the rules the live symbolizer follows (what `memprof symbolize` uses).
//!
//! The allocation path calls `alloc`, `free` and the two halves of a reallocation
//! (`realloc_start`, `realloc_end`) beside the live table's own calls, for the blocks the table
//! records: so pausing and sampling apply to the trace as to the table. A forked child stops
//! tracing (its parent's trace is not its own to write); a program the child `exec`s traces on its
//! own if its environment says so (name its file with `%p`).

#[cfg(feature = "trace")]
mod buffer;
#[cfg(feature = "trace")]
mod symbols;
#[cfg(feature = "trace")]
mod writer;

#[cfg(feature = "trace")]
pub use symbols::{OfflineSymbolizer, Unresolved};

#[cfg(feature = "trace")]
use crate::native::clock;
#[cfg(feature = "trace")]
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether events are recorded into the trace.
#[cfg(feature = "trace")]
static ON: AtomicBool = AtomicBool::new(false);

/// Starts tracing into `spec` (a path with `%p`, `%t`, `%e`, or `tcp://HOST:PORT`). Runs once,
/// when the profiler starts, inside the reentrancy guard.
pub(crate) fn start(spec: &str, sample_interval: u64) {
    #[cfg(feature = "trace")]
    {
        clock::init_clock();
        if writer::start(spec, sample_interval) {
            ON.store(true, Ordering::Release);
        }
    }
    #[cfg(not(feature = "trace"))]
    {
        let _ = sample_interval;
        crate::config::warn(format_args!(
            "MEMPROF_TRACE={spec:?}: trace mode needs memprof built with the cargo feature \
             `trace`; no trace is written"
        ));
    }
}

/// Records a new block (the table recorded it from `stack`).
#[inline(always)]
pub(crate) fn alloc(address: usize, size: usize, stack: crate::table::StackId) {
    #[cfg(feature = "trace")]
    if ON.load(Ordering::Relaxed) {
        let ticks = clock::ticks();
        match buffer::take_pending() {
            None => buffer::append(&[
                ticks << 3 | buffer::ALLOC,
                address as u64,
                size as u64,
                u64::from(stack.0),
            ]),
            Some((old, freed)) => buffer::append(&[
                freed << 3 | buffer::REALLOC,
                address as u64,
                size as u64,
                u64::from(stack.0),
                old,
                ticks,
            ]),
        }
    }
    #[cfg(not(feature = "trace"))]
    let _ = (address, size, stack);
}

/// Records the free of a block the table held.
#[inline(always)]
pub(crate) fn free(address: usize) {
    #[cfg(feature = "trace")]
    if ON.load(Ordering::Relaxed) {
        buffer::append(&[clock::ticks() << 3 | buffer::FREE, address as u64]);
    }
    #[cfg(not(feature = "trace"))]
    let _ = address;
}

/// The first half of a reallocation, before the wrapped allocator runs: `recorded` says whether
/// the table held the old block. Its free is joined to the new block's allocation when that is
/// recorded, or written alone by [`realloc_end`].
#[inline(always)]
pub(crate) fn realloc_start(old_address: usize, recorded: bool) {
    #[cfg(feature = "trace")]
    if recorded && ON.load(Ordering::Relaxed) {
        buffer::set_pending(old_address as u64, clock::ticks());
    }
    #[cfg(not(feature = "trace"))]
    let _ = (old_address, recorded);
}

/// The end of a reallocation: when it `failed`, the old block stays and nothing is written;
/// otherwise a free not joined to a recorded allocation is written alone. Tracing off, nothing
/// was made pending ([`realloc_start`]) and the thread-local is not touched; tracing stopped in
/// between, what is pending is never written.
#[inline(always)]
pub(crate) fn realloc_end(failed: bool) {
    #[cfg(feature = "trace")]
    if ON.load(Ordering::Relaxed)
        && let Some((old, freed)) = buffer::take_pending()
        && !failed
    {
        buffer::append(&[freed << 3 | buffer::FREE, old]);
    }
    #[cfg(not(feature = "trace"))]
    let _ = failed;
}

/// In a forked child: stop tracing, and never touch the parent's trace.
pub(crate) fn in_forked_child() {
    #[cfg(feature = "trace")]
    {
        ON.store(false, Ordering::Relaxed);
        writer::forget_in_child();
    }
}

/// Writes a marker into the trace: a moment of the run the program names ("request 42 done"),
/// that the tools report at or between. Events of this thread before the call are before the
/// marker in the trace, those after it after. Does nothing when not tracing.
pub fn mark(label: &str) {
    #[cfg(feature = "trace")]
    if ON.load(Ordering::Relaxed) {
        let id = crate::guard::untracked(|| writer::label_id(label));
        buffer::append(&[clock::ticks() << 3 | buffer::MARK, u64::from(id)]);
    }
    #[cfg(not(feature = "trace"))]
    let _ = label;
}

/// Closes the trace now: every thread's events so far are written, then the symbols of every
/// stack in it and the end record; events after this are not traced (the live table goes on).
/// The trace is closed at exit by itself; closing it before lets a program read its own trace, or
/// end it at a moment of its choice. Returns where it was written, or `None` when no trace was
/// open.
pub fn close_trace() -> std::io::Result<Option<std::path::PathBuf>> {
    #[cfg(feature = "trace")]
    {
        ON.store(false, Ordering::SeqCst);
        crate::guard::untracked(writer::close)
    }
    #[cfg(not(feature = "trace"))]
    Ok(None)
}

/// Whether events are traced now.
pub fn is_tracing() -> bool {
    #[cfg(feature = "trace")]
    return ON.load(Ordering::Relaxed);
    #[cfg(not(feature = "trace"))]
    false
}
