//! `memprof serve`: the viewer. A small synchronous HTTP server (tiny_http, a fixed pool of
//! worker threads) serves the page embedded in the binary and the REST API over a trace's index
//! (docs/viewer-api.md). With `--listen-trace`, it receives a trace sent to
//! `MEMPROF_TRACE=tcp://…` and serves it as it arrives, its index extended as it grows.

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
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

include!(concat!(env!("OUT_DIR"), "/viewer_files.rs"));

/// Worker threads answering requests: enough for a page's parallel requests and a few clients,
/// few enough that scans and exports cannot multiply memory.
const WORKERS: usize = 8;
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
                eprintln!(
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
    let others = Arc::new(others);
    let server = tiny_http::Server::http(listen)
        .map_err(|e| Failure(format!("--listen {listen}: {e}"), 1))?;
    let server = Arc::new(server);
    match server.server_addr().to_ip() {
        Some(address) => {
            eprintln!("memprof: serving on http://{address}/");
            if !address.ip().is_loopback() {
                eprintln!(
                    "memprof: warning: serving at {address}, beyond this machine's loopback: \
                     anyone who can reach that address can read the trace (no authentication, \
                     no TLS); listen on 127.0.0.1 unless others must reach it"
                );
            }
        }
        None => eprintln!("memprof: serving on {listen}"),
    }
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let server = server.clone();
            let shared = shared.clone();
            let others = others.clone();
            std::thread::spawn(move || {
                while let Ok(request) = server.recv() {
                    handle(&shared, &others, request);
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
    Ok(())
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
                eprintln!(
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
            Err(cache::Miss::Ignored(why)) => eprintln!(
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
        eprintln!(
            "memprof: {}: the index is not kept ({e}); the next open indexes the trace again",
            cache_path.display()
        );
    }
    Ok(state)
}

fn handle(shared: &Shared, others: &[Arc<State>], request: tiny_http::Request) {
    let url = request.url().to_owned();
    let mut hosts = request
        .headers()
        .iter()
        .filter(|h| h.field.equiv("Host"))
        .map(|h| h.value.as_str());
    let host = (hosts.next(), hosts.next());
    let reply = if let (Some(_), Some(_)) = host {
        api::Reply::error(&ApiError::bad("more than one Host header"))
    } else if let (Some(host), None) = host
        && !host_accepted(host)
    {
        api::Reply::error(&ApiError {
            status: 403,
            message: format!(
                "Host {host:?} is not an address of this server: ask for it by IP address or as \
                 localhost"
            ),
        })
    } else if *request.method() != tiny_http::Method::Get
        && *request.method() != tiny_http::Method::Head
    {
        api::Reply::error(&ApiError {
            status: 405,
            message: format!("{} {url}: only GET", request.method()),
        })
    } else if url.len() > MAX_URL {
        api::Reply::error(&ApiError {
            status: 414,
            message: format!("a URL of {} bytes: at most {MAX_URL}", url.len()),
        })
    } else {
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let current = shared.read().ok().and_then(|s| s.clone());
        // A bug in one query answers 500 and leaves the server running.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            route(current, others, path, query)
        }))
        .unwrap_or_else(|_| {
            api::Reply::error(&ApiError::internal(format!("{path}: internal error")))
        })
    };
    let mut response = tiny_http::Response::from_data(reply.body).with_status_code(reply.status);
    let mut headers = vec![("Content-Type", reply.content_type.to_owned())];
    headers.push(("Cache-Control", "no-store".to_owned()));
    if let Some(name) = reply.file_name {
        headers.push((
            "Content-Disposition",
            format!("attachment; filename=\"{name}\""),
        ));
    }
    for (name, value) in headers {
        if let Ok(header) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(header);
        }
    }
    // A client gone before its answer is no concern of the server's.
    let _ = request.respond(response);
}

/// Whether a `Host` header names the server the way only a client that means it does, as the
/// library's HTTP endpoint checks it: an IP address (`127.0.0.1`, `[::1]`) or `localhost`, with or
/// without a port. A name that resolves here is refused, so that a web page the user visits cannot
/// make its own name resolve to this machine (DNS rebinding) and read the trace through the
/// user's browser. A request without `Host` (which no browser sends) is answered.
fn host_accepted(value: &str) -> bool {
    let port_ok = |port: &str| port.is_empty() || port.parse::<u16>().is_ok();
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split_once(']').is_some_and(|(address, port)| {
            address.parse::<std::net::Ipv6Addr>().is_ok()
                && (port.is_empty() || port.strip_prefix(':').is_some_and(port_ok))
        });
    }
    let (host, port) = value.split_once(':').unwrap_or((value, ""));
    port_ok(port)
        && (host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::Ipv4Addr>().is_ok())
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
/// arrived about once a second ([`live::follow`]).
fn receive_live(address: &str, path: PathBuf, shared: Shared) -> Result<(), Failure> {
    let listener = std::net::TcpListener::bind(address)
        .map_err(|e| Failure(format!("--listen-trace {address}: {e}"), 1))?;
    if let Ok(local) = listener.local_addr() {
        eprintln!("memprof: waiting for a trace on {local}");
    }
    std::thread::spawn(move || {
        let (mut stream, peer) = match listener.accept() {
            Ok(found) => found,
            Err(e) => {
                eprintln!("memprof: --listen-trace: {e}");
                return;
            }
        };
        eprintln!(
            "memprof: receiving a trace from {peer} into {}",
            path.display()
        );
        // A new file renamed over the path at once, then written in place as the index reads
        // it: no link planted at the path is followed, and no FIFO or device there is replaced.
        let file = match memprof_files::Replacement::create(&path)
            .and_then(memprof_files::Replacement::commit)
        {
            Ok(file) => file,
            Err(e) => {
                eprintln!("memprof: {}: {e}", path.display());
                return;
            }
        };
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let indexer = {
            let (path, shared, done) = (path.clone(), shared.clone(), done.clone());
            std::thread::spawn(move || live::follow(&path, &shared, &done))
        };
        if let Err(e) = copy(&mut stream, file) {
            eprintln!("memprof: receiving the trace: {e}");
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = indexer.join();
    });
    Ok(())
}

/// Copies the stream to the file, flushing each read so the indexer sees whole chunks soon.
fn copy(stream: &mut impl Read, mut file: std::fs::File) -> io::Result<()> {
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = stream.read(&mut buffer)?;
        if n == 0 {
            return file.flush();
        }
        file.write_all(&buffer[..n])?;
    }
}

#[cfg(test)]
mod tests {
    use super::host_accepted;

    #[test]
    fn hosts() {
        for good in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "localhost:8080",
            "LOCALHOST",
            "[::1]:8080",
            "[::1]",
            "10.1.2.3:80",
        ] {
            assert!(host_accepted(good), "{good}");
        }
        for bad in [
            "evil.example:8080",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io:8080",
            "[::1]x",
            "[evil]:1",
            "127.0.0.1:port",
            "",
        ] {
            assert!(!host_accepted(bad), "{bad}");
        }
    }
}
