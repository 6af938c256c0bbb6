//! The HTTP endpoint (feature `http`): the heap profile at Go's paths, for the continuous-profiling
//! systems that scrape pprof over HTTP (Grafana Pyroscope through Alloy, Parca, Polar Signals),
//! and the reports for a person with curl.
//!
//! | path | what |
//! |---|---|
//! | `/debug/pprof/heap` | the pprof heap profile as Go writes it: `alloc_objects`, `alloc_space`, `inuse_objects`, `inuse_space` (the default); period the sampling interval |
//! | `/debug/pprof/allocs` | the same profile with `alloc_space` as its default sample type |
//! | `/debug/pprof/heap?seconds=N`, `/debug/pprof/allocs?seconds=N` | after N seconds (1 to 300), what changed during them: allocated blocks and bytes, and the change of the live ones |
//! | `/debug/pprof/delta_heap` | what was allocated since the previous request of this path (since the start for the first one), and the live heap now, as Pyroscope's `godeltaprof` serves it |
//! | `/debug/memprof/report.md`, `/debug/memprof/report.tsv` | the live-allocation reports |
//! | `/debug/memprof/crates` | live and allocated bytes and blocks per crate (which dependency holds the memory) |
//! | `/debug/memprof/objects` | live objects per type |
//! | `/debug/memprof/`, `/debug/pprof/` | an index page linking them |
//!
//! Started by [`serve_http`] or by `MEMPROF_HTTP` when the profiler starts. The endpoint is a
//! `memprof-http` server (one thread accepting connections and reading their request heads, a
//! fixed set of workers answering them, one request per connection): its own
//! allocations are never recorded (its threads run inside the reentrancy guard for their whole
//! life), its work is bounded (at most [`server::WORKERS`] requests at a time besides the
//! `?seconds=N` ones, which wait on threads of their own; one profile made at a time; each request
//! read and answered within a deadline; request heads read from every connection at once, so a
//! client that sends slowly holds no worker), and a slow client never holds the program up: a
//! snapshot is taken, the response made from it, and only then sent. Snapshots for the endpoint
//! hold the table still at most a tenth of the time (see `routes`), however many requests come.

#![forbid(unsafe_code)]

mod routes;
mod server;

use crate::config::warn;
use crate::guard::untracked;
use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

/// Serves memprof's HTTP endpoint on `address` from background threads, for as long as the
/// process runs; returns the address bound (with the port chosen when `address` asks for port 0).
/// Bind only to the addresses scrapers should reach: `127.0.0.1:6060`, or an interface of a
/// private network; binding beyond loopback (`0.0.0.0`, say) says so on stderr. Requests must
/// name the endpoint by IP address or as `localhost` in their `Host` header; others are refused
/// (403), so that no web page can reach it through a browser by DNS rebinding.
/// `MEMPROF_HTTP=127.0.0.1:6060` does the same when the profiler starts.
///
/// | path | what |
/// |---|---|
/// | `/debug/pprof/heap` | the pprof heap profile as Go writes it (`inuse_space` by default) |
/// | `/debug/pprof/allocs` | the same with `alloc_space` as the default sample type (what Parca and Grafana Alloy scrape) |
/// | `?seconds=N` on either | what changed during the next N seconds (1 to 300), as Go serves it |
/// | `/debug/pprof/delta_heap` | allocations since the previous request of this path, and the live heap now (Pyroscope's `godeltaprof`) |
/// | `/debug/memprof/report.md`, `report.tsv`, `crates`, `objects` | the reports |
/// | `/debug/memprof/` | an index of them |
///
/// Profiles carry the sampling interval as their period, and their values are already unbiased
/// estimates when sampling is on: with `MEMPROF_SAMPLE_INTERVAL=bytes:524288` (Go's default
/// rate), the profiler costs a few percent, which suits a service that runs for weeks.
///
/// # Errors
/// When the address cannot be bound (in use, not this machine's) or no thread can be started.
///
/// ```no_run
/// #[global_allocator]
/// static GLOBAL: memprof::MemProf = memprof::MemProf::new().sample_interval(512 * 1024);
///
/// fn main() -> std::io::Result<()> {
///     let address = memprof::serve_http("127.0.0.1:6060")?;
///     eprintln!("heap profile: http://{address}/debug/pprof/heap");
///     // ... the service ...
///     Ok(())
/// }
/// ```
pub fn serve_http(address: impl ToSocketAddrs) -> io::Result<SocketAddr> {
    untracked(|| {
        let listener = TcpListener::bind(address)?;
        let bound = listener.local_addr()?;
        server::start(listener)?;
        if !bound.ip().is_loopback() {
            warn(format_args!(
                "the heap profile is served at {bound}, beyond this machine's loopback: anyone who \
                 can reach that address can read it (no authentication, no TLS); bind to \
                 127.0.0.1 unless scrapers elsewhere must reach it"
            ));
        }
        Ok(bound)
    })
}

/// Serves on `MEMPROF_HTTP`'s address, saying on stderr where, or why not. Runs on the thread the
/// profiler's start created, inside the reentrancy guard.
pub(crate) fn serve_configured() {
    let Some(address) = crate::config::get().http else {
        return;
    };
    match serve_http(address) {
        Ok(bound) => warn(format_args!(
            "serving the heap profile at http://{bound}/debug/pprof/heap (index: /debug/memprof/)"
        )),
        Err(error) => warn(format_args!(
            "MEMPROF_HTTP={address}: cannot serve: {error}; no endpoint"
        )),
    }
}

/// The endpoint's lock, held across `fork` (see `hooks::fork`): taken before the symbolizer's.
pub(crate) fn lock_for_fork() -> impl std::any::Any {
    routes::turn()
}

/// Calls `close` with each listening socket of the endpoint, and forgets them: in a forked child,
/// whose copies would otherwise keep the parent's address bound after the parent is gone, with
/// nobody accepting (the endpoint's threads did not come along).
pub(crate) fn forget_listeners_in_child(close: impl FnMut(i32)) {
    server::forget_listeners(close);
}
