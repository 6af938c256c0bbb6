//! `memprof serve`'s REST API (docs/viewer-api.md), on the real binary over a real socket: every
//! endpoint and filter against a trace whose every figure is known, answers from the index and
//! from scans alike; the exports equal `memprof report`'s; garbage queries answer 400 or 404 with
//! a message and leave the server running; 50 clients at once (`MEMPROF_SERVE_STRESS_SECS`,
//! 3 s by default; `MEMPROF_SERVE_STRESS_TRACE` serves another trace than the known one) all get
//! their answers and the server's memory stays under 2 GiB; a trace received
//! over TCP is served as it arrives.

mod support;

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `memprof serve`, stopped when dropped.
struct Server {
    child: Child,
    address: String,
    /// With `--listen-trace`: where the trace goes.
    trace_address: Option<String>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memprof"))
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut trace_address = None;
        let address = loop {
            let line = lines
                .next()
                .expect("memprof serve stopped before it served")
                .unwrap();
            if let Some(rest) = line.strip_prefix("memprof: waiting for a trace on ") {
                trace_address = Some(rest.trim().to_owned());
            }
            if let Some(rest) = line.strip_prefix("memprof: serving on http://") {
                break rest.trim_end_matches('/').to_owned();
            }
        };
        // Keep reading its stderr, so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server {
            child,
            address,
            trace_address,
        }
    }

    /// One GET: status, headers (lower-case names), body.
    fn get(&self, path: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
        get(&self.address, path)
    }

    fn json(&self, path: &str) -> Value {
        let (status, _, body) = self.get(path);
        let text = shown(&body);
        assert_eq!(status, 200, "GET {path}: {text}");
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {text}"))
    }

    /// A request that must fail with `status` and a JSON error; its message.
    fn error(&self, path: &str, status: u16) -> String {
        let (got, _, body) = self.get(path);
        let text = shown(&body);
        assert_eq!(got, status, "GET {path}: {text}");
        let value: Value = serde_json::from_slice(&body).unwrap();
        value["error"].as_str().unwrap().to_owned()
    }

    fn resident_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get(address: &str, path: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("GET {path}: {}", String::from_utf8_lossy(&response)));
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let body = response[split + 4..].to_vec();
    let body = if header(&headers, "transfer-encoding") == "chunked" {
        unchunk(&body)
    } else {
        body
    };
    (status, headers, body)
}

/// A chunked body's bytes.
fn unchunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = std::str::from_utf8(&body[..line]).unwrap();
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        body = &body[line + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// The start of a body, for a message.
fn shown(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.chars().take(2000).collect()
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

fn memprof(args: &[&str]) -> Vec<u8> {
    let output = Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "memprof {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn known_trace_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memprof-serve-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("known.mptrace");
    std::fs::write(&path, support::known_trace().0).unwrap();
    path
}

/// The sites of a `/api/sites` answer: id → the row without its frame fields, nor its
/// short-lived figures ([`short_lived`] has those; `short_lived.rs` tests them).
fn sites(server: &Server, query: &str) -> (u64, Vec<Value>) {
    let answer = server.json(&format!("/api/sites?{query}"));
    let rows = answer["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let mut row = row.clone();
            for field in [
                "function",
                "file",
                "line",
                "context",
                "program",
                "short_lived",
                "short_lived_bytes",
            ] {
                row.as_object_mut().unwrap().remove(field);
            }
            row
        })
        .collect();
    (answer["total_sites"].as_u64().unwrap(), rows)
}

/// A site row: id, then allocations, allocated, frees, freed, live bytes/blocks, leaked
/// bytes/blocks, peak bytes/blocks, temporary count/bytes, mean lifetime.
fn row(id: u64, counts: [u64; 14]) -> Value {
    let [a, ab, f, fb, lb, lk, kb, kk, pb, pk, t, tb, life] = [
        counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6], counts[7],
        counts[8], counts[9], counts[10], counts[11], counts[12],
    ];
    assert_eq!(counts[13], 0, "13 figures and a 0");
    json!({
        "id": id, "allocations": a, "allocated_bytes": ab, "frees": f, "freed_bytes": fb,
        "live_bytes": lb, "live_blocks": lk, "leaked_bytes": kb, "leaked_blocks": kk,
        "peak_bytes": pb, "peak_blocks": pk, "temporary": t, "temporary_bytes": tb,
        "mean_lifetime_ns": life,
    })
}

/// Per site of a `/api/sites` answer, in its order: (id, short_lived, short_lived_bytes).
fn short_lived(server: &Server, query: &str) -> Vec<(u64, u64, u64)> {
    let answer = server.json(&format!("/api/sites?{query}"));
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("{answer}"));
    answer["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                n(&s["id"]),
                n(&s["short_lived"]),
                n(&s["short_lived_bytes"]),
            )
        })
        .collect()
}

const LEAKY_ALL: [u64; 14] = [
    3, 7000, 2, 6000, 1000, 1, 1000, 1, 7000, 3, 1, 5000, 1_000_150, 0,
];
const TEMP_ALL: [u64; 14] = [2, 30, 2, 30, 0, 0, 0, 0, 20, 1, 1, 10, 150, 0];

#[test]
fn every_endpoint_and_filter_on_a_known_trace() {
    let path = known_trace_file("api");
    let server = Server::start(&[path.to_str().unwrap()]);

    let summary = server.json("/api/summary");
    assert_eq!(summary["path"], path.display().to_string());
    assert_eq!(summary["events"], 10);
    assert_eq!(summary["duration_ns"], 2_000_700);
    assert_eq!(summary["sample_interval"], 0);
    assert_eq!(
        summary["threads"],
        json!([
            {"id": 1, "tid": 100, "name": "main", "label": "main"},
            {"id": 2, "tid": 101, "name": "worker", "label": "worker"}
        ])
    );
    assert_eq!(summary["markers"], json!([{"time_ns": 700, "label": "m"}]));
    assert_eq!(
        summary["peak"],
        json!({"time_ns": 550, "bytes": 7020, "blocks": 4})
    );
    assert_eq!(summary["end"], json!({"bytes": 1000, "blocks": 1}));
    assert_eq!(
        summary["totals"],
        json!({"allocations": 5, "reallocs": 0, "frees": 4, "allocated_bytes": 7030,
               "temporary": 2, "short_lived": 3, "short_lived_ns": 1_000_000, "mappings": 0})
    );
    let bucket = summary["bucket_ns"].as_u64().unwrap();
    assert!(bucket > 0 && 2_000_700 / bucket >= 100, "{summary}");

    // Sites, from the index: the whole run, live at the end.
    let (total, rows) = sites(&server, "");
    assert_eq!(total, 2);
    assert_eq!(rows, vec![row(0, LEAKY_ALL), row(1, TEMP_ALL)]);
    // Short-lived (freed within 1 ms): the worker's block of leaky (100 ns), not 0xa300 (2 ms);
    // both of temp's (100 and 200 ns). Within 150 ns: temp's first only.
    assert_eq!(short_lived(&server, ""), [(0, 1, 5000), (1, 2, 30)]);
    assert_eq!(
        short_lived(&server, "short_lived_ns=2000200&sort=short_lived"),
        [(0, 2, 6000), (1, 2, 30)]
    );
    assert_eq!(
        short_lived(&server, "short_lived_ns=150&sort=short_lived_bytes"),
        [(0, 1, 5000), (1, 1, 10)]
    );
    assert_eq!(
        short_lived(&server, "thread=1&sort=short_lived&desc=0"),
        [(0, 0, 0), (1, 2, 30)]
    );
    let answer = server.json("/api/sites?limit=1");
    assert_eq!(answer["sites"][0]["function"], "app::leaky");
    assert_eq!(answer["sites"][0]["file"], "src/app.rs");
    assert_eq!(answer["sites"][0]["line"], 10);
    assert_eq!(answer["sites"].as_array().unwrap().len(), 1);
    assert_eq!(
        sites(&server, "sort=temporary_bytes&desc=0").1,
        vec![row(1, TEMP_ALL), row(0, LEAKY_ALL)]
    );
    assert_eq!(
        sites(&server, "sort=peak_blocks&limit=5&offset=1").1,
        vec![row(1, TEMP_ALL)]
    );
    // Live at the peak, at the marker, at a time between the index's buckets (a scan), at 0.
    let live = |query: &str| -> Vec<(u64, u64, u64)> {
        sites(&server, query)
            .1
            .iter()
            .map(|r| {
                (
                    r["id"].as_u64().unwrap(),
                    r["live_bytes"].as_u64().unwrap(),
                    r["live_blocks"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(live("at=peak"), [(0, 7000, 3), (1, 20, 1)]);
    assert_eq!(live("at=marker:m"), [(0, 2000, 2), (1, 0, 0)]);
    assert_eq!(live("at=0.0000005"), [(0, 2000, 2), (1, 20, 1)]);
    assert_eq!(live("at=0.00000055"), [(0, 7000, 3), (1, 20, 1)]);
    assert_eq!(live("at=start"), [(0, 0, 0), (1, 0, 0)]);
    assert_eq!(
        live(&format!("at={}", bucket as f64 / 1e9)),
        [(0, 2000, 2), (1, 0, 0)]
    );
    assert_eq!(live("at=5"), [(0, 1000, 1), (1, 0, 0)]);

    let from = |query: &str| server.json(&format!("/api/sites?{query}"))["exact_from"].clone();
    assert_eq!(from("at=marker:m&thread=1"), "index");
    assert_eq!(from("at=0.0000005&func=leaky"), "index+scan");
    assert_eq!(from("size_min=3000"), "scan");
    assert_eq!(from("size_min=1024&life_max=999"), "index");
    assert_eq!(from("size_min=1024&at=0.0000005"), "index+scan");
    assert_eq!(from("from=0.0000005"), "scan");

    // Filters on whole classes (the index): threads, frames.
    assert_eq!(
        sites(&server, "thread=2").1,
        vec![row(
            0,
            [1, 5000, 1, 5000, 0, 0, 0, 0, 5000, 1, 1, 5000, 100, 0]
        )]
    );
    assert_eq!(
        sites(&server, "thread=1&thread=2").1,
        vec![row(0, LEAKY_ALL), row(1, TEMP_ALL)]
    );
    assert_eq!(
        sites(&server, "thread=1").1,
        vec![
            row(
                0,
                [
                    2, 2000, 1, 1000, 1000, 1, 1000, 1, 2000, 2, 0, 0, 2_000_200, 0
                ]
            ),
            row(1, TEMP_ALL)
        ]
    );
    assert_eq!(sites(&server, "func=temp").1, vec![row(1, TEMP_ALL)]);
    assert_eq!(
        sites(&server, "func=%5Eapp%3A%3Atemp%24").1,
        vec![row(1, TEMP_ALL)]
    );
    assert_eq!(sites(&server, "nofunc=temp").1, vec![row(0, LEAKY_ALL)]);
    assert_eq!(sites(&server, "file=app%5C.rs").0, 2);
    assert_eq!(sites(&server, "nofile=app").0, 0);
    assert_eq!(sites(&server, "thread=3").0, 0);
    // Filters on blocks (scans).
    assert_eq!(sites(&server, "size_min=100").1, vec![row(0, LEAKY_ALL)]);
    assert_eq!(
        sites(&server, "size_max=15").1,
        vec![row(1, [1, 10, 1, 10, 0, 0, 0, 0, 0, 0, 1, 10, 100, 0])]
    );
    assert_eq!(
        sites(&server, "size_min=20&size_max=20").1,
        vec![row(1, [1, 20, 1, 20, 0, 0, 0, 0, 20, 1, 0, 0, 200, 0])]
    );
    assert_eq!(
        sites(&server, "life=never").1,
        vec![row(
            0,
            [1, 1000, 0, 0, 1000, 1, 1000, 1, 1000, 1, 0, 0, 0, 0]
        )]
    );
    assert_eq!(
        sites(&server, "life=temporary").1,
        vec![
            row(0, [1, 5000, 1, 5000, 0, 0, 0, 0, 5000, 1, 1, 5000, 100, 0]),
            row(1, [1, 10, 1, 10, 0, 0, 0, 0, 0, 0, 1, 10, 100, 0])
        ]
    );
    assert_eq!(
        sites(&server, "life_min=150").1,
        vec![
            row(
                0,
                [1, 1000, 1, 1000, 0, 0, 0, 0, 1000, 1, 0, 0, 2_000_200, 0]
            ),
            row(1, [1, 20, 1, 20, 0, 0, 0, 0, 20, 1, 0, 0, 200, 0])
        ]
    );
    assert_eq!(
        sites(&server, "life_max=150&at=peak").1,
        vec![
            row(
                0,
                [1, 5000, 1, 5000, 5000, 1, 0, 0, 5000, 1, 1, 5000, 100, 0]
            ),
            row(1, [1, 10, 1, 10, 0, 0, 0, 0, 0, 0, 1, 10, 100, 0])
        ]
    );
    assert_eq!(
        sites(&server, "life_min=150&thread=1&func=leaky").1,
        vec![row(
            0,
            [1, 1000, 1, 1000, 0, 0, 0, 0, 1000, 1, 0, 0, 2_000_200, 0]
        )]
    );
    // Ranges: events after `from`, up to and with `to`.
    let range = |query: &str| -> Vec<[u64; 5]> {
        sites(&server, query)
            .1
            .iter()
            .map(|r| {
                [
                    "id",
                    "allocations",
                    "allocated_bytes",
                    "frees",
                    "freed_bytes",
                ]
                .map(|k| r[k].as_u64().unwrap())
            })
            .collect()
    };
    assert_eq!(
        range("from=0.0000006&to=0.001"),
        [[0, 0, 0, 1, 5000], [1, 0, 0, 0, 0]]
    );
    assert_eq!(
        range("from=0.0000002&to=0.0000005"),
        [[0, 1, 1000, 0, 0], [1, 1, 20, 1, 10]]
    );
    assert_eq!(
        range("marker_from=m"),
        [[0, 0, 0, 1, 1000], [1, 0, 0, 0, 0]]
    );
    assert_eq!(range("from=marker:m"), range("marker_from=m"));
    assert_eq!(
        range("marker_to=m&from=start"),
        [[0, 3, 7000, 1, 5000], [1, 2, 30, 2, 30]]
    );
    assert_eq!(range("to=peak"), [[0, 3, 7000, 0, 0], [1, 2, 30, 1, 10]]);
    assert_eq!(
        range(&format!("to={}", bucket as f64 / 1e9)),
        range("to=marker:m")
    );

    // Timeline from the index: the first point holds every event up to 700 ns.
    let timeline = server.json("/api/timeline?points=10");
    let points = timeline["points"].as_array().unwrap();
    assert!(points.len() <= 10 && points.len() >= 5, "{timeline}");
    assert_eq!(timeline["from_ns"], 0);
    assert_eq!(timeline["to_ns"], 2_000_700);
    let first = &points[0];
    assert_eq!(
        [
            "live_bytes",
            "live_blocks",
            "allocs",
            "frees",
            "alloc_bytes",
            "free_bytes"
        ]
        .map(|k| first[k].as_u64().unwrap()),
        [2000, 2, 5, 3, 7030, 5030]
    );
    let last = points.last().unwrap();
    assert_eq!(last["t_ns"], 2_000_700);
    assert_eq!(
        ["live_bytes", "live_blocks", "allocs", "frees", "free_bytes"]
            .map(|k| last[k].as_u64().unwrap()),
        [1000, 1, 0, 1, 1000]
    );
    let sum = |k: &str| points.iter().map(|p| p[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(
        (
            sum("allocs"),
            sum("frees"),
            sum("alloc_bytes"),
            sum("free_bytes")
        ),
        (5, 4, 7030, 6030)
    );
    assert_eq!(
        timeline["peak"],
        json!({"time_ns": 550, "bytes": 7020, "blocks": 4, "exact": true})
    );
    assert_eq!(timeline["markers"], json!([{"time_ns": 700, "label": "m"}]));
    // A timeline of a filter on blocks, and of a short range: scans, with their own edges.
    let timeline = server.json("/api/timeline?points=4&from=0.0000001&to=0.0000009&size_min=100");
    let points: Vec<[u64; 5]> = timeline["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            ["t_ns", "live_bytes", "live_blocks", "allocs", "frees"].map(|k| p[k].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        points,
        [
            [300, 1000, 1, 0, 0],
            [500, 2000, 2, 1, 0],
            [700, 2000, 2, 1, 1],
            [900, 2000, 2, 0, 0],
        ]
    );
    assert_eq!(timeline["from_ns"], 100);
    assert_eq!(timeline["to_ns"], 900);
    assert_eq!(timeline["markers"], json!([{"time_ns": 700, "label": "m"}]));
    let timeline = server.json("/api/timeline?points=2&to=0.000001&thread=2");
    let points: Vec<[u64; 4]> = timeline["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ["t_ns", "live_bytes", "allocs", "frees"].map(|k| p[k].as_u64().unwrap()))
        .collect();
    // From the index: its edges, the range widened to them.
    assert_eq!(points, [[0, 0, 0, 0], [bucket, 0, 1, 1]]);
    assert_eq!(timeline["to_ns"], bucket);

    // One site: its stacks and its timeline.
    let site = server.json("/api/site/1?at=peak");
    assert_eq!(site["function"], "app::temp");
    assert_eq!(site["line"], 20);
    assert_eq!(
        site["stacks"],
        json!([{"id": 1, "bytes": 20, "blocks": 1, "allocations": 2, "allocated_bytes": 30,
                "frames": [{"function": "app::temp", "file": "src/app.rs", "line": 20,
                            "std": false, "address": "0x2001"}],
                "hidden_above": 0, "hidden_below": 0, "group": 0}])
    );
    assert_eq!(
        site["groups"],
        json!([{"stacks": [1], "bytes": 20, "blocks": 1, "allocations": 2, "allocated_bytes": 30,
                "frames": [{"function": "app::temp", "file": "src/app.rs", "line": 20,
                            "std": false, "address": "0x2001"}],
                "hidden_above": [0, 0], "hidden_below": [0, 0]}])
    );
    let first = &site["timeline"]["points"][0];
    assert_eq!(
        ["live_bytes", "allocs", "frees", "alloc_bytes", "free_bytes"]
            .map(|k| first[k].as_u64().unwrap()),
        [0, 2, 2, 30, 30]
    );
    assert_eq!(site["timeline"]["peak"]["exact"], false);
    let site = server.json("/api/site/0?thread=1");
    assert_eq!(site["stacks"][0]["allocated_bytes"], 2000);
    assert_eq!(site["stacks"][0]["bytes"], 1000);
    assert_eq!(site["timeline"]["points"][0]["alloc_bytes"], 2000);
    server.error("/api/site/2", 404);
    server.error("/api/site/x", 404);

    // Flame graphs.
    let leaky = "src/app.rs:10:5 in 'app::leaky'";
    let temp = "src/app.rs:20:5 in 'app::temp'";
    let flame = |query: &str| server.json(&format!("/api/flame?{query}"));
    let tree = |total: u64, children: &[(&str, u64)]| {
        json!({"name": "all", "value": total, "children": children.iter()
            .map(|(n, v)| json!({"name": n, "value": v, "children": []})).collect::<Vec<_>>()})
    };
    assert_eq!(
        flame("what=live&at=peak"),
        tree(7020, &[(leaky, 7000), (temp, 20)])
    );
    assert_eq!(flame("at=peak"), flame("what=live&at=peak"));
    assert_eq!(flame("what=live"), tree(1000, &[(leaky, 1000)]));
    assert_eq!(flame("what=leaked"), tree(1000, &[(leaky, 1000)]));
    assert_eq!(
        flame("what=allocated"),
        tree(7030, &[(leaky, 7000), (temp, 30)])
    );
    assert_eq!(
        flame("what=allocated&from=0.0000003&to=0.0000006"),
        tree(6020, &[(leaky, 6000), (temp, 20)])
    );
    assert_eq!(
        flame("what=temporary"),
        tree(5010, &[(leaky, 5000), (temp, 10)])
    );
    assert_eq!(flame("what=temporary&thread=1"), tree(10, &[(temp, 10)]));
    assert_eq!(
        flame("what=live&at=peak&size_max=1000"),
        tree(2020, &[(leaky, 2000), (temp, 20)])
    );

    // Diff between two moments.
    let diff = server.json("/api/diff?from=0.0000005&to=peak");
    assert_eq!(diff["from_ns"], 500);
    assert_eq!(diff["to_ns"], 550);
    assert_eq!(
        diff["sites"],
        json!([{"id": 0, "function": "app::leaky", "file": "src/app.rs", "line": 10,
                "context": [{"function": "app::leaky", "file": "src/app.rs", "line": 10,
                             "std": false}],
                "program": 0,
                "from_bytes": 2000, "to_bytes": 7000, "delta_bytes": 5000,
                "from_blocks": 2, "to_blocks": 3, "delta_blocks": 1}])
    );
    assert_eq!(diff["flame"], tree(5000, &[(leaky, 5000)]));
    let diff = server.json("/api/diff?from=peak&marker_to=m");
    let deltas: Vec<(u64, i64, i64)> = diff["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_u64().unwrap(),
                s["delta_bytes"].as_i64().unwrap(),
                s["delta_blocks"].as_i64().unwrap(),
            )
        })
        .collect();
    // Shrinkage with the largest first.
    assert_eq!(deltas, [(0, -5000, -1), (1, -20, -1)]);
    assert_eq!(diff["total_sites"], 2);
    assert_eq!(diff["flame"], tree(0, &[]));
    let diff = server.json("/api/diff?from=peak&marker_to=m&limit=1");
    assert_eq!(diff["total_sites"], 2);
    assert_eq!(diff["sites"].as_array().unwrap().len(), 1);
    assert_eq!(diff["sites"][0]["id"], 1);
    server.error("/api/diff?limit=0", 400);
    // The later moment first: the shrinkage the other way round.
    let diff = server.json("/api/diff?from=end&to=peak");
    let deltas: Vec<(u64, i64, i64)> = diff["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_u64().unwrap(),
                s["delta_bytes"].as_i64().unwrap(),
                s["delta_blocks"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(deltas, [(0, 6000, 2), (1, 20, 1)]);
    assert_eq!(
        (diff["from_ns"].as_u64(), diff["to_ns"].as_u64()),
        (Some(2_000_700), Some(550))
    );
    let diff = server.json("/api/diff?from=start&to=end&func=temp");
    assert_eq!(diff["sites"], json!([]));

    // Exports: the crate's writers, equal to `memprof report` and `convert` at the moment.
    let trace = path.to_str().unwrap();
    for (format, at, args) in [
        ("md", "marker:m", vec!["report", trace, "--at", "marker:m"]),
        (
            "tsv",
            "peak",
            vec!["report", trace, "--at", "peak", "--format", "tsv"],
        ),
        ("tsv", "end", vec!["report", trace, "--format", "tsv"]),
    ] {
        let (status, headers, body) = server.get(&format!("/api/export/{format}?at={at}"));
        assert_eq!(status, 200);
        assert_eq!(
            header(&headers, "content-disposition"),
            format!("attachment; filename=\"known.{format}\"")
        );
        assert_eq!(shown(&body), shown(&memprof(&args)));
    }
    let dir = path.parent().unwrap();
    let folded = dir.join("peak.folded");
    memprof(&[
        "convert",
        trace,
        "--at",
        "peak",
        "-o",
        folded.to_str().unwrap(),
    ]);
    assert_eq!(
        server.get("/api/export/folded?at=peak").2,
        std::fs::read(&folded).unwrap()
    );
    let (_, _, body) = server.get("/api/export/tsv?at=peak&thread=1");
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains("2\t2000\tsrc/app.rs:10:5 in 'app::leaky'"),
        "{text}"
    );
    let (_, _, body) = server.get("/api/export/folded?at=peak&size_min=100&from=0.0000004");
    assert_eq!(String::from_utf8_lossy(&body).trim(), "app::leaky 6000");
    // Lifetime filters: each block live at the peak counts by how it ended after the peak.
    let folded = |query: &str| {
        let (status, _, body) = server.get(&format!("/api/export/folded?{query}"));
        assert_eq!(status, 200, "{query}");
        let mut lines: Vec<String> = String::from_utf8_lossy(&body)
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    };
    // 0xa100, never freed.
    assert_eq!(folded("at=peak&life=never"), ["app::leaky 1000"]);
    // 0xb000, freed before its thread allocated or freed anything else; not 0xa300 (a free
    // of its thread came between) nor 0xa200 (an allocation came between).
    assert_eq!(folded("at=peak&life=temporary"), ["app::leaky 5000"]);
    // 0xb000 (100 ns) and 0xa200 (200 ns); 0xa300 lived 2,000,200 ns.
    assert_eq!(
        folded("at=peak&life_max=1000"),
        ["app::leaky 5000", "app::temp 20"]
    );
    assert_eq!(folded("at=peak&life_min=2000200"), ["app::leaky 1000"]);
    assert_eq!(folded("at=end&life_max=1000"), Vec::<String>::new());
    for (format, name, magic) in [
        ("pprof", "known.pb.gz", &[0x1f, 0x8b][..]),
        ("heaptrack", "known.heaptrack.gz", &[0x1f, 0x8b][..]),
        ("dhat", "known.dhat.json", b"{"),
    ] {
        let (status, headers, body) = server.get(&format!("/api/export/{format}?at=peak"));
        assert_eq!(status, 200, "{format}");
        assert!(body.starts_with(magic), "{format}");
        assert!(
            header(&headers, "content-disposition").contains(name),
            "{format}"
        );
    }
    // The HTML report: the sites of the moment, and the whole trace's timeline up to it, with
    // its peak (5000 bytes of `app::leaky` on top of 2020 at 550 ns) and the marker.
    let (status, headers, body) = server.get("/api/export/html");
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), "text/html; charset=utf-8");
    assert!(header(&headers, "content-disposition").contains("known.html"));
    let html = String::from_utf8(body).unwrap();
    for expected in [
        "\"function\":\"app::leaky\"",
        "\"peak_ns\":550,\"peak_bytes\":7020",
        "\"markers\":[[700,\"m\"]]",
    ] {
        assert!(html.contains(expected), "{expected} not in {html}");
    }
    let (_, _, before) = server.get("/api/export/html?at=peak");
    let before = String::from_utf8(before).unwrap();
    assert!(before.contains("\"markers\":[]"), "{before}");
    let dhat: Value = serde_json::from_slice(&server.get("/api/export/dhat?at=peak").2).unwrap();
    let mut sizes: Vec<u64> = dhat["pps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["eb"].as_u64().unwrap())
        .collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [20, 7000]);

    // The page and its files.
    let (status, headers, body) = server.get("/");
    assert_eq!(status, 200);
    assert!(header(&headers, "content-type").starts_with("text/html"));
    assert!(String::from_utf8_lossy(&body).contains("<html"));
    assert_eq!(server.get("/static/index.html").2, body);
    server.error("/static/nothing.js", 404);

    garbage(&server);
    // Still answering after all of it.
    assert_eq!(server.json("/api/summary")["events"], 10);
}

/// Bad queries: 400 (or 404) with a message naming the parameter; never a crash.
fn garbage(server: &Server) {
    for (query, words) in [
        ("/api/sites?at=yesterday", "at=\"yesterday\""),
        ("/api/sites?at=-1", "at=\"-1\""),
        ("/api/sites?at=NaN", "at=\"NaN\""),
        ("/api/sites?at=marker:nope", "markers: m"),
        ("/api/sites?marker_from=nope", "marker_from=\"nope\""),
        ("/api/timeline?marker_to=", "marker_to"),
        ("/api/sites?func=(", "func=\"(\""),
        ("/api/flame?nofile=%5B", "nofile"),
        ("/api/sites?func=a%7B1000000%7D", "func"),
        ("/api/sites?size_min=abc", "size_min=\"abc\""),
        ("/api/sites?size_min=99999999999999999999999", "size_min"),
        ("/api/sites?size_min=10&size_max=5", "size_min=10"),
        ("/api/sites?life_min=5&life_max=1", "life_min=5"),
        ("/api/sites?life=sometimes", "life=\"sometimes\""),
        ("/api/sites?thread=main", "thread=\"main\""),
        ("/api/sites?sort=name", "sort=\"name\""),
        ("/api/sites?desc=maybe", "desc"),
        ("/api/sites?limit=100000000", "limit=100000000"),
        ("/api/sites?offset=-1", "offset"),
        ("/api/sites?from=0.002&to=0.001", "from"),
        ("/api/timeline?points=0", "points=0"),
        ("/api/timeline?points=1000000000", "points=1000000000"),
        ("/api/timeline?points=8.5", "points"),
        ("/api/flame?what=everything", "what=\"everything\""),
        ("/api/diff?from=soon", "from=\"soon\""),
        ("/api/sites?at=%ZZ", "percent"),
        ("/api/sites?at=%FF", "UTF-8"),
    ] {
        let message = server.error(query, 400);
        assert!(message.contains(words), "{query}: {message}");
    }
    for query in [
        "/api/nothing",
        "/api/export/zip",
        "/nothing",
        "/api/site/99999999999999999999",
    ] {
        server.error(query, 404);
    }
    // Huge ranges and moments beyond the run are the end.
    assert_eq!(
        server.json("/api/sites?from=0&to=1e300&at=1e300")["total_sites"],
        2
    );
    let timeline = server.json("/api/timeline?points=10000&from=1e-9&to=1e18");
    assert!(timeline["points"].as_array().unwrap().len() <= 10000);
    let long = format!("/api/sites?func={}", "a".repeat(20_000));
    let (status, _, _) = server.get(&long);
    assert_eq!(status, 414);
    // Not HTTP at all, and a request cut short: the server goes on.
    let mut stream = TcpStream::connect(&server.address).unwrap();
    stream.write_all(b"\x00\x01garbage\r\n\r\n").unwrap();
    let _ = stream.read_to_end(&mut Vec::new());
    let mut stream = TcpStream::connect(&server.address).unwrap();
    stream.write_all(b"GET /api/sum").unwrap();
    drop(stream);
}

#[test]
fn fifty_clients_at_once() {
    // Any trace may stand in for the known one (a big one, to see the memory stay bounded).
    let path = std::env::var_os("MEMPROF_SERVE_STRESS_TRACE")
        .map_or_else(|| known_trace_file("stress"), PathBuf::from);
    let server = Server::start(&[path.to_str().unwrap()]);
    let events = server.json("/api/summary")["events"].clone();
    let seconds: f64 = std::env::var("MEMPROF_SERVE_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let queries = [
        "/api/summary",
        "/api/timeline?points=800",
        "/api/sites?at=peak&sort=live_bytes",
        "/api/sites?size_min=100",
        "/api/sites?at=0.0000005&func=leaky",
        "/api/flame?what=allocated",
        "/api/diff?from=0.0000005&to=end",
        "/api/export/pprof?at=peak",
        "/api/sites?func=(",
        "/",
    ];
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let address = server.address.clone();
    let clients: Vec<_> = (0..50)
        .map(|client| {
            let address = address.clone();
            std::thread::spawn(move || {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    let query = queries[(client + done as usize) % queries.len()];
                    let (status, _, body) = get(&address, query);
                    let expected = if query.contains("func=(") { 400 } else { 200 };
                    assert_eq!(status, expected, "{query}: {}", shown(&body));
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut highest = 0;
    let mut total = 0;
    let started = Instant::now();
    while clients.iter().any(|c| !c.is_finished()) {
        highest = highest.max(server.resident_kib());
        std::thread::sleep(Duration::from_millis(100));
    }
    for client in clients {
        total += client.join().expect("a client failed");
    }
    eprintln!(
        "{total} requests by 50 clients in {:.1} s; server's resident memory at most {highest} KiB",
        started.elapsed().as_secs_f64()
    );
    assert!(total >= 50, "{total}");
    assert!(highest < 2 * 1024 * 1024, "{highest} KiB");
    assert_eq!(server.json("/api/summary")["events"], events);
}

#[test]
fn a_trace_served_as_it_arrives() {
    let dir = known_trace_file("live");
    let output = Path::new(&dir).with_file_name("received.mptrace");
    let server = Server::start(&[output.to_str().unwrap(), "--listen-trace", "127.0.0.1:0"]);
    assert_eq!(server.get("/api/summary").0, 503);
    let (bytes, offsets) = support::known_trace();
    let mut sender = TcpStream::connect(server.trace_address.as_ref().unwrap()).unwrap();
    // The header, the definitions and the worker's chunk, then the rest.
    sender.write_all(&bytes[..offsets[2]]).unwrap();
    sender.flush().unwrap();
    let wait_for = |events: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, _, body) = server.get("/api/summary");
            if status == 200 {
                let summary: Value = serde_json::from_slice(&body).unwrap();
                // Every event that arrived is indexed: a trace whose writer is quiet has sent
                // them all.
                if summary["events"] == events
                    && (summary["live"].is_null() || summary["live"]["pending_events"] == 0)
                {
                    return summary;
                }
            }
            assert!(Instant::now() < deadline, "{status}: {}", shown(&body));
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let summary = wait_for(2);
    assert_eq!(
        summary["peak"],
        json!({"time_ns": 550, "bytes": 5000, "blocks": 1})
    );
    assert_eq!(summary["complete"], false);
    sender.write_all(&bytes[offsets[2]..]).unwrap();
    drop(sender);
    let summary = wait_for(10);
    assert_eq!(
        summary["peak"],
        json!({"time_ns": 550, "bytes": 7020, "blocks": 4})
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.json("/api/summary")["complete"] != true {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        sites(&server, "").1,
        vec![row(0, LEAKY_ALL), row(1, TEMP_ALL)]
    );
    assert_eq!(std::fs::read(&output).unwrap(), bytes);
}

/// The functions of a Markdown report's rows, by the row's total size: each frame of a context
/// is a code span ending `in 'FUNCTION'`.
fn report_contexts(markdown: &str) -> Vec<(u64, Vec<String>)> {
    markdown
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| Allocations"))
        .map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            let bytes = cells[1].trim().replace(',', "").parse().unwrap();
            let functions = cells[2]
                .split("<br>")
                .map(|frame| {
                    let (_, function) = frame.split_once(" in '").unwrap();
                    function.rsplit_once('\'').unwrap().0.to_owned()
                })
                .collect();
            (bytes, functions)
        })
        .collect()
}

/// On stacks shaped like a real program's, each site is named by the program's code: its
/// context is the Markdown report's (the collection operation, the program's frames; memprof's,
/// the allocator's and the runtime's left out), `function` is the program's first frame, files
/// are written short as the reports write them, an opened site lists the program's frames only,
/// and the diff lists the largest shrinkage first.
#[test]
fn sites_are_named_by_the_programs_code() {
    let dir = std::env::temp_dir().join(format!("memprof-serve-named-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("named.mptrace");
    std::fs::write(&path, support::named_trace()).unwrap();
    let trace = path.to_str().unwrap();
    let server = Server::start(&[trace]);

    let answer = server.json("/api/sites?at=marker:loaded&sort=live_bytes&limit=100");
    let rows = answer["sites"].as_array().unwrap();
    let names: Vec<(&str, &str, u64, u64)> = rows
        .iter()
        .map(|s| {
            (
                s["function"].as_str().unwrap(),
                s["file"].as_str().unwrap(),
                s["line"].as_u64().unwrap(),
                s["program"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("app::load", "src/app.rs", 20, 1),
            ("app::build", "src/app.rs", 10, 1),
            // Before `main`: std's runtime is all there is, then the program's `main` symbol.
            ("main", "/bin/app", 0, 1),
            ("app::grow", "src/app.rs", 30, 1),
            ("app::tiny", "src/app.rs", 40, 1),
        ],
        "{answer}"
    );
    let build = &rows[1];
    assert_eq!(
        build["context"],
        json!([
            {"function": "alloc::vec::Vec<T>::with_capacity", "file": "alloc/src/vec/mod.rs",
             "line": 480, "std": true},
            {"function": "app::build", "file": "src/app.rs", "line": 10, "std": false},
            {"function": "app::main", "file": "src/main.rs", "line": 5, "std": false},
        ])
    );
    // Every site's context is the Markdown report's at the same moment, frame for frame.
    let report = String::from_utf8(memprof(&[
        "report",
        trace,
        "--at",
        "marker:loaded",
        "--min-bytes",
        "0",
    ]))
    .unwrap();
    let mut from_report = report_contexts(&report);
    let mut from_api: Vec<(u64, Vec<String>)> = rows
        .iter()
        .filter(|s| s["live_bytes"].as_u64().unwrap() > 0)
        .map(|s| {
            let context = s["context"].as_array().unwrap();
            let functions = context
                .iter()
                .map(|f| f["function"].as_str().unwrap().to_owned())
                .collect();
            (s["live_bytes"].as_u64().unwrap(), functions)
        })
        .collect();
    from_report.sort();
    from_api.sort();
    assert_eq!(from_api, from_report, "{report}");
    assert_eq!(from_api.len(), 3, "{report}");
    assert!(!answer.to_string().contains("/rustc/"), "{answer}");

    // The opened site: the program's frames, no memprof's, the allocator's or the runtime's.
    let id = build["id"].as_u64().unwrap();
    let site = server.json(&format!("/api/site/{id}"));
    assert_eq!(site["function"], "app::build");
    let stack = &site["stacks"][0];
    let functions: Vec<&str> = stack["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    assert_eq!(
        functions,
        [
            "alloc::vec::Vec<T>::with_capacity",
            "app::build",
            "app::main"
        ]
    );
    assert_eq!(stack["frames"][0]["file"], "alloc/src/vec/mod.rs");
    assert_eq!(stack["frames"][0]["address"], "0x130");
    assert_eq!(
        (
            stack["hidden_above"].as_u64(),
            stack["hidden_below"].as_u64()
        ),
        (Some(4), Some(7))
    );

    // The flame graph: the program's frames, outermost first, std's flagged, files short.
    let flame = server.json("/api/flame?what=allocated");
    let main = &flame["children"][0];
    assert_eq!(main["name"], "src/main.rs:5:9 in 'app::main'");
    assert!(main.get("std").is_none(), "{flame}");
    let load = main["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "src/app.rs:20:9 in 'app::load'")
        .unwrap_or_else(|| panic!("{flame}"));
    assert_eq!(
        load["children"],
        json!([{"name": "alloc/src/vec/mod.rs:480:9 in 'alloc::vec::Vec<T>::with_capacity'",
                "std": true, "value": 4000, "children": []}])
    );
    let text = flame.to_string();
    for hidden in [
        "/rustc/",
        "memprof::",
        "__rust_alloc",
        "raw_vec",
        "lang_start::",
        "'_start'",
    ] {
        assert!(!text.contains(hidden), "{hidden} in {flame}");
    }

    // The same tree as text, for a terminal.
    let (status, headers, body) = server.get("/api/flame?what=allocated&format=text");
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "content-type"),
        "text/plain; charset=utf-8"
    );
    assert_eq!(
        String::from_utf8(body).unwrap(),
        "8574 B (100.0%) all
├─ 8510 B (99.3%) src/main.rs:5:9 in 'app::main'
│  ├─ 4000 B (46.7%) src/app.rs:20:9 in 'app::load'
│  │  └─ 4000 B (46.7%) alloc/src/vec/mod.rs:480:9 in 'alloc::vec::Vec<T>::with_capacity'
│  ├─ 3000 B (35.0%) src/app.rs:30:9 in 'app::grow'
│  │  └─ 3000 B (35.0%) alloc/src/vec/mod.rs:992:9 in 'alloc::vec::Vec<T,A>::push'
│  ├─ 1500 B (17.5%) src/app.rs:10:9 in 'app::build'
│  │  └─ 1500 B (17.5%) alloc/src/vec/mod.rs:480:9 in 'alloc::vec::Vec<T>::with_capacity'
│  └─ 10 B (0.1%) src/app.rs:40:9 in 'app::tiny'
│     └─ 10 B (0.1%) alloc/src/boxed.rs:286:9 in 'alloc::boxed::Box<T>::new'
└─ 64 B (0.7%) /bin/app in 'main'
   └─ 64 B (0.7%) std/src/rt.rs:175:9 in 'std::rt::lang_start_internal'
"
    );
    server.error("/api/flame?format=xml", 400);

    // The diff from the marker to the end: growth, the largest first, then shrinkage, the
    // largest first.
    let diff = server.json("/api/diff?from=marker:loaded&to=end");
    let deltas: Vec<(&str, i64)> = diff["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["function"].as_str().unwrap(),
                s["delta_bytes"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        deltas,
        [
            ("app::grow", 3000),
            ("app::tiny", 10),
            ("app::load", -4000),
            ("app::build", -500)
        ]
    );
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The status of a GET of `path` with the `Host` headers `hosts`.
fn status_with_hosts(address: &str, path: &str, hosts: &[&str]) -> u16 {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\n");
    for host in hosts {
        request.push_str(&format!("Host: {host}\r\n"));
    }
    request.push_str("Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    String::from_utf8_lossy(&response)
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

/// A web page that makes its own name resolve to this machine cannot read the trace through the
/// user's browser (DNS rebinding): a `Host` naming anything but an IP address or `localhost` is
/// refused, for the page and the API alike; and listening beyond loopback says so.
#[test]
fn the_host_header_is_checked() {
    let path = known_trace_file("host");
    let server = Server::start(&[path.to_str().unwrap()]);
    let port = server.address.rsplit_once(':').unwrap().1.to_owned();
    for (hosts, status) in [
        (vec![server.address.clone()], 200),
        (vec![format!("localhost:{port}")], 200),
        (vec![], 200),
        (vec![format!("evil.example:{port}")], 403),
        (vec!["127.0.0.1.nip.io".to_owned()], 403),
        (vec![server.address.clone(), server.address.clone()], 400),
    ] {
        let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
        for target in ["/api/summary", "/", "/api/export/md"] {
            assert_eq!(
                status_with_hosts(&server.address, target, &hosts),
                status,
                "{target} with Host {hosts:?}"
            );
        }
    }
    drop(server);

    // Beyond loopback: a warning on stderr.
    let mut child = Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(["serve", path.to_str().unwrap(), "--listen", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let warned = loop {
        let Some(Ok(line)) = lines.next() else {
            break false;
        };
        if line.contains("beyond this machine's loopback") {
            break true;
        }
        seen.push(line);
        if seen.len() > 20 {
            break false;
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(warned, "no warning: {seen:?}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// `/api/allocations`: single allocations of the known trace, sorted and paged, with the
/// filters every endpoint takes and an address range.
#[test]
fn individual_allocations() {
    let path = known_trace_file("allocations");
    let server = Server::start(&[path.to_str().unwrap()]);
    // Each allocation as (address, size, time, lifetime).
    type Row = (String, u64, u64, Option<u64>);
    let list = |query: &str| -> (u64, Vec<Row>) {
        let answer = server.json(&format!("/api/allocations?{query}"));
        let rows = answer["allocations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["address"].as_str().unwrap().to_owned(),
                    a["size"].as_u64().unwrap(),
                    a["time_ns"].as_u64().unwrap(),
                    a["lifetime_ns"].as_u64(),
                )
            })
            .collect();
        (answer["total_count"].as_u64().unwrap(), rows)
    };
    let row = |address: &str, size, time, life| (address.to_owned(), size, time, life);
    assert_eq!(
        list(""),
        (
            5,
            vec![
                row("0xa100", 1000, 100, None),
                row("0xa200", 10, 200, Some(100)),
                row("0xa200", 20, 400, Some(200)),
                row("0xa300", 1000, 500, Some(2_000_200)),
                row("0xb000", 5000, 550, Some(100)),
            ]
        )
    );
    // The largest first (ties in the order they were made), two of them.
    assert_eq!(
        list("sort=size&desc=1&limit=2"),
        (
            5,
            vec![
                row("0xb000", 5000, 550, Some(100)),
                row("0xa100", 1000, 100, None)
            ]
        )
    );
    // The longest-lived after the first (a block never freed lives longest).
    assert_eq!(
        list("sort=lifetime&desc=1&limit=1&offset=1"),
        (5, vec![row("0xa300", 1000, 500, Some(2_000_200))])
    );
    assert_eq!(
        list("life=temporary").1,
        [
            row("0xa200", 10, 200, Some(100)),
            row("0xb000", 5000, 550, Some(100))
        ]
    );
    assert_eq!(list("from=0.0000003&to=0.0000005").0, 2);
    assert_eq!(list("thread=2").1, [row("0xb000", 5000, 550, Some(100))]);
    assert_eq!(
        list("address_min=45056").1,
        [row("0xb000", 5000, 550, Some(100))]
    );
    assert_eq!(list("size_max=20&sort=address&desc=1").0, 2);
    let first = server.json("/api/allocations?limit=1");
    assert_eq!(first["allocations"][0]["function"], "app::leaky");
    assert_eq!(first["allocations"][0]["site"], 0);
    assert_eq!(first["allocations"][0]["freed_ns"], Value::Null);
    // Moments as a percentage of the run (2,000,700 ns): 0.025% is 500 ns.
    assert_eq!(list("to=0.025%25").0, 4);
    assert_eq!(list("from=0.025%25&to=100%25").0, 1);
    assert_eq!(
        server.json("/api/sites?at=100%25"),
        server.json("/api/sites?at=end")
    );
    server.error("/api/sites?at=120x%25", 400);
    // The stack's depth: every stack of the known trace has one return address.
    assert_eq!(sites(&server, "depth_max=1").0, 2);
    assert_eq!(sites(&server, "depth_min=2").0, 0);
    assert_eq!(list("depth_min=2").0, 0);
    server.error("/api/sites?depth_min=3&depth_max=2", 400);
    server.error("/api/allocations?sort=name", 400);
    server.error("/api/allocations?limit=1000000", 400);
    server.error("/api/allocations?address_min=5&address_max=4", 400);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// Group filters on `/api/sites` (bytehound's): a site's allocations over the run, and how many
/// of them are live at the end, as a count or a share.
#[test]
fn group_filters() {
    let path = known_trace_file("groups");
    let server = Server::start(&[path.to_str().unwrap()]);
    let ids = |query: &str| -> Vec<u64> {
        sites(&server, query)
            .1
            .iter()
            .map(|r| r["id"].as_u64().unwrap())
            .collect()
    };
    // `app::leaky` (0): 3 allocations, 1 live at the end; `app::temp` (1): 2, none.
    assert_eq!(ids(""), [0, 1]);
    assert_eq!(ids("group_allocations_min=3"), [0]);
    assert_eq!(ids("group_allocations_max=2"), [1]);
    assert_eq!(ids("group_leaked_min=1"), [0]);
    assert_eq!(ids("group_leaked_max=0"), [1]);
    assert_eq!(ids("group_leaked_min=30%25"), [0]);
    assert_eq!(ids("group_leaked_min=50%25"), Vec::<u64>::new());
    // Groups leaked whole: none here.
    assert_eq!(ids("group_leaked_min=100%25"), Vec::<u64>::new());
    // With a filter, the groups are of the blocks that pass it: the worker's one block of
    // `app::leaky`, freed.
    assert_eq!(
        ids("thread=2&group_leaked_max=0&group_allocations_min=1"),
        [0]
    );
    // A filter on blocks (a scan): the groups count the blocks that pass it.
    assert_eq!(ids("size_min=1000&group_allocations_min=3"), [0]);
    assert_eq!(
        ids("size_min=2000&group_allocations_min=2"),
        Vec::<u64>::new()
    );
    assert_eq!(ids("size_min=2000&group_allocations_max=1"), [0]);
    assert_eq!(
        sites(&server, "group_allocations_min=3").0,
        1,
        "total_sites counts the groups that pass"
    );
    server.error("/api/sites?group_leaked_min=abc", 400);
    server.error("/api/sites?group_leaked_min=150%25", 400);
    server.error("/api/sites?group_allocations_min=x", 400);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// The time between a group's first and last allocation (`group_interval_min`, `_max`), and
/// the group filters on the endpoints besides `/api/sites`.
#[test]
fn group_interval_and_group_filters_everywhere() {
    let path = known_trace_file("interval");
    let server = Server::start(&[path.to_str().unwrap()]);
    let ids = |query: &str| -> Vec<u64> {
        sites(&server, query)
            .1
            .iter()
            .map(|r| r["id"].as_u64().unwrap())
            .collect()
    };
    // `app::leaky` (0) allocates at 100, 500 (main) and 550 (worker): 450 ns apart;
    // `app::temp` (1) at 200 and 400: 200 ns apart.
    assert_eq!(ids("group_interval_min=450"), [0]);
    assert_eq!(ids("group_interval_min=451"), Vec::<u64>::new());
    assert_eq!(ids("group_interval_max=449"), [1]);
    assert_eq!(ids("group_interval_max=200"), [1]);
    assert_eq!(ids("group_interval_max=199"), Vec::<u64>::new());
    assert_eq!(ids("group_interval_min=200&group_interval_max=450"), [0, 1]);
    // The groups are of the blocks that pass the filters: main's blocks of `app::leaky` are
    // 400 ns apart; a size filter (a scan) leaves `app::leaky`'s three.
    assert_eq!(ids("thread=1&group_interval_min=400"), [0]);
    assert_eq!(ids("thread=1&group_interval_min=401"), Vec::<u64>::new());
    assert_eq!(ids("size_min=1000&group_interval_min=450"), [0]);
    assert_eq!(ids("size_max=10&group_interval_max=0"), [1]);
    // A group of one allocation spans 0 ns.
    assert_eq!(ids("thread=2&group_interval_max=0"), [0]);
    // The figures of a site that passes are those without the group filter.
    assert_eq!(
        sites(&server, "group_interval_max=200").1,
        [row(1, TEMP_ALL)]
    );
    server.error("/api/sites?group_interval_min=1ms", 400);

    // The other endpoints keep the blocks of the groups that pass.
    let flame = |query: &str| server.json(&format!("/api/flame?{query}"))["value"].clone();
    assert_eq!(flame("what=allocated"), 7030);
    assert_eq!(flame("what=allocated&group_interval_max=200"), 30);
    assert_eq!(flame("what=allocated&group_allocations_min=3"), 7000);
    assert_eq!(flame("what=live&at=0.00000045&group_interval_max=200"), 20);
    let timeline = server.json("/api/timeline?points=2&to=0.000001&group_interval_min=450");
    let points = timeline["points"].as_array().unwrap();
    let last = points.last().unwrap();
    // Up to 1,000 ns (the index draws it: widened to its bucket edge, 1,024 ns) `app::leaky`
    // allocated 7,000 bytes in 3 blocks and freed 5,000 in 1.
    assert_eq!(timeline["bucket_ns"], 1024);
    assert_eq!(
        (
            last["t_ns"].as_u64(),
            last["live_bytes"].as_u64(),
            last["live_blocks"].as_u64()
        ),
        (Some(1024), Some(2000), Some(2))
    );
    let alloc_sum: u64 = points
        .iter()
        .map(|p| p["alloc_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(alloc_sum, 7000);
    let diff = server.json("/api/diff?from=0.00000045&to=end&group_interval_max=200");
    let changed: Vec<(u64, i64)> = diff["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_u64().unwrap(),
                s["delta_bytes"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(changed, [(1, -20)]);
    let allocations = server.json("/api/allocations?group_interval_max=200");
    assert_eq!(allocations["total_count"], 2);
    let labels = server.json("/api/labels?at=0.00000045&group_interval_max=200");
    assert_eq!(labels["label_sets"][0]["live_bytes"], 20);
    let (status, _, body) = server.get("/api/export/folded?at=0.00000045&group_interval_max=200");
    assert_eq!(status, 200);
    let folded: u64 = String::from_utf8(body)
        .unwrap()
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(folded, 20);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// bytehound's lifetime classes: `life=freed_in_range`, the blocks freed within the query's
/// range; `life=kept_in_range`, those not freed within it (freed after it, or never).
#[test]
fn lifetime_classes_of_the_range() {
    let path = known_trace_file("inrange");
    let server = Server::start(&[path.to_str().unwrap()]);
    let figures = |query: &str| -> Vec<(u64, u64, u64, u64, u64)> {
        sites(&server, query)
            .1
            .iter()
            .map(|r| {
                let n = |k: &str| r[k].as_u64().unwrap();
                (
                    n("id"),
                    n("allocations"),
                    n("allocated_bytes"),
                    n("frees"),
                    n("live_bytes"),
                )
            })
            .collect()
    };
    // Up to 1,000 ns: 0xa200 (10 B, freed at 300), 0xa200 (20 B, at 600) and 0xb000 (5,000 B,
    // at 650) are freed; 0xa100 (never freed) and 0xa300 (freed at 2,000,700) are not.
    assert_eq!(
        figures("life=freed_in_range&to=0.000001&sort=id&desc=0"),
        [(0, 1, 5000, 1, 0), (1, 2, 30, 2, 0)]
    );
    assert_eq!(
        figures("life=kept_in_range&to=0.000001&sort=id&desc=0"),
        [(0, 2, 2000, 0, 1000)]
    );
    // The whole run: only 0xa100 is not freed within it, as `life=never`.
    assert_eq!(
        figures("life=kept_in_range"),
        figures("life=never"),
        "kept over the whole run is never freed"
    );
    assert_eq!(
        figures("life=freed_in_range&sort=id&desc=0"),
        [(0, 2, 6000, 2, 0), (1, 2, 30, 2, 0)]
    );
    // From 500 ns (excluded) to 1,000 ns: freed within it are 0xa200 (the 20 B one, allocated
    // at 400, before the range: its free counts, not its allocation) and 0xb000 (550).
    assert_eq!(
        figures("life=freed_in_range&from=0.0000005&to=0.000001&sort=id&desc=0"),
        [(0, 1, 5000, 1, 0), (1, 0, 0, 1, 0)]
    );
    // Single allocations.
    let addresses = |query: &str| -> Vec<String> {
        server.json(&format!("/api/allocations?{query}"))["allocations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["address"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        addresses("life=freed_in_range&to=0.000001"),
        ["0xa200", "0xa200", "0xb000"]
    );
    assert_eq!(
        addresses("life=kept_in_range&to=0.000001"),
        ["0xa100", "0xa300"]
    );
    // The timeline and the flame graph count the same blocks.
    let flame = |query: &str| server.json(&format!("/api/flame?{query}"))["value"].clone();
    assert_eq!(flame("what=allocated&life=kept_in_range&to=0.000001"), 2000);
    assert_eq!(
        flame("what=allocated&life=freed_in_range&to=0.000001"),
        5030
    );
    let timeline = server.json("/api/timeline?points=2&to=0.000001&life=freed_in_range");
    let points = timeline["points"].as_array().unwrap();
    assert_eq!(points.last().unwrap()["live_bytes"], 0);
    let frees: u64 = points.iter().map(|p| p["frees"].as_u64().unwrap()).sum();
    assert_eq!(frees, 3);
    // Group filters with them: the groups of blocks freed within the range.
    assert_eq!(
        figures("life=freed_in_range&to=0.000001&group_allocations_min=2"),
        [(1, 2, 30, 2, 0)]
    );
    let message = server.error("/api/sites?life=in_range", 400);
    assert!(message.contains("freed_in_range"), "{message}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// Several traces served at once: `/api/traces` lists them, `/api/traces/ID/...` asks one, the
/// paths without an id the first; `/api/diff` compares trace A at one moment with trace B at
/// another, by call site context.
#[test]
fn several_traces_at_once() {
    let known = known_trace_file("several");
    let named = known.parent().unwrap().join("named.mptrace");
    std::fs::write(&named, support::named_trace()).unwrap();
    let (k, n) = (known.to_str().unwrap(), named.to_str().unwrap());
    let server = Server::start(&[k, n, k]);

    let traces = server.json("/api/traces");
    let listed: Vec<(u64, &str, u64)> = traces["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_u64().unwrap(),
                t["path"].as_str().unwrap(),
                t["duration_ns"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, [(0, k, 2_000_700), (1, n, 800), (2, k, 2_000_700)]);
    assert_eq!(traces["traces"][0]["events"], 10);
    assert_eq!(traces["traces"][0]["sites"], 2);
    assert_eq!(traces["traces"][1]["sites"], 5);
    // The first trace answers the paths without an id, as with one trace.
    assert_eq!(
        server.json("/api/summary"),
        server.json("/api/traces/0/summary")
    );
    assert_eq!(server.json("/api/traces/1/summary")["path"], n);
    assert_eq!(
        server.json("/api/traces/2/sites?at=peak"),
        server.json("/api/sites?at=peak")
    );
    let named_sites = server.json("/api/traces/1/sites?sort=live_bytes");
    assert_eq!(named_sites["sites"][0]["function"], "app::grow");
    assert_eq!(named_sites["sites"][0]["live_bytes"], 3000);
    server.error("/api/traces/3/summary", 404);
    // Both sides in one trace: that trace's own diff, whichever trace the path names.
    assert_eq!(
        server.json("/api/diff?from_trace=1&to_trace=1&marker_from=loaded"),
        server.json("/api/traces/1/diff?marker_from=loaded")
    );
    server.error("/api/traces/x/sites", 404);
    server.error("/api/traces/1/nothing", 404);

    // The same trace on both sides: the diff of one trace between the two moments.
    let deltas = |answer: &Value| -> Vec<(Value, Value, i64, i64)> {
        answer["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["from_id"].clone(),
                    s["to_id"].clone(),
                    s["delta_bytes"].as_i64().unwrap(),
                    s["delta_blocks"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let diff = server.json("/api/diff?from_trace=0&from=peak&to_trace=2&marker_to=m");
    assert_eq!(
        (
            &diff["from_trace"],
            &diff["to_trace"],
            &diff["from_ns"],
            &diff["to_ns"]
        ),
        (&json!(0), &json!(2), &json!(550), &json!(700))
    );
    assert_eq!(
        deltas(&diff),
        [
            (json!(0), json!(0), -5000, -1),
            (json!(1), json!(1), -20, -1)
        ]
    );
    assert_eq!(diff["total_sites"], 2);
    // Asked through trace 2's path, `to_trace` defaults to 2; the filters apply to both sides.
    let diff = server.json("/api/traces/2/diff?from_trace=0&from=peak&marker_to=m&thread=1");
    assert_eq!(
        deltas(&diff),
        [(json!(1), json!(1), -20, -1)],
        "main's blocks of app::leaky live at the peak are live at the marker"
    );
    // Two different programs: the known trace's sites at its end against the named trace's.
    let diff = server.json("/api/diff?from_trace=0&to_trace=1");
    let named_ids: Vec<(String, u64)> = named_sites["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["function"].as_str().unwrap().to_owned(),
                s["id"].as_u64().unwrap(),
            )
        })
        .collect();
    let id_of = |f: &str| json!(named_ids.iter().find(|(n, _)| n == f).unwrap().1);
    let got: Vec<(String, Value, Value, i64)> = diff["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["function"].as_str().unwrap().to_owned(),
                s["from_id"].clone(),
                s["to_id"].clone(),
                s["delta_bytes"].as_i64().unwrap(),
            )
        })
        .collect();
    let init = named_sites["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["live_bytes"] == 64)
        .unwrap()["function"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        got,
        [
            (
                "app::grow".to_owned(),
                Value::Null,
                id_of("app::grow"),
                3000
            ),
            (
                "app::build".to_owned(),
                Value::Null,
                id_of("app::build"),
                1000
            ),
            (init.clone(), Value::Null, id_of(&init), 64),
            ("app::tiny".to_owned(), Value::Null, id_of("app::tiny"), 10),
            ("app::leaky".to_owned(), json!(0), Value::Null, -1000),
        ]
    );
    // A live trace is served alone.
    let refused = Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args([
            "serve",
            k,
            n,
            "--listen-trace",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("receives one trace"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    server.error("/api/diff?from_trace=3", 400);
    server.error("/api/diff?from_trace=1&marker_from=m", 400);
    std::fs::remove_dir_all(known.parent().unwrap()).unwrap();
}

/// `/api/mappings`: the program's own mappings live at a moment by call site, over time, their
/// peak and totals, with the filters on threads and frames; none on a trace without them.
#[test]
fn the_programs_own_mappings() {
    use support::PAGE;
    let dir = std::env::temp_dir().join(format!("memprof-serve-mmap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("maps.mptrace");
    std::fs::write(&path, support::mappings_trace()).unwrap();
    let known = known_trace_file("maps");
    let server = Server::start(&[path.to_str().unwrap(), known.to_str().unwrap()]);
    let sites = |answer: &Value| -> Vec<(String, u64, u64)> {
        answer["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["function"].as_str().unwrap().to_owned(),
                    s["bytes"].as_u64().unwrap(),
                    s["mappings"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let small = |bytes, count| ("app::map_small".to_owned(), bytes, count);
    let big = |bytes, count| ("app::map_big".to_owned(), bytes, count);
    // At the end: app::map_big's 3 pages less the middle one, in 2 pieces; app::map_small's
    // first page.
    let end = server.json("/api/mappings?points=6");
    assert_eq!(sites(&end), [big(2 * PAGE, 2), small(PAGE, 1)]);
    assert_eq!(
        (&end["bytes"], &end["mappings"]),
        (&json!(3 * PAGE), &json!(3))
    );
    assert_eq!(end["time_ns"], 600);
    assert_eq!(end["peak"], json!({"time_ns": 500, "bytes": 11 * PAGE}));
    assert_eq!(
        end["totals"],
        json!({"made": 3, "made_bytes": 12 * PAGE, "unmaps": 2})
    );
    let drawn: Vec<(u64, u64, u64)> = end["timeline"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["t_ns"].as_u64().unwrap(),
                p["bytes"].as_u64().unwrap(),
                p["mappings"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        drawn,
        [
            (100, 0, 0),
            (200, 3 * PAGE, 1),
            (300, 4 * PAGE, 2),
            (400, 3 * PAGE, 3),
            (500, 11 * PAGE, 4),
            (600, 3 * PAGE, 3)
        ]
    );
    // At 550 ns, the 8 pages mapped at 500 are live; at 500 ns too (after every event at or
    // before it), not at 499.
    let at = server.json("/api/mappings?at=0.00000055");
    assert_eq!(sites(&at), [small(9 * PAGE, 2), big(2 * PAGE, 2)]);
    assert_eq!(
        sites(&server.json("/api/mappings?at=0.0000005")),
        sites(&at)
    );
    assert_eq!(
        sites(&server.json("/api/mappings?at=0.000000499")),
        [big(2 * PAGE, 2), small(PAGE, 1)]
    );
    assert_eq!(
        sites(&server.json("/api/mappings?at=0.0000002")),
        [big(3 * PAGE, 1)]
    );
    // The heap's peak (the one allocation, at 100 ns): no mapping yet.
    assert_eq!(server.json("/api/mappings?at=peak")["mappings"], 0);
    // A range: the timeline's points within it.
    let ranged = server.json("/api/mappings?from=0.0000003&to=0.0000005&points=2");
    assert_eq!(
        ranged["timeline"],
        json!({"from_ns": 300, "to_ns": 500, "points": [
            {"t_ns": 400, "bytes": 3 * PAGE, "mappings": 3},
            {"t_ns": 500, "bytes": 11 * PAGE, "mappings": 4}]})
    );
    // Filters on frames and threads.
    let only_small = server.json("/api/mappings?func=map_small");
    assert_eq!(sites(&only_small), [small(PAGE, 1)]);
    assert_eq!(
        only_small["peak"],
        json!({"time_ns": 500, "bytes": 9 * PAGE})
    );
    assert_eq!(
        only_small["totals"],
        json!({"made": 2, "made_bytes": 9 * PAGE, "unmaps": 1})
    );
    assert_eq!(
        sites(&server.json("/api/mappings?nofunc=map_small&thread=1")),
        [big(2 * PAGE, 2)]
    );
    assert_eq!(server.json("/api/mappings?thread=2")["bytes"], 0);
    let message = server.error("/api/mappings?size_min=1", 400);
    assert!(message.contains("size_min"), "{message}");
    let message = server.error("/api/mappings?address_min=0x10000", 400);
    assert!(message.contains("address_min"), "{message}");
    // The summary counts the mappings made, so that the page offers its Mappings tab.
    assert_eq!(server.json("/api/summary")["totals"]["mappings"], 3);
    assert_eq!(
        server.json("/api/traces/1/summary")["totals"]["mappings"],
        0
    );
    server.error("/api/mappings?points=0", 400);
    // A trace without mappings: none, under its id.
    let none = server.json("/api/traces/1/mappings");
    assert_eq!(
        (&none["bytes"], &none["sites"], &none["totals"]["made"]),
        (&json!(0), &json!([]), &json!(0))
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(known.parent().unwrap()).unwrap();
}

/// An address range (`address_min`, `address_max`, bytehound's) on every endpoint with filters:
/// only the blocks whose address lies within it count, exactly (a scan), as a size filter.
#[test]
fn address_range_on_every_endpoint() {
    let path = known_trace_file("address");
    let p = path.to_str().unwrap();
    let server = Server::start(&[p, p]);
    // The known trace's blocks: 0xa100 (1000 bytes, app::leaky, never freed), 0xa200 (10 then
    // 20 bytes, app::temp), 0xa300 (1000, app::leaky, freed at the end), 0xb000 (5000,
    // app::leaky on the worker, freed at 650 ns).
    let (total, rows) = sites(&server, "address_min=0xa200&address_max=0xa2ff");
    assert_eq!((total, rows), (1, vec![row(1, TEMP_ALL)]));
    // Decimal as /api/allocations reads it: 0xa300 is 41728.
    let upper = [2, 6000, 2, 6000, 0, 0, 0, 0, 6000, 2, 1, 5000, 1_000_150, 0];
    assert_eq!(
        sites(&server, "address_min=41728"),
        (1, vec![row(0, upper)])
    );
    assert_eq!(
        sites(&server, "address_min=0xa300"),
        sites(&server, "address_min=41728")
    );
    let answer = server.json("/api/sites?address_min=0xa300");
    assert_eq!(answer["exact_from"], "scan");
    // Live at a moment: at 450 ns, 0xa100 and 0xa200 (20 bytes) are live.
    let (_, at) = sites(&server, "at=0.00000045&address_max=0xa1ff");
    assert_eq!(
        at.iter()
            .map(|r| (r["id"].as_u64().unwrap(), r["live_bytes"].as_u64().unwrap()))
            .collect::<Vec<_>>(),
        [(0, 1000)]
    );
    // One site's stacks.
    let site = server.json("/api/site/0?address_min=0xb000");
    assert_eq!(
        (
            &site["stacks"][0]["allocations"],
            &site["stacks"][0]["allocated_bytes"],
            &site["stacks"][0]["bytes"]
        ),
        (&json!(1), &json!(5000), &json!(0))
    );
    // The flame graphs.
    let flame = |query: &str| server.json(&format!("/api/flame?{query}"))["value"].clone();
    assert_eq!(flame("what=allocated&address_max=0xa2ff"), 1030);
    assert_eq!(flame("what=allocated&address_min=0xa300"), 6000);
    assert_eq!(flame("what=live&at=peak&address_min=0xa200"), 6020);
    assert_eq!(flame("what=leaked&address_min=0xa101"), 0);
    assert_eq!(flame("what=temporary&address_min=0xb000"), 5000);
    // The timeline: the worker's block alone.
    let timeline = server.json("/api/timeline?points=4&to=0.000001&address_min=0xb000");
    let points: Vec<(u64, u64, u64, u64)> = timeline["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["t_ns"].as_u64().unwrap(),
                p["live_bytes"].as_u64().unwrap(),
                p["allocs"].as_u64().unwrap(),
                p["frees"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        points,
        [
            (250, 0, 0, 0),
            (500, 0, 0, 0),
            (750, 0, 1, 1),
            (1000, 0, 0, 0)
        ]
    );
    assert_eq!(timeline["peak"]["exact"], false);
    let timeline =
        server.json("/api/timeline?points=4&from=0.0000005&to=0.0000006&address_min=0xb000");
    let live: Vec<(u64, u64)> = timeline["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["t_ns"].as_u64().unwrap(),
                p["live_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(live, [(525, 0), (550, 5000), (575, 5000), (600, 5000)]);
    // The diff, within a trace and between two.
    let deltas = |answer: &Value| -> Vec<(String, i64)> {
        answer["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["function"].as_str().unwrap().to_owned(),
                    s["delta_bytes"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let diff = server.json("/api/diff?from=0.00000045&to=end&address_max=0xa2ff");
    assert_eq!(deltas(&diff), [("app::temp".to_owned(), -20)]);
    assert_eq!(diff["flame"]["value"], 0);
    let diff = server.json("/api/diff?from=peak&to=end&address_min=0xa300");
    assert_eq!(deltas(&diff), [("app::leaky".to_owned(), -6000)]);
    let between =
        server.json("/api/diff?from_trace=0&from=0.00000045&to_trace=1&to=end&address_max=0xa2ff");
    assert_eq!(deltas(&between), [("app::temp".to_owned(), -20)]);
    // The labels and the exports.
    let labels = server.json("/api/labels?at=0.00000045&address_min=0xa200");
    assert_eq!(labels["label_sets"][0]["live_bytes"], 20);
    assert_eq!(labels["label_sets"][0]["allocated_bytes"], 30);
    let folded = |query: &str| -> u64 {
        let (status, _, body) = server.get(&format!("/api/export/folded?{query}"));
        assert_eq!(status, 200, "{}", shown(&body));
        String::from_utf8(body)
            .unwrap()
            .lines()
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    assert_eq!(folded("at=peak"), 7020);
    assert_eq!(folded("at=peak&address_min=0xa200"), 6020);
    assert_eq!(folded("at=peak&address_max=0xa1ff"), 1000);
    assert_eq!(folded("at=peak&address_min=0xa200&life=temporary"), 5000);
    // The allocations, in hexadecimal too; with group filters, the groups of the blocks within
    // the range.
    assert_eq!(
        server.json("/api/allocations?address_min=0xa300")["total_count"],
        2
    );
    let ids = |query: &str| -> Vec<u64> {
        sites(&server, query)
            .1
            .iter()
            .map(|r| r["id"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(ids("address_min=0xa300&group_allocations_min=2"), [0]);
    assert_eq!(
        ids("address_max=0xa2ff&group_allocations_min=3"),
        Vec::<u64>::new()
    );
    assert_eq!(ids("address_max=0xa2ff&group_leaked_min=1"), [0]);
    // Bad ranges.
    let message = server.error("/api/sites?address_min=0xzz", 400);
    assert!(message.contains("address_min"), "{message}");
    let message = server.error("/api/flame?address_min=0xa300&address_max=0xa200", 400);
    assert!(message.contains("address_max"), "{message}");
    server.error("/api/timeline?address_max=-1", 400);
}

/// Size and lifetime bounds on the index's bin edges answer from the index, other bounds from a
/// scan, and both alike: each pair below selects the same blocks of the known trace (sizes 10,
/// 20, 1000, 1000, 5000; lifetimes 100, 200, 100, 2,000,200 ns and one never freed), the first
/// on the edges, the second off them.
#[test]
fn size_and_lifetime_bounds_on_the_edges_answer_from_the_index() {
    let path = known_trace_file("edges");
    let server = Server::start(&[path.to_str().unwrap()]);
    let summary = server.json("/api/summary");
    let edges = &summary["index_edges"];
    for size in [0u64, 7, 8, 12, 1024, 1536, 1 << 40] {
        assert!(
            edges["size"].as_array().unwrap().contains(&json!(size)),
            "{size}"
        );
    }
    for life in [1u64, 1000, 1_000_000, 1_000_000_000_000] {
        assert!(
            edges["life_ns"].as_array().unwrap().contains(&json!(life)),
            "{life}"
        );
    }
    let pairs = [
        ("size_min=1024", "size_min=1001"),
        ("size_min=1025", "size_min=4999"),
        ("size_max=1023", "size_max=4999"),
        ("size_max=1024", "size_max=4000"),
        ("size_min=16&size_max=1024", "size_min=11&size_max=1000"),
        ("life_min=1000", "life_min=201"),
        ("life_max=999", "life_max=200"),
        ("life_min=101&life_max=1000000", "life_min=150&life_max=300"),
        ("life_min=0&life_max=100", "life_min=0&life_max=101"),
        ("life=never&size_min=512", "life=never&size_min=999"),
        (
            "life=temporary&size_max=1023",
            "life=temporary&size_max=999",
        ),
        ("size_max=8192&thread=1", "size_max=9999&thread=1"),
        ("life_min=10&func=leaky", "life_min=12&func=leaky"),
    ];
    let bucket = summary["bucket_ns"].as_u64().unwrap();
    let edge = format!("{}", bucket as f64 / 1e9);
    let views = [
        "/api/sites?at=peak".to_owned(),
        "/api/sites?at=marker:m".to_owned(),
        "/api/sites?at=end".to_owned(),
        format!("/api/sites?at={edge}"),
        format!("/api/sites?at=0.00000055&to={edge}"),
        "/api/flame?what=live&at=peak".to_owned(),
        "/api/flame?what=allocated".to_owned(),
        "/api/flame?what=temporary".to_owned(),
        "/api/flame?what=leaked".to_owned(),
        "/api/diff?from=marker:m&to=end".to_owned(),
        "/api/diff?from=0&to=peak".to_owned(),
        "/api/site/0?at=peak".to_owned(),
        "/api/sites?group_allocations_min=2".to_owned(),
        "/api/sites?group_interval_min=1".to_owned(),
        "/api/flame?what=allocated&group_interval_max=0".to_owned(),
    ];
    for (aligned, other) in pairs {
        for view in &views {
            let (mut a, mut b) = (
                server.json(&format!("{view}&{aligned}")),
                server.json(&format!("{view}&{other}")),
            );
            if view.starts_with("/api/sites?") {
                let from = a["exact_from"].as_str().unwrap();
                assert!(from.starts_with("index"), "{view}&{aligned}: {from}");
                assert_eq!(b["exact_from"], "scan", "{view}&{other}");
                a["exact_from"] = json!(null);
                b["exact_from"] = json!(null);
            }
            if view.starts_with("/api/site/") {
                // Its timeline: the index's buckets, or a scan's edges.
                a["timeline"] = json!(null);
                b["timeline"] = json!(null);
            }
            assert_eq!(a, b, "{view} with {aligned} and with {other}");
        }
        // The timeline from the index: its buckets, and the same live heap at the end.
        let timeline = server.json(&format!("/api/timeline?points=800&{aligned}"));
        assert_eq!(timeline["bucket_ns"].as_u64().unwrap(), bucket, "{aligned}");
        let scanned = server.json(&format!("/api/timeline?points=800&{other}"));
        assert_eq!(scanned["bucket_ns"], 0, "{other}");
        let last = |t: &Value| {
            let points = t["points"].as_array().unwrap();
            let allocs: u64 = points.iter().map(|p| p["allocs"].as_u64().unwrap()).sum();
            let p = points.last().unwrap();
            (p["live_bytes"].clone(), p["live_blocks"].clone(), allocs)
        };
        assert_eq!(last(&timeline), last(&scanned), "{aligned} and {other}");
    }
    // The figures themselves, from the index.
    assert_eq!(
        sites(&server, "size_max=15").1,
        vec![row(1, [1, 10, 1, 10, 0, 0, 0, 0, 0, 0, 1, 10, 100, 0])]
    );
    assert_eq!(
        sites(&server, "life=never").1,
        vec![row(
            0,
            [1, 1000, 0, 0, 1000, 1, 1000, 1, 1000, 1, 0, 0, 0, 0]
        )]
    );
    let timeline = server.json("/api/timeline?points=800&size_min=4096");
    let points = timeline["points"].as_array().unwrap();
    // The 5000-byte block, allocated at 550 ns and freed at 650, within the first bucket.
    let sum = |key: &str| -> u64 { points.iter().map(|p| p[key].as_u64().unwrap()).sum() };
    assert_eq!((sum("allocs"), sum("alloc_bytes")), (1, 5000));
    assert_eq!((sum("frees"), sum("free_bytes")), (1, 5000));
    assert_eq!(timeline["peak"]["exact"], false);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// A timeline over an empty range (`from=end`, `from=peak&to=peak`, `from=T&to=T`) answers the
/// range asked for, with no point in it.
#[test]
fn empty_timeline_ranges_keep_their_start() {
    let path = known_trace_file("empty-range");
    let server = Server::start(&[path.to_str().unwrap()]);
    let summary = server.json("/api/summary");
    let (peak, end) = (&summary["peak"]["time_ns"], &summary["duration_ns"]);
    assert!(
        peak.as_u64().unwrap() > 0 && end.as_u64().unwrap() > 0,
        "{summary}"
    );
    for (query, at) in [
        ("from=end", end.clone()),
        ("from=peak&to=peak", peak.clone()),
        ("from=end&to=end", end.clone()),
        (
            "from=50%25&to=50%25",
            json!((end.as_u64().unwrap() as f64 * 0.5).round() as u64),
        ),
        ("from=peak&to=peak&points=3", peak.clone()),
    ] {
        let timeline = server.json(&format!("/api/timeline?{query}"));
        assert_eq!(timeline["from_ns"], at, "{query}: {timeline}");
        assert_eq!(timeline["to_ns"], at, "{query}: {timeline}");
        assert_eq!(timeline["points"], json!([]), "{query}: {timeline}");
    }
    drop(server);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
