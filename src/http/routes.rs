//! What each path of the endpoint serves (the table is in the `http` module's documentation).
//!
//! Profiles and reports are made one at a time ([`RENDER`]): a snapshot holds the table still for
//! the time of one copy, and a copy may be large without sampling, so scrapers that come together
//! take their snapshots in turn rather than pausing the program's allocations together and
//! holding as many copies. The wait of a `?seconds=N` delta holds no turn, only the stacks'
//! counters of its first snapshot.
//!
//! However many requests come, the endpoint's snapshots hold the table still at most
//! 1/[`FREEZE_SHARE`] of the time: after a snapshot that held it for a time t, the next one waits
//! until (`FREEZE_SHARE` − 1) × t has passed. A flood of requests over a large heap is served
//! more slowly; the program's threads allocate on.

use crate::export::{ExportOptions, Value, pprof};
use crate::report::{Report, ReportOptions};
use crate::snapshot::{Snapshot, StackSummary, Which};
use crate::symbolize::with_symbolizer;
use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Longest `?seconds=N` delta.
pub(crate) const MAX_SECONDS: u64 = 300;

/// Taken while a profile or report is made.
static RENDER: Mutex<()> = Mutex::new(());

/// The endpoint's snapshots hold the table still at most one part in this many of the time.
pub(crate) const FREEZE_SHARE: u32 = 10;

/// When the endpoint's next snapshot may be taken. Locked only during a [`turn`].
static NEXT_SNAPSHOT: Mutex<Option<Instant>> = Mutex::new(None);

/// What `/debug/pprof/delta_heap` served last: each stack's allocated counters then. Locked only
/// during a [`turn`].
static DELTA_BASE: Mutex<Option<DeltaBase>> = Mutex::new(None);

/// The allocated counters of a snapshot, and when it was taken.
struct DeltaBase {
    /// Indexed by stack id; frames and live counts left empty.
    stacks: Vec<StackSummary>,
    /// Wall-clock time since the Unix epoch.
    time: Duration,
    /// The same moment, for the duration.
    at: Instant,
}

/// What the client asked for, as the server read it from the request's head.
pub(crate) struct Request<'a> {
    /// `GET`, `HEAD`, ...
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// What follows `?`, empty when nothing does.
    pub query: &'a str,
}

/// A response: status, content type, extra headers and body.
#[derive(Debug)]
pub(crate) struct Response {
    /// HTTP status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Headers besides the type, length and connection.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A plain-text response.
    pub(crate) fn text(status: u16, text: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: text.as_bytes().to_vec(),
        }
    }

    /// A response made by `write`, of `content_type`; a failure is a 500 that says why.
    fn made(
        content_type: &'static str,
        write: impl FnOnce(&mut Vec<u8>) -> io::Result<()>,
    ) -> Response {
        let mut body = Vec::new();
        match write(&mut body) {
            Ok(()) => Response {
                status: 200,
                content_type,
                headers: Vec::new(),
                body,
            },
            Err(error) => Response::text(500, &format!("cannot make it: {error}\n")),
        }
    }

    /// A pprof profile, named `name` for a browser that saves it, as Go's server names them.
    fn profile(name: &str, write: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> Response {
        let mut response = Response::made("application/octet-stream", write);
        if response.status == 200 {
            response.headers.push((
                "Content-Disposition",
                format!("attachment; filename=\"{name}\""),
            ));
        }
        response
    }
}

/// The parameters of a query that this endpoint reads.
#[derive(Debug, Default, PartialEq, Eq)]
struct Query {
    /// `seconds=N`: a delta over the next N seconds.
    seconds: Option<u64>,
}

impl Query {
    /// Reads `seconds` (1 to [`MAX_SECONDS`]) and `debug` (only `0`, the protobuf profile);
    /// ignores the rest, `gc` included (memprof has no collector to run first). A bad value is
    /// the 400 response that says why.
    fn parse(query: &str) -> Result<Query, Response> {
        let mut parsed = Query::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "seconds" => match value.parse::<u64>() {
                    Ok(n) if (1..=MAX_SECONDS).contains(&n) => parsed.seconds = Some(n),
                    _ => {
                        return Err(Response::text(
                            400,
                            &format!(
                                "invalid value for \"seconds\": {value:?} is not a whole number \
                                 from 1 to {MAX_SECONDS}\n"
                            ),
                        ));
                    }
                },
                "debug" if value != "0" => {
                    return Err(Response::text(
                        400,
                        "only the protobuf profile (debug=0) is served; the text reports are \
                         linked from /debug/memprof/\n",
                    ));
                }
                _ => {}
            }
        }
        Ok(parsed)
    }
}

/// The response to `request`.
pub(crate) fn respond(request: &Request<'_>) -> Response {
    if request.method != "GET" && request.method != "HEAD" {
        let mut response = Response::text(405, "only GET and HEAD\n");
        response.headers.push(("Allow", "GET, HEAD".to_owned()));
        return response;
    }
    let query = match Query::parse(request.query) {
        Ok(query) => query,
        Err(response) => return response,
    };
    match (request.path, query.seconds) {
        ("/debug/pprof/heap", None) => heap(Value::LiveBytes, "heap"),
        ("/debug/pprof/allocs", None) => heap(Value::AllocatedBytes, "allocs"),
        ("/debug/pprof/heap", Some(seconds)) => delta(Value::LiveBytes, "heap", seconds),
        ("/debug/pprof/allocs", Some(seconds)) => delta(Value::AllocatedBytes, "allocs", seconds),
        ("/debug/pprof/delta_heap", None) => delta_heap(),
        ("/debug/pprof/delta_heap", Some(_)) => Response::text(
            400,
            "delta_heap is the change since its previous request; for the change over the next \
             N seconds, ask /debug/pprof/heap?seconds=N\n",
        ),
        ("/debug/memprof/report.md", _) => {
            let _turn = turn();
            let report = live_report();
            Response::made("text/markdown; charset=utf-8", |out| {
                report.write_markdown(out)
            })
        }
        ("/debug/memprof/report.tsv", _) => {
            let _turn = turn();
            let report = live_report();
            Response::made("text/tab-separated-values; charset=utf-8", |out| {
                report.write_tsv(out)
            })
        }
        ("/debug/memprof/crates", _) => {
            let _turn = turn();
            // The allocated figures of every crate: every stack's counters.
            let snapshot = snapshot(Which::All);
            let rows = with_symbolizer(|symbolizer| {
                crate::report::crates::rows(&snapshot, symbolizer, false)
            });
            Response::made("text/markdown; charset=utf-8", |out| {
                crate::report::crates::write_markdown(&rows, snapshot.sample_interval, out)
            })
        }
        ("/debug/memprof/objects", _) => {
            let _turn = turn();
            let snapshot = snapshot(Which::Live);
            Response::made("text/plain; charset=utf-8", |out| {
                let typing = crate::types::Typing::of_process(&snapshot);
                crate::report::types::write(&typing.counts(), out)
            })
        }
        ("/debug/memprof/memory", _) => {
            let _turn = turn();
            let breakdown = crate::breakdown::MemoryBreakdown::of(&snapshot(Which::Live));
            Response::made("text/plain; charset=utf-8", |out| breakdown.write_text(out))
        }
        ("/" | "/debug/memprof/" | "/debug/memprof" | "/debug/pprof/" | "/debug/pprof", _) => {
            index()
        }
        _ => Response::text(
            404,
            "not found; what is served is listed at /debug/memprof/\n",
        ),
    }
}

/// This thread's turn at making a profile or report: taken before the symbolizer and the table,
/// which making one takes. Also what the `fork` handlers take first of the endpoint's, so that a
/// forked child that serves finds it free.
pub(crate) fn turn() -> MutexGuard<'static, ()> {
    RENDER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A snapshot of the process, taken during a [`turn`] once the previous one's share of the time
/// allows ([`FREEZE_SHARE`]): of the live stacks, or of every stack for the profiles that show
/// what was allocated over the run.
fn snapshot(which: Which) -> Snapshot {
    #[cfg(test)]
    tests::SNAPSHOTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut next = NEXT_SNAPSHOT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(at) = *next {
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
    }
    let (snapshot, held) = Snapshot::take_held(which);
    *next = Some(Instant::now() + held * (FREEZE_SHARE - 1));
    snapshot
}

/// The live-allocation report of the process, with the `MEMPROF_*` options in force, from a
/// [`snapshot`].
fn live_report() -> Report {
    let snapshot = snapshot(Which::Live);
    with_symbolizer(|symbolizer| Report::live(&snapshot, symbolizer, &ReportOptions::from_env()))
}

/// Wall-clock time since the Unix epoch.
fn now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// The heap profile now, `value` its default sample type.
fn heap(value: Value, name: &str) -> Response {
    let _turn = turn();
    let snapshot = snapshot(Which::All);
    let options = ExportOptions::default().value(value);
    Response::profile(name, |out| {
        with_symbolizer(|symbolizer| pprof::write(&snapshot, symbolizer, &options, out))
    })
}

/// What changed over the next `seconds` seconds, as Go's `?seconds=N` serves it.
fn delta(value: Value, name: &str, seconds: u64) -> Response {
    let (time, at) = (now(), Instant::now());
    let mut earlier = {
        let _turn = turn();
        snapshot(Which::All)
    };
    // Only the stacks' counters are compared: the blocks need not be kept while waiting.
    earlier.blocks = Vec::new();
    std::thread::sleep(Duration::from_secs(seconds));
    let _turn = turn();
    let later = snapshot(Which::All);
    let options = ExportOptions::default()
        .value(value)
        .time(time)
        .elapsed(at.elapsed());
    Response::profile(name, |out| {
        with_symbolizer(|symbolizer| {
            pprof::write_delta(&later, &earlier, symbolizer, &options, out)
        })
    })
}

/// What was allocated since the previous request of `/debug/pprof/delta_heap` (since the start
/// for the first), and the live heap now, as Pyroscope's `godeltaprof` serves it.
fn delta_heap() -> Response {
    let _turn = turn();
    let later = snapshot(Which::All);
    let (time, at) = (now(), Instant::now());
    let mut base = DELTA_BASE.lock().unwrap_or_else(PoisonError::into_inner);
    let previous = base.take();
    let mut options = ExportOptions::default().value(Value::AllocatedBytes);
    // Live counts of 0 in the base: the profile's inuse values are the live heap now.
    let mut earlier = Snapshot::default();
    if let Some(previous) = &previous {
        options = options.time(previous.time).elapsed(at - previous.at);
        earlier.stacks.clone_from(&previous.stacks);
    }
    let response = Response::profile("delta_heap", |out| {
        with_symbolizer(|symbolizer| {
            pprof::write_delta(&later, &earlier, symbolizer, &options, out)
        })
    });
    // A response that was not made leaves the base as it was, so no allocation goes unserved.
    *base = if response.status == 200 {
        let stacks = later
            .stacks
            .iter()
            .map(|s| StackSummary {
                allocated_blocks: s.allocated_blocks,
                allocated_bytes: s.allocated_bytes,
                ..StackSummary::default()
            })
            .collect();
        Some(DeltaBase { stacks, time, at })
    } else {
        previous
    };
    response
}

/// The index page: what is served, with the heap's totals now.
fn index() -> Response {
    let stats = crate::snapshot::heap_stats();
    let sampling = match crate::snapshot::sample_interval() {
        0 => "every allocation is recorded".to_owned(),
        interval => format!(
            "one allocation is recorded per {interval} bytes on average; profiles and reports \
             show unbiased estimates"
        ),
    };
    let page = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>memprof</title></head>\n\
         <body>\n<h1>memprof</h1>\n\
         <p>{stats}. {sampling}.</p>\n\
         <h2>pprof (<code>go tool pprof URL</code>, continuous-profiling scrapers)</h2>\n<ul>\n\
         <li><a href=\"/debug/pprof/heap\">/debug/pprof/heap</a>: the heap profile \
         (<code>inuse_space</code> by default; <code>alloc_objects</code>, \
         <code>alloc_space</code>, <code>inuse_objects</code>)</li>\n\
         <li><a href=\"/debug/pprof/allocs\">/debug/pprof/allocs</a>: the same, \
         <code>alloc_space</code> by default</li>\n\
         <li><a href=\"/debug/pprof/heap?seconds=30\">/debug/pprof/heap?seconds=N</a>: what \
         changed during the next N seconds (1 to {MAX_SECONDS})</li>\n\
         <li><a href=\"/debug/pprof/delta_heap\">/debug/pprof/delta_heap</a>: what was \
         allocated since the previous request of this path, and the live heap now</li>\n\
         </ul>\n<h2>Reports</h2>\n<ul>\n\
         <li><a href=\"/debug/memprof/report.md\">report.md</a>: live allocations by call site, \
         Markdown</li>\n\
         <li><a href=\"/debug/memprof/report.tsv\">report.tsv</a>: the same, tab-separated</li>\n\
         <li><a href=\"/debug/memprof/crates\">crates</a>: live and allocated bytes per \
         crate, which dependency holds the memory</li>\n\
         <li><a href=\"/debug/memprof/objects\">objects</a>: live objects per type</li>\n\
         <li><a href=\"/debug/memprof/memory\">memory</a>: resident memory by what holds it \
         (the heap, the allocator's rounding and free memory, memprof, stacks, code)</li>\n\
         </ul>\n</body></html>\n"
    );
    Response {
        status: 200,
        content_type: "text/html; charset=utf-8",
        headers: Vec::new(),
        body: page.into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Snapshots taken through [`snapshot`], the endpoint's throttle.
    pub(super) static SNAPSHOTS: AtomicUsize = AtomicUsize::new(0);

    /// Every path whose answer is made from the table takes its snapshot through the one
    /// throttle (`/debug/memprof/memory` once took its own, outside it).
    #[test]
    fn every_snapshot_goes_through_the_throttle() {
        for path in [
            "/debug/pprof/heap",
            "/debug/pprof/allocs",
            "/debug/memprof/report.md",
            "/debug/memprof/report.tsv",
            "/debug/memprof/crates",
            "/debug/memprof/objects",
            "/debug/memprof/memory",
        ] {
            let before = SNAPSHOTS.load(Ordering::Relaxed);
            assert_eq!(status(path, "", "GET"), 200, "{path}");
            assert!(
                SNAPSHOTS.load(Ordering::Relaxed) > before,
                "{path} answered without a snapshot through the throttle"
            );
        }
    }

    fn status(path: &str, query: &str, method: &str) -> u16 {
        respond(&Request {
            method,
            path,
            query,
        })
        .status
    }

    #[test]
    fn queries() {
        assert_eq!(Query::parse("").ok(), Some(Query::default()));
        assert_eq!(
            Query::parse("gc=1&seconds=30&debug=0").ok(),
            Some(Query { seconds: Some(30) })
        );
        for bad in [
            "seconds=0",
            "seconds=301",
            "seconds=x",
            "seconds=",
            "seconds=-1",
        ] {
            let response = Query::parse(bad).unwrap_err();
            assert_eq!(response.status, 400, "{bad}");
            assert!(String::from_utf8_lossy(&response.body).contains("seconds"));
        }
        assert_eq!(Query::parse("debug=1").unwrap_err().status, 400);
    }

    #[test]
    fn methods_and_unknown_paths() {
        assert_eq!(status("/debug/pprof/heap", "", "POST"), 405);
        assert_eq!(status("/debug/pprof/profile", "", "GET"), 404);
        assert_eq!(status("/debug/pprof/delta_heap", "seconds=5", "GET"), 400);
        assert_eq!(status("/debug/pprof/heap", "seconds=0", "GET"), 400);
        assert_eq!(status("/debug/memprof/", "", "HEAD"), 200);
    }
}
