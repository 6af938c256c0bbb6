//! The heaptrack export of a program whose heap peaks in the middle of the run, with the peak
//! tracked, read back by `heaptrack_print`: heaptrack's peak is `HeapStats`' peak, each site's peak
//! consumption is what it had live then, and no allocation is called temporary (none was: every
//! block lives on past the next allocation).
//!
//! 100 blocks of 4096 bytes kept to the end; 60 of 8000 allocated on top of them, then freed (the
//! peak); 50 of 2000 allocated after the peak and kept.

mod common;

use memprof::Snapshot;
use memprof::export::{self, ExportOptions};
use std::path::PathBuf;
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new().track_peak(true);

#[inline(never)]
fn block_4096() -> Vec<u8> {
    let block = Vec::with_capacity(4096);
    // Used after the call, so the call is not a tail call that would leave no frame.
    std::hint::black_box(&block);
    block
}

#[inline(never)]
fn block_8000() -> Vec<u8> {
    let block = Vec::with_capacity(8000);
    std::hint::black_box(&block);
    block
}

#[inline(never)]
fn block_2000() -> Vec<u8> {
    let block = Vec::with_capacity(2000);
    std::hint::black_box(&block);
    block
}

/// `(function, calls, live bytes now, live bytes at the peak)` of each site.
const SITES: [(&str, u64, u64, u64); 3] = [
    ("export_heaptrack_peak::block_4096", 100, 409_600, 409_600),
    ("export_heaptrack_peak::block_8000", 60, 0, 480_000),
    ("export_heaptrack_peak::block_2000", 50, 100_000, 0),
];

/// Sums the values of the folded lines whose stack holds `function`.
fn folded_total(folded: &str, function: &str) -> u64 {
    folded
        .lines()
        .filter(|line| line.split(';').any(|frame| frame.starts_with(function)))
        .map(|line| line.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn heaptrack_shows_the_true_peak() {
    // Every vector is made at its final capacity: no block is freed until the peak.
    let mut kept = Vec::with_capacity(150);
    let mut peak = Vec::with_capacity(60);
    for _ in 0..100 {
        kept.push(block_4096());
    }
    for _ in 0..60 {
        peak.push(block_8000());
    }
    drop(peak);
    for _ in 0..50 {
        kept.push(block_2000());
    }
    let snapshot = Snapshot::take();
    assert!(snapshot.peak_known);

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("export_heaptrack_peak");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("profile-{}.heaptrack.gz", std::process::id()));
    memprof::with_symbolizer(|symbolizer| {
        export::write_path(
            file.to_str().unwrap(),
            &snapshot,
            symbolizer,
            &ExportOptions::default(),
        )
        .unwrap();
    });
    drop(kept);

    assert!(
        Command::new("heaptrack_print")
            .arg("--version")
            .output()
            .is_ok(),
        "heaptrack_print is missing: apt-get install -y heaptrack"
    );
    let cost = |kind: &str| {
        let stacks = dir.join(format!("heaptrack-{kind}-{}.txt", std::process::id()));
        common::run(
            Command::new("heaptrack_print")
                .arg("-f")
                .arg(&file)
                .args(["--flamegraph-cost-type", kind, "-F"])
                .arg(&stacks),
        );
        std::fs::read_to_string(stacks).unwrap()
    };
    let peak = cost("peak");
    let leaked = cost("leaked");
    let allocations = cost("allocations");
    let temporary = cost("temporary");
    // Each site's share of the peak is what it had live then; together they are the peak.
    let peak_total: u64 = peak
        .lines()
        .map(|line| line.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(peak_total, snapshot.stats.peak_bytes, "{peak}");
    for (function, calls, live, at_peak) in SITES {
        assert_eq!(folded_total(&peak, function), at_peak, "{function}\n{peak}");
        assert_eq!(
            folded_total(&leaked, function),
            live,
            "{function}\n{leaked}"
        );
        assert_eq!(
            folded_total(&allocations, function),
            calls,
            "{function}\n{allocations}"
        );
    }
    assert_eq!(folded_total(&temporary, ""), 0, "{temporary}");

    let summary = common::run(Command::new("heaptrack_print").arg("-f").arg(&file));
    assert!(
        summary.contains("temporary memory allocations: 0 "),
        "{summary}"
    );
}
