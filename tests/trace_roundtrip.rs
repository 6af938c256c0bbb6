//! A trace replayed to a marker, and to its end, holds exactly the live table's blocks at that
//! moment, with the same stacks and totals; its own symbols give the same Markdown report as the
//! process's symbolizer; and it names its modules, threads and labels.

#![cfg(feature = "trace")]

mod common;

use common::trace_replay::{self, replay};
use std::path::{Path, PathBuf};
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn worker(seed: usize) -> Vec<Vec<u8>> {
    let mut kept = Vec::new();
    let mut grown: Vec<u64> = Vec::new();
    for i in 0..20_000 {
        // Short-lived blocks, reallocations (the vector grows), and some blocks kept.
        let temporary = vec![i as u8; 16 + (i + seed) % 200];
        grown.push(temporary.len() as u64);
        if i % 7 == 0 {
            kept.push(temporary);
        }
        if i % 1000 == 999 {
            grown = Vec::with_capacity(3);
            kept.truncate(kept.len() / 2);
        }
    }
    kept
}

fn child(dir: &Path) {
    let threads: Vec<_> = (0..4)
        .map(|t| std::thread::spawn(move || worker(t)))
        .collect();
    let kept: Vec<Vec<Vec<u8>>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let mine = worker(9);
    // Paths made before each marker: nothing is allocated between a marker and the table's copy.
    let (checkpoint, end) = (dir.join("checkpoint.table"), dir.join("end.table"));
    memprof::mark("checkpoint");
    trace_replay::write_table(&checkpoint);
    let markdown = trace_replay::live_markdown(8);
    memprof::untracked(|| std::fs::write(dir.join("checkpoint.md"), markdown).unwrap());
    drop(kept);
    let more = worker(3);
    drop(mine);
    memprof::mark("end");
    trace_replay::write_table(&end);
    let path = memprof::close_trace().unwrap().expect("a trace was open");
    memprof::untracked(|| std::fs::write(dir.join("path"), path.to_str().unwrap()).unwrap());
    drop(more);
}

#[test]
fn trace_replays_to_the_live_table() {
    if let Some(dir) = std::env::var_os("MEMPROF_TEST_TRACE_DIR") {
        child(Path::new(&dir));
        return;
    }
    let dir = std::env::temp_dir().join(format!("memprof-trace-roundtrip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "trace_replays_to_the_live_table", "--nocapture"])
        .env("MEMPROF_TEST_TRACE_DIR", &dir)
        .env("MEMPROF_TRACE", dir.join("run-%p.mptrace"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(
        child,
        std::time::Duration::from_secs(120),
        "the traced child",
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = PathBuf::from(std::fs::read_to_string(dir.join("path")).unwrap());
    assert!(
        path.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("run-")
    );
    assert!(!path.to_str().unwrap().contains('%'), "{path:?}");
    let bytes = std::fs::read(&path).unwrap();

    let at_checkpoint = replay(&bytes, Some("checkpoint"));
    assert!(at_checkpoint.marked, "no checkpoint marker");
    assert!(at_checkpoint.error.is_none(), "{:?}", at_checkpoint.error);
    let table = trace_replay::read_table(&dir.join("checkpoint.table"));
    assert!(table.0.len() > 1000, "{} live blocks", table.0.len());
    trace_replay::assert_same(&at_checkpoint, &table, "at the checkpoint");
    let markdown = trace_replay::markdown(&at_checkpoint, 8);
    let live = std::fs::read_to_string(dir.join("checkpoint.md")).unwrap();
    assert!(live.contains("trace_roundtrip::worker"), "{live}");
    assert_eq!(
        markdown, live,
        "the report from the trace differs from the live one"
    );

    let at_end = replay(&bytes, Some("end"));
    trace_replay::assert_same(
        &at_end,
        &trace_replay::read_table(&dir.join("end.table")),
        "at the end",
    );

    // The whole trace: closed, nothing lost, every frame symbolized, the modules named.
    let whole = replay(&bytes, None);
    let (events, lost) = whole.end.expect("the END record");
    assert_eq!((events, lost), (whole.events, 0));
    assert!(events > 100_000, "{events} events");
    assert_eq!(whole.header.pid, output_pid(&path));
    assert!(
        whole.header.executable.ends_with(
            std::env::current_exe()
                .unwrap()
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
        )
    );
    for frames in whole.stacks.values() {
        for frame in frames {
            assert!(
                whole.symbols.contains_key(frame),
                "{frame:#x} not symbolized"
            );
        }
    }
    let modules = &whole.modules[0];
    let exe = modules
        .iter()
        .find(|m| m.path == whole.header.executable)
        .expect("the executable's module");
    assert!(!exe.build_id.is_empty() && !exe.text.is_empty(), "{exe:?}");
    assert!(whole.threads.len() >= 5, "{:?}", whole.threads);
    assert!(
        whole
            .threads
            .values()
            .any(|(_, name)| name.starts_with("trace_replays")),
        "{:?}",
        whole.threads
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn output_pid(path: &Path) -> u32 {
    let name = path.file_stem().unwrap().to_str().unwrap();
    name.trim_start_matches("run-").parse().unwrap()
}
