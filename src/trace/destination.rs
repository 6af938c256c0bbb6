//! Where the trace goes: a new file, a FIFO or a character device written into, or a TCP peer
//! (`tcp://HOST:PORT`), opened by the writer thread ([`connect`]: a FIFO's `open` waits for a
//! reader; a TCP connect gives up after [`CONNECT_TIMEOUT`]), and the checks the close makes
//! without opening it ([`opens_existing`], [`check_reader`]); or the connection of `memprof
//! attach`, open already.
//!
//! Every wait on the destination (a write, a flush, a connect, a FIFO's open) is measured
//! ([`Waiting`]): the close gives the trace up when the writer has waited on its destination for
//! its patience in all, so a destination that stopped reading never holds the program's exit.
//! A write that fails with `EPIPE` takes the `SIGPIPE` the writer thread blocked for itself.

use crate::native;
use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a TCP connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the trace goes, once opened.
pub(super) enum Destination {
    /// A FIFO or a character device, written into.
    File(std::fs::File),
    /// A regular file this process created, locked (`flock`) while it is written, so that
    /// another process tracing to the same path writes elsewhere ([`in_use`]).
    Created(std::fs::File),
    Tcp(TcpStream),
    /// The connection of `memprof attach` (`crate::control`).
    Socket(std::os::unix::net::UnixStream),
}

impl Write for Destination {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let _waiting = Waiting::begin();
        let result = match self {
            Destination::File(f) | Destination::Created(f) => f.write(bytes),
            Destination::Tcp(s) => s.write(bytes),
            Destination::Socket(s) => s.write(bytes),
        };
        if let Err(error) = &result
            && error.kind() == io::ErrorKind::BrokenPipe
        {
            // Raised for this thread by a FIFO whose reader went away, and blocked here.
            native::take_pending_sigpipe();
        }
        result
    }

    fn flush(&mut self) -> io::Result<()> {
        let _waiting = Waiting::begin();
        match self {
            Destination::File(f) | Destination::Created(f) => f.flush(),
            Destination::Tcp(s) => s.flush(),
            Destination::Socket(s) => s.flush(),
        }
    }
}

/// The writer waiting on its destination, from [`Waiting::begin`] to its drop: what the close
/// measures its patience against.
pub(super) struct Waiting;

/// Milliseconds (since [`now_ms`]'s origin) spent waiting on the destination, ended waits.
static WAITED_MS: AtomicU64 = AtomicU64::new(0);
/// When the wait under way began, plus one (0: none under way).
static WAITING_SINCE: AtomicU64 = AtomicU64::new(0);

/// Milliseconds since the first call.
fn now_ms() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_millis() as u64
}

impl Waiting {
    pub(super) fn begin() -> Waiting {
        WAITING_SINCE.store(now_ms() + 1, Ordering::Relaxed);
        Waiting
    }

    /// Milliseconds spent waiting so far, the wait under way included.
    pub(super) fn total() -> u64 {
        let since = WAITING_SINCE.load(Ordering::Relaxed);
        let current = match since {
            0 => 0,
            since => now_ms().saturating_sub(since - 1),
        };
        WAITED_MS.load(Ordering::Relaxed) + current
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let since = WAITING_SINCE.swap(0, Ordering::Relaxed);
        if since != 0 {
            WAITED_MS.fetch_add(now_ms().saturating_sub(since - 1), Ordering::Relaxed);
        }
    }
}

/// Opens `target`: `tcp://HOST:PORT` (each of its addresses tried for [`CONNECT_TIMEOUT`]); a
/// FIFO or a character device there, written into; else a new file, created under a temporary
/// name beside `target` without following any link and renamed over what was there (a regular
/// file or a symbolic link, which is replaced, not followed; anything else is an error). A
/// FIFO's `open` waits for a reader.
pub(super) fn connect(target: &str) -> io::Result<Destination> {
    if let Some(address) = target.strip_prefix("tcp://") {
        use std::net::ToSocketAddrs;
        let mut last = io::Error::other("the address resolves to nothing");
        for address in address.to_socket_addrs()? {
            let _waiting = Waiting::begin();
            match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
                Ok(stream) => return Ok(Destination::Tcp(stream)),
                Err(error) => last = error,
            }
        }
        return Err(last);
    }
    if !opens_existing(target) {
        let mut replacement = memprof_files::Replacement::create(std::path::Path::new(target))?;
        // Locked before it is renamed into place: a process that finds the path locked knows a
        // trace is being written there. A file system without locks is written all the same.
        let _ = native::try_flock(replacement.file(), true);
        return Ok(Destination::Created(replacement.commit()?));
    }
    let file = {
        let _waiting = Waiting::begin();
        open_existing(target, 0)?
    };
    // What was checked may have been swapped since for something else: written into only if it
    // is still a FIFO or a device.
    let meta = file.metadata()?;
    if !written_into(&meta) {
        return Err(io::Error::other(format!(
            "{} replaced the FIFO or device while it was opened; not written",
            memprof_files::kind(&meta)
        )));
    }
    Ok(Destination::File(file))
}

impl Destination {
    /// An error when the file this process created at `target` is no longer there: another
    /// process renamed its own over it, or it was removed. The trace this process wrote is then
    /// lost, and must not be reported as written. Other destinations: `Ok`.
    pub(super) fn check_still_at(&self, target: &str) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let Destination::Created(file) = self else {
            return Ok(());
        };
        let ours = file.metadata()?;
        match std::fs::symlink_metadata(target) {
            Ok(there) if (there.dev(), there.ino()) == (ours.dev(), ours.ino()) => Ok(()),
            Ok(_) => Err(io::Error::other(format!(
                "{target} was replaced by another process's file while this process wrote its \
                 trace there; this process's trace is lost (name each process's trace with %p)"
            ))),
            Err(error) => Err(io::Error::other(format!(
                "{target} was removed while this process wrote its trace there ({error}); \
                 this process's trace is lost"
            ))),
        }
    }
}

/// Whether a regular file at `target` is being written as a trace by another process now (it
/// holds the file's lock, taken by [`connect`]).
pub(super) fn in_use(target: &str) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(target)
    else {
        return false;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    native::try_flock(&file, false).is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock)
}

/// Opens the FIFO or device at `target` for writing, not following a link, with `flags` more.
fn open_existing(target: &str, flags: i32) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | flags)
        .open(target)
}

/// An error when `target` is a FIFO that nobody reads now (a device, or a FIFO with a reader:
/// none).
pub(super) fn check_reader(target: &str) -> io::Result<()> {
    open_existing(target, libc::O_NONBLOCK)
        .map(drop)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => io::Error::other("a FIFO that nobody reads"),
            _ => e,
        })
}

/// Whether `target` is a destination that exists already and is written into (`tcp://`, a FIFO,
/// a character device) rather than a file made anew.
pub(super) fn opens_existing(target: &str) -> bool {
    target.starts_with("tcp://")
        || std::fs::symlink_metadata(target).is_ok_and(|m| written_into(&m))
}

/// A FIFO or a character device: written into, never replaced.
fn written_into(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    meta.file_type().is_fifo() || meta.file_type().is_char_device()
}
