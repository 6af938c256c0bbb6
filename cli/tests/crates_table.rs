//! The crate table of a trace: `memprof report --by crate` and `--by caller-crate`, `memprof
//! summary`'s crates, and `memprof serve`'s `/api/crates`, the `crate` filter on the other views
//! and the page's Crates view (headless Chromium). The trace's stacks are shaped like a real
//! program's, with frames of the Cargo registry's crates (one inlined into the program's code),
//! std's own vendored hashbrown and a C library without debug information, so every figure is
//! known.

#[path = "../../tests/common/mod.rs"]
mod common;

use memprof_trace::{ChunkEncoder, Compressor, Header, SymbolFrame};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const RUSTC: &str = "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library";
const REGISTRY: &str = "/home/u/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f";

/// One thread; stacks (innermost first, each below std's `Vec::with_capacity` or nothing) and
/// events (ns, address, bytes):
///
/// | stack | frames                                                     | events                          |
/// |-------|------------------------------------------------------------|---------------------------------|
/// | 0     | `serde_json::de::..parse_str`, `my_cache::Cache::load`, `app::main` | 100 alloc 1000; 150 alloc 200, freed at 160 |
/// | 1     | `regex_lite::Regex::new`, `app::main` (label `tenant=acme`) | 200 alloc 3000                 |
/// | 2     | hashbrown's `reserve_rehash` and `insert` inlined into `my_cache::Cache::put`, `app::main` | 300 alloc 500; 310 alloc 300, freed at 320 |
/// | 3     | std's vendored hashbrown and `HashMap::insert`, `app::main` | 400 alloc 64                   |
/// | 4     | `sqlite3Malloc` in `libsqlite3.so.0` (no debug information), `app::main` | 500 alloc 4096 |
fn crates_trace() -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(9, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let mut compressor = Compressor::new(3).unwrap();
    let mut defs = ChunkEncoder::new(0);
    let stacks: [&[u64]; 5] = [
        &[0x131, 0x1101, 0x1201, 0x2101],
        &[0x131, 0x1301, 0x2101],
        &[0x1401, 0x2101],
        &[0x1501, 0x2101],
        &[0x1601, 0x2101],
    ];
    for (id, stack) in stacks.iter().enumerate() {
        defs.stack(id as u32, stack.iter().copied());
    }
    defs.label_set(5, &[("tenant".into(), "acme".into())]);
    defs.stack_labels(1, 5);
    defs.thread(1, 100, "main");
    defs.finish(Some(&mut compressor), &mut out).unwrap();
    let mut events = ChunkEncoder::new(1);
    events.alloc(100, 0xa000, 1000, 0);
    events.alloc(150, 0xa100, 200, 0);
    events.free(160, 0xa100);
    events.alloc(200, 0xb000, 3000, 1);
    events.alloc(300, 0xc000, 500, 2);
    events.alloc(310, 0xc100, 300, 2);
    events.free(320, 0xc100);
    events.alloc(400, 0xd000, 64, 3);
    events.alloc(500, 0xe000, 4096, 4);
    events.finish(Some(&mut compressor), &mut out).unwrap();
    let frame = |function: &str, file: &str, line: u32| SymbolFrame {
        function: Some(function.into()),
        file: Some(file.into()),
        line,
        column: 0,
    };
    let registry = |directory: &str, function: &str| {
        frame(function, &format!("{REGISTRY}/{directory}/src/lib.rs"), 10)
    };
    let mut symbols = ChunkEncoder::new(0);
    let table: Vec<(u64, Vec<SymbolFrame>)> = vec![
        (
            0x131,
            vec![
                frame(
                    "alloc::raw_vec::RawVecInner<A>::try_allocate_in",
                    &format!("{RUSTC}/alloc/src/raw_vec/mod.rs"),
                    476,
                ),
                frame(
                    "alloc::vec::Vec<T>::with_capacity",
                    &format!("{RUSTC}/alloc/src/vec/mod.rs"),
                    480,
                ),
            ],
        ),
        (
            0x1101,
            vec![registry(
                "serde_json-1.0.140",
                "serde_json::de::Deserializer<R>::parse_str",
            )],
        ),
        (
            0x1201,
            vec![frame("my_cache::Cache::load", "my_cache/src/lib.rs", 12)],
        ),
        (
            0x1301,
            vec![registry("regex-lite-0.1.9", "regex_lite::Regex::new")],
        ),
        (
            0x1401,
            vec![
                registry(
                    "hashbrown-0.17.1",
                    "hashbrown::raw::RawTable<T,A>::reserve_rehash",
                ),
                registry(
                    "hashbrown-0.17.1",
                    "hashbrown::map::HashMap<K,V,S,A>::insert",
                ),
                frame("my_cache::Cache::put", "my_cache/src/lib.rs", 50),
            ],
        ),
        (
            0x1501,
            vec![
                frame(
                    "hashbrown::raw::RawTableInner::fallible_with_capacity",
                    "/rust/deps/hashbrown-0.15.5/src/raw/mod.rs",
                    1,
                ),
                frame(
                    "std::collections::hash::map::HashMap<K,V,S>::insert",
                    &format!("{RUSTC}/std/src/collections/hash/map.rs"),
                    1,
                ),
            ],
        ),
        (
            0x1601,
            vec![frame("sqlite3Malloc", "/usr/lib/libsqlite3.so.0", 0)],
        ),
        (0x2101, vec![frame("app::main", "src/main.rs", 5)]),
    ];
    for (address, frames) in table {
        symbols.symbol(address, &frames);
    }
    symbols.end(600, 0);
    symbols.finish(Some(&mut compressor), &mut out).unwrap();
    out
}

fn memprof(args: &[&str]) -> String {
    let output: Output = Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "memprof {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn crates_of_a_trace() {
    let dir = std::env::temp_dir().join(format!("memprof-crates-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("crates.mptrace");
    std::fs::write(&path, crates_trace()).unwrap();
    let trace = path.to_str().unwrap();

    assert_eq!(
        memprof(&["report", trace, "--by", "crate", "--format", "tsv"]),
        "6\n\
         libsqlite3.so.0\t4096\t1\t4096\t1\n\
         regex_lite\t3000\t1\t3000\t1\n\
         serde_json\t1000\t1\t1200\t2\n\
         hashbrown\t500\t1\t800\t2\n\
         app\t64\t1\t64\t1\n\
         (total)\t8660\t5\t9160\t7\n"
    );
    assert_eq!(
        memprof(&["report", trace, "--by", "caller-crate", "--format", "tsv"]),
        "6\n\
         app ← libsqlite3.so.0\t4096\t1\t4096\t1\n\
         app ← regex_lite\t3000\t1\t3000\t1\n\
         my_cache ← serde_json\t1000\t1\t1200\t2\n\
         my_cache ← hashbrown\t500\t1\t800\t2\n\
         app\t64\t1\t64\t1\n\
         (total)\t8660\t5\t9160\t7\n"
    );
    // One label's blocks.
    assert_eq!(
        memprof(&[
            "report",
            trace,
            "--by",
            "crate",
            "--label",
            "tenant=acme",
            "--format",
            "tsv"
        ]),
        "2\nregex_lite\t3000\t1\t3000\t1\n(total)\t3000\t1\t3000\t1\n"
    );
    // Before the last allocation, in Markdown.
    let markdown = memprof(&["report", trace, "--by", "crate", "--at", "0.000000450"]);
    assert!(
        markdown.starts_with("| Crate ") && markdown.contains("| ` regex_lite ` |      3,000 |"),
        "{markdown}"
    );
    assert!(!markdown.contains("libsqlite3"), "{markdown}");
    assert!(
        markdown.contains("| **total**      |      4,564 |"),
        "{markdown}"
    );
    let summary = memprof(&["summary", trace, "--top", "2"]);
    let section = [
        "crates (live at the end, allocated over the run; memprof report --by crate):",
        "  live bytes  live blocks  allocated bytes  allocated blocks  crate",
        "        4096            1             4096                 1  libsqlite3.so.0",
        "        3000            1             3000                 1  regex_lite",
        "        1564            3             2064                 5  (3 more crates)",
    ]
    .join("\n");
    assert!(summary.contains(&format!("\n{section}\n")), "{summary}");
    let output = Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(["report", trace, "--by", "crate", "--sort", "short-lived"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));

    // The viewer.
    let mut child = Command::new(env!("CARGO_BIN_EXE_memprof"))
        .arg("serve")
        .arg(&path)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let address = loop {
        let line = lines.next().expect("memprof serve stopped").unwrap();
        if let Some(rest) = line.strip_prefix("memprof: serving on http://") {
            break rest.trim_end_matches('/').to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let api = |path: &str| -> Value { serde_json::from_slice(&get(&address, path)).unwrap() };
    let row = |name: &str, live: [u64; 2], allocated: [u64; 2]| {
        json!({
            "crate": name,
            "live_bytes": live[0],
            "live_blocks": live[1],
            "allocated_bytes": allocated[0],
            "allocated_blocks": allocated[1],
        })
    };
    let end = api("/api/crates");
    assert_eq!(
        end["crates"],
        json!([
            row("libsqlite3.so.0", [4096, 1], [4096, 1]),
            row("regex_lite", [3000, 1], [3000, 1]),
            row("serde_json", [1000, 1], [1200, 2]),
            row("hashbrown", [500, 1], [800, 2]),
            row("app", [64, 1], [64, 1]),
        ])
    );
    assert_eq!(
        end["total"],
        json!({"live_bytes": 8660, "live_blocks": 5, "allocated_bytes": 9160, "allocated_blocks": 7})
    );
    let by_caller = api("/api/crates?by=caller-crate");
    assert_eq!(
        by_caller["crates"][2],
        row("my_cache ← serde_json", [1000, 1], [1200, 2])
    );
    // The crate filter, on the crate table and on the other views.
    let hashbrown = api("/api/crates?crate=hashbrown");
    assert_eq!(
        hashbrown["crates"],
        json!([row("hashbrown", [500, 1], [800, 2])])
    );
    let sites = String::from_utf8(get(&address, "/api/sites?crate=regex_lite")).unwrap();
    assert!(sites.contains("regex_lite::Regex::new"), "{sites}");
    assert!(
        !sites.contains("serde_json") && !sites.contains("sqlite3Malloc"),
        "{sites}"
    );
    let summary_of = |query: &str| api(&format!("/api/timeline?points=2{query}"));
    let all = summary_of("");
    let serde = summary_of("&crate=serde_json");
    assert_ne!(all, serde);
    assert!(serde.to_string().contains("1000"), "{serde}");
    let (status, _) = get_status(&address, "/api/crates?by=site");
    assert_eq!(status, 400);

    // The page's Crates view, and its crate filter on the Sites view, in headless Chromium.
    match common::chromium() {
        Some(chromium) => {
            let dump = |query: &str, profile: &str| {
                common::run(
                    Command::new(chromium)
                        .args([
                            "--headless",
                            "--no-sandbox",
                            "--disable-gpu",
                            "--no-first-run",
                            "--disable-background-networking",
                            "--disable-component-update",
                            "--disable-sync",
                            "--dump-dom",
                            "--virtual-time-budget=10000",
                        ])
                        .arg(format!("--user-data-dir={}", dir.join(profile).display()))
                        .arg(format!("http://{address}/?{query}")),
                )
            };
            let dom = dump("view=crates&at=end", "profile-crates");
            let table = dom
                .split("<table id=\"crates\">")
                .nth(1)
                .and_then(|rest| rest.split("</table>").next())
                .unwrap_or_else(|| panic!("no crates table in\n{dom}"));
            let rows: Vec<&str> = table.split("<tr>").skip(2).collect();
            assert_eq!(rows.len(), 6, "{table}");
            for (row, name) in rows.iter().zip([
                "libsqlite3.so.0",
                "regex_lite",
                "serde_json",
                "hashbrown",
                "app",
                "total",
            ]) {
                assert!(row.contains(&format!(">{name}<")), "{name}: {row}");
            }
            assert!(rows[2].contains("data-crate=\"serde_json\""), "{}", rows[2]);
            let dom = dump("view=crates&by=caller-crate", "profile-callers");
            assert!(dom.contains(">my_cache ← hashbrown<"), "{dom}");
            let dom = dump("view=sites&crate=serde_json", "profile-sites");
            let sites = dom
                .split("<table id=\"sites\"")
                .nth(1)
                .and_then(|rest| rest.split("</table>").next())
                .unwrap_or_else(|| panic!("no sites table in\n{dom}"));
            assert!(sites.contains("serde_json"), "{sites}");
            assert!(
                !sites.contains("regex_lite") && !sites.contains("sqlite3Malloc"),
                "{sites}"
            );
        }
        None => common::missing_tool("the viewer's Crates view", "apt-get install -y chromium"),
    }
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One GET that must answer 200; its body.
fn get(address: &str, path: &str) -> Vec<u8> {
    let (status, body) = get_status(address, path);
    assert_eq!(
        status,
        200,
        "GET {path}: {}",
        String::from_utf8_lossy(&body)
    );
    body
}

/// One GET: its status and body.
fn get_status(address: &str, path: &str) -> (u16, Vec<u8>) {
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
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("GET {path}: {head}"));
    let body = &response[split + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return (status, body.to_vec());
    }
    let (mut body, mut out) = (body, Vec::new());
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = std::str::from_utf8(&body[..line]).unwrap();
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        body = &body[line + 2..];
        if size == 0 {
            return (status, out);
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}
