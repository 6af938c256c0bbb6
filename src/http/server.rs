//! The HTTP/1.1 server under the endpoint: a listening socket shared by [`WORKERS`] threads that
//! take turns accepting connections, one request per connection (`Connection: close`).
//!
//! Every resource a client can make it spend is bounded: at most [`WORKERS`] connections are
//! served at once (the others wait in the kernel's accept queue, costing the process nothing), a
//! request head is read within [`READ_DEADLINE`] and [`HEAD_LIMIT`] bytes, a response is written
//! within [`WRITE_DEADLINE`]. Request heads are parsed by `httparse`. The threads are
//! `std::thread`s spawned inside the reentrancy guard and stay inside it for their whole life, so
//! nothing the server allocates, in the spawning thread or in its own, is recorded.

use super::routes::{self, Request, Response};
use crate::guard::untracked;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// Threads serving one endpoint: requests served at once.
pub(crate) const WORKERS: usize = 4;

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
    let listener = Arc::new(listener);
    let mut started = 0;
    let mut failure = None;
    for _ in 0..WORKERS {
        let listener = Arc::clone(&listener);
        let spawned = std::thread::Builder::new()
            .name("memprof-http".into())
            .stack_size(WORKER_STACK)
            .spawn(move || untracked(|| work(&listener)));
        match spawned {
            Ok(_) => started += 1,
            Err(error) => failure = Some(error),
        }
    }
    if started == 0 {
        // The socket closes when `listener` is dropped: a child must not close a reused number.
        if let Some(slot) = slot {
            let _ = slot.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed);
        }
        return Err(failure.unwrap_or_else(|| io::Error::other("no worker thread")));
    }
    Ok(())
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

/// A worker: accepts connections and serves each, forever.
fn work(listener: &TcpListener) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                // A request that panics (a bug) fails alone; the worker serves the next one.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    serve(stream);
                }));
            }
            // Out of descriptors or memory: let the others finish before trying again.
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Reads one request from `stream`, answers it, and closes the connection.
fn serve(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut buffer = vec![0u8; HEAD_LIMIT];
    let (response, head_only) = match read_head(&mut stream, &mut buffer) {
        Ok(Some(length)) => answer(&buffer[..length]),
        Ok(None) => return,
        Err(response) => (response, false),
    };
    let _ = write_response(&mut stream, &response, head_only);
    let _ = stream.shutdown(Shutdown::Write);
}

/// The response to the request whose whole head is `head`, and whether to send only its head.
fn answer(head: &[u8]) -> (Response, bool) {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = parsed.parse(head) else {
        return (Response::text(400, "not an HTTP request\n"), false);
    };
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

/// Reads until `buffer` holds a whole request head; returns its length, `None` when the client
/// went away, or the response that says why it cannot be read (too long, too slow, not HTTP).
fn read_head(stream: &mut TcpStream, buffer: &mut [u8]) -> Result<Option<usize>, Response> {
    let deadline = Instant::now() + READ_DEADLINE;
    let mut length = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Response::text(408, "the request took too long\n"));
        }
        if length == buffer.len() {
            return Err(Response::text(431, "the request head is too long\n"));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| Response::text(500, "cannot read\n"))?;
        match stream.read(&mut buffer[length..]) {
            Ok(0) => return Ok(None),
            Ok(n) => length += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Response::text(408, "the request took too long\n"));
            }
            Err(_) => return Ok(None),
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        match httparse::Request::new(&mut headers).parse(&buffer[..length]) {
            Ok(httparse::Status::Complete(head)) => return Ok(Some(head)),
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => {
                return Err(Response::text(431, "too many headers\n"));
            }
            Err(_) => return Err(Response::text(400, "not an HTTP request\n")),
        }
    }
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
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Internal Server Error",
    }
}
