//! The HTTP/1.1 server under the endpoint: one thread reads the request heads of every
//! connection, [`WORKERS`] threads answer them, one request per connection (`Connection: close`).
//!
//! Every resource a client can make it spend is bounded:
//!
//! - Request heads are read by one thread from up to [`READING`] connections at once, without
//!   blocking on any of them: a client that sends its head a byte at a time (slowloris) holds no
//!   worker, and when [`READING`] connections are open a new one closes the oldest still unread.
//!   A head is read within [`READ_DEADLINE`] and [`HEAD_LIMIT`] bytes.
//! - Whole requests wait for one of the [`WORKERS`]; beyond [`READING`] of them waiting, new
//!   connections wait in the kernel's accept queue, costing the process nothing.
//! - A `?seconds=N` request waits its N seconds on a thread of its own, at most [`LONG`] of them at
//!   once (more are answered 503), so such requests never hold the workers.
//! - A response is written within [`WRITE_DEADLINE`].
//! - A request whose `Host` is a name other than `localhost` is refused (403): a web page that
//!   makes its own name resolve to this machine (DNS rebinding) cannot read the endpoint through
//!   the user's browser. IP addresses and `localhost`, with any port, are accepted, and so is a
//!   request without `Host` (which no browser sends).
//!
//! Request heads are parsed by `httparse`. The threads are `std::thread`s spawned inside the
//! reentrancy guard and stay inside it for their whole life, so nothing the server allocates, in
//! the spawning thread or in its own, is recorded.

use super::routes::{self, Request, Response};
use crate::guard::untracked;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Threads answering the requests of one endpoint: requests answered at once, besides the
/// `?seconds=N` ones.
pub(crate) const WORKERS: usize = 4;

/// Connections held at once by the thread that reads request heads, read or being read.
const READING: usize = 64;

/// `?seconds=N` requests served at once, each on a thread of its own, in all endpoints.
const LONG: usize = 32;

/// `?seconds=N` requests being served.
static LONG_SERVED: AtomicUsize = AtomicUsize::new(0);

/// How long the reading thread sleeps when no connection it holds had anything to read.
const TICK: Duration = Duration::from_millis(2);

/// Longest request head read (request line and headers).
const HEAD_LIMIT: usize = 8 * 1024;

/// Most headers a request may have.
const MAX_HEADERS: usize = 64;

/// Time a client has to send its request head, from the connection's acceptance.
const READ_DEADLINE: Duration = Duration::from_secs(5);

/// Time a client has to read the response, once it is made.
const WRITE_DEADLINE: Duration = Duration::from_secs(60);

/// Stack of a worker: a report symbolizes and formats, which needs more than a small stack.
const WORKER_STACK: usize = 2 << 20;

/// Listening sockets of the endpoints started, for a forked child to close; -1: a free slot.
static LISTENERS: [AtomicI32; 8] = [const { AtomicI32::new(-1) }; 8];

/// Starts the workers that serve `listener`. Runs inside the reentrancy guard.
pub(crate) fn start(listener: TcpListener) -> io::Result<()> {
    let fd = listener.as_raw_fd();
    // Known before any worker runs, so that a child forked from now on closes it. A full table
    // only means that such a child keeps this socket open.
    let slot = LISTENERS.iter().find(|slot| {
        slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    });
    let (jobs, queue) = mpsc::sync_channel::<Job>(0);
    let queue = Arc::new(Mutex::new(queue));
    let mut started = 0;
    let mut failure = None;
    for _ in 0..WORKERS {
        let queue = Arc::clone(&queue);
        let spawned = std::thread::Builder::new()
            .name("memprof-http".into())
            .stack_size(WORKER_STACK)
            .spawn(move || untracked(|| work(&queue)));
        match spawned {
            Ok(_) => started += 1,
            Err(error) => failure = Some(error),
        }
    }
    let reader = (started > 0).then(|| {
        std::thread::Builder::new()
            .name("memprof-http".into())
            .spawn(move || untracked(|| read_heads(&listener, &jobs)))
    });
    match reader {
        Some(Ok(_)) => Ok(()),
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

/// Calls `close` with each listening socket, and forgets them (see
/// [`forget_listeners_in_child`](super::forget_listeners_in_child)).
pub(crate) fn forget_listeners(mut close: impl FnMut(i32)) {
    for slot in &LISTENERS {
        let fd = slot.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            close(fd);
        }
    }
}

/// A connection whose request head is read whole: the worker's job.
struct Job {
    stream: TcpStream,
    /// The request head, and nothing after it.
    head: Vec<u8>,
}

/// A worker: answers the requests read, for as long as the reading thread runs.
fn work(queue: &Mutex<Receiver<Job>>) {
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else { return };
        // A request that panics (a bug) fails alone; the worker serves the next one.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(job)));
    }
}

/// A connection whose request head is being read.
struct Reading {
    stream: TcpStream,
    buffer: Vec<u8>,
    length: usize,
    /// When it must be whole.
    deadline: Instant,
}

/// What one read of a connection gave.
enum Step {
    /// Nothing more for now.
    Wait,
    /// The head is whole: its length.
    Head(usize),
    /// The client went away.
    Gone,
    /// The head cannot be read: the response that says why.
    Refuse(Response),
}

impl Reading {
    /// Reads what the client sent so far.
    fn step(&mut self) -> Step {
        loop {
            if self.length == self.buffer.len() {
                return Step::Refuse(Response::text(431, "the request head is too long\n"));
            }
            match self.stream.read(&mut self.buffer[self.length..]) {
                Ok(0) => return Step::Gone,
                Ok(n) => self.length += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return if Instant::now() >= self.deadline {
                        Step::Refuse(Response::text(408, "the request took too long\n"))
                    } else {
                        Step::Wait
                    };
                }
                Err(_) => return Step::Gone,
            }
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            match httparse::Request::new(&mut headers).parse(&self.buffer[..self.length]) {
                Ok(httparse::Status::Complete(head)) => return Step::Head(head),
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => {
                    return Step::Refuse(Response::text(431, "too many headers\n"));
                }
                Err(_) => return Step::Refuse(Response::text(400, "not an HTTP request\n")),
            }
        }
    }
}

/// The reading thread: accepts connections and reads their request heads, all at once and
/// without blocking on any, and hands each whole one to a worker.
fn read_heads(listener: &TcpListener, jobs: &SyncSender<Job>) {
    let mut reading: VecDeque<Reading> = VecDeque::new();
    let mut ready: VecDeque<Job> = VecDeque::new();
    loop {
        while let Some(job) = ready.pop_front() {
            match jobs.try_send(job) {
                Ok(()) => {}
                Err(TrySendError::Full(job)) => {
                    ready.push_front(job);
                    break;
                }
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
        // With nothing in hand, wait for a connection; otherwise only look.
        let idle = reading.is_empty() && ready.is_empty();
        if listener.set_nonblocking(!idle).is_err() {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let mut progressed = false;
        while ready.len() < READING {
            match listener.accept() {
                Ok((stream, _)) => {
                    progressed = true;
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if reading.len() + ready.len() >= READING {
                        // The oldest unread head goes, whoever sends it slowly.
                        reading.pop_front();
                    }
                    reading.push_back(Reading {
                        stream,
                        buffer: vec![0; HEAD_LIMIT],
                        length: 0,
                        deadline: Instant::now() + READ_DEADLINE,
                    });
                    if listener.set_nonblocking(true).is_err() {
                        break;
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                // Out of descriptors or memory: let the others finish before trying again.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(100));
                    break;
                }
            }
        }
        let mut index = 0;
        while index < reading.len() {
            let before = reading[index].length;
            let step = reading[index].step();
            progressed |= reading[index].length != before;
            match step {
                Step::Wait => index += 1,
                step => {
                    let Some(Reading {
                        mut stream,
                        mut buffer,
                        ..
                    }) = reading.remove(index)
                    else {
                        break;
                    };
                    match step {
                        Step::Head(length) => {
                            buffer.truncate(length);
                            ready.push_back(Job {
                                stream,
                                head: buffer,
                            });
                        }
                        Step::Refuse(response) => {
                            // Small enough for the socket's buffer: written now or never.
                            let _ = write_response(&mut stream, &response, false);
                            let _ = stream.shutdown(Shutdown::Write);
                        }
                        Step::Wait | Step::Gone => {}
                    }
                }
            }
        }
        let holding = !(reading.is_empty() && ready.is_empty());
        if holding && !progressed {
            std::thread::sleep(TICK);
        }
    }
}

/// Answers the request of `job` and closes the connection; a `?seconds=N` request on a thread of
/// its own.
fn serve(job: Job) {
    let Job { mut stream, head } = job;
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let _ = stream.set_nodelay(true);
    if !asks_to_wait(&head) {
        return reply(stream, &head);
    }
    let served = LONG_SERVED.fetch_add(1, Ordering::AcqRel);
    if served >= LONG {
        LONG_SERVED.fetch_sub(1, Ordering::AcqRel);
        let mut response = Response::text(
            503,
            &format!("{LONG} ?seconds= requests are in progress already; try again later\n"),
        );
        response.headers.push(("Retry-After", "10".to_owned()));
        let _ = write_response(&mut stream, &response, false);
        let _ = stream.shutdown(Shutdown::Write);
        return;
    }
    // When no thread can be started, the connection is closed unanswered.
    let _ = std::thread::Builder::new()
        .name("memprof-http".into())
        .stack_size(WORKER_STACK)
        .spawn(move || {
            untracked(|| {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    reply(stream, &head);
                }));
                LONG_SERVED.fetch_sub(1, Ordering::AcqRel);
            });
        })
        .map_err(|_| LONG_SERVED.fetch_sub(1, Ordering::AcqRel));
}

/// Answers the request whose whole head is `head` on `stream`, and closes the connection.
fn reply(mut stream: TcpStream, head: &[u8]) {
    let (response, head_only) = answer(head);
    let _ = write_response(&mut stream, &response, head_only);
    let _ = stream.shutdown(Shutdown::Write);
}

/// Whether the request asks for a delta over the next seconds (`?seconds=N`), which waits them.
fn asks_to_wait(head: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let _ = parsed.parse(head);
    let target = parsed.path.unwrap_or("");
    target
        .split_once('?')
        .is_some_and(|(_, query)| query.split('&').any(|pair| pair.starts_with("seconds=")))
}

/// The response to the request whose whole head is `head`, and whether to send only its head.
fn answer(head: &[u8]) -> (Response, bool) {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = parsed.parse(head) else {
        return (Response::text(400, "not an HTTP request\n"), false);
    };
    let mut hosts = parsed
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => {
            return (Response::text(400, "more than one Host header\n"), false);
        }
        (Some(host), None) if !host_accepted(host.value) => {
            let value = String::from_utf8_lossy(host.value);
            let text = format!(
                "Host {value:?} is not an address of this endpoint: ask for it by IP address or \
                 as localhost\n"
            );
            return (Response::text(403, &text), false);
        }
        _ => {}
    }
    let method = parsed.method.unwrap_or("");
    let target = parsed.path.unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let request = Request {
        method,
        path,
        query,
    };
    (routes::respond(&request), method == "HEAD")
}

/// Whether a `Host` header names this endpoint the way only a client that means it does: an IP
/// address (`127.0.0.1`, `[::1]`) or `localhost`, with or without a port. A name that resolves
/// here (DNS rebinding) is not accepted.
fn host_accepted(value: &[u8]) -> bool {
    let Ok(value) = std::str::from_utf8(value) else {
        return false;
    };
    let port_ok = |port: &str| port.is_empty() || port.parse::<u16>().is_ok();
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split_once(']').is_some_and(|(address, port)| {
            address.parse::<Ipv6Addr>().is_ok()
                && (port.is_empty() || port.strip_prefix(':').is_some_and(port_ok))
        });
    }
    let (host, port) = value.split_once(':').unwrap_or((value, ""));
    port_ok(port) && (host.eq_ignore_ascii_case("localhost") || host.parse::<Ipv4Addr>().is_ok())
}

/// Writes `response` (its head only for `HEAD`) within [`WRITE_DEADLINE`].
fn write_response(stream: &mut TcpStream, response: &Response, head_only: bool) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
         X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    for (name, value) in &response.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let deadline = Instant::now() + WRITE_DEADLINE;
    let body: &[u8] = if head_only { &[] } else { &response.body };
    for mut part in [head.as_bytes(), body] {
        // One write at a time, each within what is left of the deadline: a client that reads a
        // few bytes now and then cannot keep the worker past it.
        while !part.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            stream.set_write_timeout(Some(left))?;
            match stream.write(part) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => part = &part[n..],
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }
    stream.flush()
}

/// The reason phrase of the statuses this server sends.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        for good in [
            "127.0.0.1:6060",
            "127.0.0.1",
            "localhost:6060",
            "LOCALHOST",
            "[::1]:6060",
            "[::1]",
            "10.1.2.3:80",
        ] {
            assert!(host_accepted(good.as_bytes()), "{good}");
        }
        for bad in [
            "evil.example:6060",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io:6060",
            "[::1]x",
            "[evil]:1",
            "127.0.0.1:port",
            "",
        ] {
            assert!(!host_accepted(bad.as_bytes()), "{bad}");
        }
    }
}
