//! Labels from code (`with_labels`, a guard, nested sets) as the user sees them: `log_labels`
//! adds up each label set exactly, the reports keep one label's blocks, and Go's pprof reads the
//! labels as sample labels (`-tags`, `-tagfocus`) from an export file and from the HTTP endpoint.
//!
//! Every allocation is recorded (no sampling): small blocks carry a header, those of 64 KiB and
//! more sit in the side tables, and both kinds carry their labels.

#![cfg(feature = "http")]

mod common;

use memprof::export::{self, ExportOptions};
use memprof::{DiffReport, Labels, Report, ReportOptions, Snapshot};
use std::path::{Path, PathBuf};
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn block(size: usize) -> Vec<u8> {
    let block = Vec::with_capacity(size);
    // Used after the call, so the call is not a tail call that would leave no frame.
    std::hint::black_box(&block);
    block
}

/// `(live blocks, live bytes, allocated blocks, allocated bytes)` per label set, as
/// `log_labels` writes them (`key=value,...`).
fn logged() -> Vec<(String, [u64; 4])> {
    let mut out = Vec::new();
    memprof::log_labels(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let mut lines = text.lines();
    let count: usize = lines.next().unwrap().parse().unwrap();
    let rows: Vec<(String, [u64; 4])> = lines
        .take(count)
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 5, "{line}");
            let n = |i: usize| fields[i].parse::<u64>().unwrap();
            (fields[4].to_owned(), [n(0), n(1), n(2), n(3)])
        })
        .collect();
    assert_eq!(rows.len(), count, "{text}");
    rows
}

#[test]
fn labels_in_log_labels_reports_and_go_pprof() {
    let earlier = Snapshot::take();
    // The containers are made before the labels are set: only the blocks carry them.
    let mut acme: Vec<Vec<u8>> = Vec::with_capacity(2000);
    let mut zeta: Vec<Vec<u8>> = Vec::with_capacity(10);
    let mut beta: Vec<Vec<u8>> = Vec::with_capacity(10);
    memprof::with_labels(&[("tenant", "acme")], || {
        for _ in 0..10 {
            acme.push(block(256 << 10));
        }
        for _ in 0..1000 {
            acme.push(block(100));
        }
        for _ in 0..4 {
            drop(std::hint::black_box(block(100_000)));
        }
        // Nested: the inner value overrides the outer one for the same key.
        memprof::with_labels(&[("tenant", "beta")], || {
            for _ in 0..3 {
                beta.push(block(64 << 10));
            }
        });
    });
    {
        let _labels = Labels::new(&[("tenant", "zeta"), ("kind", "batch")]).enter();
        for _ in 0..5 {
            zeta.push(block(128 << 10));
        }
    }
    assert_eq!(Labels::current(), Labels::NONE);

    let rows = logged();
    let row = |labels: &str| {
        rows.iter()
            .find(|(l, _)| l == labels)
            .unwrap_or_else(|| panic!("no row {labels}: {rows:?}"))
            .1
    };
    let acme_live = 10 * (256 << 10) + 1000 * 100;
    assert_eq!(
        row("tenant=acme"),
        [1010, acme_live, 1014, acme_live + 400_000]
    );
    assert_eq!(row("tenant=beta"), [3, 3 << 16, 3, 3 << 16]);
    assert_eq!(row("kind=batch,tenant=zeta"), [5, 5 << 17, 5, 5 << 17]);
    assert!(rows.iter().any(|(l, _)| l == "(none)"), "{rows:?}");

    // The reports keep one label's blocks (`MEMPROF_LABEL=tenant=zeta` in the environment).
    let snapshot = Snapshot::take();
    let report = memprof::with_symbolizer(|s| {
        Report::live(
            &snapshot,
            s,
            &ReportOptions::default()
                .min_bytes(0)
                .label("tenant", "zeta"),
        )
    });
    let bytes: u64 = report.groups.iter().map(|g| g.bytes).sum();
    let blocks: u64 = report.groups.iter().map(|g| g.blocks).sum();
    assert_eq!((blocks, bytes), (5, 5 << 17), "{report:?}");
    // So does the diff report, of what grew since the test began.
    let diff = memprof::with_symbolizer(|s| {
        DiffReport::new(
            &snapshot.diff(&earlier),
            s,
            &ReportOptions::default()
                .min_bytes(0)
                .label("tenant", "beta"),
        )
    });
    let grown: (i64, i64) = diff
        .changes
        .iter()
        .fold((0, 0), |(b, n), g| (b + g.blocks, n + g.bytes));
    assert_eq!(grown, (3, 3 << 16), "{diff:?}");

    // An export file, read by Go's pprof.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("labels_pprof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("heap.pb.gz");
    let mut out = std::fs::File::create(&file).unwrap();
    memprof::with_symbolizer(|s| {
        export::pprof::write(&snapshot, s, &ExportOptions::default(), &mut out)
    })
    .unwrap();
    drop(out);
    let profile = common::decode_pprof(&std::fs::read(&file).unwrap());
    let s = |i: i64| profile.string_table[i as usize].as_str();
    let inuse_with = |key: &str, value: &str| -> i64 {
        profile
            .sample
            .iter()
            .filter(|sample| {
                sample
                    .label
                    .iter()
                    .any(|l| s(l.key) == key && s(l.str) == value)
            })
            .map(|sample| sample.value[3])
            .sum()
    };
    assert_eq!(inuse_with("tenant", "acme"), acme_live as i64);
    assert_eq!(inuse_with("kind", "batch"), 5 << 17);

    let address = memprof::serve_http("127.0.0.1:0").expect("the endpoint starts");
    let endpoint = common::http_get(address, "/debug/pprof/heap").unwrap();
    assert_eq!(endpoint.status, 200, "{endpoint:?}");
    let served = common::decode_pprof(&endpoint.body);
    assert!(
        served.sample.iter().any(|sample| !sample.label.is_empty()),
        "{served:?}"
    );

    let url = format!("http://{address}/debug/pprof/heap");
    let sources = [file.to_string_lossy().into_owned(), url];
    for tool in pprof_tools() {
        for source in &sources {
            // `-tags`: every key with its values and their share.
            let tags = pprof(&tool, &["-tags", "-sample_index=inuse_space"], source, &dir);
            for needle in ["tenant:", "acme", "beta", "zeta", "kind:", "batch"] {
                assert!(tags.contains(needle), "{needle}\n{tags}");
            }
            // `-tagfocus`: only the samples with that label, to the byte.
            for (focus, bytes) in [
                ("tenant=acme", acme_live),
                ("tenant=zeta", 5 << 17),
                ("kind=batch", 5 << 17),
                ("tenant=beta", 3 << 16),
            ] {
                let top = pprof(
                    &tool,
                    &[
                        "-top",
                        "-unit=byte",
                        "-sample_index=inuse_space",
                        &format!("-tagfocus={focus}"),
                    ],
                    source,
                    &dir,
                );
                let total = shown_total(&top);
                assert_eq!(total, bytes, "{focus} from {source}\n{top}");
            }
        }
    }
    drop((acme, zeta, beta));
}

/// The bytes of the samples a `pprof -top` shows, those its filters kept: its `Showing nodes
/// accounting for NB, P% of TB total` header.
fn shown_total(top: &str) -> u64 {
    let line = top
        .lines()
        .find(|l| l.starts_with("Showing nodes accounting for "))
        .unwrap_or_else(|| panic!("no total in\n{top}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    words[4]
        .trim_end_matches(',')
        .trim_end_matches('B')
        .parse()
        .unwrap()
}

/// How to run a pprof: a program and the arguments before pprof's own.
#[derive(Clone, Debug)]
struct Tool(PathBuf, Vec<&'static str>);

/// The pprof built from Debian's sources and `go tool pprof`; none without Go (which fails the
/// test under `scripts/test.sh`).
fn pprof_tools() -> Vec<Tool> {
    let Some(built) = common::pprof_binary() else {
        return Vec::new();
    };
    vec![
        Tool(built, Vec::new()),
        Tool("go".into(), vec!["tool", "pprof"]),
    ]
}

/// Runs `tool` with `args` on `source` (a file or a URL); its standard output.
fn pprof(tool: &Tool, args: &[&str], source: &str, dir: &Path) -> String {
    let output = Command::new(&tool.0)
        .args(&tool.1)
        .args(args)
        .arg(source)
        .env("PPROF_TMPDIR", dir)
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{tool:?} {args:?} {source}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}
