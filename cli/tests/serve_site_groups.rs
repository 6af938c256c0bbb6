//! `/api/site/ID` groups a site's stacks by the frames it shows of them: stacks that differ only
//! in frames left out (memprof's and the allocator's above, the runtime below the program) make
//! one group, their figures summed, the stacks it merges listed; `hidden=1` unfolds every frame
//! of each stack, the ones left out marked.

#[path = "support/server.rs"]
mod server;
mod support;

use serde_json::{Value, json};
use server::Server;

#[test]
fn a_sites_stacks_are_grouped_by_the_frames_shown() {
    let dir = std::env::temp_dir().join(format!("memprof-serve-groups-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hidden.mptrace");
    std::fs::write(&path, support::hidden_frames_trace()).unwrap();
    let server = Server::start(&[path.to_str().unwrap()]);

    let sites = server.json("/api/sites?limit=100");
    let build = sites["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["function"] == "app::build")
        .unwrap_or_else(|| panic!("{sites}"));
    assert_eq!(build["allocated_bytes"], 2000, "{sites}");
    let id = build["id"].as_u64().unwrap();

    let site = server.json(&format!("/api/site/{id}"));
    // The stacks one by one, as before: three, each with its own figures and hidden counts.
    let stacks = site["stacks"].as_array().unwrap();
    let each: Vec<(u64, u64, u64, u64, u64, u64)> = stacks
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
            (
                n("id"),
                n("bytes"),
                n("allocations"),
                n("hidden_above"),
                n("hidden_below"),
                n("group"),
            )
        })
        .collect();
    assert_eq!(
        each,
        [
            (1, 1000, 2, 4, 7, 0),
            (5, 200, 1, 5, 7, 0),
            (6, 300, 1, 4, 6, 0)
        ],
        "{site}"
    );
    assert!(stacks.iter().all(|s| s.get("all_frames").is_none()));

    // One group: the frames shown once, the figures summed, the stacks it merges named.
    let groups = site["groups"]
        .as_array()
        .unwrap_or_else(|| panic!("{site}"));
    assert_eq!(groups.len(), 1, "{site}");
    let group = &groups[0];
    let functions: Vec<&str> = group["frames"]
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
    assert_eq!(
        (
            &group["bytes"],
            &group["blocks"],
            &group["allocations"],
            &group["allocated_bytes"],
            &group["stacks"],
            &group["hidden_above"],
            &group["hidden_below"],
        ),
        (
            &json!(1500),
            &json!(3),
            &json!(4),
            &json!(2000),
            &json!([1, 5, 6]),
            &json!([4, 5]),
            &json!([6, 7]),
        ),
        "{site}"
    );

    // Unfolded: every frame of each stack, the ones left out marked above or below.
    let site = server.json(&format!("/api/site/{id}?hidden=1"));
    let unfolded = |stack: u64| -> Vec<(String, String)> {
        let s = site["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == stack)
            .unwrap();
        s["all_frames"]
            .as_array()
            .unwrap_or_else(|| panic!("{s}"))
            .iter()
            .map(|f: &Value| {
                (
                    f["function"].as_str().unwrap().to_owned(),
                    f["hidden"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    };
    let marks = |frames: &[(String, String)]| -> Vec<String> {
        frames.iter().map(|(_, h)| h.clone()).collect()
    };
    let five = unfolded(5);
    assert_eq!(five.len(), 15, "{five:?}");
    assert_eq!(five[1].0, "memprof::hooks::c_abi::malloc");
    assert_eq!(
        marks(&five),
        [vec!["above"; 5], vec![""; 3], vec!["below"; 7]].concat()
    );
    let six = unfolded(6);
    assert_eq!(
        marks(&six),
        [vec!["above"; 4], vec![""; 3], vec!["below"; 6]].concat()
    );
    assert_eq!(six.last().unwrap().0, "__libc_start_call_main");
    assert_eq!(
        site["groups"],
        groups_of(&server, id),
        "hidden=1 keeps the groups"
    );
    assert!(
        server
            .bad(&format!("/api/site/{id}?hidden=2"))
            .contains("hidden")
    );
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn groups_of(server: &Server, id: u64) -> Value {
    server.json(&format!("/api/site/{id}"))["groups"].clone()
}
