//! `memprof` on a trace written event by event with the format's encoder, so every figure is
//! known: `summary`'s totals, peak, temporary allocations, leaks and lifetimes; `report` at the
//! peak, at a time and at a marker, with the threads' chunks out of time order in the file;
//! `convert` to every format, read back by its own reader (DHAT's lifetimes and peak time in
//! `dh_view.html`, heaptrack's temporary allocations and consumption over time in
//! `heaptrack_print`); `symbolize` keeping the trace's own symbols; and a file cut short, a file with a damaged chunk and a file that is not a trace, each a one-line
//! error naming the file and the byte offset, never a panic.

#[path = "../../tests/common/mod.rs"]
mod common;

mod support;

/// The command's replay into the library's snapshot, as the command makes it.
#[path = "../src/moment.rs"]
#[allow(dead_code)]
mod moment;

use common::{missing_tool, pprof_binary};
use memprof_trace::{ChunkEncoder, Compressor, Header, SymbolFrame};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::{LEAKY, TEMP, known_trace, memprof_cli, stdout_of};

/// Runs `memprof args`, which must fail with one line on stderr; returns it.
fn failure_of(args: &[&str]) -> String {
    let output = memprof_cli(args);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn memprof_reads_a_known_trace() {
    let dir = std::env::temp_dir().join(format!("memprof-cli-known-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (bytes, offsets) = known_trace();
    let trace = write(&dir, "known.mptrace", &bytes);
    let trace = trace.to_str().unwrap();

    let summary = stdout_of(&["summary", trace]);
    for line in [
        "process: 42 (/bin/app)",
        "recorded: 0.002001 s (closed normally, 0 events lost)",
        "allocations: 5 (7030 bytes), frees: 4, markers: 1",
        "temporary allocations: 2 (40.0% of allocations)",
        "peak: 7020 bytes in 4 blocks at 0.000001 s",
        "leaked at end: 1000 bytes in 1 blocks",
        "    < 1 µs             3   75.0%",
        "   < 10 ms             1   25.0%",
        "     never             1",
    ] {
        assert!(summary.lines().any(|l| l == line), "{line:?} in\n{summary}");
    }
    // The busiest site first. Temporary (freed by its thread before it allocated or freed
    // anything else): the first block of 10 bytes and the worker's block; not the second block
    // of 1000 bytes (a free of its thread came between it and its own free).
    let most = summary.split("\nmost allocations:\n").nth(1).unwrap();
    assert!(
        most.starts_with("           3  7000 bytes\n              src/app.rs:10:5 in 'app::leaky'\n           2  30 bytes\n"),
        "{summary}"
    );
    let temporary = summary
        .split("\nmost temporary allocations:\n")
        .nth(1)
        .unwrap();
    assert!(
        temporary.starts_with("           1  33.3% of its 3\n              src/app.rs:10:5 in 'app::leaky'\n           1  50.0% of its 2\n"),
        "{summary}"
    );
    let peak = summary.split("\nlargest at the peak:\n").nth(1).unwrap();
    assert!(
        peak.starts_with("        7000  bytes in 3 blocks\n              src/app.rs:10:5 in 'app::leaky'\n          20  bytes in 1 blocks\n"),
        "{summary}"
    );

    let tsv = |at: &str| {
        stdout_of(&[
            "report",
            trace,
            "--at",
            at,
            "--format",
            "tsv",
            "--min-bytes",
            "0",
        ])
    };
    let at_peak =
        "2\n3\t7000\tsrc/app.rs:10:5 in 'app::leaky'\n1\t20\tsrc/app.rs:20:5 in 'app::temp'\n";
    assert_eq!(tsv("peak"), at_peak);
    assert_eq!(tsv("0.00000055"), at_peak);
    assert_eq!(
        tsv("marker:m"),
        "1\n2\t2000\tsrc/app.rs:10:5 in 'app::leaky'\n"
    );
    assert_eq!(tsv("end"), "1\n1\t1000\tsrc/app.rs:10:5 in 'app::leaky'\n");
    assert_eq!(tsv("0"), "0\n");

    convert_every_format(&dir, trace);

    // Symbolized again, from no module at all: the symbols the trace had are kept, the END
    // record stays last.
    let symbolized = dir.join("symbolized.mptrace");
    let output = memprof_cli(&["symbolize", trace, "-o", symbolized.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let symbolized = symbolized.to_str().unwrap();
    assert_eq!(
        stdout_of(&[
            "report",
            symbolized,
            "--at",
            "peak",
            "--format",
            "tsv",
            "--min-bytes",
            "0"
        ]),
        at_peak
    );
    assert_eq!(
        stdout_of(&["summary", symbolized]).replace("symbolized.mptrace", "known.mptrace"),
        summary
    );

    // Cut inside the third chunk: read up to the second, with a warning naming the cut.
    let cut = write(&dir, "cut.mptrace", &bytes[..offsets[2] + 30]);
    let output = memprof_cli(&["summary", cut.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "memprof: warning: {}: at byte {}: the trace ends here, cut short; read up to there\n\
             memprof: hint: 2 return addresses of this trace have no symbols (shown as their \
             module, or ???): `memprof symbolize {}` names them from the binaries it lists",
            cut.display(),
            offsets[2],
            cut.display()
        )
    );
    let summary = String::from_utf8_lossy(&output.stdout);
    assert!(
        summary.contains("allocations: 1 (5000 bytes), frees: 1"),
        "{summary}"
    );
    assert!(summary.contains("cut short: no END record"), "{summary}");

    // A damaged byte in the main thread's chunk: its checksum fails, at its offset.
    let mut damaged = bytes.clone();
    damaged[offsets[2] + 50] ^= 0x40;
    let damaged = write(&dir, "damaged.mptrace", &damaged);
    let message = failure_of(&["report", damaged.to_str().unwrap()]);
    assert_eq!(
        message,
        format!(
            "memprof: {}: at byte {}: corrupt trace: chunk checksum mismatch\n",
            damaged.display(),
            offsets[2]
        )
    );

    let text = write(&dir, "notes.txt", b"just some text, not a trace\n");
    let message = failure_of(&["summary", text.to_str().unwrap()]);
    assert_eq!(
        message,
        format!(
            "memprof: {}: at byte 0: not a memprof trace (no trace header)\n",
            text.display()
        )
    );
    let missing = dir.join("missing.mptrace");
    let message = failure_of(&["summary", missing.to_str().unwrap()]);
    assert!(message.contains("missing.mptrace"), "{message}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `memprof convert --at marker:m` to every format, each read back: there, two blocks of 1000
/// bytes from `app::leaky` are live, which allocated 3 blocks (7000 bytes) so far.
fn convert_every_format(dir: &Path, trace: &str) {
    let out = |ending: &str| {
        let path = dir.join(format!("at-m{ending}"));
        stdout_of(&[
            "convert",
            trace,
            "--at",
            "marker:m",
            "-o",
            path.to_str().unwrap(),
        ]);
        path
    };
    let text = |ending: &str| std::fs::read_to_string(out(ending)).unwrap();
    assert_eq!(text(".folded"), "app::leaky 2000\n");
    assert_eq!(
        text(".md"),
        stdout_of(&["report", trace, "--at", "marker:m"])
    );
    assert_eq!(
        text(".tsv"),
        "1\n2\t2000\tsrc/app.rs:10:5 in 'app::leaky'\n"
    );
    let dhat: serde_json::Value = serde_json::from_str(&text(".dhat.json")).unwrap();
    let leaky = &dhat["pps"][0];
    assert_eq!(
        (&leaky["tb"], &leaky["tbk"]),
        (&7000.into(), &3.into()),
        "{dhat}"
    );
    assert_eq!(
        (&leaky["eb"], &leaky["ebk"]),
        (&2000.into(), &2.into()),
        "{dhat}"
    );
    assert_eq!(dhat["pid"], 42);
    // The peak before the marker (7020 bytes at 550 ns): 3 blocks of app::leaky.
    assert_eq!(
        (&leaky["gb"], &leaky["gbk"]),
        (&7000.into(), &3.into()),
        "{dhat}"
    );
    assert_eq!(
        (&leaky["mb"], &leaky["mbk"]),
        (&7000.into(), &3.into()),
        "{dhat}"
    );
    // From the events, in ns: the peak at 550, the marker at 700; app::leaky's blocks lived
    // 600 (live at the marker since 100), 200 (since 500) and 100 (550 to 650); app::temp's 100
    // and 200, and at most one block (20 bytes) at once.
    assert_eq!((&dhat["tu"], &dhat["Mtu"]), (&"ns".into(), &"ms".into()));
    assert_eq!(
        (&dhat["tg"], &dhat["te"]),
        (&550.into(), &700.into()),
        "{dhat}"
    );
    assert_eq!(leaky["tl"], 900, "{dhat}");
    let temp = &dhat["pps"][1];
    assert_eq!(
        (&temp["tb"], &temp["tbk"], &temp["tl"]),
        (&30.into(), &2.into(), &300.into()),
        "{dhat}"
    );
    assert_eq!(
        (&temp["mb"], &temp["mbk"], &temp["gb"], &temp["gbk"]),
        (&20.into(), &1.into(), &20.into(), &1.into()),
        "{dhat}"
    );
    check_dhat_viewer(&out(".dhat.json"), dir);

    // Alys's event list up to the marker: ids link an allocation to its free.
    let events: serde_json::Value = serde_json::from_str(&text(".json")).unwrap();
    let events: Vec<(u64, &str, u64)> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_u64().unwrap(),
                e["kind"].as_str().unwrap(),
                e["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            (1, "alloc", 1000),
            (2, "alloc", 10),
            (2, "free", 10),
            (3, "alloc", 20),
            (4, "alloc", 1000),
            (5, "alloc", 5000),
            (3, "free", 20),
            (5, "free", 5000),
        ]
    );

    #[cfg(feature = "flamegraph")]
    assert!(text(".svg").contains("app::leaky"));

    let heaptrack = out(".heaptrack.gz");
    match Command::new("heaptrack_print").arg(&heaptrack).output() {
        Ok(printed) => {
            let printed = String::from_utf8_lossy(&printed.stdout);
            assert!(printed.contains("app::leaky"), "{printed}");
            assert!(printed.contains("total memory leaked: 2.00K"), "{printed}");
            assert!(
                printed.contains("calls to allocation functions: 5 "),
                "{printed}"
            );
            assert!(
                printed.contains("peak heap memory consumption: 7.02K"),
                "{printed}"
            );
            // Heaptrack's definition, over the threads' events merged in time: a free right after
            // its own allocation, the 10-byte block only (the summary's per-thread count says 3).
            assert!(
                printed.contains("temporary memory allocations: 1 "),
                "{printed}"
            );
            assert!(
                printed.contains(
                    "1 temporary allocations of 2 allocations in total (50.00%) from\napp::temp"
                ),
                "{printed}"
            );
        }
        Err(_) => missing_tool("heaptrack_print", "apt-get install -y heaptrack"),
    }

    let pprof_file = out(".pb.gz");
    let Some(pprof) = pprof_binary() else {
        return;
    };
    let top = |index: &str| {
        let output = Command::new(&pprof)
            .args(["-top", "-unit=B", "-nodefraction=0"])
            .arg(format!("-sample_index={index}"))
            .arg(&pprof_file)
            .env("PPROF_TMPDIR", dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let top = String::from_utf8(output.stdout).unwrap();
        let line = top
            .lines()
            .find(|l| l.trim_end().ends_with("app::leaky"))
            .unwrap_or_else(|| panic!("{top}"))
            .to_owned();
        line.split_whitespace()
            .nth(3)
            .unwrap()
            .trim_end_matches('B')
            .to_owned()
    };
    assert_eq!(top("inuse_space"), "2000");
    assert_eq!(top("alloc_space"), "7000");
    assert_eq!(top("inuse_objects"), "2");
}

/// Events of one thread over several milliseconds, `(time in ns, address, size)`, a size of 0
/// for a free: heaptrack's consumed-over-time series of a converted trace.
const TIMELINE: [(u64, u64, u64); 9] = [
    (1_000_005, 0x10, 100),
    (2_500_000, 0x20, 300),
    (3_500_000, 0x10, 0),
    (4_500_000, 0x30, 50),
    (4_600_000, 0x30, 0),
    (6_000_000, 0x40, 1000),
    (7_000_000, 0x20, 0),
    (9_200_000, 0x50, 64),
    (9_700_000, 0x40, 0),
];

/// A trace of [`TIMELINE`], allocations alternating between the two stacks of the known trace.
fn timeline_trace() -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(43, 1_700_000_000_000_000_000, "/bin/timeline".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let mut chunk = ChunkEncoder::new(0);
    chunk.stack(0, [LEAKY + 1].into_iter());
    chunk.stack(7, [TEMP + 1].into_iter());
    chunk.thread(1, 100, "main");
    let mut compressor = Compressor::new(3).unwrap();
    chunk.finish(Some(&mut compressor), &mut out).unwrap();
    let mut events = ChunkEncoder::new(1);
    for (i, &(time, address, size)) in TIMELINE.iter().enumerate() {
        match size {
            0 => events.free(time, address),
            _ => events.alloc(time, address, size, [0, 7][i % 2]),
        }
    }
    events.finish(Some(&mut compressor), &mut out).unwrap();
    let mut symbols = ChunkEncoder::new(0);
    for (address, function) in [(LEAKY + 1, "app::leaky"), (TEMP + 1, "app::temp")] {
        symbols.symbol(
            address,
            &[SymbolFrame {
                function: Some(function.into()),
                ..SymbolFrame::default()
            }],
        );
    }
    symbols.end(TIMELINE.len() as u64, 0);
    symbols.finish(Some(&mut compressor), &mut out).unwrap();
    out
}

/// `heaptrack_print -M` (massif output) on the converted timeline trace: a snapshot at each
/// millisecond in which events happened, holding the bytes live at its start, then one at the end.
#[test]
fn heaptrack_consumption_over_time() {
    let dir = std::env::temp_dir().join(format!("memprof-cli-timeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = write(&dir, "timeline.mptrace", &timeline_trace());
    let converted = dir.join("timeline.heaptrack.gz");
    stdout_of(&[
        "convert",
        trace.to_str().unwrap(),
        "-o",
        converted.to_str().unwrap(),
    ]);
    let massif = dir.join("timeline.massif");
    let printed = match Command::new("heaptrack_print")
        .arg(&converted)
        .arg("-M")
        .arg(&massif)
        .output()
    {
        Ok(printed) => String::from_utf8_lossy(&printed.stdout).into_owned(),
        Err(_) => {
            missing_tool("heaptrack_print", "apt-get install -y heaptrack");
            return;
        }
    };
    assert!(
        printed.contains("temporary memory allocations: 1 "),
        "{printed}"
    );
    assert!(
        printed.contains("peak heap memory consumption: 1.30K"),
        "{printed}"
    );
    let massif = std::fs::read_to_string(&massif).unwrap();
    let series: Vec<(String, u64)> = massif
        .split("snapshot=")
        .skip(1)
        .map(|snapshot| {
            let field = |name: &str| {
                snapshot
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .unwrap_or_else(|| panic!("{name} in {snapshot}"))
                    .to_owned()
            };
            (field("time="), field("mem_heap_B=").parse().unwrap())
        })
        .collect();
    // The bytes live before `ms`, from the events themselves.
    let live_before = |ns: u64| -> u64 {
        let mut live = std::collections::HashMap::new();
        for &(_, address, size) in TIMELINE.iter().filter(|e| e.0 < ns) {
            match size {
                0 => live.remove(&address),
                _ => live.insert(address, size),
            };
        }
        live.values().sum()
    };
    let mut expected: Vec<(String, u64)> = [1, 2, 3, 4, 6, 7, 9]
        .into_iter()
        .map(|ms| {
            (
                format!("{}", ms as f64 / 1000.0),
                live_before(ms * 1_000_000),
            )
        })
        .collect();
    expected.push(("0.01".into(), live_before(u64::MAX)));
    assert_eq!(series, expected, "{massif}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Valgrind's `dh_view.html` in headless Chromium opens `file` (a converted known trace) with
/// no error, and shows `app::leaky` with its lifetimes and the time of the peak.
fn check_dhat_viewer(file: &Path, dir: &Path) {
    let Some(dom) = common::dh_view_dom(file, dir) else {
        return;
    };
    let plain = dom.replace([',', '.', '\u{a0}', '\u{202f}'], "");
    for expected in [
        "t-gmax: 550 ns",
        "t-end:  700 ns",
        "app::leaky",
        "app::temp",
        "avg lifetime 300 ns",
        "avg lifetime 150 ns",
    ] {
        assert!(plain.contains(expected), "{expected} in\n{dom}");
    }
}

/// The known trace with bytes changed, cut or spliced at random: the reader replays what it can
/// or says where it stopped, never panics.
#[test]
fn damaged_traces_never_panic() {
    use memprof_trace::{Moment, Trace};
    let (bytes, _) = known_trace();
    let dir = std::env::temp_dir().join(format!("memprof-cli-damaged-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("damaged.mptrace");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = move |below: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % below as u64) as usize
    };
    let rounds: usize = std::env::var("MEMPROF_FUZZ_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let (mut opened, mut replayed) = (0, 0);
    for _ in 0..rounds {
        let mut damaged = bytes.clone();
        match random(3) {
            0 => {
                for _ in 0..1 + random(4) {
                    let at = random(damaged.len());
                    damaged[at] ^= 1 << random(8);
                }
            }
            1 => damaged.truncate(random(damaged.len())),
            _ => {
                let (from, to) = (random(damaged.len()), random(damaged.len()));
                let piece = damaged[from..].to_vec();
                damaged.splice(to..to, piece.into_iter().take(64));
            }
        }
        std::fs::write(&path, &damaged).unwrap();
        let Ok(trace) = Trace::open(&path) else {
            continue;
        };
        opened += 1;
        for moment in [Moment::Peak, Moment::End, Moment::Marker("m".into())] {
            if let Ok((heap, _)) = trace.replay(&moment, &mut |_| {}) {
                replayed += 1;
                let snapshot = moment::snapshot(&trace, &heap, heap.live_bytes);
                assert_eq!(snapshot.blocks.len(), heap.live.len());
            }
        }
    }
    // Most damage leaves something to read (a byte changed in the symbols, a cut at the end).
    assert!(
        opened > rounds / 10 && replayed > 0,
        "{opened} opened, {replayed} replayed"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
