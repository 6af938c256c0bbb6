//! `memprof::mark` with a new label each time, as in "request 42 done": 300,000 markers are
//! written in seconds (a label is found by its text in a hash map, not searched for among all
//! the labels before it), each with its own text, none lost.

#![cfg(feature = "trace")]

mod common;

use memprof_trace::{Reader, Record};
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

const MARKS: u32 = 300_000;

#[test]
fn many_distinct_marks() {
    if std::env::var_os("MEMPROF_TEST_TRACE_CHILD").is_some() {
        for i in 0..MARKS {
            memprof::mark(&format!("request {i} done"));
            // A breath every 10,000 marks (0.6 s in all): on a machine busy with other tests the
            // writer thread may get no core for a while, and a trace loses events rather than
            // stall the program (docs/trace-format.md); what is tested is that none is lost
            // when it can keep up.
            if i % 10_000 == 9_999 {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // A label used again lately keeps its id.
        memprof::mark(&format!("request {} done", MARKS - 1));
        std::process::exit(0);
    }
    let path = std::env::temp_dir().join(format!(
        "memprof-trace-marks-{}.mptrace",
        std::process::id()
    ));
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "many_distinct_marks", "--nocapture"])
        .env("MEMPROF_TEST_TRACE_CHILD", "1")
        .env("MEMPROF_TRACE", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Minutes before labels were looked up in a hash map: a hang, for this test.
    let output = common::wait_within(child, Duration::from_secs(60), "300,000 marks");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut reader = Reader::new(&bytes[..]).unwrap();
    let mut labels = HashMap::new();
    let mut marks = Vec::new();
    let mut end = None;
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            match record.unwrap() {
                Record::Label { id, text } => {
                    assert!(
                        labels.insert(id, text).is_none(),
                        "label {id} defined twice"
                    );
                }
                Record::Mark { time, label } => marks.push((time, label)),
                Record::End { events, lost } => end = Some((events, lost)),
                _ => {}
            }
        }
    }
    assert_eq!(end.map(|e| e.1), Some(0), "events lost");
    assert_eq!(marks.len(), MARKS as usize + 1);
    marks.sort();
    let texts: Vec<&str> = marks.iter().map(|(_, l)| labels[l].as_str()).collect();
    for (i, text) in texts[..MARKS as usize].iter().enumerate() {
        assert_eq!(*text, format!("request {i} done"));
    }
    assert_eq!(texts[MARKS as usize], format!("request {} done", MARKS - 1));
    assert_eq!(marks[MARKS as usize - 1].1, marks[MARKS as usize].1);
}
