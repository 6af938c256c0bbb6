//! memprof's HTTP/1.1 server, below the library's endpoint and the viewer of `memprof serve`: one
//! thread reads the request heads of every connection, a fixed set of workers answer them through
//! a [`Handler`], one request per connection (`Connection: close`).
//!
//! Every resource a client can make it spend is bounded:
//!
//! - Request heads are read by one thread from up to [`Options::reading`] connections at once,
//!   without blocking on any of them: a client that sends its head a byte at a time (slowloris)
//!   holds no worker, and when that many connections are open a new one closes the oldest still
//!   unread. A head is read within [`Options::read_deadline`] and [`Options::head_limit`] bytes.
//!   Idle connections therefore cost one descriptor each, for that deadline at most, and no thread.
//! - Whole requests wait for one of the [`Options::workers`]; beyond [`Options::reading`] of them
//!   waiting, new connections wait in the kernel's accept queue, costing the process nothing.
//! - A request the handler calls long ([`Handler::is_long`]) is answered on a thread of its own,
//!   at most [`Slots`] of them at once (more are answered 503), so that such requests never hold
//!   the workers.
//! - A response is written within [`Options::write_deadline`], extended by its size over
//!   [`Options::write_rate`].
//! - An accept that fails (out of descriptors, of memory) is retried after a pause; out of
//!   descriptors, the oldest connection still unread is closed first, so the server answers again
//!   as soon as a descriptor is free, and never stops accepting.
//! - A request whose `Host` is a name other than `localhost` is refused (403): a web page that
//!   makes its own name resolve to this machine (DNS rebinding) cannot read the server through
//!   the user's browser. IP addresses and `localhost`, with any port, are accepted, and so is a
//!   request without `Host` (which no browser sends).
//!
//! Request heads are parsed by `httparse`. Threads are started by [`Options::spawn`], so that a
//! caller can run them in a context of its own (the library's reentrancy guard).

mod host;
mod read;
mod work;
mod write;

use std::io;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::Duration;

/// What a client asked for, as the server read it from the request's head.
#[derive(Debug)]
pub struct Request<'a> {
    /// `GET`, `HEAD`, ...
    pub method: &'a str,
    /// The request target: the path and the query.
    pub target: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// What follows `?`, empty when nothing does.
    pub query: &'a str,
    headers: &'a [httparse::Header<'a>],
}

impl<'a> Request<'a> {
    /// The value of the first header named `name` (in any case), if the request has one.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }
}

/// A response: status, content type, extra headers and body. The server adds `Content-Length`,
/// `Connection: close`, `Cache-Control: no-store` and `X-Content-Type-Options: nosniff`.
#[derive(Debug)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Headers besides those the server writes (`Content-Disposition`, `Retry-After`, ...).
    pub headers: Vec<(&'static str, String)>,
    /// The body (only its length is sent in answer to `HEAD`).
    pub body: Vec<u8>,
}

impl Response {
    /// A plain-text response.
    pub fn text(status: u16, text: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: text.as_bytes().to_vec(),
        }
    }
}

/// What answers the requests. Called from the server's threads, a request at a time on each.
pub trait Handler: Send + Sync + 'static {
    /// The response to `request`, whose head is whole and whose `Host` was accepted.
    fn respond(&self, request: &Request<'_>) -> Response;

    /// Whether `request` takes long for reasons other than work (it waits): it is answered on a
    /// thread of its own, when [`Options::long`] allows it.
    fn is_long(&self, _request: &Request<'_>) -> bool {
        false
    }

    /// The response that refuses a request for a reason of the server's (a head too long or too
    /// slow, a foreign `Host`, too many long requests): `status` and why, in a sentence.
    fn refuse(&self, status: u16, why: &str) -> Response {
        Response::text(status, &format!("{why}\n"))
    }
}

/// Starts a thread: its name, its stack size, what it runs. Returns once it is started.
pub type Spawn = fn(&'static str, usize, Box<dyn FnOnce() + Send>) -> io::Result<()>;

/// Starts a `std::thread` named `name` with a stack of `stack` bytes.
pub fn spawn_thread(
    name: &'static str,
    stack: usize,
    body: Box<dyn FnOnce() + Send>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(stack)
        .spawn(body)
        .map(drop)
}

/// The bounds of a server and how it starts its threads.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The name of its threads.
    pub name: &'static str,
    /// Threads answering requests: requests answered at once, besides the long ones.
    pub workers: usize,
    /// Connections held at once by the thread that reads request heads, read or being read.
    pub reading: usize,
    /// Longest request head read (request line and headers).
    pub head_limit: usize,
    /// Time a client has to send its request head, from the connection's acceptance.
    pub read_deadline: Duration,
    /// Time a client has to read a response, once it is made...
    pub write_deadline: Duration,
    /// ... plus one second per this many bytes of its body (0: no more time for large ones).
    pub write_rate: u64,
    /// Stack of the threads that answer.
    pub worker_stack: usize,
    /// The long requests served at once ([`Handler::is_long`]), maybe shared by several servers;
    /// none: long requests are answered by the workers like the others.
    pub long: Option<&'static Slots>,
    /// Where the listening socket is noted while the server runs, for a forked child to close.
    pub listeners: Option<&'static Listeners>,
    /// Starts each thread of the server.
    pub spawn: Spawn,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            name: "http",
            workers: 4,
            reading: 64,
            head_limit: 8 * 1024,
            read_deadline: Duration::from_secs(5),
            write_deadline: Duration::from_secs(60),
            write_rate: 0,
            worker_stack: 2 << 20,
            long: None,
            listeners: None,
            spawn: spawn_thread,
        }
    }
}

/// A count of the long requests served, and its bound.
#[derive(Debug)]
pub struct Slots {
    max: usize,
    used: AtomicUsize,
}

impl Slots {
    /// At most `max` at once.
    pub const fn new(max: usize) -> Slots {
        Slots {
            max,
            used: AtomicUsize::new(0),
        }
    }

    /// Takes a slot, or says none is free.
    fn take(&self) -> bool {
        if self.used.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.used.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Gives a slot back.
    fn give(&self) {
        self.used.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The listening sockets of running servers, for a forked child to close: its copies would
/// otherwise keep the parent's address bound after the parent is gone, with nobody accepting.
#[derive(Debug)]
pub struct Listeners([AtomicI32; 8]);

impl Listeners {
    /// No socket noted.
    pub const fn new() -> Listeners {
        Listeners([const { AtomicI32::new(-1) }; 8])
    }

    /// Notes `fd`; the slot, or none when the table is full (a child then keeps it open).
    fn note(&self, fd: i32) -> Option<&AtomicI32> {
        self.0.iter().find(|slot| {
            slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Calls `close` with each socket noted, and forgets them.
    pub fn forget(&self, mut close: impl FnMut(i32)) {
        for slot in &self.0 {
            let fd = slot.swap(-1, Ordering::AcqRel);
            if fd >= 0 {
                close(fd);
            }
        }
    }
}

impl Default for Listeners {
    fn default() -> Listeners {
        Listeners::new()
    }
}

/// Serves `listener` with `handler` from threads started now, for as long as the process runs.
///
/// # Errors
/// When no thread can be started.
pub fn start<H: Handler>(listener: TcpListener, handler: H, options: Options) -> io::Result<()> {
    let fd = listener.as_raw_fd();
    // Known before any thread runs, so that a child forked from now on closes it.
    let slot = options.listeners.and_then(|listeners| listeners.note(fd));
    let server = Arc::new(work::Server { handler, options });
    let (jobs, started, failure) = work::start_workers(&server);
    let reader = (started > 0).then(|| {
        let server = Arc::clone(&server);
        (options.spawn)(
            options.name,
            256 << 10,
            Box::new(move || read::read_heads(&listener, &jobs, &server)),
        )
    });
    match reader {
        Some(Ok(())) => Ok(()),
        other => {
            // The socket closes when `listener` is dropped: a child must not close a reused
            // number. Workers without a reader see their queue close and end.
            if let Some(slot) = slot {
                let _ = slot.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed);
            }
            Err(match other {
                Some(Err(error)) => error,
                _ => failure.unwrap_or_else(|| io::Error::other("no worker thread")),
            })
        }
    }
}
