//! memprof: an in-process heap profiler for Rust.
//!
//! Put one line in your program and every allocation, reallocation and free is recorded with a
//! truncated call stack in a live table; ask for a report whenever you like, or at exit.
//!
//! # Quick start
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
//! |         100 |    800,000 | ` src/main.rs:7:25 in 'app::build_index::{closure#0}' `<br>` ... ` |
//! ```
//!
//! # Reports
//!
//! | function | output |
//! |---|---|
//! | [`pretty_log_allocations`] | Markdown table: allocations, total size, context |
//! | [`log_allocations`] | TSV: the number of lines, then `count \t bytes \t frame \t ...` per group |
//! | [`HeapStats::get`] | live, peak and total blocks and bytes, at any time |
//! | [`Snapshot::take`] + [`Report::live`] | the same data as values, for your own use |
//!
//! A frame reads `src/main.rs:12:5 in 'app::build_index'`: the file relative to the working
//! directory, line and column, and the demangled function. memprof's own frames, the allocator shim
//! and std's allocation internals are trimmed first, so the first frame is the collection operation
//! you called (`Vec::with_capacity`, `Box::new`) or your own function.
//!
//! # Configuration
//!
//! Read once from the environment when the profiler starts; see [`config`] for the table
//! (`MEMPROF_STACK_DEPTH`, `MEMPROF_STACK_SKIP`, `MEMPROF_MIN_BYTES`, `MEMPROF_PRINT_AT_EXIT`,
//! `MEMPROF_ENABLED`, `MEMPROF_UNWINDER`).
//!
//! # Stacks
//!
//! Built with `-C force-frame-pointers=yes`, memprof walks frame pointers: tens of nanoseconds per
//! allocation. In a default build it unwinds with the DWARF call-frame information instead, which
//! is slower but still shows your own functions. Line numbers need debug information
//! (`debug = "line-tables-only"` in the release profile is enough).
//!
//! # C and custom allocators
//!
//! `include/memprof.h` declares `memprof_record_alloc`, `memprof_record_realloc`,
//! `memprof_record_free` for code that manages its own blocks, and `memprof_write_report(fd)` /
//! `memprof_write_log(fd)` to print a report from C or a debugger.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

// The pipeline, in the order data flows.
pub mod capture;
pub mod config;
pub mod export;
pub mod hooks;
pub mod object_graph;
pub mod report;
pub mod scope;
pub mod snapshot;
pub mod symbolize;
pub mod table;
pub mod types;

pub use capture::{ReturnAddress, untracked};
pub use config::Config;
pub use export::{ExportOptions, write_outputs};
pub use hooks::{MemProf, is_paused, pause, resume};
pub use object_graph::{log_object_sizes, object_size, pretty_log_object_graph};
pub use report::{
    Change, Diff, Group, Report, ReportOptions, log_allocations, log_diff, pretty_log_allocations,
    pretty_log_diff,
};
pub use scope::{Scope, ScopeStats};
pub use snapshot::{LiveBlock, Snapshot, SnapshotDiff, StackDelta, StackSummary};
pub use symbolize::{Frame, Resolve, Symbolizer};
pub use table::HeapStats;
pub use types::{log_object_counts, log_object_tallies, log_trace_target, tag, tagged};
