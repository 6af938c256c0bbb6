//! `memprof run -- ./link`, a symbolic link to a program that uses memprof: the trace named by
//! `%e` is found and summarized, and the program's stderr names the file it wrote. The program
//! is this test run again (memprof is its global allocator); the link is in the test's scratch
//! directory.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the program run by `memprof run`.
const CHILD: &str = "MEMPROF_TEST_RUN_SYMLINK_CHILD";

#[test]
fn run_through_a_link() {
    if std::env::var_os(CHILD).is_some() {
        let kept = std::hint::black_box(vec![7u8; 12_345]);
        std::mem::forget(kept);
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("run_symlink");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(std::env::current_exe().unwrap(), &link).unwrap();
    let pattern = dir.join("run-%e-%p.mptrace");
    let child = Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(["run", "--trace", pattern.to_str().unwrap(), "--"])
        .arg(&link)
        .args(["--exact", "run_through_a_link", "--nocapture"])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(child, Duration::from_secs(120), "memprof run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // The summary is on stderr, the program's output alone on stdout.
    assert!(stderr.contains("allocations: "), "{stdout}\n{stderr}");
    assert!(!stdout.contains("allocations: "), "{stdout}\n{stderr}");
    let traces: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".mptrace"))
        .collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    let name = traces[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with("run-link-"), "{name}");
    assert!(
        stderr.contains(&format!(
            "memprof: trace written to {}",
            traces[0].display()
        )),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
