//! `memprof serve` on a sampled trace: the API's figures are the estimates `memprof report` gives
//! (each recorded block of `size` bytes weighted `1 / (1 - exp(-size / interval))`, rounded per
//! stack), per call site at the end and at the peak, in the summary and the flame graph, and every
//! answer with figures says they are estimates (`estimated`, `sample_interval`).

mod support;
#[path = "support/server.rs"]
mod server;

use memprof_trace::{ChunkEncoder, Compressor, Header, SymbolFrame};
use serde_json::Value;
use server::Server;
use std::collections::BTreeMap;

/// Bytes per sample on average.
const INTERVAL: u64 = 4096;

/// The functions of the three stacks, by their return address.
const SITES: [(u64, &str, u32); 3] = [
    (0x1001, "app::small", 10),
    (0x2001, "app::middle", 20),
    (0x3001, "app::large", 30),
];

/// One recorded event: time, thread, address, size (`None`: a free), stack.
type Event = (u64, u32, u64, Option<u64>, u32);

/// The events of the trace, in time order: small blocks (64 to 127 bytes) from two threads on one
/// stack, so that the stack's estimate is the sum over two threads rounded once; middle-sized
/// ones (1,000 to 2,999 bytes) on one thread; three large ones (100,000 bytes) whose frees take
/// the heap down from its peak. About half of the small and middle blocks are freed.
fn events() -> Vec<Event> {
    let mut events = Vec::new();
    let mut time = 1_000;
    let mut next = |events: &mut Vec<Event>, thread, address, size, stack| {
        time += 1_000;
        events.push((time, thread, address, size, stack));
    };
    for i in 0..40u64 {
        let thread = 1 + (i % 2) as u32;
        next(
            &mut events,
            thread,
            0x10_0000 + i * 0x100,
            Some(64 + (i * 37) % 64),
            0,
        );
        next(
            &mut events,
            1,
            0x20_0000 + i * 0x1000,
            Some(1_000 + (i * 677) % 2_000),
            1,
        );
        if i % 13 == 5 {
            next(&mut events, 2, 0x30_0000 + i * 0x10_0000, Some(100_000), 2);
        }
    }
    for i in (0..40u64).step_by(2) {
        let thread = 1 + (i % 2) as u32;
        next(&mut events, thread, 0x10_0000 + i * 0x100, None, 0);
        next(&mut events, 1, 0x20_0000 + (i + 1) * 0x1000, None, 1);
    }
    for i in [5u64, 18] {
        next(&mut events, 2, 0x30_0000 + i * 0x10_0000, None, 2);
    }
    events
}

/// The trace of [`events`], sampled every [`INTERVAL`] bytes.
fn trace() -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(9, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(INTERVAL, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let mut compressor = Compressor::new(3).unwrap();
    let mut definitions = ChunkEncoder::new(0);
    for (stack, (address, _, _)) in SITES.iter().enumerate() {
        definitions.stack(stack as u32, [*address].into_iter());
    }
    definitions.thread(1, 100, "main");
    definitions.thread(2, 101, "worker");
    definitions.finish(Some(&mut compressor), &mut out).unwrap();
    let events = events();
    for thread in [1, 2] {
        let mut chunk = ChunkEncoder::new(thread);
        for &(time, _, address, size, stack) in events.iter().filter(|e| e.1 == thread) {
            match size {
                Some(size) => chunk.alloc(time, address, size, stack),
                None => chunk.free(time, address),
            }
        }
        chunk.finish(Some(&mut compressor), &mut out).unwrap();
    }
    let mut symbols = ChunkEncoder::new(0);
    for (address, function, line) in SITES {
        symbols.symbol(
            address,
            &[SymbolFrame {
                function: Some(function.into()),
                file: Some("src/app.rs".into()),
                line,
                column: 5,
            }],
        );
    }
    let last = events.last().unwrap().0;
    symbols.end(last + 1, 0);
    symbols.finish(Some(&mut compressor), &mut out).unwrap();
    out
}

/// Per function, the blocks and bytes of `memprof report --format tsv` at `at`.
fn report(path: &str, at: &str) -> BTreeMap<String, (u64, u64)> {
    let out = support::stdout_of(&[
        "report",
        path,
        "--format",
        "tsv",
        "--min-bytes",
        "0",
        "--at",
        at,
    ]);
    let mut rows = BTreeMap::new();
    for line in out.lines().skip(1) {
        let fields: Vec<&str> = line.split('\t').collect();
        let function = fields[2].rsplit(" in ").next().unwrap().trim_matches('\'');
        rows.insert(
            function.to_owned(),
            (fields[0].parse().unwrap(), fields[1].parse().unwrap()),
        );
    }
    assert_eq!(rows.len(), SITES.len(), "{out}");
    rows
}

/// Per function, the blocks and bytes allocated over the whole run as the reports estimate
/// them: each recorded allocation weighted, summed per stack, rounded.
fn allocated() -> BTreeMap<String, (u64, u64)> {
    let mut sums = [(0.0f64, 0.0f64); SITES.len()];
    for (_, _, _, size, stack) in events() {
        if let Some(size) = size {
            let (blocks, bytes) = memprof_trace::weight(size, INTERVAL);
            sums[stack as usize].0 += blocks;
            sums[stack as usize].1 += bytes;
        }
    }
    SITES
        .iter()
        .zip(sums)
        .map(|(site, (blocks, bytes))| {
            (
                site.1.to_owned(),
                (blocks.round() as u64, bytes.round() as u64),
            )
        })
        .collect()
}

fn total(rows: &BTreeMap<String, (u64, u64)>) -> (u64, u64) {
    rows.values().fold((0, 0), |t, r| (t.0 + r.0, t.1 + r.1))
}

/// The `estimated` and `sample_interval` members of an answer.
fn assert_marked(answer: &Value, what: &str) {
    assert_eq!(answer["estimated"], true, "{what}: {answer}");
    assert_eq!(answer["sample_interval"], INTERVAL, "{what}: {answer}");
}

/// Per function, `(blocks, bytes)` of two members of each site of a `/api/sites` answer.
fn by_site(answer: &Value, blocks: &str, bytes: &str) -> BTreeMap<String, (u64, u64)> {
    answer["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|site| {
            let figure = |key: &str| {
                site[key]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{key}: {site}"))
            };
            (
                site["function"].as_str().unwrap().to_owned(),
                (figure(blocks), figure(bytes)),
            )
        })
        .collect()
}

/// Per function, the value of the flame graph's node (the stacks have one frame each).
fn flame_values(flame: &Value) -> BTreeMap<String, u64> {
    flame["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| {
            (
                node["name"]
                    .as_str()
                    .unwrap()
                    .rsplit(' ')
                    .next()
                    .unwrap()
                    .trim_matches('\'')
                    .to_owned(),
                node["value"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_api_gives_the_reports_estimates_and_says_so() {
    let dir = std::env::temp_dir().join(format!("memprof-serve-sampled-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sampled.mptrace");
    std::fs::write(&path, trace()).unwrap();
    let path = path.to_str().unwrap();
    let at_end = report(path, "end");
    let at_peak = report(path, "peak");
    let allocated = allocated();
    let recorded = events().iter().filter(|e| e.3.is_some()).count() as u64;
    // Estimates, not the samples: far more blocks than recorded.
    assert!(total(&allocated).0 > 10 * recorded, "{allocated:?}");

    let server = Server::start(&[path]);

    let summary = server.json("/api/summary");
    assert_marked(&summary, "/api/summary");
    let pair = |v: &Value| (v["blocks"].as_u64().unwrap(), v["bytes"].as_u64().unwrap());
    assert_eq!(pair(&summary["end"]), total(&at_end), "{summary}");
    assert_eq!(pair(&summary["peak"]), total(&at_peak), "{summary}");
    let totals = &summary["totals"];
    assert_eq!(
        (
            totals["allocations"].as_u64().unwrap(),
            totals["allocated_bytes"].as_u64().unwrap()
        ),
        total(&allocated),
        "{summary}"
    );
    assert_eq!(summary["recorded"]["allocations"], recorded, "{summary}");

    // The sites, answered by the index, then by a scan (a size bound off the index's bins, which
    // every block passes): the same estimates.
    for filter in ["", "&size_min=50"] {
        for (at, live) in [("end", &at_end), ("peak", &at_peak)] {
            let query = format!("/api/sites?at={at}{filter}");
            let sites = server.json(&query);
            assert_marked(&sites, &query);
            let expected_from = if filter.is_empty() { "index" } else { "scan" };
            assert_eq!(sites["exact_from"], expected_from, "{query}");
            assert_eq!(
                &by_site(&sites, "live_blocks", "live_bytes"),
                live,
                "{query}"
            );
            assert_eq!(
                by_site(&sites, "leaked_blocks", "leaked_bytes"),
                at_end,
                "{query}"
            );
            assert_eq!(
                by_site(&sites, "peak_blocks", "peak_bytes"),
                at_peak,
                "{query}"
            );
            assert_eq!(
                by_site(&sites, "allocations", "allocated_bytes"),
                allocated,
                "{query}"
            );
        }
    }

    // The flame graphs: live at the end and at the peak, allocated over the run.
    for (query, expected) in [
        ("/api/flame?what=live", &at_end),
        ("/api/flame?what=live&at=peak", &at_peak),
        ("/api/flame?what=allocated", &allocated),
    ] {
        let flame = server.json(query);
        assert_marked(&flame, query);
        let bytes: BTreeMap<String, u64> = expected.iter().map(|(f, r)| (f.clone(), r.1)).collect();
        assert_eq!(flame_values(&flame), bytes, "{query}: {flame}");
        assert_eq!(flame["value"], total(expected).1, "{query}: {flame}");
    }
    let (status, text) = server.get("/api/flame?what=live&format=text");
    let text = String::from_utf8(text).unwrap();
    assert_eq!(status, 200);
    assert!(
        text.starts_with(&format!(
            "≈ estimated from allocations sampled one per {INTERVAL} bytes"
        )),
        "{text}"
    );

    // The other answers with figures say so too.
    for query in [
        "/api/timeline?points=50",
        "/api/diff?from=0&to=end",
        "/api/site/0",
    ] {
        assert_marked(&server.json(query), query);
    }
    let timeline = server.json("/api/timeline?points=50");
    // Its peak is the recorded heap's, its figures estimated (rounded once).
    let peak = &timeline["peak"];
    assert_eq!(peak["time_ns"], summary["peak"]["time_ns"], "{timeline}");
    assert!(
        peak["bytes"].as_u64().unwrap().abs_diff(total(&at_peak).1) <= 3,
        "{timeline}"
    );
    let last = timeline["points"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    // Rounded once per point, not per stack: within a block or byte per stack of the sum.
    let (blocks, bytes) = total(&at_end);
    assert!(
        last["live_blocks"].as_u64().unwrap().abs_diff(blocks) <= 3,
        "{last}"
    );
    assert!(
        last["live_bytes"].as_u64().unwrap().abs_diff(bytes) <= 3,
        "{last}"
    );
    let allocations = server.json("/api/allocations?limit=1");
    assert_eq!(allocations["total_count"], recorded, "{allocations}");
    assert_eq!(allocations["sample_interval"], INTERVAL, "{allocations}");
    let estimated = allocations["estimated_count"].as_u64().unwrap();
    assert!(
        estimated.abs_diff(total(&allocated).0) <= 3,
        "{allocations}"
    );
    drop(server);

    // Served again, from the index kept beside the trace: the same estimates.
    let again = Server::start(&[path]);
    assert_eq!(again.json("/api/summary")["end"], summary["end"]);
    let sites = again.json("/api/sites?at=peak");
    assert_eq!(by_site(&sites, "live_blocks", "live_bytes"), at_peak);
    let _ = std::fs::remove_dir_all(&dir);
}
