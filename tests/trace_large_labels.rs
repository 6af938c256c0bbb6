//! Label sets whose definitions outgrow a chunk never end the trace: 3,000 sets with 8 KiB
//! values (24 MB of definitions for one buffer, more than the format's 16 MiB limit on a chunk)
//! are written over several chunks, and a set with a 17 MB value is cut where it is made (to
//! 64 KiB, `docs/labels.md`). Before, the writer stopped at the first such buffer ("chunk
//! payload above MAX_CHUNK_BYTES; tracing stops") and the file held its header alone.

#![cfg(feature = "trace")]

mod common;

use memprof_trace::{Reader, Record};
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

const SETS: usize = 3_000;
const VALUE: usize = 8 << 10;
const HUGE: usize = 17_000_000;
const BIG_BLOCK: usize = 1 << 20;

fn child() {
    let mut kept = Vec::with_capacity(SETS + 1);
    for i in 0..SETS {
        let value = format!("{i:08}").repeat(VALUE / 8);
        kept.push(memprof::with_labels(&[("big", &value)], || vec![1u8; 100]));
    }
    let huge = "h".repeat(HUGE);
    kept.push(memprof::with_labels(&[("huge", &huge)], || vec![2u8; 200]));
    let block = vec![3u8; BIG_BLOCK];
    memprof::mark("after");
    memprof::close_trace().unwrap().expect("a trace was open");
    drop((kept, block, huge));
}

#[test]
fn large_label_sets_are_written() {
    if std::env::var_os("MEMPROF_TEST_TRACE_CHILD").is_some() {
        child();
        return;
    }
    let path = std::env::temp_dir().join(format!(
        "memprof-trace-large-labels-{}.mptrace",
        std::process::id()
    ));
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "large_label_sets_are_written", "--nocapture"])
        .env("MEMPROF_TEST_TRACE_CHILD", "1")
        .env("MEMPROF_TRACE", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(child, Duration::from_secs(120), "the traced child");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("tracing stops"), "{stderr}");
    assert!(
        stderr.contains("labels cut"),
        "no warning of the cut: {stderr}"
    );

    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut reader = Reader::new(&bytes[..]).unwrap();
    let mut sets = HashMap::new();
    let mut stack_labels = HashMap::new();
    let mut labels = HashMap::new();
    let mut allocs = Vec::new();
    let (mut marked, mut end, mut definition_chunks) = (false, None, 0);
    while let Some(chunk) = reader.next_chunk().unwrap() {
        if chunk.header.flags & memprof_trace::flags::DEFINITIONS != 0 {
            definition_chunks += 1;
        }
        for record in chunk.records() {
            match record.unwrap() {
                Record::LabelSet { id, pairs } => {
                    sets.insert(id, pairs);
                }
                Record::StackLabels { stack, labels: set } => {
                    stack_labels.insert(stack, set);
                }
                Record::Label { id, text } => {
                    labels.insert(id, text);
                }
                Record::Mark { label, .. } => {
                    marked |= labels.get(&label).map(String::as_str) == Some("after");
                }
                Record::Alloc { size, stack, .. } => allocs.push((size, stack)),
                Record::End { events, lost } => end = Some((events, lost)),
                _ => {}
            }
        }
    }
    assert_eq!(end.map(|e| e.1), Some(0), "no end record, or events lost");
    assert!(marked, "the marker is not in the trace");
    assert!(
        allocs.iter().any(|&(size, _)| size == BIG_BLOCK as u64),
        "the 1 MiB block is not in the trace"
    );
    assert!(
        definition_chunks >= 2,
        "24 MB of definitions in {definition_chunks} chunk"
    );
    // Every labelled block names a set the trace defines, with its whole 8 KiB value.
    let labelled: Vec<_> = allocs
        .iter()
        .filter(|&&(size, _)| size == 100)
        .map(|(_, stack)| &sets[&stack_labels[stack]])
        .collect();
    assert_eq!(labelled.len(), SETS);
    for (i, pairs) in labelled.iter().enumerate() {
        assert_eq!(pairs.len(), 1);
        assert_eq!(pairs[0].1.len(), VALUE, "set {i}");
    }
    let distinct: std::collections::HashSet<_> = labelled.iter().map(|p| &p[0].1).collect();
    assert_eq!(distinct.len(), SETS);
    // The 17 MB value, cut to 64 KiB.
    let huge = allocs
        .iter()
        .find(|&&(size, _)| size == 200)
        .map(|(_, stack)| &sets[&stack_labels[stack]])
        .expect("the block of the huge set");
    assert_eq!(huge[0].0, "huge");
    assert_eq!(huge[0].1, "h".repeat(64 << 10));
}
