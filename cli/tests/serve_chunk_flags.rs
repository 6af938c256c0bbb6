//! The viewer API's filters on glibc's chunk flags (`mmapped=true|false`, `arena=main|other`,
//! docs/viewer-api.md), on the real binary over a real socket: on a trace whose every block's
//! flags are known, each endpoint counts exactly the blocks that pass, alone and with the group
//! filters; a trace without the flags answers a filter on them with a 400 that names it.

mod support;
#[path = "support/server.rs"]
mod server;

use server::Server;
use std::path::PathBuf;

fn trace_file(name: &str, bytes: Vec<u8>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memprof-chunk-flags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

const MIB: u64 = 1 << 20;

/// The addresses `/api/allocations?QUERY` lists, in time order, and its total.
fn allocations(server: &Server, query: &str) -> (u64, Vec<String>) {
    let answer = server.json(&format!("/api/allocations?{query}"));
    let listed = answer["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["address"].as_str().unwrap().to_owned())
        .collect();
    (answer["total_count"].as_u64().unwrap(), listed)
}

/// `/api/sites?QUERY`: per site function, (allocations, allocated bytes, frees, live bytes).
fn sites(server: &Server, query: &str) -> Vec<(String, [u64; 4])> {
    let answer = server.json(&format!("/api/sites?{query}&sort=id&desc=0"));
    let mut rows: Vec<(String, [u64; 4])> = answer["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["function"].as_str().unwrap().to_owned(),
                ["allocations", "allocated_bytes", "frees", "live_bytes"]
                    .map(|k| s[k].as_u64().unwrap()),
            )
        })
        .collect();
    rows.sort();
    assert_eq!(answer["total_sites"].as_u64().unwrap(), rows.len() as u64);
    rows
}

#[test]
fn filters_on_glibcs_chunk_flags() {
    let server = Server::start(&[trace_file("flagged.mptrace", support::flagged_trace())
        .to_str()
        .unwrap()]);
    assert_eq!(server.json("/api/summary")["chunk_flags"], true);

    // Individual allocations, with their flags.
    let (total, listed) = allocations(&server, "mmapped=true");
    assert_eq!(total, 3);
    assert_eq!(
        listed,
        ["0x7f0000000010", "0x7f0000200010", "0x7f0000400010"]
    );
    let answer = server.json("/api/allocations?mmapped=true");
    for allocation in answer["allocations"].as_array().unwrap() {
        assert_eq!(allocation["mmapped"], true);
        assert_eq!(allocation["arena"], "main");
    }
    assert_eq!(
        allocations(&server, "mmapped=false"),
        (
            4,
            ["0xa000", "0xa100", "0x7e0000001000", "0x7e0000001100"]
                .map(String::from)
                .to_vec()
        )
    );
    assert_eq!(
        allocations(&server, "arena=other"),
        (
            2,
            ["0x7e0000001000", "0x7e0000001100"]
                .map(String::from)
                .to_vec()
        )
    );
    assert_eq!(allocations(&server, "arena=main").0, 5);
    assert_eq!(
        allocations(&server, "arena=main&mmapped=false"),
        (2, ["0xa000", "0xa100"].map(String::from).to_vec())
    );
    assert_eq!(allocations(&server, "arena=other&mmapped=true").0, 0);
    assert_eq!(allocations(&server, "arena=other&size_min=100").0, 1);
    let other = server.json("/api/allocations?arena=other");
    assert_eq!(other["allocations"][0]["arena"], "other");
    assert_eq!(other["allocations"][0]["mmapped"], false);

    // Sites: (allocations, allocated bytes, frees, live bytes at the end).
    let small = "app::small".to_owned();
    let big = "app::big".to_owned();
    assert_eq!(
        sites(&server, ""),
        [
            (big.clone(), [3, 4 * MIB, 0, 4 * MIB]),
            (small.clone(), [4, 320, 2, 192])
        ]
    );
    assert_eq!(
        sites(&server, "mmapped=true"),
        [(big.clone(), [3, 4 * MIB, 0, 4 * MIB])]
    );
    assert_eq!(
        sites(&server, "mmapped=false"),
        [(small.clone(), [4, 320, 2, 192])]
    );
    assert_eq!(
        sites(&server, "arena=other"),
        [(small.clone(), [2, 192, 0, 192])]
    );
    assert_eq!(
        sites(&server, "arena=main"),
        [
            (big.clone(), [3, 4 * MIB, 0, 4 * MIB]),
            (small.clone(), [2, 128, 2, 0])
        ]
    );
    // At a moment: at 550 ns the worker has allocated nothing yet.
    assert_eq!(
        sites(&server, "arena=main&at=0.00000055"),
        [
            (big.clone(), [3, 4 * MIB, 0, 3 * MIB]),
            (small.clone(), [2, 128, 2, 0])
        ]
    );

    // The group filters count the blocks that pass the others.
    assert_eq!(
        sites(&server, "mmapped=false&group_allocations_min=3"),
        [(small.clone(), [4, 320, 2, 192])]
    );
    assert_eq!(sites(&server, "arena=main&group_allocations_min=4"), []);
    assert_eq!(
        sites(&server, "arena=main&group_leaked_min=100%25"),
        [(big.clone(), [3, 4 * MIB, 0, 4 * MIB])]
    );
    assert_eq!(
        allocations(&server, "arena=main&group_leaked_min=100%25").0,
        3
    );

    // The timeline's last point and the flame graph.
    let last_live = |query: &str| {
        let timeline = server.json(&format!("/api/timeline?{query}"));
        let points = timeline["points"].as_array().unwrap();
        points.last().unwrap()["live_bytes"].as_u64().unwrap()
    };
    assert_eq!(last_live(""), 4 * MIB + 192);
    assert_eq!(last_live("mmapped=true"), 4 * MIB);
    assert_eq!(last_live("arena=other"), 192);
    assert_eq!(last_live("arena=main&mmapped=false"), 0);
    let flame = server.json("/api/flame?what=allocated&arena=main");
    assert_eq!(flame["value"], 4 * MIB + 128);
    let flame = server.json("/api/flame?what=live&mmapped=false");
    assert_eq!(flame["value"], 192);
    let flame = server.json("/api/flame?what=live&arena=other&mmapped=true");
    assert_eq!(flame["value"], 0);

    // Bad values name the parameter.
    let message = server.bad("/api/sites?mmapped=yes");
    assert!(message.contains("mmapped=\"yes\""), "{message}");
    let message = server.bad("/api/allocations?arena=non_main");
    assert!(message.contains("arena=\"non_main\""), "{message}");
}

#[test]
fn a_trace_without_the_flags_says_so() {
    let server = Server::start(&[trace_file("known.mptrace", support::known_trace().0)
        .to_str()
        .unwrap()]);
    assert_eq!(server.json("/api/summary")["chunk_flags"], false);
    for path in [
        "/api/allocations?mmapped=true",
        "/api/sites?mmapped=false",
        "/api/timeline?arena=main",
        "/api/flame?arena=other",
        "/api/labels?mmapped=true",
        "/api/export/folded?arena=main",
    ] {
        let message = server.bad(path);
        let name = if path.contains("mmapped") {
            "mmapped"
        } else {
            "arena"
        };
        assert!(
            message.starts_with(&format!("{name}=")),
            "{path}: {message}"
        );
        assert!(
            message.contains("does not hold glibc's chunk flags"),
            "{path}: {message}"
        );
    }
    // Without those filters, as before.
    assert_eq!(server.json("/api/allocations")["total_count"], 5);
}
