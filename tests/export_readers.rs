//! The exports of this profiled process, opened by the tools they are for: pprof (built from
//! Debian's sources of google/pprof), `heaptrack_print`, Valgrind's DHAT viewer in headless
//! Chromium, and inferno's flamegraph (with the `flamegraph` feature).
//!
//! Three call sites with distinct sizes: 100 blocks of 4096 bytes kept, 100 of 3000 freed at once,
//! 100 of 5000 of which half are kept. The peak is not tracked here (`export_heaptrack_peak` tracks
//! it). Every tool is required under `scripts/test.sh`; run on its own, the test skips pprof
//! without `go` and the DHAT viewer without `chromium`, with a message.

mod common;

use memprof::Snapshot;
use memprof::export::{self, ExportOptions, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn block_4096() -> Vec<u8> {
    let block = Vec::with_capacity(4096);
    // Used after the call, so the call is not a tail call that would leave no frame.
    std::hint::black_box(&block);
    block
}

#[inline(never)]
fn block_3000() -> Vec<u8> {
    let block = Vec::with_capacity(3000);
    // Used after the call, so the call is not a tail call that would leave no frame.
    std::hint::black_box(&block);
    block
}

#[inline(never)]
fn block_5000() -> Vec<u8> {
    let block = Vec::with_capacity(5000);
    // Used after the call, so the call is not a tail call that would leave no frame.
    std::hint::black_box(&block);
    block
}

/// Allocates from the three sites; returns what stays live.
#[inline(never)]
fn allocate(kept: &mut Vec<Vec<u8>>) {
    for _ in 0..100 {
        kept.push(block_4096());
    }
    for _ in 0..100 {
        drop(std::hint::black_box(block_3000()));
    }
    let mut half = Vec::with_capacity(100);
    for _ in 0..100 {
        half.push(block_5000());
    }
    kept.extend(half.drain(..).step_by(2));
}

/// A call site as the exports must show it.
struct Expected {
    function: &'static str,
    allocated_blocks: u64,
    allocated_bytes: u64,
    live_blocks: u64,
    live_bytes: u64,
}

const SITES: [Expected; 3] = [
    Expected {
        function: "export_readers::block_4096",
        allocated_blocks: 100,
        allocated_bytes: 409_600,
        live_blocks: 100,
        live_bytes: 409_600,
    },
    Expected {
        function: "export_readers::block_3000",
        allocated_blocks: 100,
        allocated_bytes: 300_000,
        live_blocks: 0,
        live_bytes: 0,
    },
    Expected {
        function: "export_readers::block_5000",
        allocated_blocks: 100,
        allocated_bytes: 500_000,
        live_blocks: 50,
        live_bytes: 250_000,
    },
];

#[test]
fn real_readers_open_the_exports() {
    let mut kept = Vec::with_capacity(200);
    allocate(&mut kept);
    let snapshot = Snapshot::take_all();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("export_readers");
    std::fs::create_dir_all(&dir).unwrap();
    let options = ExportOptions::default();
    let path = |ending: &str| dir.join(format!("profile-{}{ending}", std::process::id()));
    memprof::with_symbolizer(|symbolizer| {
        for ending in [".pb.gz", ".folded", ".dhat.json", ".heaptrack.gz"] {
            let pattern = format!("{}/profile-%p{ending}", dir.display());
            let written = export::write_path(&pattern, &snapshot, symbolizer, &options).unwrap();
            assert_eq!(written, path(ending));
        }
        let mut allocated = Vec::new();
        let options = options.clone().value(Value::AllocatedBytes);
        export::folded::write(&snapshot, symbolizer, &options, &mut allocated).unwrap();
        std::fs::write(path(".allocated.folded"), allocated).unwrap();
        #[cfg(feature = "flamegraph")]
        export::write_path(
            &format!("{}/profile-%p.svg", dir.display()),
            &snapshot,
            symbolizer,
            &options,
        )
        .unwrap();
    });
    drop(kept);

    check_folded(&path(".folded"), &path(".allocated.folded"));
    #[cfg(feature = "flamegraph")]
    check_flamegraph(&path(".svg"));
    check_heaptrack(&path(".heaptrack.gz"), &dir, snapshot.stats.peak_bytes);
    check_pprof(&path(".pb.gz"));
    check_dhat_viewer(&path(".dhat.json"), &dir);
}

/// Sums the values of the folded lines whose stack holds `function`.
fn folded_total(folded: &str, function: &str) -> u64 {
    folded
        .lines()
        .filter(|line| line.split(';').any(|frame| frame.starts_with(function)))
        .map(|line| line.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

fn check_folded(live: &Path, allocated: &Path) {
    let live = std::fs::read_to_string(live).unwrap();
    let allocated = std::fs::read_to_string(allocated).unwrap();
    for site in &SITES {
        let frame = format!("{} ", site.function);
        assert_eq!(
            folded_total(&live, site.function),
            site.live_bytes,
            "{frame}\n{live}"
        );
        assert_eq!(
            folded_total(&allocated, site.function),
            site.allocated_bytes,
            "{frame}\n{allocated}"
        );
        // Root first: the caller comes right before the allocating function.
        let caller = format!("export_readers::allocate;{}", site.function);
        assert!(allocated.contains(&caller), "{caller}\n{allocated}");
    }
}

#[cfg(feature = "flamegraph")]
fn check_flamegraph(svg: &Path) {
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.contains("memprof: allocated bytes"), "no title");
    for site in &SITES {
        let tooltip = format!(
            "<title>{} ({} bytes",
            site.function,
            thousands(site.allocated_bytes)
        );
        assert!(svg.contains(&tooltip), "{tooltip} missing from the SVG");
    }
}

/// `n` with comma thousands separators.
#[cfg(feature = "flamegraph")]
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn check_heaptrack(file: &Path, dir: &Path, peak_bytes: u64) {
    let found = Command::new("heaptrack_print").arg("--version").output();
    assert!(
        found.is_ok(),
        "heaptrack_print is missing: apt-get install -y heaptrack"
    );
    // heaptrack_print's own flamegraph output: one folded line per backtrace, with the cost asked for.
    let cost = |kind: &str| {
        let stacks = dir.join(format!("heaptrack-{kind}.txt"));
        common::run(
            Command::new("heaptrack_print")
                .arg("-f")
                .arg(file)
                .args(["--flamegraph-cost-type", kind, "-F"])
                .arg(&stacks),
        );
        std::fs::read_to_string(stacks).unwrap()
    };
    let allocations = cost("allocations");
    let leaked = cost("leaked");
    let peak = cost("peak");
    let temporary = cost("temporary");
    for site in &SITES {
        assert_eq!(
            folded_total(&allocations, site.function),
            site.allocated_blocks,
            "{}\n{allocations}",
            site.function
        );
        assert_eq!(
            folded_total(&leaked, site.function),
            site.live_bytes,
            "{}\n{leaked}",
            site.function
        );
    }
    // Unmerged: heaptrack_print merges backtraces whose innermost frame is at one source line,
    // and in an optimized build all three sites start with `Vec::with_capacity` inlined.
    let text = common::run(Command::new("heaptrack_print").arg("-f").arg(file).args([
        "--print-leaks",
        "1",
        "--merge-backtraces",
        "0",
    ]));
    let leaks = &text[text.find("MEMORY LEAKS").expect("a leak section")..];
    assert!(leaks.contains("export_readers::block_4096"), "{text}");
    assert!(leaks.contains("export_readers::block_5000"), "{text}");
    // The peak is `HeapStats`' peak. This program keeps no peak table, so no site is said to
    // have had anything live then: the whole peak is under memprof's own name for it.
    let total = |folded: &str| folded_total(folded, "");
    assert_eq!(total(&peak), peak_bytes, "{peak}");
    assert_eq!(
        folded_total(&peak, "[memprof: live at the peak, call sites not recorded"),
        peak_bytes,
        "{peak}"
    );
    // Which allocations were temporary is not known without a trace: none is said to be.
    assert_eq!(total(&temporary), 0, "{temporary}");
}

/// The `cum` column of pprof's `-top` line for `function`, in bytes or objects.
fn pprof_cum(top: &str, function: &str) -> Option<u64> {
    top.lines()
        .find(|line| line.trim_end().ends_with(function))
        .map(|line| {
            let cum = line.split_whitespace().nth(3).unwrap();
            cum.trim_end_matches('B').parse().unwrap()
        })
}

fn check_pprof(file: &Path) {
    let Some(pprof) = common::pprof_binary() else {
        return;
    };
    let top = |index: &str| {
        common::run(
            Command::new(&pprof)
                .args(["-top", "-unit=B", "-nodefraction=0", "-nodecount=1000"])
                .arg(format!("-sample_index={index}"))
                .arg(file)
                .env("PPROF_TMPDIR", file.parent().unwrap()),
        )
    };
    let inuse_space = top("inuse_space");
    let alloc_space = top("alloc_space");
    let inuse_objects = top("inuse_objects");
    let alloc_objects = top("alloc_objects");
    assert!(inuse_space.contains("Type: inuse_space"), "{inuse_space}");
    for site in &SITES {
        assert_eq!(
            pprof_cum(&alloc_space, site.function),
            Some(site.allocated_bytes),
            "{alloc_space}"
        );
        assert_eq!(
            pprof_cum(&alloc_objects, site.function),
            Some(site.allocated_blocks),
            "{alloc_objects}"
        );
        assert_eq!(
            pprof_cum(&inuse_objects, site.function).unwrap_or(0),
            site.live_blocks,
            "{inuse_objects}"
        );
        assert_eq!(
            pprof_cum(&inuse_space, site.function).unwrap_or(0),
            site.live_bytes,
            "{inuse_space}"
        );
    }
}

/// The text of an HTML document: tags removed, the entities the viewer writes decoded.
fn text_of(html: &str) -> String {
    let mut text = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        text.push_str(&rest[..open]);
        rest = rest[open..].split_once('>').map_or("", |(_, after)| after);
    }
    text.push_str(rest);
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

fn check_dhat_viewer(file: &Path, dir: &Path) {
    let Some(dom) = common::dh_view_dom(file, dir) else {
        return;
    };
    let text = text_of(&dom);
    let tree = &text[text.find("Invocation {").expect("a rendered profile")..];
    assert!(tree.contains("Mode:    rust-heap"), "{tree}");
    // Numbers as the viewer formats them in any locale: separators removed.
    let plain = |line: &str| line.replace([',', '.', '\u{a0}', '\u{202f}', ' '], "");
    for site in &SITES {
        let at = tree
            .find(site.function)
            .unwrap_or_else(|| panic!("{} missing from the viewer:\n{tree}", site.function));
        // The program point that names the function: its lines come just before its frames.
        let node = &tree[tree[..at].rfind("Total:").unwrap()..at];
        let total = plain(node.lines().next().unwrap());
        let expected = plain(&format!("Total: {} bytes", site.allocated_bytes));
        assert!(total.starts_with(&expected), "{expected} in {node}");
        let blocks = plain(&format!("in {} blocks", site.allocated_blocks));
        assert!(total.contains(&blocks), "{blocks} in {node}");
        let end = node
            .lines()
            .find(|l| l.contains("At t-end:"))
            .map(plain)
            .unwrap_or_else(|| panic!("no t-end in {node}"));
        let expected = plain(&format!("At t-end: {} bytes", site.live_bytes));
        assert!(end.contains(&expected), "{expected} in {node}");
    }
}
