//! The crate table (`memprof::log_crates`) on a program with three dependencies that allocate:
//! a JSON document parsed by `serde_json` (whose keys are made by `serde_core`'s `String`
//! visitor: the two crates' rows add up to what the parse kept), a compiled `regex_lite` pattern with its search cache,
//! a `hashbrown` map (the registry's crate, used directly) and a std `HashMap` (std's vendored
//! hashbrown, which is the standard library's: its row is the program's crate, which called it).
//! Each crate's live bytes equal what the program counted with a `Scope` around the calls that
//! made them, exactly; the rows sum to the heap's totals; by caller crate, each dependency's row
//! names the program as its caller (in a second process with stacks deep enough to reach the
//! program's frames). Run in debug and release builds (`scripts/test.sh`).
//!
//! Its own `main` (`harness = false`): libtest's own blocks, allocated from the program's
//! generated `main`, would be the program's crate's too.

use memprof::{Report, Scope, Snapshot};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// This test's crate: the program's own.
const OWN: &str = "crates_table";

const JSON: &str = r#"{
    "name": "cache", "tags": ["hot", "cold", "warm", "lukewarm"],
    "entries": [{"key": "alpha", "value": 1}, {"key": "beta", "value": [1, 2, 3]},
                {"key": "gamma", "value": {"nested": "a string long enough to be its own block"}}]
}"#;

/// Answers a test runner's `--list` as the default harness would: one test, none ignored.
fn listed() -> bool {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--list") {
        return false;
    }
    if !args.iter().any(|a| a == "--ignored") {
        println!("crates_table: test");
    }
    true
}

/// What `make` returns, and the bytes of the blocks it allocated that are still live.
#[inline(never)]
fn kept<T>(make: impl FnOnce() -> T) -> (T, u64) {
    let scope = Scope::start();
    let value = make();
    let live = scope.stats().live_bytes;
    assert!(live > 0);
    (value, live)
}

fn main() {
    if listed() {
        return;
    }
    let (json, json_bytes) =
        kept(|| serde_json::from_str::<serde_json::Value>(JSON).expect("valid JSON"));
    let (regex, regex_bytes) = kept(|| {
        let regex = regex_lite::Regex::new(r"(\w+)@(\w+)\.com|[a-z]{3,9}").expect("valid");
        // The search cache, kept in the regex's pool.
        assert!(regex.is_match("mail me at someone@example.com"));
        regex
    });
    let (map, map_bytes) = kept(|| {
        let mut map: hashbrown::HashMap<u64, u64, BuildHasherDefault<DefaultHasher>> =
            hashbrown::HashMap::default();
        for i in 0..1000 {
            map.insert(i, i * i);
        }
        map
    });
    let (std_map, std_map_bytes) = kept(|| {
        let mut map: HashMap<u64, u64> = HashMap::new();
        for i in 0..500 {
            map.insert(i, i);
        }
        map
    });

    let snapshot = Snapshot::take_all();
    let (rows, by_caller) = memprof::with_symbolizer(|symbolizer| {
        (
            Report::crates(&snapshot, symbolizer, false),
            Report::crates(&snapshot, symbolizer, true),
        )
    });
    std::hint::black_box((&json, &regex, &map, &std_map));

    let live = |rows: &[(String, [u64; 4])], name: &str| {
        rows.iter()
            .find(|(n, _)| n == name)
            .map(|(_, figures)| figures[0])
            .unwrap_or_else(|| panic!("no row {name:?} in {rows:#?}"))
    };
    // The strings of the document's keys come from serde's own `String` visitor, which
    // serde_json calls: serde_core's code.
    assert!(live(&rows, "serde_core") > 0, "{rows:#?}");
    for (name, expected) in [
        ("serde_json", json_bytes - live(&rows, "serde_core")),
        ("regex_lite", regex_bytes),
        ("hashbrown", map_bytes),
        (OWN, std_map_bytes),
    ] {
        assert_eq!(live(&rows, name), expected, "{name}: {rows:#?}");
    }
    // Every live block and every allocation is in exactly one row.
    for rows in [&rows, &by_caller] {
        let sum = |i: usize| rows.iter().map(|(_, f)| f[i]).sum::<u64>();
        let blocks = snapshot.blocks.iter();
        assert_eq!(sum(0), blocks.clone().map(|b| b.size).sum::<u64>());
        assert_eq!(sum(1), snapshot.blocks.len() as u64);
        let stacks = snapshot.stacks.iter();
        assert_eq!(
            sum(2),
            stacks.clone().map(|s| s.allocated_bytes).sum::<u64>()
        );
        assert_eq!(sum(3), stacks.map(|s| s.allocated_blocks).sum::<u64>());
    }
    // No frame left unnamed in a program built with debug information.
    assert!(
        rows.iter().all(|(name, _)| name != "(unknown)"),
        "{rows:#?}"
    );

    println!(
        "kept: serde_json {json_bytes}, regex_lite {regex_bytes}, hashbrown {map_bytes}, \
         {OWN} {std_map_bytes}"
    );
    let mut out = Vec::new();
    Report::write_crates_markdown(&rows, snapshot.sample_interval, &mut out).unwrap();
    print!("{}", String::from_utf8(out).unwrap());
    // The callers need stacks that reach the program's frames under the dependencies' own:
    // the checks run again in a process with deeper stacks.
    if std::env::var_os("MEMPROF_STACK_DEPTH").is_some() {
        for (name, expected) in [
            (
                format!("{OWN} ← serde_json"),
                json_bytes - live(&by_caller, &format!("{OWN} ← serde_core")),
            ),
            (format!("{OWN} ← regex_lite"), regex_bytes),
            (format!("{OWN} ← hashbrown"), map_bytes),
            (OWN.to_owned(), std_map_bytes),
        ] {
            assert_eq!(live(&by_caller, &name), expected, "{name}: {by_caller:#?}");
        }
    } else {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .env("MEMPROF_STACK_DEPTH", "64")
            .status()
            .unwrap();
        assert!(status.success());
    }
    println!("crates_table: ok");
}
