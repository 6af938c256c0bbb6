//! The control channel of `memprof attach PID`, for a program with memprof built in: the
//! command sends the control signal (`MEMPROF_CONTROL_SIGNAL`), whose handler only wakes the dump
//! thread (`hooks::triggers`); that thread calls [`open`], which starts the channel's own thread.
//! It listens on an abstract Unix socket named by the process id ([`socket_name`]), accepts one
//! connection of the same user (checked with `SO_PEERCRED`; another user's is closed unanswered),
//! reads one request line and answers it, then closes the socket: nothing is left on disk, and no
//! path can be planted where it would be.
//!
//! The requests, one line each (`docs/attach.md`):
//!
//! - `outputs SPEC`: writes the heap now to the files of `SPEC`, as `MEMPROF_OUTPUT` names them
//!   (`%p`, `%e`, `%t` expanded; created without following links); answers `wrote PATH` or
//!   `error PATH: WHY` for each, then `ok` or `error`;
//! - `pause`, `resume`: recording off or on (as `memprof::pause` and `memprof::resume`);
//!   answers `ok paused` or `ok recording` (the state before: `was paused`);
//! - `trace`: answers `ok`, then the trace of the events from now on streams on the connection
//!   (the trace format, `docs/trace-format.md`), until the command writes a line or closes its
//!   side: then the trace is closed (its symbols and end record written) and the connection with
//!   it. A build without the cargo feature `trace`, or a process tracing already, answers
//!   `error WHY`.
//!
//! The accept waits [`ACCEPT_WAIT`] at most; a request line is at most [`MAX_REQUEST`] bytes.
//! One channel at a time: a signal while one is open opens it once more after it.

#![forbid(unsafe_code)]

use crate::config::warn;
use crate::guard;
use crate::native;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the channel waits for the command's connection.
const ACCEPT_WAIT: Duration = Duration::from_secs(10);

/// How long the channel waits for the request line.
const REQUEST_WAIT: Duration = Duration::from_secs(5);

/// Longest request line.
const MAX_REQUEST: usize = 64 << 10;

/// How often a trace's session looks whether the trace ended by itself.
const TRACE_POLL: Duration = Duration::from_millis(100);

/// Stack of the channel's thread: writing the exports symbolizes.
const STACK: usize = 2 << 20;

/// Set while the channel is open.
static OPEN: AtomicBool = AtomicBool::new(false);

/// Set when the signal came while the channel was open: the channel opens again after it (the
/// command asks its next request as soon as the last one is answered).
static AGAIN: AtomicBool = AtomicBool::new(false);

/// The abstract socket's name for process `pid`; the `memprof` command computes the same.
pub(crate) fn socket_name(pid: u32) -> String {
    format!("memprof-control-{pid}")
}

/// Starts the channel's thread, unless the channel is open already. Called by the dump thread
/// when the control signal arrived.
pub(crate) fn open() {
    if OPEN.swap(true, Ordering::AcqRel) {
        AGAIN.store(true, Ordering::Release);
        return;
    }
    fn channel_thread() {
        loop {
            guard::untracked(|| {
                if let Err(error) = serve() {
                    warn(format_args!(
                        "memprof attach: the control channel failed: {error}"
                    ));
                }
            });
            if AGAIN.swap(false, Ordering::AcqRel) {
                continue;
            }
            OPEN.store(false, Ordering::Release);
            // A signal between the look above and the store: its `open` found the channel open.
            if !AGAIN.swap(false, Ordering::AcqRel) || OPEN.swap(true, Ordering::AcqRel) {
                return;
            }
        }
    }
    if let Err(error) = native::spawn(c"memprof-control", STACK, channel_thread) {
        OPEN.store(false, Ordering::Release);
        warn(format_args!(
            "memprof attach: cannot start the control channel's thread: {}",
            io::Error::from_raw_os_error(error)
        ));
    }
}

/// Listens, takes the first connection of this process's user, and answers its request.
fn serve() -> io::Result<()> {
    let pid = std::process::id();
    let address = SocketAddr::from_abstract_name(socket_name(pid))?;
    let listener = UnixListener::bind_addr(&address)?;
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + ACCEPT_WAIT;
    let (stream, peer) = loop {
        match listener.accept() {
            Ok((stream, _)) => match native::peer_credentials(stream.as_fd()) {
                Ok((peer, uid)) if uid == native::user_id() => break (stream, peer),
                // Another user's process: closed unanswered.
                _ => continue,
            },
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "nothing connected within {} s of the signal",
                            ACCEPT_WAIT.as_secs()
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    };
    // The name is free again before a long trace begins.
    drop(listener);
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(REQUEST_WAIT))?;
    let mut reader = BufReader::new(stream.try_clone()?).take(MAX_REQUEST as u64);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    if !line.ends_with('\n') {
        return answer(&stream, "error the request is not one line\n");
    }
    let line = line.trim_end_matches('\n');
    let (verb, argument) = line.split_once(' ').unwrap_or((line, ""));
    match verb {
        "pause" | "resume" => {
            let was = if crate::record::is_paused() {
                "was paused"
            } else {
                "was recording"
            };
            if verb == "pause" {
                crate::record::pause();
            } else {
                crate::record::resume();
            }
            answer(&stream, &format!("ok {verb}d, {was}\n"))
        }
        "outputs" => answer(&stream, &outputs(argument)),
        "trace" => trace(stream, peer),
        _ => answer(&stream, &format!("error unknown request {verb:?}\n")),
    }
}

/// Writes `text` and closes the connection.
fn answer(mut stream: &UnixStream, text: &str) -> io::Result<()> {
    stream.write_all(text.as_bytes())?;
    stream.shutdown(std::net::Shutdown::Both)
}

/// Writes the heap now to each file of `spec`; the answer's lines.
fn outputs(spec: &str) -> String {
    let paths: Vec<&str> = spec
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if paths.is_empty() {
        return "error no files named\n".to_owned();
    }
    let snapshot = crate::snapshot::Snapshot::take();
    let options = crate::export::ExportOptions::default();
    let mut text = String::new();
    let mut failed = 0;
    crate::symbolize::with_symbolizer(|symbolizer| {
        for path in &paths {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::export::write_path(path, &snapshot, symbolizer, &options)
            }));
            match result {
                Ok(Ok(written)) => text.push_str(&format!("wrote {}\n", written.display())),
                Ok(Err(error)) => {
                    failed += 1;
                    text.push_str(&format!("error {path}: {error}\n"));
                }
                Err(_) => {
                    failed += 1;
                    text.push_str(&format!("error {path}: writing it failed\n"));
                }
            }
        }
    });
    match failed {
        0 => text.push_str("ok\n"),
        n => text.push_str(&format!("error {n} of {} files not written\n", paths.len())),
    }
    text
}

/// Streams the trace from now on to `stream`, until the command asks it to end (a line, or its
/// side closed) or the trace ends by itself (`close_trace`, a failed write).
fn trace(stream: UnixStream, peer: u32) -> io::Result<()> {
    let writer = stream.try_clone()?;
    if let Err(error) = crate::trace::start_on(writer, peer, b"ok\n") {
        // Nothing was written: the command reads this line instead of `ok`.
        return answer(&stream, &format!("error {error}\n"));
    }
    stream.set_read_timeout(Some(TRACE_POLL))?;
    let mut byte = [0u8; 1];
    loop {
        match (&stream).read(&mut byte) {
            Ok(_) => break,
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if !crate::trace::is_tracing() {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    let closed = crate::trace::close_trace();
    // What the command wrote is read whole: a socket closed with bytes unread resets the
    // connection, and the command would lose the trace's end.
    if stream.set_nonblocking(true).is_ok() {
        while matches!((&stream).read(&mut byte), Ok(1..)) {}
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    closed.map(drop)
}
