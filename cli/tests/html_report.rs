//! The HTML report of `memprof convert TRACE -o report.html` opened from its file in headless
//! Chromium, with no server: its figures (the call-site table's totals and, sorted by a click on
//! a header, its top row; the timeline's peak and markers) are `memprof summary`'s of the same
//! trace, and the page asked for nothing but its own file.
//!
//! Chromium missing fails the test under `MEMPROF_REQUIRE_TOOLS=1` (`scripts/test.sh`) and skips
//! it with a message otherwise.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;
#[path = "support/browser.rs"]
mod browser;

use browser::{Browser, centre_of};
use common::{chromium, missing_tool};
use serde_json::{Value, json};
use support::{named_trace, stdout_of};

/// The number after `prefix` on the summary's line that starts with it (`1,234` read as 1234).
fn figure(summary: &str, prefix: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in:\n{summary}"));
    let digits: String = line[prefix.len()..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no figure in {line:?}"))
}

/// A cell's figure as the page shows it (`5,564`).
fn shown(value: &Value) -> u64 {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not text: {value}"))
        .replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {value}"))
}

#[test]
fn the_html_report_shows_the_summarys_figures_offline() {
    let Some(chromium) = chromium() else {
        missing_tool(
            "the HTML report in headless Chromium",
            "apt-get install chromium",
        );
        return;
    };
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("html_report");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("named.mptrace");
    std::fs::write(&trace, named_trace()).unwrap();
    let report = dir.join("report.html");
    let trace_arg = trace.to_str().unwrap();
    stdout_of(&["convert", trace_arg, "-o", report.to_str().unwrap()]);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "{} names a URL",
        report.display()
    );
    let summary = stdout_of(&["summary", trace_arg]);

    let mut browser = Browser::open(
        chromium,
        &dir.join("profile"),
        &format!("file://{}", report.display()),
    );
    // Every request the page makes from now on is seen (none is expected: the page's own file
    // was asked for before this).
    browser.call("Network.enable", json!({}));
    browser.wait_for("document.body.dataset.state === 'ready'");
    let page = browser.eval(
        "(() => {
            const text = (s) => [...document.querySelectorAll(s)].map((e) => e.textContent);
            return {
                totals: text('#sites tfoot td.num'),
                peak: document.getElementById('peak-bytes').textContent,
                markers: document.querySelectorAll('#timeline line.marker').length,
                polyline: document.querySelectorAll('#timeline polyline').length,
                flame: document.querySelectorAll('#flame > svg').length,
                resources: performance.getEntriesByType('resource').length,
            };
        })()",
    );
    // The totals: live at the end (what the summary calls leaked), allocations and their bytes.
    assert_eq!(
        [
            shown(&page["totals"][0]),
            shown(&page["totals"][1]),
            shown(&page["totals"][2]),
            shown(&page["totals"][3]),
        ],
        [
            figure(&summary, "leaked at end:"),
            figure(
                summary
                    .lines()
                    .find(|l| l.starts_with("leaked at end:"))
                    .unwrap()
                    .split(" in ")
                    .nth(1)
                    .unwrap(),
                ""
            ),
            figure(&summary, "allocations:"),
            figure(
                summary
                    .lines()
                    .find(|l| l.starts_with("allocations:"))
                    .unwrap()
                    .split_once('(')
                    .unwrap()
                    .1,
                ""
            ),
        ],
        "{summary}"
    );
    assert_eq!(shown(&page["peak"]), figure(&summary, "peak:"), "{summary}");
    let markers = summary
        .lines()
        .find(|l| l.starts_with("allocations:"))
        .and_then(|l| l.split_once("markers:"))
        .unwrap()
        .1;
    assert_eq!(page["markers"], json!(figure(markers, "")));
    assert_eq!(page["polyline"], json!(1));
    assert_eq!(page["flame"], json!(1), "the flame graph is drawn");
    assert_eq!(page["resources"], json!(0), "the page fetched something");

    // Sorted by allocations with a click on the header, the top row is the summary's first of
    // its "most allocations" (`app::build`: 2 allocations of 1500 bytes in all), named by the
    // program's function, as the viewer names it.
    let (x, y) = centre_of(
        &mut browser,
        "document.querySelector('#sites th[data-key=allocations]')",
    );
    browser.click(x, y);
    browser.wait_for("document.querySelector('#sites th.sorted').dataset.key === 'allocations'");
    let top = browser.eval(
        "(() => {
            const row = document.querySelector('#sites tbody tr');
            return {
                function: row.querySelector('.function').textContent,
                allocations: row.querySelector('td[data-key=allocations]').textContent,
                bytes: row.querySelector('td[data-key=allocated_bytes]').textContent,
            };
        })()",
    );
    let most = summary
        .split_once("most allocations:\n")
        .unwrap()
        .1
        .lines()
        .collect::<Vec<_>>();
    let first = most[0].split_whitespace().collect::<Vec<_>>();
    assert_eq!(
        [shown(&top["allocations"]), shown(&top["bytes"])],
        [first[0].parse().unwrap(), first[1].parse::<u64>().unwrap()],
        "{summary}"
    );
    let function = top["function"].as_str().unwrap();
    assert_eq!(function, "app::build");
    assert!(
        most[1..4]
            .iter()
            .any(|frame| frame.ends_with(&format!(" in '{function}'"))),
        "{summary}"
    );
    // A second click on the header turns the order round.
    browser.click(x, y);
    browser.wait_for("document.querySelector('#sites th.sorted.ascending')");
    let last = browser.eval("document.querySelector('#sites tbody tr .function').textContent");
    assert_ne!(last, json!("app::build"));
    drop(browser);

    // Without inferno's SVG (memprof built without the `flamegraph` feature), the page draws
    // the flame graph from its data: every live byte under the root, `app::build`'s 1000 live
    // bytes in its frame.
    let (before, rest) = html.split_once("<div id=\"flame\">").unwrap();
    let (_, after) = rest.split_once("</div>\n</section>").unwrap();
    let drawn = dir.join("drawn.html");
    std::fs::write(
        &drawn,
        format!("{before}<div id=\"flame\"></div>\n</section>{after}"),
    )
    .unwrap();
    let mut browser = Browser::open(
        chromium,
        &dir.join("profile-drawn"),
        &format!("file://{}", drawn.display()),
    );
    browser.wait_for("document.body.dataset.state === 'ready'");
    let frames = browser.eval(
        "[...document.querySelectorAll('#flame > svg g.frame')].map((g) => [g.dataset.name, Number(g.dataset.value)])",
    );
    let frames: Vec<(String, u64)> = serde_json::from_value(frames).unwrap();
    assert_eq!(
        frames.first(),
        Some(&("all".to_owned(), figure(&summary, "leaked at end:"))),
        "{frames:?}"
    );
    assert!(
        frames.contains(&("app::build".to_owned(), 1000)),
        "{frames:?}"
    );
    // A click on a frame widens it to the whole graph.
    let (x, y) = centre_of(
        &mut browser,
        "document.querySelector('#flame g.frame[data-name=\"app::grow\"] rect')",
    );
    browser.click(x, y);
    browser.wait_for(
        "document.querySelector('#flame g.frame').dataset.name === 'app::grow' && \
         document.querySelector('#flame g.frame rect').getAttribute('width') === '1200.0'",
    );
}
