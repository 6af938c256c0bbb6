//! A trace cut short by `kill -9` reads up to its last complete chunk: the header, the modules
//! (with the build id that names the executable for offline symbolization), stacks defined
//! before their use, and events up to the cut; only the end is missing.

#![cfg(feature = "trace")]

mod common;

use common::trace_replay::replay;
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[test]
fn cut_trace_reads_to_its_last_chunk() {
    if std::env::var_os("MEMPROF_TEST_TRACE_CHILD").is_some() {
        common::allocate_forever();
    }
    let path = std::env::temp_dir().join(format!(
        "memprof-trace-kill9-{}.mptrace",
        std::process::id()
    ));
    common::trace_then_kill(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cut_trace_reads_to_its_last_chunk",
                "--nocapture",
            ])
            .env("MEMPROF_TEST_TRACE_CHILD", "1"),
        &path,
        200_000,
    );
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let cut = replay(&bytes, None);
    if let Some(error) = &cut.error {
        assert!(error.contains("cut short"), "{error}");
    }
    assert_eq!(cut.end, None);
    assert!(cut.events > 50_000, "{} events", cut.events);
    // Blocks whose allocation sat in another thread's buffer, not written before the kill, may
    // be freed in the trace; no address is ever allocated twice.
    assert!(
        cut.conflicts.iter().all(|c| c.contains("not live")),
        "{:?}",
        &cut.conflicts[..5.min(cut.conflicts.len())]
    );
    for (_, stack) in cut.live.values() {
        assert!(
            cut.stacks.contains_key(stack),
            "stack {stack} used before its definition"
        );
    }
    // Symbols are written in the background as stacks appear: a cut trace holds some, each of a
    // return address of a stack it defined.
    let addresses: std::collections::HashSet<u64> =
        cut.stacks.values().flatten().copied().collect();
    for address in cut.symbols.keys() {
        assert!(
            addresses.contains(address),
            "symbol of {address:#x}, in no stack defined"
        );
    }
    let exe = std::env::current_exe().unwrap();
    let module = cut.modules[0]
        .iter()
        .find(|m| std::path::Path::new(&m.path) == exe)
        .expect("the executable in the module map");
    // The build id is the file's own: what an offline symbolizer matches the binary by.
    let file = std::fs::read(&exe).unwrap();
    assert!(module.build_id.len() >= 8);
    assert!(
        file.windows(module.build_id.len())
            .any(|w| w == module.build_id),
        "{module:?}"
    );
}
