//! `memprof report TRACE --at marker:x --format tsv`, run as the real binary on the trace of a
//! program, prints exactly what the program's own `log_allocations` printed at that marker; the
//! Markdown report and `memprof convert` to `.tsv` agree with it too.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::{memprof_cli, stdout_of};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn keep(count: usize, size: usize) -> Vec<Vec<u8>> {
    (0..count).map(|i| vec![i as u8; size]).collect()
}

#[inline(never)]
fn churn(rounds: usize) -> usize {
    let mut total = 0;
    for i in 0..rounds {
        let temporary = vec![1u8; 100 + i % 50];
        total += temporary.len();
    }
    total
}

#[inline(never)]
fn worker(seed: usize) -> Vec<Vec<u8>> {
    let mut kept = Vec::new();
    for i in 0..5000 {
        let block = vec![i as u8; 16 + (i * 7 + seed) % 300];
        if i % 5 == 0 {
            kept.push(block);
        }
        if i % 1000 == 999 {
            kept.truncate(kept.len() / 2);
        }
    }
    kept
}

fn child(dir: &Path) {
    // Threads whose chunks the reader merges by time; what they keep is live at the marker.
    let threads: Vec<_> = (0..4)
        .map(|t| std::thread::spawn(move || worker(t)))
        .collect();
    let kept: Vec<Vec<Vec<u8>>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let big = keep(10, 4096);
    let small = keep(100, 64);
    std::hint::black_box(churn(1000));
    let mut tsv = memprof::untracked(|| Vec::with_capacity(1 << 20));
    let mut md = memprof::untracked(|| Vec::with_capacity(1 << 20));
    memprof::mark("x");
    memprof::log_allocations(&mut tsv).unwrap();
    memprof::pretty_log_allocations(&mut md).unwrap();
    memprof::untracked(|| {
        std::fs::write(dir.join("x.tsv"), &tsv).unwrap();
        std::fs::write(dir.join("x.md"), &md).unwrap();
    });
    drop(big);
    let later = keep(5, 10_000);
    memprof::mark("y");
    let path = memprof::close_trace().unwrap().expect("a trace was open");
    memprof::untracked(|| std::fs::write(dir.join("path"), path.to_str().unwrap()).unwrap());
    drop((small, later, kept));
}

#[test]
fn report_at_a_marker_equals_the_live_report() {
    if let Some(dir) = std::env::var_os("MEMPROF_TEST_CLI_DIR") {
        child(Path::new(&dir));
        return;
    }
    check(None);
    // Sampled, the replay weighs each block as the live table does.
    check(Some("bytes:4096"));
}

fn check(sample_interval: Option<&str>) {
    let dir = std::env::temp_dir().join(format!(
        "memprof-cli-report-{}-{}",
        std::process::id(),
        sample_interval.is_some()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    if let Some(interval) = sample_interval {
        command.env("MEMPROF_SAMPLE_INTERVAL", interval);
    } else {
        command.env_remove("MEMPROF_SAMPLE_INTERVAL");
    }
    let output = command
        .args([
            "--exact",
            "report_at_a_marker_equals_the_live_report",
            "--nocapture",
        ])
        .env("MEMPROF_TEST_CLI_DIR", &dir)
        .env("MEMPROF_TRACE", dir.join("run.mptrace"))
        .env("MEMPROF_MIN_BYTES", "0")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let trace = PathBuf::from(std::fs::read_to_string(dir.join("path")).unwrap());
    let trace = trace.to_str().unwrap();

    let live_tsv = std::fs::read_to_string(dir.join("x.tsv")).unwrap();
    assert!(live_tsv.contains("report_at_marker::keep"), "{live_tsv}");
    assert!(live_tsv.contains("report_at_marker::worker"), "{live_tsv}");
    let replayed = stdout_of(&[
        "report",
        trace,
        "--at",
        "marker:x",
        "--format",
        "tsv",
        "--min-bytes",
        "0",
    ]);
    assert_eq!(replayed, live_tsv, "TSV at marker x");

    let live_md = std::fs::read_to_string(dir.join("x.md")).unwrap();
    let replayed = stdout_of(&["report", trace, "--at", "marker:x", "--min-bytes", "0"]);
    assert_eq!(replayed, live_md, "Markdown at marker x");
    assert_eq!(
        live_md.contains("Estimates: one allocation in every 4,096 bytes"),
        sample_interval.is_some(),
        "{live_md}"
    );

    let converted = dir.join("x.tsv.out.tsv");
    stdout_of(&[
        "convert",
        trace,
        "--at",
        "marker:x",
        "--min-bytes",
        "0",
        "-o",
        converted.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read_to_string(&converted).unwrap(), live_tsv);

    if sample_interval.is_some() {
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    // Between x and y: ten blocks of 4,096 bytes went and five of 10,000 came, from the same
    // context; the outer vector of the ten (240 bytes) went, that of the five (120) came.
    let diff = stdout_of(&[
        "diff",
        trace,
        "--from",
        "marker:x",
        "--to",
        "marker:y",
        "--format",
        "tsv",
        "--min-bytes",
        "0",
    ]);
    let lines: Vec<&str> = diff.lines().collect();
    assert_eq!(lines[0], "3", "{diff}");
    assert!(lines.iter().any(|l| l.starts_with("1\t120\t")), "{diff}");
    assert!(lines.iter().any(|l| l.starts_with("-5\t9040\t")), "{diff}");
    assert!(lines.iter().any(|l| l.starts_with("-1\t-240\t")), "{diff}");

    // `memprof run`: the same program traced, then its summary.
    let again = dir.join("again");
    std::fs::create_dir_all(&again).unwrap();
    let traced = again.join("run-%p.mptrace");
    let output = Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(["run", "--trace", traced.to_str().unwrap(), "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "report_at_a_marker_equals_the_live_report",
            "--nocapture",
        ])
        .env("MEMPROF_TEST_CLI_DIR", &again)
        .output()
        .unwrap();
    // The summary is on stderr, after the program's own output.
    let summary = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{}{summary}",
        String::from_utf8_lossy(&output.stdout)
    );
    let written = std::fs::read_to_string(again.join("path")).unwrap();
    assert!(
        summary.contains(&format!("trace: {written}\n")),
        "{summary}"
    );
    assert!(
        summary.contains("closed normally, 0 events lost"),
        "{summary}"
    );
    assert!(summary.contains("report_at_marker::worker"), "{summary}");

    // `memprof receive`: the same program traced to tcp://, its report at the marker as its own.
    let sent = dir.join("sent");
    std::fs::create_dir_all(&sent).unwrap();
    let received = dir.join("received.mptrace");
    let mut receiver = Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(["receive", "--listen", "127.0.0.1:0", "-o"])
        .arg(&received)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = std::io::BufReader::new(receiver.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut said, &mut line).unwrap();
    let address = line
        .trim()
        .strip_prefix("memprof: listening on ")
        .unwrap_or_else(|| panic!("{line}"));
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "report_at_a_marker_equals_the_live_report",
            "--nocapture",
        ])
        .env("MEMPROF_TEST_CLI_DIR", &sent)
        .env("MEMPROF_TRACE", format!("tcp://{address}"))
        .env("MEMPROF_MIN_BYTES", "0")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut said, &mut rest).unwrap();
    assert!(receiver.wait().unwrap().success(), "{rest}");
    assert!(rest.contains("closed normally"), "{rest}");
    assert_eq!(
        stdout_of(&[
            "report",
            received.to_str().unwrap(),
            "--at",
            "marker:x",
            "--format",
            "tsv",
            "--min-bytes",
            "0",
        ]),
        std::fs::read_to_string(sent.join("x.tsv")).unwrap()
    );

    let missing = memprof_cli(&["report", trace, "--at", "marker:nope"]);
    assert_eq!(missing.status.code(), Some(1));
    let message = String::from_utf8_lossy(&missing.stderr);
    assert!(message.contains("no marker labelled \"nope\""), "{message}");
    std::fs::remove_dir_all(&dir).unwrap();
}
