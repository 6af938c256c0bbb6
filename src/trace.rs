//! Trace mode: every allocation, reallocation and free, with its time, thread and stack, written
//! to a file (or a FIFO, or a TCP peer) while the program runs, for tools to analyse afterwards.
//!
//! `MEMPROF_TRACE=path` (or [`MemProf::trace`](crate::MemProf::trace)) turns it on, beside the live
//! table, in a build with the cargo feature `trace`. The file format (`docs/trace-format.md`),
//! its encoder, decoder and replay are the `memprof-trace` crate's, shared with the `memprof`
//! command; here are the recorder's pieces:
//!
//! - `writer`: the background thread that opens the destination and each round hands the full
//!   buffers to the sink, and the close, which has it write what is left, the symbols and the end
//!   record, and gives a stalled destination up;
//! - `sink`: what the writer keeps between rounds and writes each round: compressed chunks of
//!   events, with the stacks, modules, threads and labels defined before their first use, and the
//!   symbols; the marker labels' ids;
//! - `destination`: where the trace goes (a new file, a FIFO, a device, `tcp://`), how it is
//!   opened and how long the writer has waited on it;
//! - `symbols`: offline symbolization (`OfflineSymbolizer`), from the binaries a trace's module
//!   records name, with the rules the live symbolizer follows (what `memprof symbolize` uses).
//!
//! The allocation path's half, the per-thread buffers of raw events and the taps that fill them
//! beside the live table's own calls, is part of the allocation path (`record::buffer`,
//! `record::trace_tap`): so pausing and sampling apply to the trace as to the table; this module
//! opens and closes the trace for it. A forked child stops
//! tracing (its parent's trace is not its own to write); a program the child `exec`s traces on its
//! own if its environment says so (name its file with `%p`).

#[cfg(feature = "trace")]
mod destination;
#[cfg(feature = "trace")]
mod sink;
#[cfg(feature = "trace")]
mod symbols;
#[cfg(feature = "trace")]
mod writer;

#[cfg(feature = "trace")]
pub use symbols::{OfflineSymbolizer, Unresolved};

#[cfg(feature = "trace")]
use crate::native::clock;
#[cfg(feature = "trace")]
use crate::record::buffer;
#[cfg(feature = "trace")]
use crate::record::trace_tap::ON;
#[cfg(feature = "trace")]
use std::sync::atomic::Ordering;

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

/// Starts tracing now into `stream`, the connection of `memprof attach` from process `peer`
/// (`crate::control`): `preamble`, then the trace's header are written before this returns, then
/// the events from now on. An error, and nothing written, when this process traces already or has traced (one trace per process), or
/// in a build without the cargo feature `trace`.
pub(crate) fn start_on(
    stream: std::os::unix::net::UnixStream,
    peer: u32,
    preamble: &[u8],
) -> std::io::Result<()> {
    #[cfg(feature = "trace")]
    {
        clock::init_clock();
        let target = format!("{}{peer}", writer::ATTACH_PREFIX);
        // The writer turns the events on before the command reads `preamble`.
        writer::start_on(stream, target, crate::snapshot::sample_interval(), preamble)
    }
    #[cfg(not(feature = "trace"))]
    {
        let _ = (stream, peer, preamble);
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this program's memprof is built without the cargo feature `trace`: no trace; \
             ask for --output files instead, or build it with `features = [\"trace\"]`",
        ))
    }
}

/// Closes the trace before the process ends by `_exit` (which runs no exit handler), as the exit
/// would; the writer says where it went. Allocates nothing and takes no lock on this thread
/// (`_exit` may come from a signal handler), and waits for the writer a bounded time (see
/// `writer`). The trace has no memory record then.
#[cfg(feature = "preload")]
pub(crate) fn close_before_exit() {
    #[cfg(feature = "trace")]
    writer::close_before_exit();
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
/// marker in the trace, those after it after. Does nothing when not tracing. A label may be new
/// each time: labels are found by their text in a hash map of bounded size (65,536 labels or
/// 4 MiB, then forgotten, and defined again when used again); a marker is lost, and counted in
/// the trace's end record, only when as many labels wait for a writer far behind its destination.
pub fn mark(label: &str) {
    #[cfg(feature = "trace")]
    if ON.load(Ordering::Relaxed) {
        match crate::guard::untracked(|| sink::label_id(label)) {
            Some(id) => buffer::append(&[clock::ticks() << 3 | buffer::MARK, u64::from(id)]),
            // Too many labels wait for a writer far behind its destination.
            None => {
                buffer::LOST.fetch_add(1, Ordering::Relaxed);
            }
        }
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
