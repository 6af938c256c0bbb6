//! memprof: an in-process heap profiler for Rust.
//!
//! Put one line in your program and every allocation, reallocation and free is recorded with a
//! truncated call stack in a live table; ask for a report whenever you like, or at exit. Which call
//! sites hold the live heap, what leaks, what churns, which types dominate, who keeps an object
//! alive.
//!
//! This page is the short manual. The full one is in the repository's `docs/` directory, one page
//! per topic: `docs/reports.md`, `docs/labels.md`, `docs/exports.md`, `docs/configuration.md`,
//! `docs/trace-mode.md`, `docs/viewer.md`, `docs/services.md`, `docs/dumps.md`,
//! `docs/heap-assertions.md`, `docs/builds-and-stacks.md`, `docs/overhead.md`,
//! `docs/guarantees.md`.
//!
//! # Quick start
//!
//! memprof is not on crates.io: depend on it by path or git (`memprof = { path = "../memprof" }`).
//!
//! In a release build, a report's files and lines need debug information, which Cargo's release
//! profile leaves out by default; in `Cargo.toml`:
//!
//! ```toml
//! [profile.release]
//! debug = "limited"
//!
//! # memprof optimized in debug builds too, where it is otherwise several times slower (each
//! # allocation costs microseconds); your own code stays a debug build.
//! [profile.dev.package.memprof]
//! opt-level = 3
//! ```
//!
//! Then, in `main.rs`:
//!
//! ```rust,standalone_crate
//! #[global_allocator]
//! static GLOBAL: memprof::MemProf = memprof::MemProf::new(); // wraps std::alloc::System
//!
//! #[inline(never)]
//! fn build_index() -> Vec<Vec<u64>> {
//!     (0..100).map(|i| vec![i; 1000]).collect()
//! }
//!
//! fn main() {
//!     let index = build_index();
//!     // Markdown: | Allocations | Total size | Context |
//!     memprof::pretty_log_allocations(&mut std::io::stdout()).unwrap();
//!     let stats = memprof::HeapStats::get();
//!     assert!(stats.live_bytes >= 100 * 1000 * 8);
//!     drop(index);
//! }
//! ```
//!
//! A report groups the live blocks by the context they were allocated from, the largest total
//! first:
//!
//! ```text
//! | Allocations | Total size | Context |
//! |------------:|-----------:|---------|
//! |         100 |    800,000 | ` alloc/src/vec/mod.rs:3651:5 in 'alloc::vec::from_elem' `<br>` src/main.rs:6:22 in 'app::build_index::{{closure}}' `<br>` ... ` |
//! ```
//!
//! A frame reads `src/main.rs:12:5 in 'app::build_index'`: the file relative to the working
//! directory, line and column, and the demangled function. memprof's own frames, the allocator shim
//! and std's allocation internals are trimmed first, so the first frame is the collection operation
//! you called (`Vec::with_capacity`, `Box::new`) or your own function; the runtime below `main`
//! (`std::rt::lang_start` and what calls it) and below a thread's closure is trimmed too, so a
//! context ends at `main` or at the thread's closure. The standard library's files read from their
//! crate on: `alloc/src/vec/mod.rs` is `library/alloc/src/vec/mod.rs` in Rust's sources
//! (`docs/reports.md`).
//!
//! # Reports and exports
//!
//! | function | output |
//! |---|---|
//! | [`pretty_log_allocations`] | Markdown table: allocations, total size, context |
//! | [`log_allocations`] | TSV: the number of lines, then `count \t bytes \t frame \t ...` per group |
//! | [`pretty_log_diff`], [`log_diff`] | what grew or shrank between two [`Snapshot`]s ([`Snapshot::diff`]) |
//! | [`log_object_counts`], [`log_object_sizes`] | live objects and reachable bytes per type ([`types`]) |
//! | [`object_size`] | the heap bytes reachable from a value |
//! | [`pretty_log_object_graph`] | a mermaid graph of who points to the live objects of a type |
//! | [`log_object_tallies`], [`log_trace_target`] | objects created per type over the run; the contexts that created one type |
//! | [`export`] | pprof, folded stacks, flamegraph SVG, DHAT JSON, heaptrack, an HTML report, by file ending ([`write_outputs`]) |
//! | [`log_labels`] | TSV: live and allocated blocks and bytes per label set ([`with_labels`], `docs/labels.md`) |
//! | [`HeapStats::get`] | live, peak and total blocks and bytes, at any time |
//! | [`MemoryBreakdown::get`] | resident memory by what holds it: the live heap, the allocator's rounding and free memory, memprof's own, stacks, code, other mappings |
//! | [`Scope`] | what the code a thread runs allocates and keeps, with assertions for tests, and per-call-site baselines kept in a file (`assert_baseline`, [`Tolerance`]) |
//! | [`mark`], [`close_trace`], [`trace`] | trace mode (cargo feature `trace`, `MEMPROF_TRACE`): every event with its time, thread and stack, to a file or a socket, for tools to report on any moment of the run |
//!
//! The exports are described in `docs/exports.md`; trace mode and the `memprof` command that reads
//! traces, with its web viewer, in `docs/trace-mode.md` and `docs/viewer.md`.
//!
//! # Services: a live heap profile over HTTP
//!
//! With the cargo feature `http`, `memprof::serve_http("127.0.0.1:6060")` (or
//! `MEMPROF_HTTP=127.0.0.1:6060` in the environment) serves the heap profile at Go's paths,
//! `/debug/pprof/heap` and `/debug/pprof/allocs`, where continuous-profiling systems (Grafana
//! Pyroscope through Alloy, Parca) and `go tool pprof URL` fetch it; `?seconds=N` and
//! `/debug/pprof/delta_heap` give deltas, and `/debug/memprof/` links the reports. Its threads'
//! own allocations are never recorded, and nothing listens unless asked. For a service that runs
//! for weeks, record a sample ([`MemProf::sample_interval`], `MEMPROF_SAMPLE_INTERVAL=bytes:524288`):
//! the profiles carry the interval as their period, with values already scaled to unbiased
//! estimates. `docs/services.md` has the paths and the scrapers' configurations.
//!
//! # Labels: which request, task or tenant holds the heap
//!
//! [`with_labels`]`(&[("tenant", "acme")], || ...)` labels what its closure allocates on the
//! thread; [`Labels::enter`] is the guard form and [`Labels::attach`] wraps a future, so a task
//! keeps its labels on whichever worker thread polls it. A block carries its labels for its whole
//! life; [`log_labels`] sums the live and allocated bytes per label set, `MEMPROF_LABEL=key=value`
//! keeps one label's blocks in the reports, and the pprof exports and the HTTP endpoint carry the
//! labels as sample labels (`go tool pprof -tagfocus=tenant=acme`). With the cargo feature
//! `tracing`, `LabelsLayer` makes the entered span the labels. `docs/labels.md` has the rules.
//!
//! # Configuration
//!
//! Read once from the environment when the profiler starts; see [`Config`] for the table
//! (`MEMPROF_STACK_DEPTH`, `MEMPROF_MIN_BYTES`, `MEMPROF_PRINT_AT_EXIT`, `MEMPROF_OUTPUT`,
//! `MEMPROF_SAMPLE_INTERVAL`, ...). Recording can be switched off and on at run time with
//! [`pause`] and [`resume`], or a signal (`MEMPROF_TOGGLE_SIGNAL`). The same table, with the
//! cargo features and the settings in code, is in `docs/configuration.md`.
//!
//! # Stacks
//!
//! Built with `-C force-frame-pointers=yes`, memprof walks frame pointers. In a default build it
//! unwinds with the DWARF call-frame information instead, which is slower but still shows your own
//! functions. Names, lines and types need debug information (`debug = "limited"` in the release
//! profile). Either walk finds the function that allocated, even when the allocation is the last
//! thing it does; a function that ends in a call to another one that is not inlined (returning
//! `iter.collect()`) leaves by a jump in an optimized build, and the report names its caller.
//! `docs/builds-and-stacks.md` has the recommended build settings; `docs/overhead.md` what each
//! costs.
//!
//! # C and custom allocators
//!
//! `include/memprof.h` declares `memprof_record_alloc`, `memprof_record_realloc`,
//! `memprof_record_free` for code that manages its own blocks, and `memprof_write_report(fd)` /
//! `memprof_write_log(fd)` to print a report from C or a debugger.

#![deny(missing_docs, missing_debug_implementations)]
#![warn(unreachable_pub)]
#![deny(unsafe_op_in_unsafe_fn)]

// Shared building blocks, below every stage of the pipeline.
mod address;
mod alarm;
mod calls;
mod config;
mod fence;
mod frames;
mod guard;
mod header;
mod labels;
mod modules;
mod native;
mod memory;
mod sampling;

// The pipeline, in the order data flows: the front doors, the allocation path and its stack
// capture, the live table, its snapshots, then what is made of them.
mod hooks;
mod record;
mod capture;
mod table;
mod scope;
mod snapshot;
mod symbolize;
pub mod types;
mod object_graph;
mod report;
mod breakdown;
pub mod export;
#[cfg(feature = "http")]
mod http;
pub mod trace;
mod control;

pub use address::{ReturnAddress, StackId};
pub use breakdown::MemoryBreakdown;
pub use config::{Config, NearLimit, Unwinder};
pub use export::{ExportOptions, write_outputs};
pub use frames::Frame;
pub use guard::untracked;
pub use hooks::MemProf;
#[cfg(feature = "preload")]
#[doc(hidden)]
pub use hooks::preload;
#[cfg(feature = "http")]
pub use http::serve_http;
#[cfg(feature = "tracing")]
pub use labels::LabelsLayer;
pub use labels::{Labels, LabelsGuard, dropped_label_sets, with_labels};
pub use object_graph::object_size;
pub use record::{is_paused, pause, resume};
pub use report::context_range;
pub use report::{
    DiffGroup, DiffReport, Group, Report, ReportOptions, context_of, log_allocations, log_crates,
    log_diff, log_labels, log_object_counts, log_object_sizes, log_object_tallies,
    log_trace_target, log_type_contexts, pretty_log_allocations, pretty_log_diff,
    pretty_log_object_graph, pretty_log_object_graph_of,
};
pub use scope::{Scope, ScopeStats, Tolerance};
pub use snapshot::{LiveBlock, Snapshot, SnapshotDiff, StackDelta, StackSummary};
pub use symbolize::{Resolve, Symbolizer, with_symbolizer};
pub use table::HeapStats;
pub use trace::{close_trace, is_tracing, mark};
pub use types::{tag, tagged};
