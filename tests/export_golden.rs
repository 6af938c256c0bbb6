//! The export writers against golden files built from a synthetic snapshot (folded stacks, DHAT
//! JSON, heaptrack text), and the pprof profile decoded back and checked field by field, sampled
//! and as the delta of two snapshots.

mod common;

use memprof::export::{self, CallSites, ExportOptions, Value};
use memprof::{Frame, ReturnAddress, Snapshot};
use prost::Message;
use std::collections::HashMap;
use std::io::Read;
use std::time::Duration;

use common::{frame, stack};

/// Call sites covering what the writers must handle: inlined frames, a partly trimmed return
/// address, two raw stacks that trim alike, a name with `;` and quotes, a frame known only by its
/// module, an unknown frame, a stack with no frames at all, and a site whose blocks were all freed.
fn synthetic() -> (Snapshot, HashMap<ReturnAddress, Vec<Frame>>) {
    let alloc = "/rustc/0/library/alloc/src/vec/mod.rs";
    let mut symbols = HashMap::new();
    let mut add = |address: usize, frames: Vec<Frame>| {
        symbols.insert(ReturnAddress(address), frames);
    };
    add(
        0x1010,
        vec![frame("memprof::hooks::record_alloc", "src/hooks.rs", 75, 9)],
    );
    add(
        0x1020,
        vec![frame("__rustc::__rust_alloc", "src/main.rs", 3, 1)],
    );
    // An allocator frame inlined into the collection operation: only the latter stays.
    add(
        0x1030,
        vec![
            frame(
                "alloc::raw_vec::RawVecInner<A>::try_allocate_in",
                alloc,
                10,
                5,
            ),
            frame("alloc::vec::Vec<T>::with_capacity", alloc, 20, 9),
        ],
    );
    // `app::parse_row` inlined into `app::build_index`.
    add(
        0x2040,
        vec![
            frame("app::parse_row", "src/index.rs", 40, 13),
            frame("app::build_index", "src/index.rs", 12, 5),
        ],
    );
    add(0x2041, vec![frame("app::main", "src/main.rs", 30, 0)]);
    add(
        0x2050,
        vec![frame(
            "<[u8; 4] as app::Fill>::fill \"x\"",
            "src/fill.rs",
            7,
            1,
        )],
    );
    add(
        0x2060,
        vec![Frame {
            function: Some("libfoo_alloc".into()),
            file: Some("/usr/lib/libfoo.so".into()),
            line: 0,
            column: 0,
        }],
    );
    let stacks = vec![
        // 0 and 1 trim to the same frames: one site.
        stack(&[0x1010, 0x1020, 0x1030, 0x2040, 0x2041], 30, 30_000),
        stack(&[0x1010, 0x1030, 0x2040, 0x2041], 5, 5_003),
        stack(&[0x1010, 0x1020, 0x2050, 0x2041], 4, 64),
        stack(&[0x1010, 0x2060, 0x9999, 0x2041], 2, 200),
        // Freed entirely.
        stack(&[0x1010, 0x1020, 0x2040, 0x2041], 7, 700),
        // No frames at all (captured while a thread was exiting).
        stack(&[], 1, 48),
        // Never allocated from: left out.
        stack(&[0x2041], 0, 0),
    ];
    let blocks = common::blocks(&[
        (0, 1000, 10),
        (1, 1001, 2),
        (2, 16, 3),
        (3, 100, 1),
        (3, 60, 1),
        (5, 48, 1),
    ]);
    (Snapshot::from_parts(blocks, stacks, 50_000), symbols)
}

fn options() -> ExportOptions {
    ExportOptions::default()
        .pid(4242)
        .command("app --index \"big file\"")
        .elapsed(Duration::from_millis(1_500))
        .time(Duration::from_secs(1_700_000_000))
}

fn render(
    write: impl Fn(
        &Snapshot,
        &mut dyn memprof::Resolve,
        &ExportOptions,
        &mut Vec<u8>,
    ) -> std::io::Result<()>,
    options: &ExportOptions,
) -> String {
    let (snapshot, mut symbols) = synthetic();
    let mut out = Vec::new();
    write(&snapshot, &mut symbols, options, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn sites_merge_and_sort() {
    let (snapshot, mut symbols) = synthetic();
    let sites = CallSites::build(&snapshot, &mut symbols, &options());
    let counts: Vec<_> = sites
        .sites
        .iter()
        .map(|s| {
            (
                s.allocated_blocks,
                s.allocated_bytes,
                s.live_blocks,
                s.live_bytes,
            )
        })
        .collect();
    assert_eq!(
        counts,
        [
            (35, 35_003, 12, 12_002),
            (2, 200, 2, 160),
            (4, 64, 3, 48),
            (1, 48, 1, 48),
            (7, 700, 0, 0),
        ]
    );
}

#[test]
fn folded_live_bytes() {
    let folded = render(export::folded::write, &options());
    common::golden("export_live_bytes.folded", &folded);
}

#[test]
fn folded_allocated_blocks() {
    let folded = render(
        export::folded::write,
        &options().value(Value::AllocatedBlocks),
    );
    common::golden("export_allocated_blocks.folded", &folded);
}

#[test]
fn dhat_json() {
    let json = render(export::dhat::write, &options());
    common::golden("export.dhat.json", &json);
}

#[test]
fn heaptrack_text() {
    let text = render(export::heaptrack::write_text, &options());
    common::golden("export.heaptrack", &text);
}

#[test]
fn heaptrack_gzip_holds_the_text() {
    let (snapshot, mut symbols) = synthetic();
    let mut gz = Vec::new();
    export::heaptrack::write(&snapshot, &mut symbols, &options(), &mut gz).unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, render(export::heaptrack::write_text, &options()));
}

#[test]
fn pprof_decodes_with_the_expected_fields() {
    let (snapshot, mut symbols) = synthetic();
    let mut gz = Vec::new();
    export::pprof::write(&snapshot, &mut symbols, &options(), &mut gz).unwrap();
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut bytes)
        .unwrap();
    let profile = common::pprof_proto::Profile::decode(&bytes[..]).unwrap();
    let s = |i: i64| profile.string_table[i as usize].as_str();
    assert_eq!(profile.string_table[0], "");
    let types: Vec<(&str, &str)> = profile
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(
        types,
        [
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ]
    );
    let period = profile.period_type.as_ref().unwrap();
    assert_eq!((s(period.r#type), s(period.unit)), ("space", "bytes"));
    assert_eq!(profile.period, 1);
    assert_eq!(s(profile.default_sample_type), "inuse_space");
    assert_eq!(profile.time_nanos, 1_700_000_000 * 1_000_000_000);
    assert_eq!(profile.duration_nanos, 1_500_000_000);
    // Synthetic addresses fall in no loaded module.
    assert!(profile.mapping.is_empty());

    let function = |id: u64| {
        let f = profile.function.iter().find(|f| f.id == id).unwrap();
        (s(f.name), s(f.filename))
    };
    let location = |id: u64| profile.location.iter().find(|l| l.id == id).unwrap();
    let first = &profile.sample[0];
    assert_eq!(first.value, [35, 35_003, 12, 12_002]);
    let leaf = location(first.location_id[0]);
    assert_eq!(leaf.address, 0x1030 - 1);
    // The trimmed allocator frame is gone; the collection operation stays.
    let leaf_lines: Vec<_> = leaf
        .line
        .iter()
        .map(|l| (function(l.function_id).0, l.line, l.column))
        .collect();
    assert_eq!(leaf_lines, [("alloc::vec::Vec<T>::with_capacity", 20, 9)]);
    // Inlined frames: innermost first, the caller last.
    let inlined = location(first.location_id[1]);
    let names: Vec<_> = inlined
        .line
        .iter()
        .map(|l| function(l.function_id))
        .collect();
    assert_eq!(
        names,
        [
            ("app::parse_row", "src/index.rs"),
            ("app::build_index", "src/index.rs")
        ]
    );
    assert_eq!(first.location_id.len(), 3);
    // The site without frames has a sample with no locations; the freed one has zero in use.
    let values: Vec<&[i64]> = profile.sample.iter().map(|s| &s.value[..]).collect();
    assert!(values.contains(&&[7, 700, 0, 0][..]));
    let frameless = profile
        .sample
        .iter()
        .find(|s| s.value == [1, 48, 1, 48])
        .unwrap();
    assert!(frameless.location_id.is_empty());
    // The unknown frame is a location without lines.
    let unknown = profile
        .location
        .iter()
        .find(|l| l.address == 0x9998)
        .unwrap();
    assert!(unknown.line.is_empty());
}

#[test]
fn every_format_writes_through_write_path() {
    let (snapshot, mut symbols) = synthetic();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("export_golden");
    std::fs::create_dir_all(&dir).unwrap();
    for ending in [
        ".pb.gz",
        ".folded",
        ".dhat.json",
        ".heaptrack.gz",
        ".md",
        ".tsv",
        ".html",
    ] {
        let pattern = format!("{}/out-%p-%e{ending}", dir.display());
        let written = export::write_path(&pattern, &snapshot, &mut symbols, &options()).unwrap();
        let name = written.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("out-4242-export_golden"), "{name}");
        assert!(name.ends_with(ending), "{name}");
        assert!(std::fs::metadata(&written).unwrap().len() > 0, "{name}");
    }
    let error = export::write_path(
        &format!("{}/out.json", dir.display()),
        &snapshot,
        &mut symbols,
        &options(),
    )
    .unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains(".dhat.json"), "{error}");
}

/// The run's events for the HTML report's timeline: blocks of the synthetic stacks allocated and
/// freed (the peak, 1600 bytes, at 40 ns), and two markers, one with a name that would end a
/// `<script>` element.
struct Run;

impl export::Events for Run {
    fn for_each(&mut self, f: &mut dyn FnMut(export::Event)) -> std::io::Result<()> {
        let alloc = |time, address, size, stack| export::Event::Alloc {
            time,
            address,
            size,
            stack: memprof::StackId(stack),
        };
        f(alloc(10, 0x10, 1000, 0));
        f(alloc(20, 0x20, 500, 4));
        f(alloc(40, 0x30, 100, 3));
        f(export::Event::Free {
            time: 900,
            address: 0x20,
        });
        // A free of a block the events never allocated changes nothing.
        f(export::Event::Free {
            time: 950,
            address: 0x99,
        });
        f(alloc(1_000, 0x40, 48, 5));
        Ok(())
    }

    fn markers(&mut self) -> Vec<(u64, String)> {
        vec![(30, "loaded".into()), (960, "</script><b>".into())]
    }
}

/// The HTML report against its golden file, with its flame graph left out (inferno's SVG with
/// the `flamegraph` feature, drawn by the page's script without): a function named with
/// `</script>` stays inside the data, and the file names no URL.
#[test]
fn html_report() {
    let (mut snapshot, mut symbols) = synthetic();
    symbols.insert(
        ReturnAddress(0x2070),
        vec![common::frame(
            "app::</script><script>alert(1)</script>",
            "src/evil.rs",
            1,
            1,
        )],
    );
    snapshot
        .stacks
        .push(common::stack(&[0x1010, 0x2070, 0x2041], 1, 16));
    let mut out = Vec::new();
    export::write_with_events(
        export::Format::Html,
        &snapshot,
        &mut symbols,
        &options(),
        Some(&mut Run),
        &mut out,
    )
    .unwrap();
    let html = String::from_utf8(out).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "{html}"
    );
    // The page's two script elements, and no other.
    assert_eq!(html.matches("</script>").count(), 2, "{html}");
    assert_eq!(html.matches("<script").count(), 2, "{html}");
    assert!(
        html.contains(r"app::\u003c/script\u003e\u003cscript\u003ealert(1)\u003c/script\u003e")
    );
    let (before, rest) = html.split_once("<div id=\"flame\">").unwrap();
    let (flame, after) = rest.split_once("</div>\n</section>").unwrap();
    if cfg!(feature = "flamegraph") {
        assert!(flame.starts_with("<svg "), "{flame}");
        assert!(!flame.contains("<script"), "{flame}");
        assert!(
            flame.contains("<title>app::parse_row (12,002 bytes, "),
            "{flame}"
        );
    } else {
        assert_eq!(flame, "");
    }
    common::golden(
        "export.html",
        &format!("{before}<div id=\"flame\">(the flame graph)</div>\n</section>{after}"),
    );
}

#[cfg(feature = "flamegraph")]
#[test]
fn flamegraph_svg_is_titled_counted_and_stable() {
    let svg = render(export::flamegraph::write, &options());
    assert!(svg.contains("memprof: live bytes"), "no title");
    // inferno's tooltip per frame: name, count and unit.
    assert!(
        svg.contains("<title>app::parse_row (12,002 bytes, "),
        "no tooltip for app::parse_row"
    );
    let titles: Vec<&str> = svg
        .split("<title>")
        .skip(1)
        .map(|t| t.split("</title>").next().unwrap())
        .collect();
    assert!(
        titles
            .iter()
            .any(|t| t.starts_with("&lt;[u8: 4] as app::Fill&gt;::fill &quot;x&quot; (48 bytes, ")),
        "{titles:#?}"
    );
    assert_eq!(svg, render(export::flamegraph::write, &options()));
    let blocks = render(
        export::flamegraph::write,
        &options()
            .value(Value::AllocatedBlocks)
            .title("index blocks"),
    );
    assert!(blocks.contains("index blocks"), "no custom title");
    assert!(blocks.contains("<title>app::parse_row (42 blocks, "));

    let empty = Snapshot::from_parts(Vec::new(), Vec::new(), 0);
    let mut out = Vec::new();
    export::flamegraph::write(&empty, &mut HashMap::new(), &options(), &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("memprof: live bytes: no live bytes in this snapshot"));
    assert!(out.trim_end().ends_with("</svg>"));
}

/// What heaptrack's reader (`AccumulatedTraceData::read` in heaptrack 1.4) derives from the
/// events of a file: per trace, its calls, what it leaks and what it had live at the peak.
#[derive(Debug, Default, PartialEq, Eq)]
struct Derived {
    peak: u64,
    temporary: u64,
    calls: u64,
    leaked: u64,
    /// `(calls, leaked, peak)` of each trace that allocated, sorted.
    traces: Vec<(u64, u64, u64)>,
}

fn heaptrack_derives(text: &str) -> Derived {
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
    let mut kinds: Vec<(u64, u64)> = Vec::new();
    let mut per_trace: HashMap<u64, (u64, u64, u64)> = HashMap::new();
    let mut derived = Derived::default();
    let mut last_allocation = 0;
    for line in text.lines() {
        let mut words = line.split(' ');
        match words.next() {
            Some("a") => kinds.push((hex(words.next().unwrap()), hex(words.next().unwrap()))),
            Some("+") => {
                let kind = hex(words.next().unwrap());
                let (size, trace) = kinds[kind as usize];
                last_allocation = kind;
                let entry = per_trace.entry(trace).or_default();
                entry.0 += 1;
                entry.1 += size;
                derived.calls += 1;
                derived.leaked += size;
                if derived.leaked > derived.peak {
                    derived.peak = derived.leaked;
                    for entry in per_trace.values_mut() {
                        entry.2 = entry.1;
                    }
                }
            }
            Some("-") => {
                let kind = hex(words.next().unwrap());
                if kind == last_allocation {
                    derived.temporary += 1;
                }
                last_allocation = 0;
                let (size, trace) = kinds[kind as usize];
                per_trace.get_mut(&trace).unwrap().1 -= size;
                derived.leaked -= size;
            }
            _ => {}
        }
    }
    // The reader records each trace's live bytes when the peak is first reached; the pass above
    // does it at every new peak, which ends the same.
    derived.traces = per_trace.into_values().collect();
    derived.traces.sort_unstable();
    derived
}

/// `(calls, leaked, peak)` of each call site of `snapshot`, as heaptrack must derive them, sorted.
fn expected_traces(snapshot: &Snapshot, extra: Option<(u64, u64, u64)>) -> Vec<(u64, u64, u64)> {
    let (_, mut symbols) = synthetic();
    let sites = CallSites::build(snapshot, &mut symbols, &options());
    let mut traces: Vec<(u64, u64, u64)> = sites
        .sites
        .iter()
        .map(|s| {
            let peak = if snapshot.peak_known { s.peak_bytes } else { 0 };
            (s.allocated_blocks, s.live_bytes, peak)
        })
        .chain(extra)
        .collect();
    traces.sort_unstable();
    traces
}

fn heaptrack_of(snapshot: &Snapshot) -> String {
    let (_, mut symbols) = synthetic();
    let mut out = Vec::new();
    export::heaptrack::write_text(snapshot, &mut symbols, &options(), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// The synthetic snapshot with its peak table: per stack, what was live at the peak.
fn with_peak(peaks: [(u64, u64); 7]) -> Snapshot {
    let (mut snapshot, _) = synthetic();
    for (stack, (blocks, bytes)) in snapshot.stacks.iter_mut().zip(peaks) {
        stack.peak_blocks = blocks;
        stack.peak_bytes = bytes;
    }
    snapshot.peak_known = true;
    snapshot.stats.peak_bytes = peaks.iter().map(|p| p.1).sum();
    snapshot
}

#[test]
fn heaptrack_derives_the_true_peak_and_no_temporaries() {
    let peaks = [
        (20, 20_000),
        (5, 5_003),
        (4, 64),
        (2, 160),
        (7, 700),
        (1, 48),
        (0, 0),
    ];
    let snapshot = with_peak(peaks);
    let derived = heaptrack_derives(&heaptrack_of(&snapshot));
    assert_eq!(derived.peak, snapshot.stats.peak_bytes);
    assert_eq!(derived.peak, 25_975);
    assert_eq!(derived.temporary, 0);
    assert_eq!(derived.calls, snapshot.stats.total_blocks);
    assert_eq!(derived.leaked, snapshot.stats.live_bytes);
    assert_eq!(derived.traces, expected_traces(&snapshot, None));

    // The peak table describes a moment a little before the peak: the difference is live at
    // the peak under a site of its own, one more call.
    let mut short = with_peak(peaks);
    short.stats.peak_bytes += 300;
    let derived = heaptrack_derives(&heaptrack_of(&short));
    assert_eq!(derived.peak, short.stats.peak_bytes);
    assert_eq!(derived.temporary, 0);
    assert_eq!(derived.calls, short.stats.total_blocks + 1);
    assert_eq!(derived.traces, expected_traces(&short, Some((1, 0, 300))));

    // Without the peak table: the peak is `HeapStats`' peak, no site claims any of it.
    let (plain, _) = synthetic();
    let text = heaptrack_of(&plain);
    let derived = heaptrack_derives(&text);
    assert_eq!(derived.peak, 50_000);
    assert_eq!(derived.temporary, 0);
    assert_eq!(derived.leaked, plain.stats.live_bytes);
    assert_eq!(
        derived.traces,
        expected_traces(&plain, Some((1, 0, 50_000)))
    );
    assert!(text.contains("MEMPROF_PEAK=1 records them"), "{text}");
}

#[test]
fn pprof_of_a_sampled_snapshot_carries_its_interval() {
    let (exact, mut symbols) = synthetic();
    let sampled = Snapshot::sampled(exact.blocks.clone(), exact.stacks.clone(), 0, 4096);
    let options = options().value(Value::AllocatedBytes);
    let mut gz = Vec::new();
    export::pprof::write(&sampled, &mut symbols, &options, &mut gz).unwrap();
    let profile = common::decode_pprof(&gz);
    let s = |i: i64| profile.string_table[i as usize].as_str();
    assert_eq!(profile.period, 4096);
    assert_eq!(s(profile.default_sample_type), "alloc_space");
    assert!(
        s(profile.comment[0]).contains("one allocation recorded per 4096 bytes on average"),
        "{}",
        s(profile.comment[0])
    );
    // Live values are the snapshot's estimates: each sampled block of `size` bytes stands for
    // 1 / (1 - exp(-size / 4096)) blocks. The first site is stacks 0 (10 blocks of 1000 bytes)
    // and 1 (2 of 1001), each rounded.
    let weight = |size: f64| 1.0 / -(-size / 4096.0).exp_m1();
    let first = &profile.sample[0];
    assert_eq!(first.value[..2], [35, 35_003]);
    let blocks = (10.0 * weight(1000.0)).round() + (2.0 * weight(1001.0)).round();
    let bytes = (10_000.0 * weight(1000.0)).round() + (2_002.0 * weight(1001.0)).round();
    assert_eq!(first.value[2..], [blocks as i64, bytes as i64]);
}

#[test]
fn pprof_delta_has_what_changed_between_two_snapshots() {
    let (earlier, mut symbols) = synthetic();
    let mut stacks = earlier.stacks.clone();
    // Stack 0 allocated 5 blocks more, 3 of them still live; stack 2's blocks were freed.
    stacks[0].allocated_blocks += 5;
    stacks[0].allocated_bytes += 5_000;
    let spec = [
        (0, 1000, 13),
        (1, 1001, 2),
        (3, 100, 1),
        (3, 60, 1),
        (5, 48, 1),
    ];
    let later = Snapshot::from_parts(common::blocks(&spec), stacks, 50_000);
    let options = options().elapsed(Duration::from_secs(30));
    let delta = delta_profile(&later, &earlier, &mut symbols, &options);
    let values: Vec<&[i64]> = delta.sample.iter().map(|s| &s.value[..]).collect();
    assert_eq!(values, [&[5, 5_000, 3, 3_000][..], &[0, 0, -3, -48][..]]);
    assert_eq!(delta.duration_nanos, 30_000_000_000);
    // Only the locations the two sites use.
    let used: std::collections::HashSet<u64> = delta
        .sample
        .iter()
        .flat_map(|s| s.location_id.iter().copied())
        .collect();
    assert_eq!(used.len(), delta.location.len());
    // Against a snapshot without live counts (what `/debug/pprof/delta_heap` compares with), the
    // live values are the later snapshot's own.
    let mut base = Snapshot {
        stacks: earlier.stacks.clone(),
        ..Snapshot::default()
    };
    for stack in &mut base.stacks {
        (stack.live_blocks, stack.live_bytes) = (0, 0);
    }
    let delta = delta_profile(&later, &base, &mut symbols, &options);
    assert_eq!(delta.sample[0].value, [5, 5_000, 15, 15_002]);
    assert_eq!(delta.sample.len(), 3, "{:?}", delta.sample);
}

/// The delta profile `export::pprof::write_delta` writes, decoded.
fn delta_profile(
    later: &Snapshot,
    earlier: &Snapshot,
    symbols: &mut HashMap<ReturnAddress, Vec<Frame>>,
    options: &ExportOptions,
) -> common::pprof_proto::Profile {
    let mut gz = Vec::new();
    export::pprof::write_delta(later, earlier, symbols, options, &mut gz).unwrap();
    common::decode_pprof(&gz)
}
