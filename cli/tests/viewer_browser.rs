//! The viewer's page in a real browser: `memprof serve` on a trace written event by event with
//! the format's encoder (so every site, size and time is known), and headless Chromium on its
//! page. `--dump-dom` covers loading, the filters read from the URL and the diff; the clicks (a
//! site's row, a drag on the timeline, a frame of the flame graph) go through the DevTools
//! protocol as a user's mouse would, over its WebSocket: `tungstenite` is a small synchronous
//! client, and the test needs only five of the protocol's commands, where a browser-driver crate
//! brings a whole browser-management layer.
//!
//! Chromium missing fails the test under `MEMPROF_REQUIRE_TOOLS=1` (`scripts/test.sh`) and skips
//! it with a message otherwise.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;
#[path = "support/browser.rs"]
mod browser;

use browser::{Browser, CHROMIUM_FLAGS, centre_of};

use common::{chromium, missing_tool};
use memprof_trace::{ChunkEncoder, Compressor, Header, SymbolFrame};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// Return addresses of the trace's stacks; each has one frame in the symbol chunk.
const LEAKY: u64 = 0x1000;
const TEMP: u64 = 0x2000;
const NET: u64 = 0x3000;
const MAIN_LEAKY: u64 = 0x4000;
const MAIN_TEMP: u64 = 0x4100;
const WORKER: u64 = 0x5000;

/// Three call sites: `app::leaky` (two blocks of 1000 bytes from `app::main`, one never freed),
/// `app::temp` (two temporary blocks of 10 and 20 bytes) and `net::buffer` on the worker thread
/// (5000 bytes freed at once, 300 bytes never freed); a marker `loaded` between them.
fn known_trace() -> Vec<u8> {
    run_trace(1000, 300, false)
}

/// The known trace's program, run with other sizes: `app::leaky`'s block never freed of
/// `leaked` bytes, `net::buffer`'s of `kept` bytes, and `app::temp`'s second block (20 bytes)
/// never freed when `temp_kept`.
fn run_trace(leaked: u64, kept: u64, temp_kept: bool) -> Vec<u8> {
    sampled_trace(leaked, kept, temp_kept, 0)
}

/// [`run_trace`] as recorded sampling one allocation per `interval` bytes on average (0: every
/// allocation recorded).
fn sampled_trace(leaked: u64, kept: u64, temp_kept: bool, interval: u64) -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(interval, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let chunk = |encoder: &mut ChunkEncoder, out: &mut Vec<u8>| {
        encoder
            .finish(Some(&mut Compressor::new(3).unwrap()), out)
            .unwrap();
    };
    let mut definitions = ChunkEncoder::new(0);
    definitions.stack(0, [LEAKY + 1, MAIN_LEAKY + 1].into_iter());
    definitions.stack(1, [TEMP + 1, MAIN_TEMP + 1].into_iter());
    definitions.stack(2, [NET + 1, WORKER + 1].into_iter());
    definitions.thread(1, 100, "main");
    definitions.thread(2, 101, "worker");
    definitions.label(3, "loaded");
    chunk(&mut definitions, &mut out);
    let mut main = ChunkEncoder::new(1);
    main.alloc(100_000, 0xa100, leaked, 0);
    main.alloc(200_000, 0xa200, 10, 1);
    main.free(300_000, 0xa200);
    main.alloc(400_000, 0xa200, 20, 1);
    main.alloc(500_000, 0xa300, 1000, 0);
    if !temp_kept {
        main.free(600_000, 0xa200);
    }
    main.mark(700_000, 3);
    main.free(2_000_000, 0xa300);
    chunk(&mut main, &mut out);
    let mut worker = ChunkEncoder::new(2);
    worker.alloc(550_000, 0xb000, 5000, 2);
    worker.free(1_200_000, 0xb000);
    worker.alloc(1_500_000, 0xb100, kept, 2);
    chunk(&mut worker, &mut out);
    let mut symbols = ChunkEncoder::new(0);
    for (address, function, file, line) in [
        (LEAKY + 1, "app::leaky", "src/app.rs", 10),
        (TEMP + 1, "app::temp", "src/app.rs", 20),
        (NET + 1, "net::buffer", "src/net.rs", 30),
        (MAIN_LEAKY + 1, "app::main", "src/main.rs", 5),
        (MAIN_TEMP + 1, "app::main", "src/main.rs", 6),
        (WORKER + 1, "app::worker", "src/worker.rs", 7),
    ] {
        symbols.symbol(
            address,
            &[SymbolFrame {
                function: Some(function.into()),
                file: Some(file.into()),
                line,
                column: 5,
            }],
        );
    }
    symbols.end(11, 0);
    chunk(&mut symbols, &mut out);
    out
}

/// `memprof serve` on a trace, killed when dropped.
struct Server {
    child: Child,
    address: SocketAddr,
}

impl Server {
    fn start(trace: &Path) -> Server {
        Server::start_all(&[trace])
    }

    /// `memprof serve` on several traces, trace `i` under `/api/traces/i/`.
    fn start_all(traces: &[&Path]) -> Server {
        // A port free a moment ago: the server takes an address, not a listening socket.
        let address = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_memprof"))
            .arg("serve")
            .args(traces)
            .arg("--listen")
            .arg(address.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut server = Server { child, address };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("memprof serve exited with {status} before answering");
            }
            if get(address, "/api/summary").is_some_and(|(status, _)| status == 200) {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "memprof serve did not answer /api/summary within a minute"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn url(&self, target: &str) -> String {
        format!("http://{}{target}", self.address)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain GET: the status and the body, or None when nothing answers.
fn get(address: SocketAddr, target: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// A page's DOM once its scripts ran for up to five seconds of virtual time, and the file it is
/// kept in (the failure messages name the file rather than print pages of SVG).
struct Dom {
    html: String,
    file: PathBuf,
}

fn dump_dom(chromium: &str, profile: &Path, url: &str) -> Dom {
    let output = Command::new(chromium)
        .args(CHROMIUM_FLAGS)
        .arg("--dump-dom")
        .arg("--virtual-time-budget=5000")
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "chromium --dump-dom {url}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let html = String::from_utf8(output.stdout).unwrap();
    let dir = profile.parent().unwrap();
    let count = std::fs::read_dir(dir).unwrap().count();
    let file = dir.join(format!("dom-{count}.html"));
    std::fs::write(&file, format!("<!-- {url} -->\n{html}")).unwrap();
    Dom { html, file }
}

/// The rows of the call-site table: each row's function names, in order.
fn site_rows(dom: &str) -> Vec<String> {
    let body = dom
        .split_once("<table id=\"sites\"")
        .and_then(|(_, rest)| rest.split_once("</table>"))
        .map(|(table, _)| table)
        .expect("the page has a call-site table");
    body.split("<tr data-site=")
        .skip(1)
        .map(|row| {
            let (_, rest) = row.split_once("<div class=\"function\">").unwrap();
            rest.split_once("</div>").unwrap().0.to_owned()
        })
        .collect()
}

/// The values of the flame graph's frames of function `function` (a frame's name is its function,
/// or its location and function as the Markdown report writes it).
fn flame_values(dom: &str, function: &str) -> Vec<u64> {
    dom.split("data-name=\"")
        .skip(1)
        .filter_map(|tag| {
            let (name, rest) = tag.split_once('"')?;
            let named = name == function || name.ends_with(&format!(" in '{function}'"));
            let value = rest.split_once("data-value=\"")?.1.split_once('"')?.0;
            named.then(|| value.parse().unwrap())
        })
        .collect()
}

fn assert_ready(dom: &Dom) {
    assert!(
        dom.html.contains("data-state=\"ready\""),
        "the page did not finish: {}",
        dom.file.display()
    );
    assert!(
        !dom.html.contains("class=\"error\""),
        "the page shows an error: {}",
        dom.file.display()
    );
}

#[test]
fn the_viewer_page_in_chromium() {
    let Some(chromium) = chromium() else {
        missing_tool(
            "the viewer's page in a browser",
            "apt-get install -y chromium",
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("viewer-browser-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("known.mptrace");
    std::fs::write(&trace, known_trace()).unwrap();
    let server = Server::start(&trace);
    let profile = dir.join("profile");

    // The page loads; the timeline has points, the marker and the peak; the flame graph of what
    // was allocated over the run has every site under its callers.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=flame&what=allocated"),
    );
    assert_ready(&dom);
    let file = dom.file.display();
    for expected in [
        "class=\"timeline\"",
        "data-label=\"loaded\"",
        "class=\"peak\"",
    ] {
        assert!(dom.html.contains(expected), "no {expected} in {file}");
    }
    assert!(!dom.html.contains("data-points=\"0\""), "{file}");
    // The thread filter lists each thread by its label: its name alone, no other has it.
    for expected in [
        "<option value=\"1\">main</option>",
        "<option value=\"2\">worker</option>",
    ] {
        assert!(dom.html.contains(expected), "no {expected} in {file}");
    }
    for (name, bytes) in [
        ("app::leaky", 2000),
        ("app::temp", 30),
        ("net::buffer", 5300),
    ] {
        assert_eq!(
            flame_values(&dom.html, name),
            [bytes],
            "{name} in the flame graph of {file}"
        );
    }
    for caller in ["app::main", "app::worker"] {
        assert!(
            !flame_values(&dom.html, caller).is_empty(),
            "no {caller} in the flame graph of {file}"
        );
    }

    // The call-site table, then the same table with filters from the URL (the worker thread
    // by the id the API gives it).
    let (_, summary) = get(server.address, "/api/summary").unwrap();
    let summary: Value = serde_json::from_str(&summary).unwrap();
    let worker = summary["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "worker")
        .unwrap_or_else(|| panic!("no worker thread in {summary}"))["id"]
        .clone();
    for (query, expected) in [
        ("", &["net::buffer", "app::leaky", "app::temp"][..]),
        ("&size_min=1000", &["net::buffer", "app::leaky"][..]),
        ("&size_min=2000", &["net::buffer"][..]),
        (
            "&func=%5Eapp%3A%3Amain%24",
            &["app::leaky", "app::temp"][..],
        ),
        ("&nofile=net", &["app::leaky", "app::temp"][..]),
        ("&life=never", &["app::leaky", "net::buffer"][..]),
        (&format!("&thread={worker}"), &["net::buffer"][..]),
    ] {
        let url = server.url(&format!("/?view=sites&sort=allocated_bytes&desc=1{query}"));
        let dom = dump_dom(chromium, &profile, &url);
        assert_ready(&dom);
        assert_eq!(site_rows(&dom.html), expected, "{}", dom.file.display());
        if query == "&size_min=1000" {
            // The size control offers the index's edges, and keeps a bound off them.
            for option in [
                r#"<option value="1024">1.00 KiB</option>"#,
                r#"<option value="1536">1.50 KiB</option>"#,
                ">1000 (replayed)</option>",
                r#"<option value="1000000">1.0 ms</option>"#,
            ] {
                assert!(
                    dom.html.contains(option),
                    "{option} in {}",
                    dom.file.display()
                );
            }
        }
    }

    // The diff between the start and the end: what is left grew, and only that is in the flame
    // graph of the growth.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=diff&from=start&to=end"),
    );
    assert_ready(&dom);
    let diff = dom
        .html
        .split_once("<table id=\"diff\">")
        .and_then(|(_, rest)| rest.split_once("</table>"))
        .map(|(table, _)| table)
        .expect("the page has a diff table");
    let grown: Vec<&str> = diff
        .split("<div class=\"function\">")
        .skip(1)
        .map(|cell| cell.split_once("</div>").unwrap().0)
        .collect();
    assert_eq!(
        grown,
        ["app::leaky", "net::buffer"],
        "{}",
        dom.file.display()
    );
    for (name, bytes) in [("app::leaky", 1000), ("net::buffer", 300)] {
        assert_eq!(
            flame_values(&dom.html, name),
            [bytes],
            "{name} in the growth of {}",
            dom.file.display()
        );
    }
    assert!(flame_values(&dom.html, "app::temp").is_empty());

    // A query the API refuses shows its message in the page, not a blank page.
    let dom = dump_dom(chromium, &profile, &server.url("/?view=sites&func=%28"));
    let error = dom
        .html
        .split_once("<div class=\"error\"><span>")
        .and_then(|(_, rest)| rest.split_once("</span>"))
        .map(|(message, _)| message)
        .unwrap_or_else(|| panic!("no error shown in {}", dom.file.display()));
    assert!(error.contains("400") && error.contains("func"), "{error}");

    // A click on a row opens the site's stack with its files and lines; a drag on the timeline
    // selects a range, kept in the URL.
    let mut browser = Browser::open(
        chromium,
        &dir.join("profile-cdp"),
        &server.url("/?view=sites"),
    );
    browser.wait_for("document.body.dataset.state === 'ready'");
    // The export link of the HTML report gives the report of the page's moment.
    let link = browser.eval("document.querySelector('#exports a[data-format=html]').href");
    let link = link.as_str().unwrap();
    let target = &link[link.find("/api/").expect(link)..];
    let (status, body) = get(server.address, target).unwrap();
    assert_eq!(status, 200, "{target}");
    assert!(body.starts_with("<!DOCTYPE html>"), "{target}");
    assert!(body.contains("\"function\":\"app::leaky\""), "{target}");
    let (x, y) = centre_of(
        &mut browser,
        "[...document.querySelectorAll('#sites tr[data-site]')].find(r => r.textContent.includes('app::leaky'))",
    );
    browser.click(x, y);
    browser.wait_for(
        "document.body.dataset.state === 'ready' && !document.getElementById('site').hidden \
         && document.getElementById('site-stacks').textContent.includes('src/app.rs:10')",
    );
    let stacks = browser.eval("document.getElementById('site-stacks').innerText");
    let stacks = stacks.as_str().unwrap();
    for expected in ["app::leaky", "src/app.rs:10", "app::main", "src/main.rs:5"] {
        assert!(stacks.contains(expected), "{expected} missing: {stacks}");
    }
    assert!(!stacks.contains("net::buffer"), "{stacks}");
    let search = browser.eval("location.search");
    assert!(search.as_str().unwrap().contains("site="), "{search}");

    let (left, top, width) = {
        let r = browser.eval(
            "(() => { const r = document.querySelector('#timeline .overlay').getBoundingClientRect(); \
             return [r.x, r.y + r.height / 2, r.width]; })()",
        );
        (
            r[0].as_f64().unwrap(),
            r[1].as_f64().unwrap(),
            r[2].as_f64().unwrap(),
        )
    };
    browser.mouse("mouseMoved", left + width * 0.25, top);
    browser.mouse("mousePressed", left + width * 0.25, top);
    browser.mouse("mouseMoved", left + width * 0.5, top);
    browser.mouse("mouseReleased", left + width * 0.5, top);
    browser.wait_for(
        "new URLSearchParams(location.search).has('from') && new URLSearchParams(location.search).has('to') \
         && document.body.dataset.state === 'ready'",
    );
    let range = browser.eval(
        "[new URLSearchParams(location.search).get('from'), new URLSearchParams(location.search).get('to')]",
    );
    let seconds = |v: &Value| v.as_str().unwrap().parse::<f64>().unwrap();
    let (from, to) = (seconds(&range[0]), seconds(&range[1]));
    assert!(
        0.0003 < from && from < 0.0007 && 0.0008 < to && to < 0.0012,
        "a drag over the second quarter of a 2 ms run selected {range}"
    );

    // A click on a frame of the flame graph zooms into it: its callee then fills the width.
    browser.call(
        "Page.navigate",
        json!({ "url": server.url("/?view=flame&what=allocated") }),
    );
    browser.wait_for(
        "location.search.includes('view=flame') && document.body.dataset.state === 'ready' \
         && !!document.querySelector('#flame svg')",
    );
    let frame = "[...document.querySelectorAll('#flame g.frame')].find(g => g.dataset.name.endsWith(\"'app::main'\") || g.dataset.name === 'app::main')";
    let (x, y) = centre_of(&mut browser, frame);
    browser.click(x, y);
    browser.wait_for(
        "document.body.dataset.state === 'ready' && new URLSearchParams(location.search).has('zoom')",
    );
    let widths = browser.eval(
        "(() => { const svg = document.querySelector('#flame svg'); \
         const leaky = [...svg.querySelectorAll('g.frame')].find(g => g.dataset.name.includes('app::leaky')); \
         return [Number(leaky.querySelector('rect').getAttribute('width')), Number(svg.getAttribute('width'))]; })()",
    );
    let (leaky, whole) = (widths[0].as_f64().unwrap(), widths[1].as_f64().unwrap());
    assert!(
        leaky > whole - 2.0,
        "app::leaky is {leaky} of {whole} pixels wide after zooming into app::main"
    );
    drop(browser);
    drop(server);
    // The browser's processes may still be writing its profile there as it goes: the
    // directory is the test's scratch, not what it checks.
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace of one block and `count` markers (`m0`, `m1`, ...), one every microsecond.
fn marked_trace(count: u32) -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let chunk = |encoder: &mut ChunkEncoder, out: &mut Vec<u8>| {
        encoder
            .finish(Some(&mut Compressor::new(3).unwrap()), out)
            .unwrap();
    };
    let mut definitions = ChunkEncoder::new(0);
    definitions.stack(0, [LEAKY + 1, MAIN_LEAKY + 1].into_iter());
    definitions.thread(1, 100, "main");
    for label in 0..count {
        definitions.label(label, &format!("m{label}"));
    }
    chunk(&mut definitions, &mut out);
    let mut main = ChunkEncoder::new(1);
    main.alloc(500, 0xa100, 1000, 0);
    for label in 0..count {
        main.mark(1_000 * u64::from(label + 1), label);
    }
    chunk(&mut main, &mut out);
    let mut symbols = ChunkEncoder::new(0);
    for (address, function, line) in [
        (LEAKY + 1, "app::leaky", 10),
        (MAIN_LEAKY + 1, "app::main", 5),
    ] {
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
    symbols.end(1_000 * u64::from(count + 1), 0);
    chunk(&mut symbols, &mut out);
    out
}

/// A sampled trace: the page says its figures are estimates, names the interval, and marks the
/// figures of the call-site table `≈`; the same trace recorded whole has no such mark.
#[test]
fn the_viewer_marks_a_sampled_traces_estimates() {
    let Some(chromium) = chromium() else {
        missing_tool(
            "the viewer's page in a browser",
            "apt-get install -y chromium",
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("viewer-sampled-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for interval in [4096, 0] {
        let trace = dir.join(format!("sampled-{interval}.mptrace"));
        std::fs::write(&trace, sampled_trace(1000, 300, false, interval)).unwrap();
        let server = Server::start(&trace);
        let dom = dump_dom(
            chromium,
            &dir.join(format!("profile-{interval}")),
            &server.url("/?view=sites"),
        );
        assert_ready(&dom);
        let file = dom.file.display();
        let note = "≈ sampled: one allocation per 4,096 bytes on average recorded";
        assert_eq!(dom.html.contains(note), interval != 0, "{file}");
        let table = dom
            .html
            .split_once("<table id=\"sites\"")
            .and_then(|(_, rest)| rest.split_once("</table>"))
            .map(|(table, _)| table)
            .expect("the page has a call-site table");
        // `app::leaky`'s 2,000 bytes allocated, estimated from 2 blocks of 1,000 bytes.
        let (blocks, bytes) = memprof_trace::weight(1000, 4096);
        let leaky = format!("≈{:.2} KiB", (2.0 * bytes).round() / 1024.0);
        assert_eq!(table.contains(&leaky), interval != 0, "{leaky}: {file}");
        assert_eq!(
            table.contains(&format!(">≈{}<", (2.0 * blocks).round())),
            interval != 0,
            "{file}"
        );
        assert_eq!(table.contains('≈'), interval != 0, "{file}");
    }
}

/// More markers than the summary lists: the page asks for them all once, and offers each of
/// them in its marker pickers.
#[test]
fn the_viewer_offers_every_marker() {
    let Some(chromium) = chromium() else {
        missing_tool(
            "the viewer's page in a browser",
            "apt-get install -y chromium",
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("viewer-markers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("marked.mptrace");
    const COUNT: usize = 1_500;
    std::fs::write(&trace, marked_trace(COUNT as u32)).unwrap();
    let server = Server::start(&trace);
    let dom = dump_dom(
        chromium,
        &dir.join("profile"),
        &server.url("/?view=timeline"),
    );
    assert_ready(&dom);
    let file = dom.file.display();
    // Both pickers, `marker_from` and `marker_to`, offer every marker.
    assert_eq!(
        dom.html.matches("<option value=\"m").count(),
        2 * COUNT,
        "{file}"
    );
    assert_eq!(
        dom.html
            .matches(&format!("<option value=\"m{}\"", COUNT - 1))
            .count(),
        2,
        "{file}"
    );
}

/// On stacks shaped like a real program's (`support::named_trace`), the page names each site by
/// the program's code, in the table, the opened site, the flame graph and the diff, with the
/// files written short; and the markers' labels of a crowded timeline do not overlap.
#[test]
fn the_viewer_names_sites_by_the_programs_code() {
    let Some(chromium) = chromium() else {
        missing_tool(
            "the viewer's page in a browser",
            "apt-get install -y chromium",
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("viewer-named-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("named.mptrace");
    std::fs::write(&trace, support::named_trace()).unwrap();
    let server = Server::start(&trace);
    let profile = dir.join("profile");

    // The table: the program's function first in each row, the collection operation after
    // `via`, the callers after it; the whole context in the row's tooltip, files short.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=sites&at=marker:loaded&sort=live_bytes"),
    );
    assert_ready(&dom);
    let file = dom.file.display();
    assert_eq!(
        site_rows(&dom.html),
        ["app::load", "app::build", "main", "app::grow", "app::tiny"],
        "{file}"
    );
    for expected in [
        "<div class=\"via\">via alloc::vec::Vec&lt;T&gt;::with_capacity</div>",
        "<div class=\"callers\">← app::main</div>",
    ] {
        assert!(dom.html.contains(expected), "no {expected} in {file}");
    }
    assert!(
        dom.html
            .contains("title=\"alloc/src/vec/mod.rs:480 in 'alloc::vec::Vec&lt;T&gt;::with_capacity'\nsrc/app.rs:20 in 'app::load'\nsrc/main.rs:5 in 'app::main'\""),
        "no context tooltip in {file}"
    );
    assert!(!dom.html.contains("/rustc/"), "{file}");

    // The diff: the largest growth first, then the largest shrinkage first.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=diff&marker_from=loaded&to=end"),
    );
    assert_ready(&dom);
    let diff = dom
        .html
        .split_once("<table id=\"diff\">")
        .and_then(|(_, rest)| rest.split_once("</table>"))
        .map(|(table, _)| table)
        .expect("the page has a diff table");
    let rows: Vec<&str> = diff
        .split("<div class=\"function\">")
        .skip(1)
        .map(|cell| cell.split_once("</div>").unwrap().0)
        .collect();
    assert_eq!(
        rows,
        ["app::grow", "app::tiny", "app::load", "app::build"],
        "{}",
        dom.file.display()
    );

    // The flame graph: no /rustc/ paths in its frames or tooltips; std's frames told apart.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=flame&what=allocated"),
    );
    assert_ready(&dom);
    let file = dom.file.display();
    assert!(!dom.html.contains("/rustc/"), "{file}");
    assert!(
        dom.html.contains(
            "class=\"frame std\" data-name=\"alloc/src/vec/mod.rs:480:9 in 'alloc::vec::Vec&lt;T&gt;::with_capacity'\""
        ),
        "{file}"
    );
    assert!(
        dom.html
            .contains("class=\"frame\" data-name=\"src/app.rs:20:9 in 'app::load'\""),
        "{file}"
    );

    // The opened site, by a click: the program's frames only, the site's own marked, and what
    // was left out counted.
    let mut browser = Browser::open(
        chromium,
        &dir.join("profile-cdp"),
        &server.url("/?view=sites&at=marker:loaded"),
    );
    browser.wait_for("document.body.dataset.state === 'ready'");
    let (x, y) = centre_of(
        &mut browser,
        "[...document.querySelectorAll('#sites tr[data-site]')].find(r => r.querySelector('.function').textContent === 'app::build')",
    );
    browser.click(x, y);
    browser.wait_for(
        "document.body.dataset.state === 'ready' && !document.getElementById('site').hidden \
         && document.getElementById('site-stacks').textContent.includes('app::build')",
    );
    let frames = browser.eval(
        "[...document.querySelectorAll('#site-stacks .frames li')].map(li => [li.className, [...li.children].map(c => c.textContent).join(' | ')])",
    );
    assert_eq!(
        frames,
        json!([
            [
                "std",
                "alloc::vec::Vec<T>::with_capacity | alloc/src/vec/mod.rs:480"
            ],
            ["own", "app::build | src/app.rs:10"],
            ["", "app::main | src/main.rs:5"],
        ]),
        "{}",
        browser.eval("document.getElementById('site-stacks').innerHTML")
    );
    let notes = browser.eval(
        "[...document.querySelectorAll('#site-stacks .hidden-frames')].map(p => p.textContent)",
    );
    assert_eq!(
        notes,
        json!([
            "4 frames of memprof, the allocator and std below the collection operation not shown",
            "7 frames of the runtime below the program not shown"
        ])
    );
    let title = browser.eval("document.getElementById('site-title').textContent");
    assert_eq!(title, "#1 app::build src/app.rs:10");
    drop(browser);

    // Marker labels on a crowded timeline: none drawn over another.
    let marked = dir.join("marked.mptrace");
    std::fs::write(&marked, marked_trace(200)).unwrap();
    let marked_server = Server::start(&marked);
    let mut browser = Browser::open(
        chromium,
        &dir.join("profile-markers"),
        &marked_server.url("/?view=timeline"),
    );
    browser.wait_for(
        "document.body.dataset.state === 'ready' && document.querySelector('#timeline g.marker')",
    );
    let overlaps = browser.eval(
        "(() => { const boxes = [...document.querySelectorAll('#timeline g.marker text')].map(t => t.getBoundingClientRect()); \
         let n = 0; for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) { \
         const a = boxes[i], b = boxes[j]; if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) n++; } \
         return [boxes.length, n, document.querySelectorAll('#timeline g.marker').length]; })()",
    );
    let labels = overlaps[0].as_u64().unwrap();
    assert_eq!(overlaps[1], 0, "overlapping marker labels: {overlaps}");
    assert_eq!(overlaps[2], 200, "{overlaps}");
    assert!(labels >= 3, "{overlaps}");
    drop(browser);
    drop(marked_server);
    drop(server);
    // The browser's processes may still be writing its profile there as it goes: the
    // directory is the test's scratch, not what it checks.
    let _ = std::fs::remove_dir_all(&dir);
}

/// A site whose stacks differ only in frames left out (`support::hidden_frames_trace`) opens as
/// one stack, its figures summed, the stacks it merges counted; "show hidden frames" lists each
/// of them with every frame, the ones left out marked, and keeps the choice in the URL.
#[test]
fn the_viewer_merges_stacks_that_differ_only_in_hidden_frames() {
    let Some(chromium) = chromium() else {
        missing_tool(
            "the viewer's page in a browser",
            "apt-get install -y chromium",
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("viewer-hidden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("hidden.mptrace");
    std::fs::write(&trace, support::hidden_frames_trace()).unwrap();
    let server = Server::start(&trace);
    let mut browser = Browser::open(
        chromium,
        &dir.join("profile-cdp"),
        &server.url("/?view=sites"),
    );
    browser.wait_for("document.body.dataset.state === 'ready'");
    let (x, y) = centre_of(
        &mut browser,
        "[...document.querySelectorAll('#sites tr[data-site]')].find(r => r.querySelector('.function').textContent === 'app::build')",
    );
    browser.click(x, y);
    browser.wait_for(
        "document.body.dataset.state === 'ready' && !document.getElementById('site').hidden \
         && document.getElementById('site-stacks').textContent.includes('app::build')",
    );
    let headings =
        browser.eval("[...document.querySelectorAll('#site-stacks h3')].map(h => h.textContent)");
    assert_eq!(
        headings,
        json!([
            "stack 1 of 1: 1.46 KiB in 3 blocks live at end; 4 allocations (1.95 KiB) in the range (3 stacks that differ only in frames not shown)"
        ]),
        "{}",
        browser.eval("document.getElementById('site-stacks').innerHTML")
    );
    let shown = browser.eval(
        "[...document.querySelectorAll('#site-stacks .frames li')].map(li => li.querySelector('.function').textContent)",
    );
    assert_eq!(
        shown,
        json!([
            "alloc::vec::Vec<T>::with_capacity",
            "app::build",
            "app::main"
        ])
    );
    let notes = browser.eval(
        "[...document.querySelectorAll('#site-stacks .hidden-frames')].map(p => p.textContent)",
    );
    assert_eq!(
        notes,
        json!([
            "4 to 5 frames of memprof, the allocator and std below the collection operation not shown",
            "6 to 7 frames of the runtime below the program not shown"
        ])
    );

    // Unfolded: the three stacks, every frame, the hidden ones marked.
    let (x, y) = centre_of(&mut browser, "document.getElementById('site-hidden')");
    browser.click(x, y);
    browser.wait_for(
        "document.body.dataset.state === 'ready' && document.querySelectorAll('#site-stacks .full-stack').length === 3",
    );
    let full = browser.eval(
        "[...document.querySelectorAll('#site-stacks .full-stack')].map(s => [s.querySelector('h4').textContent, \
         s.querySelectorAll('li').length, s.querySelectorAll('li.hidden.above').length, \
         s.querySelectorAll('li.hidden.below').length])",
    );
    assert_eq!(
        full,
        json!([
            ["stack 1: 1000 B in 1 blocks live at end", 14, 4, 7],
            ["stack 5: 200 B in 1 blocks live at end", 15, 5, 7],
            ["stack 6: 300 B in 1 blocks live at end", 13, 4, 6]
        ]),
        "{}",
        browser.eval("document.getElementById('site-stacks').innerHTML")
    );
    let malloc = browser.eval(
        "[...document.querySelectorAll('#site-stacks .full-stack li.hidden.above')].some(li => li.textContent.includes('memprof::hooks::c_abi::malloc'))",
    );
    assert_eq!(malloc, json!(true));
    let search = browser.eval("location.search");
    assert!(search.as_str().unwrap().contains("hidden=1"), "{search}");
    drop(browser);
    drop(server);
    // The browser's processes may still be writing its profile there as it goes: the
    // directory is the test's scratch, not what it checks.
    let _ = std::fs::remove_dir_all(&dir);
}

/// A row of a table of call sites: the site's function, the id text beside its location, and the
/// other cells, each as (its tooltip, its text).
type Row = (String, String, Vec<(String, String)>);

/// The rows of the table `id` of the page.
fn table_rows(dom: &Dom, id: &str) -> Vec<Row> {
    let table = dom
        .html
        .split_once(&format!("<table id=\"{id}\""))
        .and_then(|(_, rest)| rest.split_once("</table>"))
        .map(|(table, _)| table)
        .unwrap_or_else(|| panic!("no table {id} in {}", dom.file.display()));
    let body = table.split_once("<tbody>").unwrap().1;
    let between = |text: &str, open: &str, close: &str| -> String {
        text.split_once(open)
            .and_then(|(_, rest)| rest.split_once(close))
            .map_or(String::new(), |(inside, _)| inside.to_owned())
    };
    body.split("<tr")
        .skip(1)
        .filter(|row| row.contains("<div class=\"function"))
        .map(|row| {
            // `class="function"`, or `class="function std"` for the standard library's.
            let after = row.split_once("<div class=\"function").unwrap().1;
            let function = between(after, ">", "</div>");
            let id = between(row, "<span class=\"site-id\">", "</span>");
            let cells = row
                .split("<td")
                .skip(2)
                .map(|cell| {
                    let (attributes, rest) = cell.split_once('>').unwrap();
                    let title = between(attributes, "title=\"", "\"");
                    (title, rest.split_once("</td>").unwrap().0.to_owned())
                })
                .collect();
            (function, id, cells)
        })
        .collect()
}

/// A cell with a tooltip, and one without.
fn cell(title: &str, text: &str) -> (String, String) {
    (title.to_owned(), text.to_owned())
}

/// Two runs of one program served together: the page compares them in its Diff view (a trace
/// and a moment each side, sites matched by their code), and switches which trace the other
/// views show.
#[test]
fn the_viewer_compares_two_runs() {
    let Some(chromium) = chromium() else {
        missing_tool(
            "the viewer's page in a browser",
            "apt-get install -y chromium",
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("viewer-runs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Run A, the known trace; run B leaks 3000 bytes from app::leaky, keeps 100 of
    // net::buffer's, and leaks app::temp's second block (20 bytes). Runs C and D: the trace
    // shaped like a real program's, twice.
    let a = dir.join("a.mptrace");
    let b = dir.join("b.mptrace");
    let c = dir.join("c.mptrace");
    let d = dir.join("d.mptrace");
    std::fs::write(&a, known_trace()).unwrap();
    std::fs::write(&b, run_trace(3000, 100, true)).unwrap();
    std::fs::write(&c, support::named_trace()).unwrap();
    std::fs::write(&d, support::named_trace()).unwrap();
    let server = Server::start_all(&[&a, &b, &c, &d]);
    let profile = dir.join("profile");

    // A at its end against B at its end: the largest growth first, then the shrinkage.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=diff&from_trace=0&to_trace=1"),
    );
    assert_ready(&dom);
    let file = dom.file.display();
    let row = |function: &str, id: &str, cells: &[(&str, &str)]| -> Row {
        (
            function.to_owned(),
            id.to_owned(),
            cells.iter().map(|(t, x)| cell(t, x)).collect(),
        )
    };
    assert_eq!(
        table_rows(&dom, "diff"),
        [
            row(
                "app::leaky",
                "#0 → #0 ",
                &[
                    ("1,000 bytes", "1000 B"),
                    ("3,000 bytes", "2.93 KiB"),
                    ("+2,000 bytes", "+1.95 KiB"),
                    ("", "1"),
                    ("", "1"),
                    ("", "0")
                ]
            ),
            row(
                "app::temp",
                "#1 → #1 ",
                &[
                    ("0 bytes", "0 B"),
                    ("20 bytes", "20 B"),
                    ("+20 bytes", "+20 B"),
                    ("", "0"),
                    ("", "1"),
                    ("", "+1")
                ]
            ),
            row(
                "net::buffer",
                "#2 → #2 ",
                &[
                    ("300 bytes", "300 B"),
                    ("100 bytes", "100 B"),
                    ("-200 bytes", "−200 B"),
                    ("", "1"),
                    ("", "1"),
                    ("", "0")
                ]
            ),
        ],
        "{file}"
    );
    let caption = dom
        .html
        .split_once("<p id=\"diff-caption\">")
        .and_then(|(_, rest)| rest.split_once("</p>"))
        .unwrap()
        .0;
    assert_eq!(
        caption,
        "A: trace 0: a.mptrace at end (0.002 s); B: trace 1: b.mptrace at end (0.002 s). \
         Call sites matched by their code (each frame's function, file and line): \
         +1.97 KiB grew, −200 B shrank from A to B.",
        "{file}"
    );
    for expected in [
        "<th class=\"before\">bytes in A</th>",
        "<th class=\"after\">blocks in B</th>",
        "<h2 id=\"diff-flame-title\" hidden=\"\">",
    ] {
        assert!(dom.html.contains(expected), "no {expected} in {file}");
    }

    // Each moment read in its own trace: A's marker against B's end.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=diff&from_trace=0&marker_from=loaded&to_trace=1&to=end"),
    );
    assert_ready(&dom);
    let deltas: Vec<(String, String)> = table_rows(&dom, "diff")
        .into_iter()
        .map(|(function, _, cells)| (function, cells[2].0.clone()))
        .collect();
    assert_eq!(
        deltas,
        [
            ("app::leaky".to_owned(), "+1,000 bytes".to_owned()),
            ("app::temp".to_owned(), "+20 bytes".to_owned()),
            ("net::buffer".to_owned(), "-4,900 bytes".to_owned()),
        ],
        "{}",
        dom.file.display()
    );

    // Stacks shaped like a real program's: each site named by the program's first frame, the
    // collection operation after `via`, as in the other views.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=diff&from_trace=2&marker_from=loaded&to_trace=3&to=end"),
    );
    assert_ready(&dom);
    let file = dom.file.display();
    let rows: Vec<(String, String)> = table_rows(&dom, "diff")
        .into_iter()
        .map(|(function, _, cells)| (function, cells[2].0.clone()))
        .collect();
    assert_eq!(
        rows,
        [
            ("app::grow".to_owned(), "+3,000 bytes".to_owned()),
            ("app::tiny".to_owned(), "+10 bytes".to_owned()),
            ("app::load".to_owned(), "-4,000 bytes".to_owned()),
            ("app::build".to_owned(), "-500 bytes".to_owned()),
        ],
        "{file}"
    );
    for expected in [
        "<div class=\"via\">via alloc::vec::Vec&lt;T,A&gt;::push</div>",
        "<div class=\"via\">via alloc::vec::Vec&lt;T&gt;::with_capacity</div>",
        "<div class=\"callers\">← app::main</div>",
    ] {
        assert!(dom.html.contains(expected), "no {expected} in {file}");
    }

    // The other views show the trace picked: run B's sites under `trace=1`.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?trace=1&view=sites&sort=allocated_bytes"),
    );
    assert_ready(&dom);
    let file = dom.file.display();
    let live: Vec<(String, String)> = table_rows(&dom, "sites")
        .into_iter()
        .map(|(function, _, cells)| (function, cells[3].0.clone()))
        .collect();
    assert_eq!(
        live,
        [
            ("net::buffer".to_owned(), "100 bytes in 1 blocks".to_owned()),
            (
                "app::leaky".to_owned(),
                "3,000 bytes in 1 blocks".to_owned()
            ),
            ("app::temp".to_owned(), "20 bytes in 1 blocks".to_owned()),
        ],
        "{file}"
    );
    assert!(dom.html.contains("b.mptrace</span>"), "{file}");

    // The address range from the URL applies to the views: app::temp's blocks alone lie
    // in 0xa200..=0xa2ff.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=sites&address_min=0xa200&address_max=0xa2ff"),
    );
    assert_ready(&dom);
    assert_eq!(
        site_rows(&dom.html),
        ["app::temp"],
        "{}",
        dom.file.display()
    );
    assert!(
        dom.html.contains("<label id=\"trace-pick\" title="),
        "{file}"
    );

    // By hand: the two sides picked in the Diff view's form and compared with a click; then
    // another trace picked for the views.
    let mut browser = Browser::open(
        chromium,
        &dir.join("profile-cdp"),
        &server.url("/?view=diff"),
    );
    browser.wait_for(
        "document.body.dataset.state === 'ready' && !document.getElementById('diff-traces').hidden",
    );
    browser.eval(
        "(() => { const f = document.getElementById('diff-traces'); \
         f.elements.from_trace.value = '0'; f.elements.from.value = 'marker:loaded'; \
         f.elements.to_trace.value = '1'; f.elements.to.value = 'end'; })()",
    );
    let (x, y) = centre_of(
        &mut browser,
        "document.querySelector('#diff-traces button')",
    );
    browser.click(x, y);
    browser.wait_for(
        "new URLSearchParams(location.search).get('to_trace') === '1' \
         && document.body.dataset.state === 'ready' \
         && document.querySelector('#diff tr[data-to-site]')",
    );
    let rows = browser.eval(
        "[...document.querySelectorAll('#diff tbody tr')].map(r => [r.querySelector('.function').textContent, r.children[3].title])",
    );
    assert_eq!(
        rows,
        json!([
            ["app::leaky", "+1,000 bytes"],
            ["app::temp", "+20 bytes"],
            ["net::buffer", "-4,900 bytes"]
        ])
    );
    let search = browser.eval("location.search");
    let search = search.as_str().unwrap();
    for expected in ["from_trace=0", "from=marker%3Aloaded", "to=end"] {
        assert!(search.contains(expected), "{expected} not in {search}");
    }
    // The change event once this evaluation has returned: the page then loads again.
    browser.eval(
        "(() => { const s = document.getElementById('trace'); s.value = '1'; \
         setTimeout(() => s.dispatchEvent(new Event('change')), 0); })()",
    );
    browser.wait_for(
        "new URLSearchParams(location.search).get('trace') === '1' \
         && document.body.dataset.state === 'ready' \
         && document.querySelector('#summary .path').textContent.endsWith('b.mptrace')",
    );
    let search = browser.eval("location.search");
    assert!(!search.as_str().unwrap().contains("from_trace"), "{search}");
    drop(browser);
    drop(server);
    // The browser's processes may still be writing its profile there as it goes: the
    // directory is the test's scratch, not what it checks.
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace with the program's own mappings: the Mappings tab shows them live at the moment by
/// call site, and their timeline; a trace without has no such tab.
#[test]
fn the_viewer_shows_the_programs_mappings() {
    let Some(chromium) = chromium() else {
        missing_tool(
            "the viewer's page in a browser",
            "apt-get install -y chromium",
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("viewer-mappings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let maps = dir.join("maps.mptrace");
    let known = dir.join("known.mptrace");
    std::fs::write(&maps, support::mappings_trace()).unwrap();
    std::fs::write(&known, known_trace()).unwrap();
    let server = Server::start_all(&[&maps, &known]);
    let profile = dir.join("profile");
    let mapped = |dom: &Dom| -> Vec<(String, String, String)> {
        table_rows(dom, "mappings")
            .into_iter()
            .map(|(function, _, cells)| (function, cells[0].0.clone(), cells[1].1.clone()))
            .collect()
    };
    let site = |function: &str, bytes: &str, count: &str| {
        (function.to_owned(), bytes.to_owned(), count.to_owned())
    };

    // At the end: app::map_big's 3 pages less the middle one, in 2 pieces; app::map_small's
    // first page.
    let dom = dump_dom(chromium, &profile, &server.url("/?view=mappings"));
    assert_ready(&dom);
    let file = dom.file.display();
    assert_eq!(
        mapped(&dom),
        [
            site("app::map_big", "8,192 bytes", "2"),
            site("app::map_small", "4,096 bytes", "1")
        ],
        "{file}"
    );
    assert!(
        dom.html
            .contains("<button type=\"button\" role=\"tab\" data-view=\"mappings\" aria-selected=\"true\">Mappings</button>"),
        "{file}"
    );
    let caption = dom
        .html
        .split_once("<p id=\"mappings-caption\">")
        .and_then(|(_, rest)| rest.split_once("</p>"))
        .unwrap()
        .0;
    assert!(
        caption.starts_with("12.0 KiB in 3 mappings of the program's own live at end (6e-7 s), from 2 call sites; the most mapped, 44.0 KiB, at 5e-7 s; 3 mappings made over the run (48.0 KiB), 2 unmaps."),
        "{caption}"
    );
    // Its timeline: one point a pixel at most, the peak's 11 pages marked.
    let chart = dom
        .html
        .split_once("<div id=\"mappings-timeline\"")
        .unwrap()
        .1;
    assert!(chart.contains("class=\"timeline\""), "{file}");
    assert!(chart.contains("peak 44.0 KiB"), "{file}");
    assert!(chart.contains("mapped bytes"), "{file}");

    // At 550 ns, the 8 pages mapped at 500 are live.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=mappings&at=0.00000055"),
    );
    assert_ready(&dom);
    assert_eq!(
        mapped(&dom),
        [
            site("app::map_small", "36,864 bytes", "2"),
            site("app::map_big", "8,192 bytes", "2")
        ],
        "{}",
        dom.file.display()
    );

    // The frame filters apply; those on blocks are said not to.
    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=mappings&func=map_small&size_min=1"),
    );
    assert_ready(&dom);
    let file = dom.file.display();
    assert_eq!(
        mapped(&dom),
        [site("app::map_small", "4,096 bytes", "1")],
        "{file}"
    );
    assert!(
        dom.html.contains("Not applied to mappings: size_min."),
        "{file}"
    );

    // A trace without mappings: no Mappings tab.
    let dom = dump_dom(chromium, &profile, &server.url("/?trace=1&view=timeline"));
    assert_ready(&dom);
    assert!(
        dom.html.contains("data-view=\"mappings\" hidden=\"\""),
        "{}",
        dom.file.display()
    );
    drop(server);
    // The browser's processes may still be writing its profile there as it goes: the
    // directory is the test's scratch, not what it checks.
    let _ = std::fs::remove_dir_all(&dir);
}

/// The call-site table's short-lived column: on a churning loop that heaptrack's rule calls not
/// temporary ([`support::churn_trace`]), sorting by it puts the churn first; the page's
/// `short_lived_ns` sets the bound (5 µs: none of its 8 µs blocks).
#[test]
fn the_viewer_sorts_sites_by_short_lived_allocations() {
    let Some(chromium) = chromium() else {
        missing_tool(
            "the viewer's page in a browser",
            "apt-get install -y chromium",
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("viewer-short-lived-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("churn.mptrace");
    std::fs::write(&trace, support::churn_trace()).unwrap();
    let server = Server::start(&trace);
    let profile = dir.join("profile");

    let dom = dump_dom(chromium, &profile, &server.url("/?view=sites"));
    assert_ready(&dom);
    assert_eq!(
        site_rows(&dom.html),
        ["app::keep", "app::churn"],
        "{}",
        dom.file.display()
    );
    // The summary line: heaptrack's temporary count beside the short-lived one.
    assert!(
        dom.html
            .contains("0 temporary, 1,000 short-lived (freed within 1.0 ms)"),
        "{}",
        dom.file.display()
    );

    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=sites&sort=short_lived"),
    );
    assert_ready(&dom);
    let file = dom.file.display();
    assert_eq!(site_rows(&dom.html), ["app::churn", "app::keep"], "{file}");
    let rows = table_rows(&dom, "sites");
    // The row's cells: allocations, allocated, freed, live, leaked, peak, temporary,
    // short-lived (its bytes in the tooltip), mean lifetime.
    assert_eq!(rows[0].2[7], cell("64,000 bytes", "1,000"), "{file}");
    assert_eq!(rows[0].2[6].1, "0", "{file}");
    assert!(
        dom.html.contains("short-lived: freed within 1.0 ms"),
        "{file}"
    );

    let dom = dump_dom(
        chromium,
        &profile,
        &server.url("/?view=sites&sort=short_lived&short_lived_ns=5000"),
    );
    assert_ready(&dom);
    let file = dom.file.display();
    let rows = table_rows(&dom, "sites");
    assert_eq!(rows[0].2[7], cell("0 bytes", "0"), "{file}");
    assert!(
        dom.html.contains("short-lived: freed within 5.0 µs"),
        "{file}"
    );
}
