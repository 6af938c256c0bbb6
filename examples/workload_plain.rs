//! The comparison workload on the plain system allocator: the baseline, and the binary that
//! heaptrack and Valgrind run. See `examples/workload/mod.rs` for the scenarios.
//!
//! `cargo run --release -p memprof-bench --example workload_plain -- churn 200000`

#[path = "workload/mod.rs"]
mod workload;

fn main() {
    workload::run(&workload::Tool::PLAIN).print();
}
