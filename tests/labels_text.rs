//! Label text that could break the outputs: a tab, a line break or a backslash in a key or a
//! value, and `,` or `=` inside one. `log_labels` escapes them, so its count line counts the rows
//! that follow, each row has five fields, and `comma=a,b=c` stays one label; the pprof export
//! carries the text as it was, read back by Go's pprof (`-raw`). A pair with an empty key or an
//! empty value is refused where labels are set (pprof has no label with an empty value), so no
//! output shows it and a report filtered on it keeps nothing.

mod common;

use memprof::export::{self, ExportOptions};
use memprof::{Labels, Report, ReportOptions, Snapshot};
use std::path::PathBuf;
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn block(size: usize) -> Vec<u8> {
    let block = Vec::with_capacity(size);
    std::hint::black_box(&block);
    block
}

/// A `log_labels` label field back to its pairs: split at the `,` and the first `=` that are not
/// escaped, then the escapes undone.
fn unescape_labels(field: &str) -> Vec<(String, String)> {
    if field == "(none)" {
        return Vec::new();
    }
    let mut pairs = Vec::new();
    let (mut key, mut text, mut in_value) = (String::new(), String::new(), false);
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => text.push(match chars.next().expect("an escape ends the field") {
                't' => '\t',
                'n' => '\n',
                'r' => '\r',
                other => other,
            }),
            '=' if !in_value => {
                key = std::mem::take(&mut text);
                in_value = true;
            }
            ',' => {
                assert!(in_value, "a pair without = in {field:?}");
                pairs.push((std::mem::take(&mut key), std::mem::take(&mut text)));
                in_value = false;
            }
            c => text.push(c),
        }
    }
    assert!(in_value, "a pair without = in {field:?}");
    pairs.push((key, text));
    pairs
}

/// Label pairs as given.
type Pairs<'a> = &'a [(&'a str, &'a str)];

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|&(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn labels_text() {
    // Refused pairs: a set of them alone is no labels; beside others, they are left out.
    assert_eq!(Labels::new(&[("tenant", "")]), Labels::NONE);
    assert_eq!(Labels::new(&[("", "x")]), Labels::NONE);
    assert_eq!(
        Labels::new(&[("tenant", ""), ("kind", "kept")]),
        Labels::new(&[("kind", "kept")])
    );
    // A refused pair does not clear the outer value of its key.
    memprof::with_labels(&[("tenant", "outer")], || {
        memprof::with_labels(&[("tenant", "")], || {
            assert_eq!(Labels::current().pairs(), owned(&[("tenant", "outer")]));
        });
    });

    // (the pairs given, the pairs kept, the size of the block made with them)
    let sets: [(Pairs, Pairs, usize); 4] = [
        (
            &[("tab\tkey", "v"), ("comma", "a,b=c")],
            &[("comma", "a,b=c"), ("tab\tkey", "v")],
            111_111,
        ),
        (
            &[("k", "line\nbreak"), ("back", "x\\y"), ("cr", "a\rb")],
            &[("back", "x\\y"), ("cr", "a\rb"), ("k", "line\nbreak")],
            222_222,
        ),
        (
            &[("tenant", ""), ("kind", "kept")],
            &[("kind", "kept")],
            333_333,
        ),
        (&[("tenant", "")], &[], 444_444),
    ];
    let mut kept = Vec::with_capacity(sets.len());
    for (pairs, _, size) in &sets {
        memprof::with_labels(pairs, || kept.push(block(*size)));
    }

    // log_labels: as many rows as the count says, five fields each, the labels as they were.
    let mut out = Vec::new();
    memprof::log_labels(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let mut lines = text.lines();
    let count: usize = lines.next().unwrap().parse().unwrap();
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), count, "{text}");
    let mut logged = Vec::new();
    for row in &rows {
        let fields: Vec<&str> = row.split('\t').collect();
        assert_eq!(fields.len(), 5, "{row:?} in\n{text}");
        let live_bytes: u64 = fields[1].parse().unwrap();
        logged.push((unescape_labels(fields[4]), live_bytes));
    }
    for (_, expected, size) in &sets[..3] {
        let row = logged
            .iter()
            .find(|(labels, _)| *labels == owned(expected))
            .unwrap_or_else(|| panic!("no row for {expected:?} in\n{text}"));
        assert_eq!(row.1, *size as u64, "{expected:?}");
    }
    assert!(
        rows.iter()
            .any(|row| row.ends_with("\tcomma=a\\,b\\=c,tab\\tkey=v")),
        "{text}"
    );
    assert!(
        rows.iter()
            .any(|row| row.ends_with("\tback=x\\\\y,cr=a\\rb,k=line\\nbreak")),
        "{text}"
    );
    // No label with an empty value anywhere.
    for (labels, _) in &logged {
        assert!(
            labels.iter().all(|(k, v)| !k.is_empty() && !v.is_empty()),
            "{text}"
        );
    }

    // The reports' filter: the text as it was; an empty value keeps nothing.
    let snapshot = Snapshot::take();
    let filtered = |key: &str, value: &str| -> u64 {
        let options = ReportOptions::default().min_bytes(0).label(key, value);
        let report = memprof::with_symbolizer(|s| Report::live(&snapshot, s, &options));
        report.groups.iter().map(|g| g.bytes).sum()
    };
    assert_eq!(filtered("comma", "a,b=c"), 111_111);
    assert_eq!(filtered("k", "line\nbreak"), 222_222);
    assert_eq!(filtered("kind", "kept"), 333_333);
    assert_eq!(filtered("tenant", ""), 0);

    // The pprof export: the labels' text as it was, none with an empty value.
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("labels_text-{}.pb.gz", std::process::id()));
    let mut out = std::fs::File::create(&file).unwrap();
    memprof::with_symbolizer(|s| {
        export::pprof::write(&snapshot, s, &ExportOptions::default(), &mut out)
    })
    .unwrap();
    drop(out);
    let profile = common::decode_pprof(&std::fs::read(&file).unwrap());
    let s = |i: i64| profile.string_table[i as usize].clone();
    for (_, expected, size) in &sets {
        let samples: Vec<_> = profile
            .sample
            .iter()
            .filter(|sample| sample.value[3] == *size as i64)
            .collect();
        assert_eq!(samples.len(), 1, "one sample of {size} live bytes");
        let mut labels: Vec<(String, String)> = samples[0]
            .label
            .iter()
            .map(|l| (s(l.key), s(l.str)))
            .collect();
        labels.sort();
        assert_eq!(labels, owned(expected), "{size}");
    }

    // Go's pprof reads the same labels back.
    let dir = file.with_extension("pprof");
    std::fs::create_dir_all(&dir).unwrap();
    let mut tools: Vec<(PathBuf, Vec<&str>)> = Vec::new();
    if let Some(built) = common::pprof_binary() {
        tools.push((built, Vec::new()));
        tools.push(("go".into(), vec!["tool", "pprof"]));
    }
    for (tool, before) in &tools {
        let output = Command::new(tool)
            .args(before)
            .arg("-raw")
            .arg(&file)
            .env("PPROF_TMPDIR", &dir)
            .env("HOME", &dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{tool:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let raw = String::from_utf8(output.stdout).unwrap();
        // `-raw` prints a sample's values, then its labels as `key:[value]` on the next line.
        let labels_after = |size: usize| -> String {
            let at = raw
                .find(&format!(" {size}: "))
                .unwrap_or_else(|| panic!("no sample of {size} bytes in\n{raw}"));
            let rest = &raw[at..];
            let line_end = rest.find('\n').unwrap();
            let next = &rest[line_end + 1..];
            let end = next.find("\n ").map_or(next.len(), |e| e + 1);
            let labels = next[..end].trim();
            // The next sample's values, when this one has no labels.
            if labels.starts_with(|c: char| c.is_ascii_digit()) {
                return String::new();
            }
            labels.to_owned()
        };
        assert_eq!(labels_after(111_111), "comma:[a,b=c] tab\tkey:[v]", "{raw}");
        assert_eq!(
            labels_after(222_222),
            "back:[x\\y] cr:[a\rb] k:[line\nbreak]",
            "{raw}"
        );
        assert_eq!(labels_after(333_333), "kind:[kept]", "{raw}");
        assert_eq!(labels_after(444_444), "", "{raw}");
        assert!(!raw.contains(":[]"), "{raw}");
    }
    drop(kept);
}
