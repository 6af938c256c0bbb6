//! `memprof summary` on a trace with the program's own mappings (the preloaded library's `MMAP`
//! and `MUNMAP` records): made over the run, their peak, live at the end and the largest live at
//! the end by site; and on a trace without them, no word of mappings.

mod support;

use support::{known_trace, mappings_trace, stdout_of};

#[test]
fn the_summary_lists_mappings() {
    let dir = std::env::temp_dir().join(format!("memprof-cli-maps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("maps.mptrace");
    std::fs::write(&path, mappings_trace()).unwrap();
    let summary = stdout_of(&["summary", path.to_str().unwrap()]);
    for line in [
        "allocations: 1 (100 bytes), frees: 0, markers: 0",
        "mappings: 3 made (49152 bytes), 2 unmaps; peak: 45056 bytes mapped at 0.000000 s",
        "mapped at end: 12288 bytes in 3 mappings",
    ] {
        assert!(summary.lines().any(|l| l == line), "{line:?} in\n{summary}");
    }
    let largest = summary
        .split("\nlargest mappings at the end:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        largest.starts_with(
            "        8192  bytes in 2 mappings\n              src/app.rs:1:1 in 'app::map_big'\n        4096  bytes in 1 mappings\n              src/app.rs:1:1 in 'app::map_small'\n"
        ),
        "{summary}"
    );
    // Sites that only mapped are not among the allocations.
    let most = summary.split("\nmost allocations:\n").nth(1).unwrap();
    let most = most.split("\n\n").next().unwrap();
    assert!(!most.contains("map_"), "{summary}");

    // Without mappings, the summary says nothing of them.
    let (bytes, _) = known_trace();
    let known = dir.join("known.mptrace");
    std::fs::write(&known, bytes).unwrap();
    let summary = stdout_of(&["summary", known.to_str().unwrap()]);
    assert!(!summary.contains("mapp"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}
