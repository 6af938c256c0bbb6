//! The endpoint's HTTP/1.1 server: `memprof-http` (one thread reading the request heads of every
//! connection, [`WORKERS`] threads answering them, one request per connection), with the paths
//! of [`routes`] as its handler.
//!
//! Every resource a client can make it spend is bounded (see `memprof-http`): request heads are
//! read from up to [`READING`] connections at once without blocking on any (a slowloris client
//! holds no worker), within [`READ_DEADLINE`] and [`HEAD_LIMIT`] bytes; a `?seconds=N` request
//! waits its N seconds on a thread of its own, at most [`LONG`] of them at once in all endpoints
//! (more are answered 503); a response is written within [`WRITE_DEADLINE`]; a `Host` other than
//! an IP address or `localhost` is refused (403, DNS rebinding); an accept that fails is retried.
//!
//! The threads are `std::thread`s spawned inside the reentrancy guard and stay inside it for their
//! whole life, so nothing the server allocates, in the spawning thread or in its own, is recorded.

use super::routes::{self, Request};
use crate::guard::untracked;
use memprof_http::{Handler, Listeners, Options, Response, Slots};
use std::io;
use std::net::TcpListener;
use std::time::Duration;

/// Threads answering the requests of one endpoint: requests answered at once, besides the
/// `?seconds=N` ones.
pub(crate) const WORKERS: usize = 4;

/// Connections held at once by the thread that reads request heads, read or being read.
const READING: usize = 64;

/// `?seconds=N` requests served at once, each on a thread of its own, in all endpoints.
const LONG: usize = 32;

/// `?seconds=N` requests being served.
static LONG_SERVED: Slots = Slots::new(LONG);

/// Longest request head read (request line and headers).
const HEAD_LIMIT: usize = 8 * 1024;

/// Time a client has to send its request head, from the connection's acceptance.
const READ_DEADLINE: Duration = Duration::from_secs(5);

/// Time a client has to read the response, once it is made.
const WRITE_DEADLINE: Duration = Duration::from_secs(60);

/// Stack of a worker: a report symbolizes and formats, which needs more than a small stack.
const WORKER_STACK: usize = 2 << 20;

/// Listening sockets of the endpoints started, for a forked child to close.
static LISTENERS: Listeners = Listeners::new();

/// The endpoint's paths, as the server's handler.
struct Endpoint;

impl Handler for Endpoint {
    fn respond(&self, request: &memprof_http::Request<'_>) -> Response {
        let response = routes::respond(&Request {
            method: request.method,
            path: request.path,
            query: request.query,
        });
        Response {
            status: response.status,
            content_type: response.content_type,
            headers: response.headers,
            body: response.body,
        }
    }

    /// A delta over the next seconds (`?seconds=N`) waits them.
    fn is_long(&self, request: &memprof_http::Request<'_>) -> bool {
        request
            .query
            .split('&')
            .any(|pair| pair.starts_with("seconds="))
    }
}

/// Starts the threads that serve `listener`. Runs inside the reentrancy guard.
pub(crate) fn start(listener: TcpListener) -> io::Result<()> {
    let options = Options {
        name: "memprof-http",
        workers: WORKERS,
        reading: READING,
        head_limit: HEAD_LIMIT,
        read_deadline: READ_DEADLINE,
        write_deadline: WRITE_DEADLINE,
        write_rate: 0,
        worker_stack: WORKER_STACK,
        long: Some(&LONG_SERVED),
        listeners: Some(&LISTENERS),
        spawn,
    };
    memprof_http::start(listener, Endpoint, options)
}

/// Starts a thread of the endpoint, inside the reentrancy guard for its whole life.
fn spawn(name: &'static str, stack: usize, body: Box<dyn FnOnce() + Send>) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(stack)
        .spawn(move || untracked(body))
        .map(drop)
}

/// Calls `close` with each listening socket, and forgets them (see
/// [`forget_listeners_in_child`](super::forget_listeners_in_child)).
pub(crate) fn forget_listeners(close: impl FnMut(i32)) {
    LISTENERS.forget(close);
}
