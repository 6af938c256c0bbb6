//! The heaptrack export of sampled snapshots whose estimates stand for far more blocks than were
//! recorded: one sampled byte at a 2^30 interval stands for about 2^30 blocks. The file holds one
//! entry per group of a site (not one per estimated block), stays small, opens in
//! `heaptrack_print` with the estimated bytes, and extreme sizes and intervals (`u64::MAX`) are
//! written without a panic.

mod common;

use memprof::export::{self, ExportOptions};
use memprof::{Frame, ReturnAddress, Snapshot};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use common::{frame, stack};

fn symbols() -> HashMap<ReturnAddress, Vec<Frame>> {
    let mut symbols = HashMap::new();
    symbols.insert(
        ReturnAddress(0x2010),
        vec![frame("app::small_blocks", "src/app.rs", 10, 5)],
    );
    symbols.insert(
        ReturnAddress(0x2020),
        vec![frame("app::huge_block", "src/app.rs", 20, 5)],
    );
    symbols.insert(
        ReturnAddress(0x2030),
        vec![frame("app::main", "src/main.rs", 3, 1)],
    );
    symbols
}

/// The uncompressed heaptrack text of `snapshot`.
fn text(snapshot: &Snapshot) -> String {
    let mut out = Vec::new();
    export::heaptrack::write_text(
        snapshot,
        &mut symbols(),
        &ExportOptions::default(),
        &mut out,
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

fn folded_total(folded: &str, function: &str) -> u64 {
    folded
        .lines()
        .filter(|line| line.split(';').any(|frame| frame.starts_with(function)))
        .map(|line| line.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn sampled_estimates_are_aggregated_entries() {
    // 50 blocks of 1 byte recorded at a 2^30 interval: about 50 * 2^30 blocks estimated live,
    // and 100 * 2^30 allocated over the run.
    let stacks = vec![stack(&[0x2010, 0x2030], 100 << 30, 100 << 30)];
    let snapshot = Snapshot::sampled(common::blocks(&[(0, 1, 50)]), stacks, 0, 1 << 30);
    let live = snapshot.stacks[0].live_bytes;
    assert!(snapshot.stacks[0].live_blocks > 40 << 30);
    let written = text(&snapshot);
    let events = written
        .lines()
        .filter(|l| l.starts_with('+') || l.starts_with('-'))
        .count();
    assert!(events <= 10, "{events} events:\n{written}");

    // heaptrack_print opens it and shows the estimated bytes.
    let found = Command::new("heaptrack_print").arg("--version").output();
    assert!(
        found.is_ok(),
        "heaptrack_print is missing: apt-get install -y heaptrack"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("export_heaptrack_sampled");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("sampled-{}.heaptrack.gz", std::process::id()));
    let mut gz = Vec::new();
    export::heaptrack::write(
        &snapshot,
        &mut symbols(),
        &ExportOptions::default(),
        &mut gz,
    )
    .unwrap();
    std::fs::write(&file, gz).unwrap();
    let leaked_file = dir.join(format!("leaked-{}.txt", std::process::id()));
    common::run(
        Command::new("heaptrack_print")
            .arg("-f")
            .arg(&file)
            .args(["--flamegraph-cost-type", "leaked", "-F"])
            .arg(&leaked_file),
    );
    let leaked = std::fs::read_to_string(&leaked_file).unwrap();
    assert_eq!(folded_total(&leaked, "app::small_blocks"), live, "{leaked}");

    // Extreme sizes and intervals: written, small, without a panic.
    let stacks = vec![
        stack(&[0x2010, 0x2030], u64::MAX, u64::MAX),
        stack(&[0x2020, 0x2030], u64::MAX, u64::MAX),
    ];
    let blocks = common::blocks(&[(0, 1, 3), (1, u64::MAX, 2)]);
    for interval in [u64::MAX, 1 << 30, 1] {
        let snapshot = Snapshot::sampled(blocks.clone(), stacks.clone(), u64::MAX, interval);
        let written = text(&snapshot);
        let events = written
            .lines()
            .filter(|l| l.starts_with('+') || l.starts_with('-'))
            .count();
        assert!(events <= 20, "interval {interval}: {events} events");
        assert!(written.contains("app::huge_block"), "{written}");
    }
}
