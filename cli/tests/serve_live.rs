//! `memprof serve --listen-trace`: a real traced program (this test binary run again, its
//! allocator memprof's) streams its trace over TCP for about eight seconds from four threads; while it
//! runs, the viewer's figures grow and stay consistent, and once the trace is complete every
//! answer equals that of `memprof serve` opening the file afresh (the crate filter's too, asked
//! before the symbols came).

#[path = "support/server.rs"]
mod server;

use serde_json::Value;
use server::Server;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn work(thread: usize, rounds: usize) -> Vec<Vec<u8>> {
    let mut kept = Vec::new();
    for round in 0..rounds {
        for i in 0..200 {
            let block = vec![i as u8; 16 + (i * 13 + thread) % 500];
            if i % 7 == 0 {
                kept.push(block);
            }
        }
        if round % 10 == 9 {
            kept.truncate(kept.len() / 2);
        }
        if thread == 0 && round % 20 == 0 {
            memprof::mark("round");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    kept
}

/// Four threads allocating for about eight seconds: the index, a few seconds behind, grows while
/// they run.
fn child() {
    let threads: Vec<_> = (0..4)
        .map(|t| std::thread::spawn(move || work(t, 800)))
        .collect();
    let kept: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    memprof::close_trace().unwrap();
    drop(kept);
}

#[test]
fn a_traced_program_served_live() {
    if std::env::var_os("MEMPROF_TEST_LIVE_CHILD").is_some() {
        child();
        return;
    }
    let dir = std::env::temp_dir().join(format!("memprof-serve-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = dir.join("live.mptrace");
    let server = Server::start(&[output.to_str().unwrap(), "--listen-trace", "127.0.0.1:0"]);
    let mut program = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_traced_program_served_live", "--nocapture"])
        .env("MEMPROF_TEST_LIVE_CHILD", "1")
        .env(
            "MEMPROF_TRACE",
            format!("tcp://{}", server.trace_address.as_ref().unwrap()),
        )
        .stdout(Stdio::null())
        .spawn()
        .unwrap();

    // While it runs: the index grows, and its figures hold together.
    let mut seen_live = 0;
    let mut last_allocations = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    let summary = loop {
        assert!(Instant::now() < deadline, "the trace never completed");
        let (status, body) = server.get("/api/summary");
        if status == 503 {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let summary: Value = serde_json::from_slice(&body).unwrap();
        if summary["complete"] == true && summary["live"].is_null() {
            break summary;
        }
        let totals = &summary["totals"];
        let allocations = totals["allocations"].as_u64().unwrap();
        assert!(allocations >= last_allocations, "{summary}");
        last_allocations = allocations;
        assert!(
            totals["frees"].as_u64().unwrap() <= allocations,
            "{summary}"
        );
        assert!(
            summary["end"]["bytes"].as_u64().unwrap() <= summary["peak"]["bytes"].as_u64().unwrap(),
            "{summary}"
        );
        let live = &summary["live"];
        if !live.is_null() && allocations > 0 && summary["complete"] == false {
            seen_live += 1;
            assert!(
                live["pending_events"].as_u64().unwrap() <= summary["events"].as_u64().unwrap(),
                "{summary}"
            );
            // The sites' figures agree with the summary's at the same update, or a later one.
            let sites = server.json("/api/sites?limit=100000");
            let allocated: u64 = sites["sites"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["allocations"].as_u64().unwrap_or(0))
                .sum();
            assert!(allocated >= allocations, "{allocated} < {allocations}");
            // The crate filter, before the symbols came: the stacks' crates are worked out
            // again once they have.
            server.json("/api/sites?crate=serve_live");
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(program.wait().unwrap().success());
    assert!(
        seen_live >= 2,
        "the page saw the index grow {seen_live} times"
    );
    let events = summary["events"].as_u64().unwrap();
    assert!(events > 4 * 800 * 200, "{summary}");

    // Every answer equals that of the complete trace opened afresh.
    let fresh = Server::start(&[output.to_str().unwrap()]);
    for path in [
        "/api/summary",
        "/api/sites?limit=100000",
        "/api/sites?at=peak&sort=live_bytes",
        "/api/timeline?points=200",
        "/api/flame?what=allocated",
        "/api/flame?what=live&at=peak",
        "/api/markers",
        "/api/crates",
        "/api/sites?crate=serve_live&limit=100000",
    ] {
        let (mut live, mut afresh) = (server.json(path), fresh.json(path));
        for answer in [&mut live, &mut afresh] {
            if let Some(object) = answer.as_object_mut() {
                object.remove("live");
            }
        }
        assert_eq!(live, afresh, "{path}");
    }
    let own = fresh.json("/api/sites?crate=serve_live&limit=100000");
    assert!(!own["sites"].as_array().unwrap().is_empty(), "{own}");
    drop(fresh);
    drop(server);
    remove(&dir);
}

fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}
