//! The comparison workload under dhat-rs (`dhat::Alloc` as the global allocator, a heap profiler
//! running for the whole program). See `examples/workload/mod.rs` for the scenarios.
//!
//! `cargo run --release -p memprof-bench --example workload_dhat -- churn 200000`

#[path = "workload/mod.rs"]
mod workload;

use workload::{Counts, Tool};

#[global_allocator]
static GLOBAL: dhat::Alloc = dhat::Alloc;

const TOOL: Tool = Tool {
    name: "dhat-rs",
    counts: || {
        let stats = dhat::HeapStats::get();
        Some(Counts {
            total_blocks: stats.total_blocks,
            live_blocks: stats.curr_blocks as u64,
            live_bytes: stats.curr_bytes as u64,
        })
    },
    live_of_size: |_| None,
    mark: |_| {},
};

fn main() {
    // dhat-rs writes its profile when the profiler is dropped: into the temporary directory, so
    // runs leave nothing in the working tree. That write is part of its cost and is timed by the
    // caller of the process, not in `hot_s`.
    let profiler = dhat::Profiler::builder()
        .file_name(std::env::temp_dir().join("workload-dhat-heap.json"))
        .build();
    let outcome = workload::run(&TOOL);
    drop(profiler);
    outcome.print();
}
