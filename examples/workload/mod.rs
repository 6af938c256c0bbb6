//! The workload shared by `workload` (memprof), `workload_plain` (the system allocator, also run
//! under heaptrack and Valgrind) and `workload_dhat` (dhat-rs): each binary only picks its global
//! allocator and hands a [`Tool`] to [`run`].
//!
//! Usage: `<binary> <scenario> [size] [threads | live records]`, scenarios:
//!
//! | scenario | what it does | size |
//! |---|---|---|
//! | `churn` | short-lived boxes, growing vectors, strings, hash maps and a large live set (200,000 records unless given), 24 to 40 frames deep; marks its phases (`live set built`, `churn done`, `live set dropped`) when the tool can | iterations |
//! | `markdown` | renders a generated Markdown document to HTML with pulldown-cmark | sections |
//! | `json` | builds a large `serde_json::Value`, serializes it and parses it back | objects |
//! | `threads` | `churn` on `threads` threads at once, each doing `size` iterations | iterations per thread |
//! | `live` | keeps `size` blocks of `bytes` bytes (16 unless given as the third argument) live and measures how much the resident set grew | blocks |
//! | `recursive` | half of the events are reallocs (vectors and strings growing, `format!`), made 10 to 30 frames deep through two mutually recursive functions over about 10,000 distinct stacks, beside a churning `HashMap` of about 4,096 entries | iterations |
//! | `tree` | a balanced tree of 2^`size` boxed nodes each owning a `Vec`, walked and freed, then again beside a linked list of 2^(`size` − 2) nodes | levels |
//! | `crates` | pulldown-cmark, serde_json and syn on generated inputs of `size` units each (a few MB at the default) | units |
//! | `exchange` | `recursive` on `threads` threads (2 unless given), each handing every 16th block it makes to the next thread, which frees it | iterations per thread |
//! | `paths` | one 24-byte box at the end of each of `size` distinct call paths 20 frames deep (two mutually recursive functions chosen by the bits of a counter), all kept, then all freed: what a new distinct stack costs as stacks accumulate | distinct paths |
//!
//! The last line of standard output is `RESULT key=value ...`: the timed part (`hot_s`), the
//! allocations the tool counted in it (`allocs`, `-` without a counting tool), the peak resident
//! set of the process (`peak_rss_kb`, `VmHWM`) and scenario-specific values.

#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// Counters a profiling tool keeps, read at any time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Blocks allocated so far (a `realloc` counts as one).
    pub total_blocks: u64,
    /// Blocks live now.
    pub live_blocks: u64,
    /// Bytes live now.
    pub live_bytes: u64,
}

/// What the binary running the workload can tell about its allocator.
pub struct Tool {
    /// Short name printed in the result line.
    pub name: &'static str,
    /// The tool's counters, when it keeps any.
    pub counts: fn() -> Option<Counts>,
    /// Live blocks of exactly this many bytes, when the tool can list its live blocks.
    pub live_of_size: fn(usize) -> Option<u64>,
    /// Marks a moment of the run (`memprof::mark`), when the tool can; the single-threaded
    /// `churn` marks its phases.
    pub mark: fn(&str),
}

impl Tool {
    /// The system allocator: counts nothing.
    pub const PLAIN: Tool = Tool {
        name: "plain",
        counts: || None,
        live_of_size: |_| None,
        mark: |_| {},
    };
}

/// The measured values of one run, printed as the `RESULT` line.
pub struct Outcome {
    fields: Vec<(String, String)>,
}

impl Outcome {
    /// An outcome of `scenario` at `size` run by `tool`.
    pub fn new(tool: &Tool, scenario: &str, size: usize) -> Outcome {
        let mut outcome = Outcome { fields: Vec::new() };
        outcome.set("tool", tool.name);
        outcome.set("scenario", scenario);
        outcome.set("size", size);
        outcome
    }

    /// Adds or replaces one value.
    pub fn set(&mut self, key: &str, value: impl ToString) {
        let value = value.to_string();
        match self.fields.iter_mut().find(|(k, _)| k == key) {
            Some(field) => field.1 = value,
            None => self.fields.push((key.to_owned(), value)),
        }
    }

    /// Prints `RESULT key=value ...` with the process's peak resident set added; call it last,
    /// after the profiler has written its files.
    pub fn print(mut self) {
        self.set("peak_rss_kb", status_kb("VmHWM:").unwrap_or(0));
        let mut line = String::from("RESULT");
        for (key, value) in &self.fields {
            let _ = write!(line, " {key}={value}");
        }
        println!("{line}");
    }
}

/// A `kB` value of `/proc/self/status` (`"VmHWM:"`, `"VmRSS:"`).
pub fn status_kb(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Runs the scenario named on the command line and returns what it measured.
pub fn run(tool: &Tool) -> Outcome {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scenario = args.first().map(String::as_str).unwrap_or("churn");
    let size = |i: usize, default: usize| {
        args.get(i)
            .map(|s| s.parse().expect("the size is a whole number"))
            .unwrap_or(default)
    };
    match scenario {
        "churn" => churn_scenario(tool, size(1, 100_000), size(2, CHURN_LIVE)),
        "markdown" => markdown_scenario(tool, size(1, 20_000)),
        "json" => json_scenario(tool, size(1, 100_000)),
        "threads" => threads_scenario(tool, size(1, 50_000), size(2, 2)),
        "live" => live_scenario(tool, size(1, 1_000_000), size(2, 16)),
        "recursive" => recursive_scenario(tool, size(1, 200_000)),
        "tree" => tree_scenario(tool, size(1, 20)),
        "crates" => crates_scenario(tool, size(1, 20_000)),
        "exchange" => exchange_scenario(tool, size(1, 100_000), size(2, 2)),
        "paths" => paths_scenario(tool, size(1, 1 << 20)),
        other => {
            eprintln!(
                "unknown scenario {other:?}; use churn, markdown, json, threads, live, \
                 recursive, tree, crates, exchange or paths"
            );
            std::process::exit(2);
        }
    }
}

/// Times `f` and records the time and the allocations the tool counted in it.
fn timed<R>(tool: &Tool, outcome: &mut Outcome, f: impl FnOnce() -> R) -> R {
    let before = (tool.counts)();
    let start = Instant::now();
    let result = f();
    let elapsed = start.elapsed();
    let after = (tool.counts)();
    outcome.set("hot_s", format!("{:.6}", elapsed.as_secs_f64()));
    match (before, after) {
        (Some(b), Some(a)) => outcome.set("allocs", a.total_blocks - b.total_blocks),
        _ => outcome.set("allocs", "-"),
    }
    result
}

/// A small deterministic random number generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    /// A generator with this seed (not zero).
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------------------------------------
// churn

/// A record of the long-lived set.
struct Record {
    name: String,
    values: Vec<u32>,
    parent: Option<Box<u64>>,
}

/// A small short-lived node.
struct Node {
    key: u64,
    weight: f64,
    flags: u32,
}

/// Iterations done at one place of the call tree before the next descent.
const BATCH: usize = 64;

/// What one thread's churn works on.
struct Churn {
    rng: Rng,
    live: Vec<Option<Record>>,
    checksum: u64,
}

/// Goes `depth` frames down through two alternating functions chosen by the bits of `path`, so
/// deep stacks differ the way a real program's call paths do, then calls `f`.
#[inline(never)]
fn descend_a(depth: usize, path: u64, f: &mut dyn FnMut()) {
    if depth == 0 {
        f();
    } else if path & 1 == 0 {
        descend_a(black_box(depth - 1), path >> 1, f);
    } else {
        descend_b(black_box(depth - 1), path >> 1, f);
    }
    black_box(());
}

/// The other half of [`descend_a`].
#[inline(never)]
fn descend_b(depth: usize, path: u64, f: &mut dyn FnMut()) {
    if depth == 0 {
        f();
    } else if path & 1 == 0 {
        descend_a(black_box(depth - 1), path >> 1, f);
    } else {
        descend_b(black_box(depth - 1), path >> 1, f);
    }
    black_box(());
}

/// Levels of the `paths` scenario's call paths.
const PATH_LEVELS: usize = 20;

/// One 24-byte box at the end of each of `paths` distinct call paths, all kept, then all freed.
fn paths_scenario(tool: &Tool, paths: usize) -> Outcome {
    let mut outcome = Outcome::new(tool, "paths", paths);
    let kept = timed(tool, &mut outcome, || {
        let mut kept: Vec<Box<[u64; 3]>> = Vec::with_capacity(paths);
        for i in 0..paths as u64 {
            descend_a(PATH_LEVELS, i, &mut || {
                kept.push(black_box(Box::new([i; 3])))
            });
        }
        kept
    });
    outcome.set("checksum", kept.iter().map(|b| b[0]).sum::<u64>());
    drop(black_box(kept));
    outcome
}

/// Two short-lived boxes: a node and a byte buffer of random size.
#[inline(never)]
fn short_boxes(state: &mut Churn, i: u64) {
    let node = Box::new(Node {
        key: i,
        weight: i as f64 * 0.5,
        flags: i as u32,
    });
    let bytes = vec![i as u8; 8 + state.rng.below(248) as usize].into_boxed_slice();
    state.checksum = state
        .checksum
        .wrapping_add(black_box(&node).key ^ black_box(&bytes).len() as u64)
        .wrapping_add(node.flags as u64 + node.weight as u64);
}

/// A vector grown by pushing, as a collector would.
#[inline(never)]
fn growing_vec(state: &mut Churn) {
    let n = state.rng.below(48) as u32;
    let mut v = Vec::new();
    for x in 0..n {
        v.push(x);
    }
    state.checksum = state.checksum.wrapping_add(black_box(&v).len() as u64);
}

/// A formatted string, extended and upper-cased.
#[inline(never)]
fn strings(state: &mut Churn, i: u64) {
    let mut s = format!("item-{i}");
    s.push_str("-suffix-that-makes-it-grow");
    let upper = s.to_uppercase();
    state.checksum = state.checksum.wrapping_add(black_box(&upper).len() as u64);
}

/// A small map of string keys, built and dropped.
#[inline(never)]
fn small_map(state: &mut Churn, i: u64) {
    let mut map: HashMap<String, u64> = HashMap::new();
    for k in 0..16 {
        map.insert(format!("k{}", i + k), k);
    }
    state.checksum = state.checksum.wrapping_add(map.len() as u64);
}

/// Replaces one record of the long-lived set.
#[inline(never)]
fn replace_record(state: &mut Churn, i: u64) {
    let slot = state.rng.below(state.live.len() as u64) as usize;
    state.live[slot] = Some(new_record(&mut state.rng, i));
}

/// A record with a name, a few values and sometimes a boxed parent.
#[inline(never)]
fn new_record(rng: &mut Rng, i: u64) -> Record {
    let values = (0..rng.below(12) as u32).collect();
    Record {
        name: format!("record-{i}"),
        values,
        parent: i.is_multiple_of(3).then(|| Box::new(i)),
    }
}

/// One iteration: about a dozen allocations of every common kind.
#[inline(never)]
fn churn_step(state: &mut Churn, i: u64) {
    short_boxes(state, i);
    growing_vec(state);
    strings(state, i);
    if i.is_multiple_of(8) {
        small_map(state, i);
    }
    replace_record(state, i);
}

/// `iterations` churn steps over a live set of `live` records, in batches at 24 to 40 frames.
#[inline(never)]
fn churn(seed: u64, iterations: usize, live: usize, mark: fn(&str)) -> u64 {
    let mut rng = Rng::new(seed);
    let records = (0..live as u64)
        .map(|i| Some(new_record(&mut rng, i)))
        .collect();
    mark("live set built");
    let mut state = Churn {
        rng,
        live: records,
        checksum: 0,
    };
    let mut i = 0u64;
    while (i as usize) < iterations {
        let depth = 24 + state.rng.below(17) as usize;
        let path = state.rng.next();
        let batch = BATCH.min(iterations - i as usize) as u64;
        let start = i;
        descend_a(depth, path, &mut || {
            for k in start..start + batch {
                churn_step(&mut state, k);
            }
        });
        i += batch;
    }
    mark("churn done");
    state.checksum
}

/// The live set of the single-threaded churn.
const CHURN_LIVE: usize = 200_000;

fn churn_scenario(tool: &Tool, iterations: usize, live: usize) -> Outcome {
    let mut outcome = Outcome::new(tool, "churn", iterations);
    outcome.set("live", live);
    let checksum = timed(tool, &mut outcome, || {
        let checksum = churn(42, iterations, live.max(1), tool.mark);
        (tool.mark)("live set dropped");
        checksum
    });
    outcome.set("checksum", checksum);
    outcome
}

// ---------------------------------------------------------------------------------------------
// threads

/// Blocks of this size are kept live by every thread at the end, to be counted.
const MARK_SIZE: usize = 777;
/// How many each thread keeps.
const MARKS_PER_THREAD: usize = 1000;
/// The live set of each thread's churn.
const THREAD_LIVE: usize = 50_000;

fn threads_scenario(tool: &Tool, iterations: usize, threads: usize) -> Outcome {
    let mut outcome = Outcome::new(tool, "threads", iterations);
    outcome.set("threads", threads);
    // The first spawn makes a few blocks std keeps for the life of the process: make them now, so
    // the live totals after the threads end can be compared with those before.
    std::thread::spawn(|| {})
        .join()
        .expect("the warm-up thread ran");
    // Every thread and this one meet once the marks are made, and again before they are freed.
    let made = Arc::new(Barrier::new(threads + 1));
    let checked = Arc::new(Barrier::new(threads + 1));
    let before = (tool.counts)();
    let marks_before = (tool.live_of_size)(MARK_SIZE);
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (made, checked) = (made.clone(), checked.clone());
            std::thread::spawn(move || {
                let checksum = churn(1000 + t as u64, iterations, THREAD_LIVE, |_| {});
                let marks: Vec<Box<[u8]>> = (0..MARKS_PER_THREAD)
                    .map(|_| vec![t as u8; MARK_SIZE].into_boxed_slice())
                    .collect();
                made.wait();
                checked.wait();
                black_box(marks);
                checksum
            })
        })
        .collect();
    made.wait();
    let elapsed = start.elapsed();
    let marks = (tool.live_of_size)(MARK_SIZE);
    checked.wait();
    let checksum = handles
        .into_iter()
        .map(|h| h.join().expect("a workload thread panicked"))
        .fold(0u64, u64::wrapping_add);
    let after = (tool.counts)();
    outcome.set("hot_s", format!("{:.6}", elapsed.as_secs_f64()));
    outcome.set(
        "iters_per_s",
        format!(
            "{:.0}",
            (threads * iterations) as f64 / elapsed.as_secs_f64()
        ),
    );
    match (before, after) {
        (Some(b), Some(a)) => {
            outcome.set("allocs", a.total_blocks - b.total_blocks);
            // Every thread has ended and freed all it allocated: the live totals are back.
            outcome.set(
                "live_blocks_diff",
                a.live_blocks as i64 - b.live_blocks as i64,
            );
            outcome.set("live_bytes_diff", a.live_bytes as i64 - b.live_bytes as i64);
        }
        _ => outcome.set("allocs", "-"),
    }
    if let (Some(before), Some(marks)) = (marks_before, marks) {
        outcome.set("marks_expected", threads * MARKS_PER_THREAD);
        outcome.set("marks_seen", marks - before);
    }
    outcome.set("checksum", checksum);
    outcome
}

// ---------------------------------------------------------------------------------------------
// markdown

/// A Markdown document of `sections` sections using most of CommonMark and GFM tables.
fn markdown_document(sections: usize) -> String {
    let mut doc = String::new();
    for i in 0..sections {
        let _ = write!(
            doc,
            "## Section {i}: *emphasis* and **strong**\n\n\
             A paragraph with a [link](https://example.org/{i}), `inline code`, an ![image](img{i}.png) \
             and some plain words that wrap over a line\nso the parser joins them. Escapes \\* and \
             entities &amp; &copy; too.\n\n\
             - first item {i}\n- second item with *nested* text\n  - a nested item\n- third\n\n\
             1. one\n2. two\n\n\
             > A block quote\n> over two lines.\n\n\
             ```rust\nfn section_{i}() -> u32 {{\n    {i}\n}}\n```\n\n\
             | name | value |\n|------|------:|\n| a{i} | {i} |\n| b | {} |\n\n",
            i * 2
        );
    }
    doc
}

/// Renders `doc` to HTML `times` times; returns the HTML length.
#[inline(never)]
fn render_markdown(doc: &str, times: usize) -> usize {
    use pulldown_cmark::{Options, Parser, html};
    let mut length = 0;
    for _ in 0..times {
        let parser = Parser::new_ext(doc, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH);
        let mut out = String::new();
        html::push_html(&mut out, parser);
        length += black_box(out).len();
    }
    length
}

fn markdown_scenario(tool: &Tool, sections: usize) -> Outcome {
    let mut outcome = Outcome::new(tool, "markdown", sections);
    let doc = markdown_document(sections);
    outcome.set("input_bytes", doc.len());
    let html = timed(tool, &mut outcome, || render_markdown(&doc, 3));
    outcome.set("output_bytes", html);
    outcome
}

// ---------------------------------------------------------------------------------------------
// json

/// A JSON value of `objects` records with strings, numbers, arrays and nested objects.
#[inline(never)]
fn json_value(objects: usize) -> serde_json::Value {
    use serde_json::{Value, json};
    let items: Vec<Value> = (0..objects)
        .map(|i| {
            json!({
                "id": i,
                "name": format!("user-{i}"),
                "email": format!("user{i}@example.org"),
                "score": i as f64 * 1.25,
                "active": i % 2 == 0,
                "tags": ["alpha", "beta", format!("t{}", i % 17)],
                "address": { "street": format!("{i} Main Street"), "zip": format!("{:05}", i % 100_000) },
                "history": [i, i + 1, i + 2, i * 3],
            })
        })
        .collect();
    json!({ "version": 1, "items": items })
}

/// Builds, serializes and parses back a value; returns the text length.
#[inline(never)]
fn json_round_trip(objects: usize) -> usize {
    let value = json_value(objects);
    let text = serde_json::to_string(&value).expect("serializes");
    let back: serde_json::Value = serde_json::from_str(&text).expect("parses");
    assert!(back == value, "the JSON round trip changed the value");
    text.len()
}

fn json_scenario(tool: &Tool, objects: usize) -> Outcome {
    let mut outcome = Outcome::new(tool, "json", objects);
    let length = timed(tool, &mut outcome, || json_round_trip(objects));
    outcome.set("text_bytes", length);
    outcome
}

// ---------------------------------------------------------------------------------------------
// live

fn live_scenario(tool: &Tool, blocks: usize, bytes: usize) -> Outcome {
    let mut outcome = Outcome::new(tool, "live", blocks);
    outcome.set("bytes", bytes);
    // The vector's own pages are the same with or without a profiler: they cancel out when the
    // growth of a plain run is subtracted from a profiled one. Every block is written, so its
    // pages are resident with or without a profiler too.
    let mut kept: Vec<Box<[u8]>> = Vec::with_capacity(blocks);
    let vector_bytes = blocks * std::mem::size_of::<Box<[u8]>>();
    let rss_before = status_kb("VmRSS:").unwrap_or(0);
    timed(tool, &mut outcome, || {
        for i in 0..blocks {
            kept.push(vec![i as u8 | 1; bytes].into_boxed_slice());
        }
    });
    let rss_after = status_kb("VmRSS:").unwrap_or(0);
    outcome.set("rss_growth_kb", rss_after.saturating_sub(rss_before));
    outcome.set("vector_kb", vector_bytes / 1024);
    black_box(&kept);
    outcome
}

// ---------------------------------------------------------------------------------------------
// recursive: reallocs at many distinct deep stacks

/// What one thread of the recursive workload works on.
struct Recursive {
    rng: Rng,
    /// About 4,096 entries, replaced one by one.
    map: HashMap<u64, String>,
    checksum: u64,
    /// Every `HANDED`th block made goes here instead of being dropped (the exchange workload).
    handed: Option<std::sync::mpsc::Sender<Vec<u64>>>,
    made: u64,
}

/// Every how many blocks one is handed to another thread in the exchange workload.
const HANDED: u64 = 16;

/// Keys of the churning map.
const MAP_KEYS: u64 = 4096;

/// The bottom of one descent: a vector grown by pushing, a string grown by appending, a
/// `format!`, and one entry of the map replaced.
#[inline(never)]
fn recursive_step(state: &mut Recursive, i: u64, path: u64) {
    let n = 4 + state.rng.below(60);
    let mut v: Vec<u64> = Vec::new();
    for x in 0..n {
        v.push(x ^ path);
    }
    let mut s = String::new();
    for _ in 0..1 + state.rng.below(4) {
        s.push_str("segment-");
    }
    let label = format!("{i}:{}", v.len());
    state.checksum = state
        .checksum
        .wrapping_add(black_box(&s).len() as u64 + black_box(&label).len() as u64);
    state.map.insert(state.rng.below(MAP_KEYS), label);
    state.made += 1;
    match &state.handed {
        Some(other) if state.made.is_multiple_of(HANDED) => {
            let _ = other.send(v);
        }
        _ => drop(black_box(v)),
    }
}

/// `iterations` descents, at depths of 10 to 30 frames along about 10,000 distinct paths.
#[inline(never)]
fn recursive(
    seed: u64,
    iterations: usize,
    handed: Option<std::sync::mpsc::Sender<Vec<u64>>>,
    received: Option<std::sync::mpsc::Receiver<Vec<u64>>>,
) -> u64 {
    let mut state = Recursive {
        rng: Rng::new(seed),
        map: HashMap::new(),
        checksum: 0,
        handed,
        made: 0,
    };
    for i in 0..iterations as u64 {
        let depth = 10 + state.rng.below(21) as usize;
        // 10,000 paths: the stacks differ in their depth and in the functions along them.
        let path = Rng::new(1 + state.rng.below(10_000 / 21 + 1)).next();
        descend_a(depth, path, &mut || recursive_step(&mut state, i, path));
        if let Some(received) = &received {
            while let Ok(v) = received.try_recv() {
                state.checksum = state.checksum.wrapping_add(v.len() as u64);
            }
        }
    }
    state.handed = None;
    if let Some(received) = received {
        for v in received {
            state.checksum = state.checksum.wrapping_add(v.len() as u64);
        }
    }
    state.checksum
}

fn recursive_scenario(tool: &Tool, iterations: usize) -> Outcome {
    let mut outcome = Outcome::new(tool, "recursive", iterations);
    let checksum = timed(tool, &mut outcome, || recursive(7, iterations, None, None));
    outcome.set("checksum", checksum);
    outcome
}

// ---------------------------------------------------------------------------------------------
// exchange: threads freeing each other's blocks

fn exchange_scenario(tool: &Tool, iterations: usize, threads: usize) -> Outcome {
    let mut outcome = Outcome::new(tool, "exchange", iterations);
    outcome.set("threads", threads);
    std::thread::spawn(|| {})
        .join()
        .expect("the warm-up thread ran");
    let checksum = timed(tool, &mut outcome, || {
        // Thread t hands its blocks to thread t + 1 (the last to the first); a single thread
        // frees its own.
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..threads).map(|_| std::sync::mpsc::channel()).unzip();
        let mut receivers: Vec<_> = receivers.into_iter().map(Some).collect();
        receivers.rotate_right(1);
        let handles: Vec<_> = senders
            .into_iter()
            .zip(receivers)
            .enumerate()
            .map(|(t, (sender, receiver))| {
                let (sender, receiver) = if threads > 1 {
                    (Some(sender), receiver)
                } else {
                    (None, None)
                };
                std::thread::spawn(move || recursive(100 + t as u64, iterations, sender, receiver))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a workload thread panicked"))
            .fold(0u64, u64::wrapping_add)
    });
    let hot: f64 = outcome_hot(&outcome);
    outcome.set(
        "iters_per_s",
        format!("{:.0}", (threads * iterations) as f64 / hot),
    );
    outcome.set("checksum", checksum);
    outcome
}

/// The `hot_s` an outcome holds.
fn outcome_hot(outcome: &Outcome) -> f64 {
    outcome
        .fields
        .iter()
        .find(|(k, _)| k == "hot_s")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(f64::NAN)
}

// ---------------------------------------------------------------------------------------------
// tree: millions of live blocks

/// A node of the balanced tree: two children and a vector of its own.
struct TreeNode {
    left: Option<Box<TreeNode>>,
    right: Option<Box<TreeNode>>,
    values: Vec<u32>,
}

/// A balanced tree of `levels` levels.
#[inline(never)]
fn build_tree(levels: u32, rng: &mut Rng) -> Option<Box<TreeNode>> {
    if levels == 0 {
        return None;
    }
    let values = (0..1 + rng.below(8) as u32).collect();
    Some(Box::new(TreeNode {
        left: build_tree(levels - 1, rng),
        right: build_tree(levels - 1, rng),
        values,
    }))
}

/// The sum of every value in the tree.
#[inline(never)]
fn walk_tree(node: &Option<Box<TreeNode>>) -> u64 {
    match node {
        None => 0,
        Some(n) => {
            n.values.iter().map(|&v| u64::from(v)).sum::<u64>()
                + walk_tree(&n.left)
                + walk_tree(&n.right)
        }
    }
}

/// A node of the linked list.
struct ListNode {
    next: Option<Box<ListNode>>,
    value: u64,
}

/// A linked list of `n` nodes.
#[inline(never)]
fn build_list(n: usize) -> Option<Box<ListNode>> {
    let mut head = None;
    for value in 0..n as u64 {
        head = Some(Box::new(ListNode { next: head, value }));
    }
    head
}

/// Frees a list front to back without recursing.
#[inline(never)]
fn free_list(mut head: Option<Box<ListNode>>) -> u64 {
    let mut sum = 0;
    while let Some(mut node) = head {
        sum += node.value;
        head = node.next.take();
    }
    sum
}

/// Builds, walks and frees a tree of `levels` levels; returns the sum of its values.
#[inline(never)]
fn tree_round(levels: u32, rng: &mut Rng) -> u64 {
    let tree = build_tree(levels, rng);
    let sum = walk_tree(&tree);
    drop(black_box(tree));
    sum
}

fn tree_scenario(tool: &Tool, levels: usize) -> Outcome {
    let mut outcome = Outcome::new(tool, "tree", levels);
    let levels = levels.clamp(2, 30) as u32;
    let checksum = timed(tool, &mut outcome, || {
        let mut rng = Rng::new(11);
        let first = tree_round(levels, &mut rng);
        let list = build_list(1 << (levels - 2));
        let second = tree_round(levels, &mut rng);
        first ^ second ^ free_list(list)
    });
    outcome.set("checksum", checksum);
    outcome
}

// ---------------------------------------------------------------------------------------------
// crates: real parsers on generated inputs

/// Rust source of `units` items: structs, enums, impls with matches and closures.
fn rust_source(units: usize) -> String {
    let mut src = String::new();
    for i in 0..units {
        let _ = write!(
            src,
            "/// Item {i}.\n#[derive(Clone, Debug)]\npub struct S{i}<T: Clone> {{ a: u32, b: Vec<T>, c: Option<String> }}\n\
             pub enum E{i} {{ A(u8), B {{ x: i64, y: &'static str }}, C }}\n\
             impl<T: Clone> S{i}<T> {{\n    pub fn f(&self, e: E{i}) -> u64 {{\n        \
             match e {{ E{i}::A(v) => v as u64 + self.a as u64, E{i}::B {{ x, .. }} => x as u64, \
             E{i}::C => self.b.iter().map(|_| 1u64).sum() }}\n    }}\n}}\n"
        );
    }
    src
}

/// Parses `src` with syn; returns the number of items.
#[inline(never)]
fn parse_rust(src: &str) -> usize {
    let file: syn::File = syn::parse_str(src).expect("the generated source parses");
    black_box(&file).items.len()
}

fn crates_scenario(tool: &Tool, units: usize) -> Outcome {
    let mut outcome = Outcome::new(tool, "crates", units);
    let markdown = markdown_document(units / 4);
    let rust = rust_source(units / 2);
    outcome.set("input_bytes", markdown.len() + rust.len());
    let checksum = timed(tool, &mut outcome, || {
        render_markdown(&markdown, 1) + json_round_trip(units) + parse_rust(&rust)
    });
    outcome.set("checksum", checksum);
    outcome
}
