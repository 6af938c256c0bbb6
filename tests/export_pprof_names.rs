//! Rust's function names in a pprof profile as Go's `go tool pprof` shows them: whole. pprof
//! takes a function whose `name` equals its `system_name` for a symbol still to demangle, and one
//! that fails to demangle but reads like C++ (`::` and `<...>`) has its `<...>` removed:
//! `<std::path::Path>::_join` became `::_join`, and `<alloc::vec::Vec<T> as Drop>::drop` became
//! `::drop`. memprof's names are already demangled, so the profile says so (an empty
//! `system_name`), and pprof keeps them as they are.

mod common;

use memprof::export::{self, ExportOptions};
use memprof::{Frame, ReturnAddress, Snapshot};
use std::collections::HashMap;
use std::process::Command;

use common::{frame, stack};

/// Names pprof's heuristics for demangled C++ would cut, each the program's frame of a site.
const NAMES: [&str; 4] = [
    "<std::path::Path>::_join",
    "<app::Rows<T> as core::iter::traits::iterator::Iterator>::next",
    "app::Index<u32>::build",
    "app::load::{{closure}}",
];

#[test]
fn go_tool_pprof_keeps_rust_names_whole() {
    if Command::new("go").arg("version").output().is_err() {
        common::missing_tool("go tool pprof", "apt-get install -y golang-go");
        return;
    }
    let mut symbols: HashMap<ReturnAddress, Vec<Frame>> = HashMap::new();
    let mut stacks = Vec::new();
    for (i, name) in NAMES.iter().enumerate() {
        let address = 0x1000 * (i + 1);
        symbols.insert(
            ReturnAddress(address),
            vec![frame(name, "src/app.rs", 10 + i as u32, 5)],
        );
        stacks.push(stack(&[address], 1, 1000 * (i as u64 + 1)));
    }
    let blocks = common::blocks(&[(0, 1000, 1), (1, 2000, 1), (2, 3000, 1), (3, 4000, 1)]);
    let snapshot = Snapshot::from_parts(blocks, stacks, 10_000);
    let mut profile = Vec::new();
    export::pprof::write(
        &snapshot,
        &mut symbols,
        &ExportOptions::default(),
        &mut profile,
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("memprof-pprof-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("names.pb.gz");
    std::fs::write(&file, &profile).unwrap();
    for view in ["-top", "-traces"] {
        let output = Command::new("go")
            .args(["tool", "pprof", view, "-sample_index=inuse_space"])
            .arg(&file)
            .env("PPROF_TMPDIR", &dir)
            .env("HOME", &dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "go tool pprof {view}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        for name in NAMES {
            assert!(
                text.lines().any(|l| l.trim_end().ends_with(name)),
                "go tool pprof {view} does not show {name} whole:\n{text}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
