//! A workload that allocates the way real programs do, profiled by memprof: run it to see what
//! memprof costs, and compare with `workload_plain` (no profiler) and `workload_dhat` (dhat-rs).
//! `scripts/compare.py` runs them all, with heaptrack and Valgrind, and prints a table.
//!
//! ```text
//! cargo run --release -p memprof-bench --example workload -- churn 200000
//! cargo run --release -p memprof-bench --example workload -- markdown 20000
//! cargo run --release -p memprof-bench --example workload -- json 100000
//! cargo run --release -p memprof-bench --example workload -- threads 100000 2
//! cargo run --release -p memprof-bench --example workload -- live 1000000
//! cargo run --release -p memprof-bench --example workload -- report 1000000
//! ```
//!
//! With `WORKLOAD_LABELS=1` in the environment, the scenario runs under one label set
//! (`memprof::with_labels`): what labels cost when they are in use (`docs/overhead.md`).
//!
//! Besides the scenarios of `examples/workload/mod.rs`, this one has `report [blocks]`: `blocks`
//! live blocks over 10,000 distinct stacks, then the time to take a snapshot, render the Markdown
//! report (with a cold symbolizer, then a warm one) and write each export format (cold, warm).

#[path = "workload/stacks.rs"]
mod stacks;
#[path = "workload/mod.rs"]
mod workload;

use memprof::export::{self, ExportOptions, Format};
use memprof::{HeapStats, Snapshot, Symbolizer};
use std::hint::black_box;
use std::io::{self, Write};
use std::time::Instant;
use workload::{Counts, Outcome, Tool};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

const TOOL: Tool = Tool {
    name: "memprof",
    counts: || {
        let stats = HeapStats::get();
        Some(Counts {
            total_blocks: stats.total_blocks,
            live_blocks: stats.live_blocks,
            live_bytes: stats.live_bytes,
        })
    },
    live_of_size: |size| {
        let snapshot = Snapshot::take();
        Some(
            snapshot
                .blocks
                .iter()
                .filter(|b| b.size == size as u64)
                .count() as u64,
        )
    },
    mark: memprof::mark,
};

fn main() {
    let config = memprof::Config::current();
    let mut outcome = if std::env::args().nth(1).as_deref() == Some("report") {
        let blocks = std::env::args()
            .nth(2)
            .map(|s| s.parse().expect("the size is a whole number"))
            .unwrap_or(1_000_000);
        report_scenario(blocks)
    } else if std::env::var_os("WORKLOAD_LABELS").is_some() {
        // What labels cost when they are in use: the whole run under one label set.
        memprof::with_labels(&[("workload", "labelled")], || workload::run(&TOOL))
    } else {
        workload::run(&TOOL)
    };
    if std::env::args().nth(1).as_deref() == Some("paths") {
        // With every block freed: what a report costs after many stacks were seen.
        let kinds = ["VmRSS:", "RssAnon:", "RssFile:"];
        let before = kinds.map(|kind| workload::status_kb(kind).unwrap_or(0));
        let (s, result) = seconds(|| memprof::log_allocations(&mut io::sink()));
        result.expect("the report renders");
        outcome.set("report_s", format!("{s:.3}"));
        let grown = kinds.map(|kind| workload::status_kb(kind).unwrap_or(0));
        outcome.set("report_rss_kb", grown[0].saturating_sub(before[0]));
        // Of which the program's own pages (anonymous) and its files' (the debug information
        // the symbolizer maps, which the kernel may drop and read again).
        outcome.set("report_anon_kb", grown[1].saturating_sub(before[1]));
        outcome.set("report_file_kb", grown[2].saturating_sub(before[2]));
        let (s, result) = seconds(|| memprof::pretty_log_allocations(&mut io::sink()));
        result.expect("the report renders");
        outcome.set("pretty_report_s", format!("{s:.3}"));
    }
    if std::env::var_os("WORKLOAD_BREAKDOWN").is_some() {
        // Where the process's memory is at the end: memprof's own tables among the rest.
        memprof::MemoryBreakdown::get()
            .write_text(&mut io::stderr())
            .expect("stderr takes the breakdown");
        outcome.set("stacks", Snapshot::take_all().stacks.len());
    }
    outcome.set("unwinder", format!("{:?}", config.unwinder));
    outcome.set("stack_depth", config.stack_depth);
    outcome.print();
}

// ---------------------------------------------------------------------------------------------
// report: many live blocks over many distinct stacks

/// Distinct stacks of the report scenario.
const STACKS: usize = 10_000;

/// `blocks` live blocks, spread evenly over [`STACKS`] stacks.
#[inline(never)]
fn fill(blocks: usize) -> Vec<stacks::Block> {
    let mut kept = Vec::with_capacity(blocks);
    for i in 0..blocks {
        let stack = i % STACKS;
        kept.push(stacks::MIDS[stack / 100](stacks::LEAVES[stack % 100]));
    }
    kept
}

/// A writer that counts the bytes it is given and drops them.
#[derive(Default)]
struct Count(u64);

impl Write for Count {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Seconds taken by `f`, with what it returned.
fn seconds<R>(f: impl FnOnce() -> R) -> (f64, R) {
    let start = Instant::now();
    let result = f();
    (start.elapsed().as_secs_f64(), result)
}

fn report_scenario(blocks: usize) -> Outcome {
    let tool = Tool {
        name: "memprof",
        ..TOOL
    };
    let mut outcome = Outcome::new(&tool, "report", blocks);
    let (fill_s, kept) = seconds(|| fill(blocks));
    outcome.set("fill_s", format!("{fill_s:.3}"));

    let (snapshot_s, snapshot) = seconds(Snapshot::take);
    outcome.set("snapshot_s", format!("{snapshot_s:.3}"));
    outcome.set("live_blocks", snapshot.blocks.len());
    outcome.set("stacks", snapshot.stacks.len());

    // The Markdown report as users call it: snapshot, symbolize (the process's symbolizer, cold
    // the first time), group and render.
    for pass in ["cold", "warm"] {
        let mut out = Count::default();
        let (s, result) = seconds(|| memprof::pretty_log_allocations(&mut out));
        result.expect("the report renders");
        outcome.set(&format!("markdown_{pass}_s"), format!("{s:.3}"));
        outcome.set("markdown_bytes", out.0);
    }

    // Every export of the same snapshot, each with a new symbolizer, then again with it warm.
    let options = ExportOptions::default();
    let working_dir = memprof::Config::current().working_dir.clone();
    for (name, format) in [
        ("pprof", Format::Pprof),
        ("folded", Format::Folded),
        ("dhat", Format::Dhat),
        ("heaptrack", Format::Heaptrack),
    ] {
        let mut symbolizer = memprof::untracked(|| Symbolizer::new(working_dir.clone()));
        for pass in ["cold", "warm"] {
            let mut out = Count::default();
            let (s, result) =
                seconds(|| export::write(format, &snapshot, &mut symbolizer, &options, &mut out));
            result.expect("the export writes");
            outcome.set(&format!("{name}_{pass}_s"), format!("{s:.3}"));
            outcome.set(&format!("{name}_bytes"), out.0);
        }
        memprof::untracked(|| drop(symbolizer));
    }
    black_box(kept);
    outcome
}
