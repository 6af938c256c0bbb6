//! The HTTP endpoint read by Go's pprof over HTTP, as a continuous-profiling scraper or a person
//! reads it: `pprof -raw URL` (the binary built from Debian's sources of google/pprof, and
//! `go tool pprof`) lists this program's call sites with their four values, without
//! `-symbolize=none` and without asking the server for symbols; `/debug/pprof/allocs` shows
//! `alloc_space` first; `?seconds=N` and `/debug/pprof/delta_heap` serve deltas; the reports and the
//! index are served; bad requests get 400, 404 and 405.
//!
//! Sampling is on, one allocation per 4 KiB: blocks of 128 KiB and more are recorded with a
//! probability of 1 (to the last bit of a double) and stand for exactly themselves, so their
//! values are exact, while 100,000 blocks of 64 bytes are estimated, which the profile's values
//! show scaled.

#![cfg(feature = "http")]

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const INTERVAL: u64 = 4096;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new().sample_interval(INTERVAL);

#[inline(never)]
fn kept_256k() -> Vec<u8> {
    let block = Vec::with_capacity(256 << 10);
    // Used after the call, so the call is not a tail call that would leave no frame.
    std::hint::black_box(&block);
    block
}

#[inline(never)]
fn freed_128k() -> Vec<u8> {
    let block = Vec::with_capacity(128 << 10);
    std::hint::black_box(&block);
    block
}

#[inline(never)]
fn half_192k() -> Vec<u8> {
    let block = Vec::with_capacity(192 << 10);
    std::hint::black_box(&block);
    block
}

#[inline(never)]
fn small_64() -> Vec<u8> {
    let block = Vec::with_capacity(64);
    std::hint::black_box(&block);
    block
}

#[inline(never)]
fn during_delta() -> Vec<u8> {
    let block = Vec::with_capacity(256 << 10);
    std::hint::black_box(&block);
    block
}

#[inline(never)]
fn after_delta_heap() -> Vec<u8> {
    let block = Vec::with_capacity(256 << 10);
    std::hint::black_box(&block);
    block
}

/// A call site's values: `alloc_objects`, `alloc_space`, `inuse_objects`, `inuse_space`.
type Values = [i64; 4];

#[test]
fn go_pprof_reads_the_endpoint() {
    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(200);
    for _ in 0..20 {
        kept.push(kept_256k());
    }
    for _ in 0..30 {
        drop(std::hint::black_box(freed_128k()));
    }
    let mut half: Vec<Vec<u8>> = (0..40).map(|_| half_192k()).collect();
    kept.extend(half.drain(..).step_by(2));
    drop(half);
    let small: Vec<Vec<u8>> = (0..100_000).map(|_| small_64()).collect();

    let address = memprof::serve_http("127.0.0.1:0").expect("the endpoint starts");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("http_pprof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let exact: [(&str, Values); 3] = [
        ("http_pprof::kept_256k", [20, 20 << 18, 20, 20 << 18]),
        ("http_pprof::freed_128k", [30, 30 << 17, 0, 0]),
        (
            "http_pprof::half_192k",
            [40, 40 * (192 << 10), 20, 20 * (192 << 10)],
        ),
    ];
    let tools = pprof_tools();
    for tool in &tools {
        let raw = raw(tool, &format!("http://{address}/debug/pprof/heap"), &dir);
        assert!(raw.text.contains("PeriodType: space bytes"), "{}", raw.text);
        assert!(
            raw.text.contains(&format!("Period: {INTERVAL}")),
            "{}",
            raw.text
        );
        assert_eq!(
            raw.types,
            [
                "alloc_objects/count",
                "alloc_space/bytes",
                "inuse_objects/count",
                "inuse_space/bytes[dflt]"
            ],
            "{}",
            raw.text
        );
        for (function, values) in &exact {
            assert_eq!(
                raw.cumulative(function),
                *values,
                "{function}\n{}",
                raw.text
            );
        }
        // 100,000 blocks of 64 bytes, about 1,560 of them recorded, each standing for ~64.5:
        // the values are scaled estimates, within 10 % (more than 4 standard deviations).
        let estimate = raw.cumulative("http_pprof::small_64");
        for (value, truth) in estimate
            .iter()
            .zip([100_000, 6_400_000, 100_000, 6_400_000])
        {
            let error = (*value as f64 - truth as f64).abs() / truth as f64;
            assert!(error < 0.1, "{estimate:?}\n{}", raw.text);
        }
        // Every location is named by the server: pprof had nothing to look up.
        assert!(!raw.stderr.contains("symbol"), "{}", raw.stderr);
    }

    // `/debug/pprof/allocs`: the same values, `alloc_space` shown first.
    let allocs = common::http_get(address, "/debug/pprof/allocs").unwrap();
    assert_eq!(allocs.status, 200, "{allocs:?}");
    let profile = common::decode_pprof(&allocs.body);
    let s = |i: i64| profile.string_table[i as usize].as_str();
    assert_eq!(s(profile.default_sample_type), "alloc_space");
    assert_eq!(profile.period, INTERVAL as i64);
    assert!(
        profile
            .mapping
            .iter()
            .all(|m| m.has_functions && m.has_filenames && m.has_line_numbers),
        "{:?}",
        profile.mapping
    );
    for (function, values) in &exact {
        assert_eq!(
            common::pprof_cumulative(&profile, function),
            values.to_vec(),
            "{function}"
        );
    }
    for tool in &tools {
        let raw = raw(tool, &format!("http://{address}/debug/pprof/allocs"), &dir);
        assert_eq!(raw.types[1], "alloc_space/bytes[dflt]", "{}", raw.text);
        for (function, values) in &exact {
            assert_eq!(
                raw.cumulative(function),
                *values,
                "{function}\n{}",
                raw.text
            );
        }
    }

    // `?seconds=3`: what happens during the three seconds after the request, and only that.
    let tool = tools.first().cloned();
    let url = format!("http://{address}/debug/pprof/heap?seconds=3");
    let fetch = std::thread::spawn({
        let dir = dir.clone();
        move || tool.map(|tool| raw(&tool, &url, &dir))
    });
    let direct = std::thread::spawn(move || {
        common::http_get(address, "/debug/pprof/allocs?seconds=3").unwrap()
    });
    std::thread::sleep(Duration::from_millis(1500));
    let during: Vec<Vec<u8>> = (0..10).map(|_| during_delta()).collect();
    kept.drain(..10);
    let direct = direct.join().unwrap();
    assert_eq!(direct.status, 200, "{direct:?}");
    let profile = common::decode_pprof(&direct.body);
    assert_eq!(
        common::pprof_cumulative(&profile, "http_pprof::during_delta"),
        [10, 10 << 18, 10, 10 << 18]
    );
    assert_eq!(
        common::pprof_cumulative(&profile, "http_pprof::kept_256k"),
        [0, 0, -10, -(10 << 18)],
        "the shrinking site's live values are negative"
    );
    assert_eq!(
        common::pprof_cumulative(&profile, "http_pprof::freed_128k"),
        [0; 4]
    );
    assert!(
        profile.duration_nanos >= 3_000_000_000,
        "{}",
        profile.duration_nanos
    );
    if let Some(raw) = fetch.join().unwrap() {
        assert_eq!(
            raw.cumulative("http_pprof::during_delta"),
            [10, 10 << 18, 10, 10 << 18]
        );
        assert_eq!(
            raw.cumulative("http_pprof::kept_256k"),
            [0, 0, -10, -(10 << 18)]
        );
    }

    // `/debug/pprof/delta_heap`: allocations since the previous request, the live heap now.
    let first = common::decode_pprof(&get_ok(address, "/debug/pprof/delta_heap").body);
    assert_eq!(
        common::pprof_cumulative(&first, "http_pprof::freed_128k"),
        [30, 30 << 17, 0, 0]
    );
    let later: Vec<Vec<u8>> = (0..5).map(|_| after_delta_heap()).collect();
    let second = common::decode_pprof(&get_ok(address, "/debug/pprof/delta_heap").body);
    assert_eq!(
        common::pprof_cumulative(&second, "http_pprof::after_delta_heap"),
        [5, 5 << 18, 5, 5 << 18]
    );
    assert_eq!(
        common::pprof_cumulative(&second, "http_pprof::kept_256k"),
        [0, 0, 10, 10 << 18],
        "nothing allocated since; live as it is"
    );
    assert_eq!(
        common::pprof_cumulative(&second, "http_pprof::freed_128k"),
        [0; 4]
    );

    // The reports and the index, for a person with curl.
    let markdown = String::from_utf8(get_ok(address, "/debug/memprof/report.md").body).unwrap();
    assert!(
        markdown.starts_with("| Allocations | Total size | Context |"),
        "{markdown}"
    );
    assert!(markdown.contains("http_pprof::kept_256k"), "{markdown}");
    let tsv = String::from_utf8(get_ok(address, "/debug/memprof/report.tsv").body).unwrap();
    let lines: usize = tsv.lines().next().unwrap().parse().unwrap();
    assert_eq!(lines, tsv.lines().count() - 1, "{tsv}");
    assert!(tsv.contains("http_pprof::half_192k"), "{tsv}");
    // The crate table: the test's own crate holds most of the heap (its blocks, allocated with
    // std's `Vec::with_capacity`, are the caller's); its rows add up to the total row.
    let crates = String::from_utf8(get_ok(address, "/debug/memprof/crates").body).unwrap();
    let rows: Vec<Vec<String>> = crates
        .lines()
        .skip(2)
        .map(|line| {
            line.split('|')
                .map(|cell| cell.trim().replace(',', ""))
                .filter(|cell| !cell.is_empty())
                .collect()
        })
        .collect();
    assert!(crates.starts_with("| Crate "), "{crates}");
    assert_eq!(rows[0][0], "` http_pprof `", "{crates}");
    let total = rows.iter().position(|r| r[0] == "**total**").unwrap();
    for column in 1..5 {
        let sum: u64 = rows[..total]
            .iter()
            .map(|r| r[column].parse::<u64>().unwrap())
            .sum();
        assert_eq!(sum.to_string(), rows[total][column], "{crates}");
    }
    let objects = String::from_utf8(get_ok(address, "/debug/memprof/objects").body).unwrap();
    assert!(objects.lines().count() > 1, "{objects}");
    let index = get_ok(address, "/debug/memprof/");
    assert!(index.head.contains("text/html"), "{}", index.head);
    let index = String::from_utf8(index.body).unwrap();
    for link in [
        "/debug/pprof/heap",
        "/debug/pprof/allocs",
        "/debug/pprof/delta_heap",
        "/debug/memprof/report.md",
        "/debug/memprof/report.tsv",
        "/debug/memprof/crates",
        "/debug/memprof/objects",
    ] {
        assert!(
            index.contains(&format!("href=\"{link}\"")),
            "{link}\n{index}"
        );
    }
    assert!(
        index.contains(&format!("one allocation is recorded per {INTERVAL} bytes")),
        "{index}"
    );

    // What the endpoint refuses.
    let status = |target: &str| common::http_get(address, target).unwrap().status;
    assert_eq!(status("/debug/pprof/heap?seconds=0"), 400);
    assert_eq!(status("/debug/pprof/heap?seconds=301"), 400);
    assert_eq!(status("/debug/pprof/heap?seconds=ten"), 400);
    assert_eq!(status("/debug/pprof/heap?debug=1"), 400);
    assert_eq!(status("/debug/pprof/profile"), 404);
    assert_eq!(status("/debug/pprof/symbol"), 404);
    let post = common::http_request(
        address,
        &format!("POST /debug/pprof/heap HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\n\r\n"),
    )
    .unwrap();
    assert_eq!(post.status, 405);
    assert_eq!(
        common::http_request(address, "garbage\r\n\r\n")
            .unwrap()
            .status,
        400
    );
    let head = common::http_request(
        address,
        &format!("HEAD /debug/pprof/heap HTTP/1.1\r\nHost: {address}\r\n\r\n"),
    )
    .unwrap();
    assert_eq!((head.status, head.body.len()), (200, 0), "{head:?}");
    assert!(head.head.contains("Content-Length: "), "{}", head.head);

    drop((kept, small, during, later));
}

/// A successful `GET`.
fn get_ok(address: SocketAddr, target: &str) -> common::HttpResponse {
    let response = common::http_get(address, target).unwrap();
    assert_eq!(response.status, 200, "{target}: {response:?}");
    response
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

/// Runs `tool` with `args` on `source`; returns its stdout and stderr.
fn run_tool(tool: &Tool, args: &[&str], source: &str, dir: &Path) -> (String, String) {
    let output = Command::new(&tool.0)
        .args(&tool.1)
        .args(args)
        .arg(source)
        .env("PPROF_TMPDIR", dir)
        .env("HOME", dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{tool:?} {args:?} {source}: {stderr}"
    );
    (String::from_utf8(output.stdout).unwrap(), stderr)
}

/// What `pprof -raw` printed.
struct Raw {
    text: String,
    stderr: String,
    /// The sample types, `type/unit`.
    types: Vec<String>,
    /// Each sample's values and location ids.
    samples: Vec<(Vec<i64>, Vec<u64>)>,
    /// Each location's function names.
    locations: HashMap<u64, Vec<String>>,
}

impl Raw {
    /// The sums of the values of the samples whose stack names `function`.
    fn cumulative(&self, function: &str) -> Values {
        let mut sums = [0; 4];
        for (values, locations) in &self.samples {
            let named = locations.iter().any(|l| {
                self.locations
                    .get(l)
                    .is_some_and(|names| names.iter().any(|n| n == function))
            });
            if named {
                for (sum, value) in sums.iter_mut().zip(values) {
                    *sum += value;
                }
            }
        }
        sums
    }
}

/// `pprof -raw URL`, parsed: after `Samples:`, the sample types, then `values: location ids`
/// lines; after `Locations`, `id: address M=mapping function file:line` lines, each inlined
/// function on a line of its own below.
fn raw(tool: &Tool, url: &str, dir: &Path) -> Raw {
    let (text, stderr) = run_tool(tool, &["-raw"], url, dir);
    let mut types = Vec::new();
    let mut samples = Vec::new();
    let mut locations: HashMap<u64, Vec<String>> = HashMap::new();
    let mut section = "";
    let mut current = 0;
    for line in text.lines() {
        match line.trim() {
            "Samples:" => {
                section = "types";
                continue;
            }
            "Locations" => {
                section = "locations";
                continue;
            }
            "Mappings" => {
                section = "";
                continue;
            }
            _ => {}
        }
        match section {
            "types" => {
                types = line.split_whitespace().map(str::to_owned).collect();
                section = "samples";
            }
            "samples" => {
                let Some((values, ids)) = line.split_once(':') else {
                    continue;
                };
                let values: Vec<i64> = values
                    .split_whitespace()
                    .map(|v| v.parse().unwrap())
                    .collect();
                if values.len() != types.len() {
                    continue; // a label line
                }
                let ids = ids.split_whitespace().map(|v| v.parse().unwrap()).collect();
                samples.push((values, ids));
            }
            "locations" => {
                let trimmed = line.trim_start();
                let function = if let Some((id, rest)) = trimmed
                    .split_once(": ")
                    .filter(|(id, _)| id.parse::<u64>().is_ok())
                {
                    current = id.parse().unwrap();
                    // `0xADDRESS M=N function file:line s=N`
                    rest.split_whitespace().nth(2)
                } else {
                    trimmed.split_whitespace().next()
                };
                if let Some(function) = function {
                    locations
                        .entry(current)
                        .or_default()
                        .push(function.to_owned());
                }
            }
            _ => {}
        }
    }
    assert!(!samples.is_empty(), "{text}");
    Raw {
        text,
        stderr,
        types,
        samples,
        locations,
    }
}
