//! Labels through a trace (format 1.2): a program labels what two threads allocate
//! (`with_labels`, a guard) and writes its own `log_labels` and, with `MEMPROF_LABEL`, its own
//! one-tenant TSV report; from the trace, `memprof report --label` prints that report exactly,
//! `memprof summary` lists the same label sets with the same counts, and `memprof convert` to
//! pprof carries the labels as sample labels.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::stdout_of;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn keep(count: usize, size: usize) -> Vec<Vec<u8>> {
    (0..count).map(|i| vec![i as u8; size]).collect()
}

#[inline(never)]
fn churn(rounds: usize) -> usize {
    (0..rounds).map(|i| vec![1u8; 100 + i % 50].len()).sum()
}

fn child(dir: &Path) {
    let zeta = std::thread::spawn(|| {
        let _labels = memprof::Labels::new(&[("tenant", "zeta")]).enter();
        std::hint::black_box(churn(100));
        keep(7, 3000)
    });
    let acme = memprof::with_labels(&[("tenant", "acme")], || {
        std::hint::black_box(churn(200));
        memprof::with_labels(&[("kind", "index")], || keep(20, 512))
    });
    let zeta = zeta.join().unwrap();
    let plain = keep(3, 100);
    let mut labels = memprof::untracked(|| Vec::with_capacity(1 << 16));
    let mut tsv = memprof::untracked(|| Vec::with_capacity(1 << 16));
    memprof::mark("x");
    memprof::log_labels(&mut labels).unwrap();
    memprof::log_allocations(&mut tsv).unwrap();
    let path = memprof::close_trace().unwrap().expect("a trace was open");
    memprof::untracked(|| {
        std::fs::write(dir.join("labels.tsv"), &labels).unwrap();
        std::fs::write(dir.join("acme.tsv"), &tsv).unwrap();
        std::fs::write(dir.join("path"), path.to_str().unwrap()).unwrap();
    });
    drop((acme, zeta, plain));
}

#[test]
fn labels_survive_the_trace() {
    if let Some(dir) = std::env::var_os("MEMPROF_TEST_CLI_DIR") {
        child(Path::new(&dir));
        return;
    }
    let dir = std::env::temp_dir().join(format!("memprof-cli-labels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "labels_survive_the_trace", "--nocapture"])
        .env("MEMPROF_TEST_CLI_DIR", &dir)
        .env("MEMPROF_TRACE", dir.join("run.mptrace"))
        .env("MEMPROF_MIN_BYTES", "0")
        .env("MEMPROF_LABEL", "tenant=acme")
        .env_remove("MEMPROF_SAMPLE_INTERVAL")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let trace = PathBuf::from(std::fs::read_to_string(dir.join("path")).unwrap());
    let trace = trace.to_str().unwrap();

    // The program's own report kept tenant=acme's blocks only; the trace's agrees.
    let live_tsv = std::fs::read_to_string(dir.join("acme.tsv")).unwrap();
    assert!(live_tsv.contains("labels_trace::keep"), "{live_tsv}");
    let total: u64 = live_tsv
        .lines()
        .skip(1)
        .map(|l| l.split('\t').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    // 20 blocks of 512 and their vector of 20 (480 bytes), under `kind=index,tenant=acme`.
    assert_eq!(total, 20 * 512 + 480, "{live_tsv}");
    let replayed = stdout_of(&[
        "report",
        trace,
        "--at",
        "marker:x",
        "--format",
        "tsv",
        "--min-bytes",
        "0",
        "--label",
        "tenant=acme",
    ]);
    assert_eq!(replayed, live_tsv);
    // No label has an empty value: a filter on one is refused, not an empty report.
    let refused = support::memprof_cli(&["report", trace, "--label", "tenant="]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("with a key and a value"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // The summary's label sets are the program's `log_labels` rows.
    let logged = std::fs::read_to_string(dir.join("labels.tsv")).unwrap();
    let summary = stdout_of(&["summary", trace]);
    let table = summary
        .split("label sets (live at the end, allocated over the run):\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no label sets in\n{summary}"));
    let summarized: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    for labels in ["kind=index,tenant=acme", "tenant=acme", "tenant=zeta"] {
        let row: Vec<&str> = logged
            .lines()
            .find(|l| l.ends_with(&format!("\t{labels}")))
            .unwrap_or_else(|| panic!("{labels} not in\n{logged}"))
            .split('\t')
            .collect();
        assert!(
            summarized.contains(&row),
            "{labels}: {row:?}\n{summary}\n{logged}"
        );
    }

    // pprof from the trace: the labels are the samples' labels.
    let pprof = dir.join("x.pb.gz");
    stdout_of(&[
        "convert",
        trace,
        "--at",
        "marker:x",
        "-o",
        pprof.to_str().unwrap(),
    ]);
    let profile = common::decode_pprof(&std::fs::read(&pprof).unwrap());
    let s = |i: i64| profile.string_table[i as usize].as_str();
    let inuse_of = |value: &str| -> i64 {
        profile
            .sample
            .iter()
            .filter(|sample| {
                sample
                    .label
                    .iter()
                    .any(|l| s(l.key) == "tenant" && s(l.str) == value)
            })
            .map(|sample| sample.value[3])
            .sum()
    };
    // acme: 20 x 512 and the outer vector of 20 (480 bytes); zeta: 7 x 3000 and its vector.
    assert_eq!(inuse_of("acme"), 20 * 512 + 480);
    assert_eq!(inuse_of("zeta"), 7 * 3000 + 168);
    std::fs::remove_dir_all(&dir).unwrap();
}
