//! The workers: each takes a connection whose request head is whole, checks its `Host`, has the
//! handler answer it, writes the answer and closes the connection; a long request goes to a
//! thread of its own.

use crate::host::host_accepted;
use crate::write::write_response;
use crate::{Handler, Options, Request, Response};
use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};

/// Most headers a request may have.
pub(crate) const MAX_HEADERS: usize = 64;

/// A server: what answers, and its bounds.
pub(crate) struct Server<H> {
    pub(crate) handler: H,
    pub(crate) options: Options,
}

/// A connection whose request head is read whole: a worker's job.
pub(crate) struct Job {
    pub(crate) stream: TcpStream,
    /// The request head, and nothing after it.
    pub(crate) head: Vec<u8>,
}

/// Starts the workers: the queue that feeds them, how many started, and why one did not.
pub(crate) fn start_workers<H: Handler>(
    server: &Arc<Server<H>>,
) -> (SyncSender<Job>, usize, Option<io::Error>) {
    let (jobs, queue) = mpsc::sync_channel::<Job>(0);
    let queue = Arc::new(Mutex::new(queue));
    let mut started = 0;
    let mut failure = None;
    for _ in 0..server.options.workers {
        let queue = Arc::clone(&queue);
        let server = Arc::clone(server);
        let options = server.options;
        match (options.spawn)(
            options.name,
            options.worker_stack,
            Box::new(move || work(&queue, &server)),
        ) {
            Ok(()) => started += 1,
            Err(error) => failure = Some(error),
        }
    }
    (jobs, started, failure)
}

/// A worker: answers the requests read, for as long as the reading thread runs.
fn work<H: Handler>(queue: &Mutex<Receiver<Job>>, server: &Arc<Server<H>>) {
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else { return };
        // A request that panics (a bug) fails alone; the worker serves the next one.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(server, job)));
    }
}

/// Answers the request of `job` and closes the connection; a long request on a thread of its
/// own.
fn serve<H: Handler>(server: &Arc<Server<H>>, job: Job) {
    let Job { mut stream, head } = job;
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let _ = stream.set_nodelay(true);
    let long = server.options.long.filter(|_| {
        with_request(&head, |request| {
            request.is_ok_and(|request| server.handler.is_long(&request))
        })
    });
    let Some(slots) = long else {
        return reply(server, stream, &head);
    };
    if !slots.take() {
        let mut response = server.handler.refuse(
            503,
            &format!(
                "{} such requests are in progress already; try again later",
                slots.max
            ),
        );
        response.headers.push(("Retry-After", "10".to_owned()));
        let _ = write_response(&mut stream, &response, false, &server.options);
        let _ = stream.shutdown(Shutdown::Write);
        return;
    }
    let options = server.options;
    let server = Arc::clone(server);
    // When no thread can be started, the connection is closed unanswered.
    let _ = (options.spawn)(
        options.name,
        options.worker_stack,
        Box::new(move || {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                reply(&server, stream, &head);
            }));
            slots.give();
        }),
    )
    .map_err(|_| slots.give());
}

/// Calls `with` with the request whose whole head is `head`, or with the response that refuses
/// it.
fn with_request<T>(head: &[u8], with: impl FnOnce(Result<Request<'_>, (u16, &str)>) -> T) -> T {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = parsed.parse(head) else {
        return with(Err((400, "not an HTTP request")));
    };
    let target = parsed.path.unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    with(Ok(Request {
        method: parsed.method.unwrap_or(""),
        target,
        path,
        query,
        headers: parsed.headers,
    }))
}

/// Answers the request whose whole head is `head` on `stream`, and closes the connection.
fn reply<H: Handler>(server: &Server<H>, mut stream: TcpStream, head: &[u8]) {
    let (response, head_only) = with_request(head, |request| answer(server, request));
    let _ = write_response(&mut stream, &response, head_only, &server.options);
    let _ = stream.shutdown(Shutdown::Write);
}

/// The response to `request`, and whether to send only its head.
fn answer<H: Handler>(
    server: &Server<H>,
    request: Result<Request<'_>, (u16, &str)>,
) -> (Response, bool) {
    let request = match request {
        Ok(request) => request,
        Err((status, why)) => return (server.handler.refuse(status, why), false),
    };
    let mut hosts = request
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => {
            return (
                server.handler.refuse(400, "more than one Host header"),
                false,
            );
        }
        (Some(host), None) if !host_accepted(host.value) => {
            let value = String::from_utf8_lossy(host.value);
            let why = format!(
                "Host {value:?} is not an address of this server: ask for it by IP address or as \
                 localhost"
            );
            return (server.handler.refuse(403, &why), false);
        }
        _ => {}
    }
    (server.handler.respond(&request), request.method == "HEAD")
}
