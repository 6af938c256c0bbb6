//! Short-lived allocations (freed within a bound of their allocation, 1 ms unless told) where
//! heaptrack's temporary rule sees none: a block made and freed 8 µs later in a loop, after
//! another allocation of its thread each time ([`support::churn_trace`]). `memprof summary`
//! counts and lists it, `memprof report --sort short-lived` puts its site first, the viewer's
//! `/api/sites?sort=short_lived` too; a bound below its lifetime (`--short-lived 5us`,
//! `short_lived_ns=5000`) leaves it out.

#[path = "support/server.rs"]
mod server;
mod support;

use serde_json::Value;
use server::Server;
use support::{memprof_cli, stdout_of};

fn churn_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("memprof-short-lived-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, support::churn_trace()).unwrap();
    path
}

/// The lines of the summary's table titled `title`, up to the blank line after it.
fn table<'a>(summary: &'a str, title: &str) -> Vec<&'a str> {
    summary
        .split(&format!("\n{title}:\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("{title:?} in\n{summary}"))
        .lines()
        .take_while(|l| !l.is_empty())
        .collect()
}

#[test]
fn summary_counts_short_lived_allocations_heaptrack_calls_not_temporary() {
    let path = churn_file("summary.mptrace");
    let trace = path.to_str().unwrap();

    let summary = stdout_of(&["summary", trace]);
    for line in [
        "allocations: 2000 (4160000 bytes), frees: 1000, markers: 0",
        "temporary allocations: 0 (0.0% of allocations)",
        "short-lived allocations: 1000 (50.0% of allocations, freed within 1 ms)",
    ] {
        assert!(summary.lines().any(|l| l == line), "{line:?} in\n{summary}");
    }
    assert_eq!(table(&summary, "most temporary allocations"), ["  none"]);
    assert_eq!(
        table(&summary, "most short-lived allocations (freed within 1 ms)"),
        [
            "        1000  100.0% of its 1000",
            "              src/app.rs:30:5 in 'app::churn'",
        ],
        "{summary}"
    );

    // The bound is inclusive: 8 µs holds them, 5 µs none.
    let at = |bound: &str| stdout_of(&["summary", trace, "--short-lived", bound]);
    assert!(
        at("8us")
            .lines()
            .any(|l| l == "short-lived allocations: 1000 (50.0% of allocations, freed within 8 µs)"),
        "{}",
        at("8us")
    );
    let tight = at("5µs");
    assert!(
        tight
            .lines()
            .any(|l| l == "short-lived allocations: 0 (0.0% of allocations, freed within 5 µs)"),
        "{tight}"
    );
    assert_eq!(
        table(&tight, "most short-lived allocations (freed within 5 µs)"),
        ["  none"]
    );

    // A bound without its unit is refused, saying which units there are.
    let refused = memprof_cli(&["summary", trace, "--short-lived", "5"]);
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("ns, us (or µs), ms or s"), "{message}");
}

#[test]
fn report_sorted_by_short_lived_puts_the_churn_first() {
    let path = churn_file("report.mptrace");
    let trace = path.to_str().unwrap();
    let report = |extra: &[&str]| {
        let mut args = vec!["report", trace, "--format", "tsv", "--min-bytes", "0"];
        args.extend_from_slice(extra);
        stdout_of(&args)
    };
    // The live heap, as before: only the kept blocks.
    assert_eq!(
        report(&[]),
        "1\n1000\t4096000\tsrc/app.rs:40:5 in 'app::keep'\n"
    );
    assert_eq!(
        report(&["--sort", "short-lived"]),
        "1\n1000\t64000\tsrc/app.rs:30:5 in 'app::churn'\n"
    );
    // Up to a moment: the blocks freed by then (the 500th is freed at 9,989 µs).
    assert_eq!(
        report(&["--sort", "short-lived", "--at", "0.01"]),
        "1\n500\t32000\tsrc/app.rs:30:5 in 'app::churn'\n"
    );
    assert_eq!(
        report(&["--sort", "short-lived", "--short-lived", "5us"]),
        "0\n"
    );
    // Only the blocks allocated with a label, as every report: none has one here.
    assert_eq!(
        report(&["--sort", "short-lived", "--label", "phase=load"]),
        "0\n"
    );
    let markdown = stdout_of(&["report", trace, "--sort", "short-lived", "--min-bytes", "0"]);
    assert!(
        markdown.contains("| 1,000 | 64,000 | ` src/app.rs:30:5 in 'app::churn' ` |"),
        "{markdown}"
    );
}

#[test]
fn viewer_sites_sorted_by_short_lived_put_the_churn_first() {
    let path = churn_file("serve.mptrace");
    let server = Server::start(&[path.to_str().unwrap()]);
    let sites = |query: &str| -> Vec<(String, u64, u64)> {
        let answer = server.json(&format!("/api/sites?{query}"));
        answer["sites"]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"))
            .iter()
            .map(|s: &Value| {
                (
                    s["function"].as_str().unwrap().to_owned(),
                    s["short_lived"].as_u64().unwrap(),
                    s["short_lived_bytes"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let churn = |n: u64| ("app::churn".to_owned(), n, n * 64);
    let keep = ("app::keep".to_owned(), 0, 0);
    let totals = &server.json("/api/summary")["totals"];
    assert_eq!(
        (
            &totals["temporary"],
            &totals["short_lived"],
            &totals["short_lived_ns"]
        ),
        (&0.into(), &1000.into(), &1_000_000.into()),
        "{totals}"
    );
    // The default order, by bytes allocated: the kept blocks first.
    assert_eq!(sites(""), [keep.clone(), churn(1000)]);
    // Heaptrack's rule: none of them temporary.
    let all = server.json("/api/sites");
    for site in all["sites"].as_array().unwrap() {
        assert_eq!(site["temporary"], 0, "{all}");
    }
    assert_eq!(sites("sort=short_lived"), [churn(1000), keep.clone()]);
    assert_eq!(sites("sort=short_lived_bytes"), [churn(1000), keep.clone()]);
    assert_eq!(
        server.json("/api/sites?sort=short_lived")["short_lived_ns"],
        1_000_000
    );
    // Bounds off the index's lifetime edges (a scan) and on them. (Equal figures: by id.)
    assert_eq!(
        sites("sort=short_lived&short_lived_ns=8000"),
        [churn(1000), keep.clone()]
    );
    assert_eq!(
        sites("sort=short_lived&short_lived_ns=5000"),
        [churn(0), keep.clone()]
    );
    assert_eq!(
        sites("sort=short_lived&short_lived_ns=1000"),
        [churn(0), keep.clone()]
    );
    // With the query's range and lifetime filter: the allocations of the range, within both.
    assert_eq!(
        sites("sort=short_lived&from=0.01")[0],
        churn(500),
        "the 500 allocated after 10 ms"
    );
    // No block lived 9 µs or more and was freed: no site passes.
    assert_eq!(sites("sort=short_lived&life_min=9000"), []);
    assert_eq!(sites("sort=short_lived&life_max=8000"), [churn(1000)]);
    assert!(
        server
            .bad("/api/sites?short_lived_ns=soon")
            .contains("short_lived_ns")
    );
}
