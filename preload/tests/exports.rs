//! The exports a C program's run under the library writes at exit (`MEMPROF_OUTPUT`), opened by
//! their real readers: `heaptrack_print` names the leaking C function with its leaked bytes, Go's
//! pprof (built from Debian's sources, as the crate's own tests/export_readers.rs does) shows its
//! live objects and bytes in `-top`, and the DHAT file parses as JSON (Python's `json`) with the
//! leak's program point, and loads in Valgrind's `dh_view.html` in headless Chromium.
//! Every reader is required: a missing one fails the test.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::common::run;
use support::*;

const BLOCKS: u64 = 37;
const BYTES: u64 = 37_000;

#[test]
fn exports_open_in_real_readers() {
    let dir = scratch("exports");
    let program = compile(
        &dir,
        &["alloc_functions.c"],
        "alloc_functions",
        &["-O2", "-g", "-fomit-frame-pointer"],
    );
    let base = dir.join("heap-%p");
    let outputs = [".pb.gz", ".heaptrack.gz", ".dhat.json"]
        .map(|ending| format!("{}{ending}", base.display()))
        .join(",");
    let mut command = clean_command(&program);
    command
        .env("LD_PRELOAD", library())
        .env("MEMPROF_OUTPUT", &outputs);
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", both(&output));
    let path = |ending: &str| dir.join(format!("heap-{pid}{ending}"));
    check_heaptrack(&path(".heaptrack.gz"), &dir);
    check_pprof(&path(".pb.gz"));
    check_dhat(&path(".dhat.json"), &dir);
}

/// The total of the folded lines (`frame;frame cost`) that mention `function`.
fn folded_total(folded: &str, function: &str) -> u64 {
    folded
        .lines()
        .filter(|l| l.contains(function))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

fn check_heaptrack(file: &Path, dir: &Path) {
    require_tool(
        "heaptrack_print",
        &["--version"],
        "apt-get install -y heaptrack",
    );
    let leaked = dir.join("heaptrack-leaked.txt");
    run(Command::new("heaptrack_print")
        .arg("-f")
        .arg(file)
        .args(["--flamegraph-cost-type", "leaked", "-F"])
        .arg(&leaked));
    let leaked = std::fs::read_to_string(leaked).unwrap();
    assert_eq!(folded_total(&leaked, "leak_blocks"), BYTES, "{leaked}");
    let text = run(Command::new("heaptrack_print").arg("-f").arg(file).args([
        "--print-leaks",
        "1",
        "--merge-backtraces",
        "0",
    ]));
    let leaks = &text[text.find("MEMORY LEAKS").expect("a leak section")..];
    assert!(leaks.contains("leak_blocks"), "{text}");
    assert!(leaks.contains("alloc_functions.c"), "{text}");
}

/// pprof built from Debian's `golang-github-google-pprof-dev` sources, as the crate's tests build
/// it.
fn pprof_binary() -> PathBuf {
    support::common::pprof_binary()
        .expect("Go and pprof's sources are required (apt-get install -y golang-go golang-github-google-pprof-dev)")
}

/// The `cum` column of pprof's `-top` line for `function`.
fn pprof_cum(top: &str, function: &str) -> Option<u64> {
    top.lines()
        .find(|line| line.trim_end().ends_with(function))
        .map(|line| {
            let cum = line.split_whitespace().nth(3).unwrap();
            cum.trim_end_matches('B').parse().unwrap()
        })
}

fn check_pprof(file: &Path) {
    let pprof = pprof_binary();
    let top = |index: &str| {
        run(Command::new(&pprof)
            .args(["-top", "-unit=B", "-nodefraction=0", "-nodecount=1000"])
            .arg(format!("-sample_index={index}"))
            .arg(file)
            .env("PPROF_TMPDIR", file.parent().unwrap()))
    };
    let space = top("inuse_space");
    assert!(space.contains("Type: inuse_space"), "{space}");
    assert_eq!(pprof_cum(&space, "leak_blocks"), Some(BYTES), "{space}");
    let objects = top("inuse_objects");
    assert_eq!(
        pprof_cum(&objects, "leak_blocks"),
        Some(BLOCKS),
        "{objects}"
    );
    assert_eq!(pprof_cum(&space, "leak_pvalloc"), Some(4444), "{space}");
}

fn check_dhat(file: &Path, dir: &Path) {
    // The program point whose innermost frame is leak_blocks: its bytes and blocks at the end.
    let script = "import json, sys\n\
                  d = json.load(open(sys.argv[1]))\n\
                  assert d['dhatFileVersion'] == 2\n\
                  pps = [p for p in d['pps'] if 'leak_blocks' in d['ftbl'][p['fs'][0]]]\n\
                  print(len(pps), sum(p['eb'] for p in pps), sum(p['ebk'] for p in pps), \
                  sum(p['tb'] for p in pps))";
    let output = Command::new("python3")
        .args(["-c", script])
        .arg(file)
        .output()
        .expect("python3 is required by this test (apt-get install -y python3)");
    assert!(output.status.success(), "{}", both(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("1 {BYTES} {BLOCKS} {BYTES}")
    );
    check_dhat_viewer(file, dir);
}

/// Loads the file in Valgrind's own `dh_view.html` in headless Chromium, as the crate's
/// tests/export_readers.rs does, and finds the leak in the rendered tree.
fn check_dhat_viewer(file: &Path, dir: &Path) {
    let dom = support::common::dh_view_dom(file, dir)
        .expect("Chromium is required by this test (apt-get install -y chromium)");
    assert!(dom.contains("Invocation {"), "no rendered profile:\n{dom}");
    assert!(
        dom.contains("leak_blocks"),
        "the leak is not in the viewer:\n{dom}"
    );
}
