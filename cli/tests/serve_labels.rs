//! `memprof serve` on a trace with labels (format 1.2): `/api/labels` groups the heap at a
//! moment by label set, `label=KEY=VALUE` filters every view, `/api/export/pprof` carries the
//! labels as sample labels, and the page's Labels tab shows them (headless Chromium).

#[path = "../../tests/common/mod.rs"]
mod common;

use memprof_trace::{ChunkEncoder, Compressor, Header, SymbolFrame};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A trace: stack 0 unlabelled, stack 1 `tenant=acme`, stack 2 `kind=batch,tenant=zeta`, each
/// with some blocks live at the end and some freed, and a marker `m` in between.
fn labelled_trace() -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(7, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let mut compressor = Compressor::new(3).unwrap();
    let mut defs = ChunkEncoder::new(0);
    for (id, address) in [(0, 0x1001u64), (1, 0x2001), (2, 0x3001)] {
        defs.stack(id, [address].into_iter());
    }
    defs.label_set(5, &[("tenant".into(), "acme".into())]);
    defs.stack_labels(1, 5);
    defs.label_set(
        6,
        &[
            ("kind".into(), "batch".into()),
            ("tenant".into(), "zeta".into()),
        ],
    );
    defs.stack_labels(2, 6);
    defs.thread(1, 100, "main");
    defs.label(0, "m");
    defs.finish(Some(&mut compressor), &mut out).unwrap();
    let mut events = ChunkEncoder::new(1);
    events.alloc(100, 0xa000, 1000, 0);
    events.alloc(200, 0xb000, 4000, 1);
    events.alloc(300, 0xb100, 500, 1);
    events.free(400, 0xb100);
    events.alloc(500, 0xc000, 7000, 2);
    events.mark(600, 0);
    events.alloc(700, 0xc100, 300, 2);
    events.finish(Some(&mut compressor), &mut out).unwrap();
    let mut symbols = ChunkEncoder::new(0);
    for (address, function) in [
        (0x1001, "app::plain"),
        (0x2001, "app::acme"),
        (0x3001, "app::zeta"),
    ] {
        symbols.symbol(
            address,
            &[SymbolFrame {
                function: Some(function.into()),
                file: Some("src/app.rs".into()),
                line: 1,
                column: 1,
            }],
        );
    }
    symbols.end(7, 0);
    symbols.finish(Some(&mut compressor), &mut out).unwrap();
    out
}

#[test]
fn the_viewer_groups_by_label() {
    let dir = std::env::temp_dir().join(format!("memprof-serve-labels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("labels.mptrace");
    std::fs::write(&path, labelled_trace()).unwrap();
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

    let set = |labels: Value, live: [u64; 2], allocated: [u64; 2]| {
        json!({
            "labels": labels,
            "live_blocks": live[0],
            "live_bytes": live[1],
            "allocated_blocks": allocated[0],
            "allocated_bytes": allocated[1],
        })
    };
    let end: Value = serde_json::from_slice(&get(&address, "/api/labels")).unwrap();
    assert_eq!(
        end["label_sets"],
        json!([
            set(
                json!({"kind": "batch", "tenant": "zeta"}),
                [2, 7300],
                [2, 7300]
            ),
            set(json!({"tenant": "acme"}), [1, 4000], [2, 4500]),
            set(json!({}), [1, 1000], [1, 1000]),
        ])
    );
    let at_marker: Value =
        serde_json::from_slice(&get(&address, "/api/labels?at=marker:m")).unwrap();
    assert_eq!(
        at_marker["label_sets"][0],
        set(
            json!({"kind": "batch", "tenant": "zeta"}),
            [1, 7000],
            [1, 7000]
        )
    );

    let profile = common::decode_pprof(&get(&address, "/api/export/pprof"));
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
    assert_eq!(inuse_with("tenant", "acme"), 4000);
    assert_eq!(inuse_with("tenant", "zeta"), 7300);
    assert_eq!(inuse_with("kind", "batch"), 7300);

    // `label=KEY=VALUE` filters every view, from the index and from scans alike.
    let acme: Value =
        serde_json::from_slice(&get(&address, "/api/labels?label=tenant%3Dacme")).unwrap();
    assert_eq!(
        acme["label_sets"],
        json!([set(json!({"tenant": "acme"}), [1, 4000], [2, 4500])])
    );
    let sites = String::from_utf8(get(&address, "/api/sites?label=tenant%3Dzeta")).unwrap();
    assert!(sites.contains("app::zeta"), "{sites}");
    assert!(
        !sites.contains("app::acme") && !sites.contains("app::plain"),
        "{sites}"
    );
    let zeta = common::decode_pprof(&get(&address, "/api/export/pprof?label=kind%3Dbatch"));
    let inuse: i64 = zeta.sample.iter().map(|sample| sample.value[3]).sum();
    assert_eq!(inuse, 7300);
    let (status, _) = get_status(&address, "/api/labels?label=tenant");
    assert_eq!(status, 400);
    // No label has an empty value: a filter on one is refused, as `memprof report --label`
    // and `MEMPROF_LABEL` refuse it.
    let (status, _) = get_status(&address, "/api/labels?label=tenant%3D");
    assert_eq!(status, 400);

    // The page's Labels view, in headless Chromium.
    match common::chromium() {
        Some(chromium) => {
            let dom = common::run(
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
                    .arg(format!("--user-data-dir={}", dir.join("profile").display()))
                    .arg(format!("http://{address}/?view=labels&at=end")),
            );
            let table = dom
                .split("<table id=\"labels\">")
                .nth(1)
                .unwrap_or_else(|| panic!("no labels table in\n{dom}"));
            let rows: Vec<&str> = table.split("<tr>").skip(2).collect();
            assert_eq!(rows.len(), 3, "{table}");
            for (row, labels) in
                rows.iter()
                    .zip(["kind=batch, tenant=zeta", "tenant=acme", "(no labels)"])
            {
                assert!(row.contains(&format!(">{labels}<")), "{labels}: {row}");
            }
        }
        None => common::missing_tool("the viewer's Labels view", "apt-get install -y chromium"),
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
