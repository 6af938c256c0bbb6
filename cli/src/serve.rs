//! `memprof serve`: the viewer. memprof's HTTP server (`memprof-http`: one thread reading request
//! heads, a fixed pool of workers, deadlines, a `Host` check against DNS rebinding) serves the
//! page embedded in the binary and the REST API over a trace's index (docs/viewer-api.md). With
//! `--listen-trace`, it receives a trace sent to `MEMPROF_TRACE=tcp://…` and serves it as it
//! arrives, its index extended as it grows.

#![forbid(unsafe_code)]

mod api;
mod cache;
mod index;
mod live;
mod query;
mod state;
mod view;

use crate::Failure;
use query::ApiError;
use state::{Shared, State};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

include!(concat!(env!("OUT_DIR"), "/viewer_files.rs"));

/// Worker threads answering requests: enough for a page's parallel requests and a few clients,
/// few enough that scans and exports cannot multiply memory.
const WORKERS: usize = 8;
/// Connections whose request heads are read at once; beyond them, a new connection closes the
/// oldest still unread, so idle connections cannot keep a page's requests out.
const READING: usize = 64;
/// A request line longer than this is refused (a page's URL is far shorter).
const MAX_URL: usize = 16 * 1024;

/// Runs the server until the process is stopped: over `traces` (the first answers the paths
/// without a trace id), or over the trace received at `listen_trace` (written to the one path
/// given, if any).
pub fn serve(
    traces: Vec<PathBuf>,
    listen: &str,
    listen_trace: Option<&str>,
) -> Result<(), Failure> {
    let shared: Shared = Arc::new(RwLock::new(None));
    let mut others: Vec<Arc<State>> = Vec::new();
    match listen_trace {
        None if traces.is_empty() => {
            return Err(Failure(
                "serve: give a TRACE, or --listen-trace ADDR to receive one".into(),
                2,
            ));
        }
        None => {
            for (id, path) in traces.iter().enumerate() {
                let state = open_indexed(path)?;
                say!(
                    "memprof: trace {id}: {}: {} events, {} call sites, {} classes indexed",
                    path.display(),
                    state.trace.events(),
                    state.sites.len(),
                    state.classes.list.len()
                );
                if id == 0 {
                    *shared.write().map_err(|_| Failure("lock".into(), 1))? = Some(Arc::new(state));
                } else {
                    others.push(Arc::new(state));
                }
            }
        }
        Some(address) => {
            if traces.len() > 1 {
                return Err(Failure(
                    "serve: --listen-trace receives one trace: give at most one file to write it to"
                        .into(),
                    2,
                ));
            }
            let path = traces.into_iter().next().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("memprof-live-{}.mptrace", std::process::id()))
            });
            receive_live(address, path, shared.clone())?;
        }
    }
    let listener = std::net::TcpListener::bind(listen)
        .map_err(|e| Failure(format!("--listen {listen}: {e}"), 1))?;
    let address = listener
        .local_addr()
        .map_err(|e| Failure(format!("--listen {listen}: {e}"), 1))?;
    let viewer = Viewer { shared, others };
    memprof_http::start(listener, viewer, options())
        .map_err(|e| Failure(format!("--listen {listen}: {e}"), 1))?;
    say!("memprof: serving on http://{address}/");
    warn_beyond_loopback(address, "--listen");
    loop {
        std::thread::park();
    }
}

/// The socket of [`serve_following`], bound to `listen` before anything else is done, so that an
/// address that cannot be had is refused first.
pub fn bind_following(listen: &str) -> Result<std::net::TcpListener, Failure> {
    std::net::TcpListener::bind(listen).map_err(|e| Failure(format!("--serve {listen}: {e}"), 1))
}

/// The viewer on `listener` ([`bind_following`]) over the trace file being written at `path`
/// (`memprof attach --serve`): its index follows the file until `done` is set and the rest of it
/// is indexed. The server runs on threads of its own; returns the address it listens on, once it
/// listens.
pub fn serve_following(
    path: PathBuf,
    listener: std::net::TcpListener,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> Result<SocketAddr, Failure> {
    let shared: Shared = Arc::new(RwLock::new(None));
    let address = listener
        .local_addr()
        .map_err(|e| Failure(format!("--serve: {e}"), 1))?;
    let following = shared.clone();
    std::thread::spawn(move || live::follow(&path, &following, &done));
    let viewer = Viewer {
        shared,
        others: Vec::new(),
    };
    memprof_http::start(listener, viewer, options())
        .map_err(|e| Failure(format!("--serve {address}: {e}"), 1))?;
    say!("memprof: serving on http://{address}/");
    warn_beyond_loopback(address, "--serve");
    Ok(address)
}

/// The server's bounds: enough workers for a page's parallel requests and a few clients, few
/// enough that scans and exports cannot multiply memory; time to read answers of many MBs.
fn options() -> memprof_http::Options {
    memprof_http::Options {
        name: "memprof-serve",
        workers: WORKERS,
        reading: READING,
        head_limit: MAX_URL + 16 * 1024,
        read_deadline: Duration::from_secs(10),
        write_deadline: Duration::from_secs(60),
        write_rate: 256 << 10,
        worker_stack: 8 << 20,
        ..memprof_http::Options::default()
    }
}

/// Says on stderr that `address` (given by `option`) is reachable beyond this machine's
/// loopback, when it is.
fn warn_beyond_loopback(address: SocketAddr, option: &str) {
    if !address.ip().is_loopback() {
        say!(
            "memprof: warning: {option} {address} is beyond this machine's loopback: anyone who \
             can reach that address can {} (no authentication, no TLS); use 127.0.0.1 unless \
             others must reach it",
            if option == "--listen" {
                "read the trace"
            } else {
                "send a trace to it"
            }
        );
    }
}

/// Opens a trace with its index: the one kept beside it when it is the index of this trace as it
/// is now ([`cache`]), else one built by replaying it, then kept there for the next time.
fn open_indexed(path: &std::path::Path) -> Result<State, Failure> {
    let key = cache::key(path).ok();
    let trace = crate::common::open(path)?;
    let cache_path = cache::path_of(path);
    if let Some(key) = &key {
        match cache::load(&cache_path, key, trace.stacks().len()) {
            Ok((index, classes, resolved)) => {
                let (state, sites) = State::with_resolved(trace, index, classes, resolved);
                say!(
                    "memprof: {}: index read from {}{}",
                    path.display(),
                    cache_path.display(),
                    if sites {
                        ""
                    } else {
                        " (call sites resolved again)"
                    }
                );
                return Ok(state);
            }
            Err(cache::Miss::Absent) => {}
            Err(cache::Miss::Ignored(why)) => say!(
                "memprof: {}: {why}; ignored, indexing the trace again",
                cache_path.display()
            ),
        }
    }
    let state = State::build(trace, false)?;
    // Kept only when the trace did not change while it was indexed.
    if let Some(key) = key
        && cache::key(path).is_ok_and(|now| now == key)
        && let Err(e) = cache::store(&cache_path, key, &state)
    {
        say!(
            "memprof: {}: the index is not kept ({e}); the next open indexes the trace again",
            cache_path.display()
        );
    }
    Ok(state)
}

/// The viewer's requests, answered from the traces served.
struct Viewer {
    /// The first trace (none yet while waiting for one to be received).
    shared: Shared,
    /// The others.
    others: Vec<Arc<State>>,
}

impl memprof_http::Handler for Viewer {
    fn respond(&self, request: &memprof_http::Request<'_>) -> memprof_http::Response {
        let (method, url) = (request.method, request.target);
        let reply = if method != "GET" && method != "HEAD" {
            api::Reply::error(&ApiError {
                status: 405,
                message: format!("{method} {url}: only GET"),
            })
        } else if url.len() > MAX_URL {
            api::Reply::error(&ApiError {
                status: 414,
                message: format!("a URL of {} bytes: at most {MAX_URL}", url.len()),
            })
        } else {
            let (path, query) = (request.path, request.query);
            let current = self.shared.read().ok().and_then(|s| s.clone());
            // A bug in one query answers 500 and leaves the server running.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                route(current, &self.others, path, query)
            }))
            .unwrap_or_else(|_| {
                api::Reply::error(&ApiError::internal(format!("{path}: internal error")))
            })
        };
        response(reply)
    }

    fn refuse(&self, status: u16, why: &str) -> memprof_http::Response {
        response(api::Reply::error(&ApiError {
            status,
            message: why.to_owned(),
        }))
    }
}

/// The response that sends `reply`.
fn response(reply: api::Reply) -> memprof_http::Response {
    let mut headers = Vec::new();
    if let Some(name) = reply.file_name {
        headers.push((
            "Content-Disposition",
            format!("attachment; filename=\"{name}\""),
        ));
    }
    memprof_http::Response {
        status: reply.status,
        content_type: reply.content_type,
        headers,
        body: reply.body,
    }
}

fn route(state: Option<Arc<State>>, others: &[Arc<State>], path: &str, query: &str) -> api::Reply {
    if path == "/" || path == "/index.html" {
        return file("index.html");
    }
    if let Some(name) = path.strip_prefix("/static/") {
        return file(name);
    }
    if !path.starts_with("/api/") {
        return api::Reply::error(&ApiError::not_found(format!("no page {path}")));
    }
    let Some(state) = state else {
        return api::Reply::error(&ApiError {
            status: 503,
            message: "no trace yet: waiting for the traced program to connect".into(),
        });
    };
    let mut traces: Vec<&State> = vec![&state];
    traces.extend(others.iter().map(|s| &**s));
    api::route(&traces, path, query).unwrap_or_else(|e| api::Reply::error(&e))
}

fn file(name: &str) -> api::Reply {
    match VIEWER_FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, bytes, content_type)) => api::Reply {
            status: 200,
            content_type,
            body: bytes.to_vec(),
            file_name: None,
        },
        None => api::Reply::error(&ApiError::not_found(format!("no file {name}"))),
    }
}

/// Receives a trace in the background, writing it to `path`, and extends its index with what
/// arrived about once a second ([`live::follow`]). A sender whose first bytes are not a memprof
/// trace's header, or that sends none within [`HEADER_DEADLINE`], is dropped with a message, and
/// the next one is awaited.
fn receive_live(address: &str, path: PathBuf, shared: Shared) -> Result<(), Failure> {
    let listener = std::net::TcpListener::bind(address)
        .map_err(|e| Failure(format!("--listen-trace {address}: {e}"), 1))?;
    if let Ok(local) = listener.local_addr() {
        say!("memprof: waiting for a trace on {local}");
        warn_beyond_loopback(local, "--listen-trace");
    }
    std::thread::spawn(move || {
        let (mut stream, head) = loop {
            let (mut stream, peer) = match listener.accept() {
                Ok(found) => found,
                Err(e) => {
                    // Out of descriptors, say: the next try may succeed.
                    say!("memprof: --listen-trace: {e}");
                    std::thread::sleep(Duration::from_millis(500));
                    continue;
                }
            };
            match trace_head(&mut stream) {
                Ok(head) => {
                    say!(
                        "memprof: receiving a trace from {peer} into {}",
                        path.display()
                    );
                    break (stream, head);
                }
                Err(why) => say!(
                    "memprof: --listen-trace: {peer} sent no memprof trace ({why}); dropped, \
                     waiting for another sender"
                ),
            }
        };
        // A new file renamed over the path at once, then written in place as the index reads
        // it: no link planted at the path is followed, and no FIFO or device there is replaced.
        let file = match memprof_files::Replacement::create(&path)
            .and_then(memprof_files::Replacement::commit)
        {
            Ok(file) => file,
            Err(e) => {
                say!("memprof: {}: {e}", path.display());
                return;
            }
        };
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let indexer = {
            let (path, shared, done) = (path.clone(), shared.clone(), done.clone());
            std::thread::spawn(move || live::follow(&path, &shared, &done))
        };
        if let Err(e) = copy(&head, &mut stream, file) {
            say!("memprof: receiving the trace: {e}");
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = indexer.join();
    });
    Ok(())
}

/// Time a sender has to send a trace's header, from its connection's acceptance.
const HEADER_DEADLINE: Duration = Duration::from_secs(10);

/// Reads a trace's header from `stream`, checked as it arrives (the magic number first, so that
/// a sender of anything else is known at its first byte): the header's bytes, or why they are
/// not one.
fn trace_head(stream: &mut std::net::TcpStream) -> Result<Vec<u8>, String> {
    use memprof_trace::{MAGIC, MAJOR, MAX_HEADER_BYTES};
    let deadline = std::time::Instant::now() + HEADER_DEADLINE;
    let mut head: Vec<u8> = Vec::new();
    let mut wanted = 16;
    while head.len() < wanted {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(format!(
                "{} bytes of a header in {}s",
                head.len(),
                HEADER_DEADLINE.as_secs()
            ));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let mut buffer = vec![0u8; (wanted - head.len()).min(64 << 10)];
        let n = match stream.read(&mut buffer) {
            Ok(0) => return Err(format!("closed after {} bytes", head.len())),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string()),
        };
        head.extend_from_slice(&buffer[..n]);
        let magic = head.len().min(MAGIC.len());
        if head[..magic] != MAGIC[..magic] {
            return Err("not a memprof trace's header".into());
        }
        if wanted == 16 && head.len() >= 16 {
            let major = u16::from_le_bytes([head[8], head[9]]);
            if major != MAJOR {
                return Err(format!("a trace of version {major}, not {MAJOR}"));
            }
            let body = u32::from_le_bytes([head[12], head[13], head[14], head[15]]);
            if body > MAX_HEADER_BYTES {
                return Err(format!("a header of {body} bytes"));
            }
            wanted = 16 + body as usize;
        }
    }
    memprof_trace::Reader::new(&head[..]).map_err(|e| e.to_string())?;
    stream.set_read_timeout(None).map_err(|e| e.to_string())?;
    Ok(head)
}

/// Writes `head` then copies the stream to the file, flushing each read so the indexer sees whole
/// chunks soon.
fn copy(head: &[u8], stream: &mut impl Read, mut file: std::fs::File) -> io::Result<()> {
    file.write_all(head)?;
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = stream.read(&mut buffer)?;
        if n == 0 {
            return file.flush();
        }
        file.write_all(&buffer[..n])?;
    }
}
