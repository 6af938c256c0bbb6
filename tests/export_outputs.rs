//! `write_outputs`, what `MEMPROF_OUTPUT` runs at exit: every file of a comma-separated list is
//! written in the format its name asks for, with `%p` and `%e` expanded, and an unknown ending or
//! a failed write is reported on stderr without stopping the others. The test runs itself as a
//! child process to read that stderr.

use std::path::PathBuf;
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child: the directory to write to.
const CHILD: &str = "MEMPROF_TEST_EXPORT_OUTPUTS_DIR";

#[inline(never)]
fn keep_7777() -> Vec<u8> {
    std::hint::black_box(Vec::with_capacity(7777))
}

#[test]
fn outputs_are_written_and_failures_reported() {
    if let Some(dir) = std::env::var_os(CHILD) {
        let dir = PathBuf::from(dir);
        let kept = keep_7777();
        let spec = format!(
            "{0}/live-%p.folded, {0}/live-%e.tsv,{0}/unknown.txt, {0}/missing/dir/x.dhat.json ,, {0}/live.pb.gz",
            dir.display()
        );
        memprof::write_outputs(&spec);
        drop(kept);
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("export_outputs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "outputs_are_written_and_failures_reported",
            "--nocapture",
        ])
        .env(CHILD, &dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(child.status.success(), "{stderr}");
    let folded = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".folded"))
        .expect("the folded file");
    let pid = folded
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches("live-")
        .trim_end_matches(".folded")
        .to_owned();
    assert!(pid.parse::<u32>().is_ok(), "%p expands to a pid: {pid}");
    assert!(
        stderr.contains(&format!("memprof: wrote {}", folded.display())),
        "{stderr}"
    );
    let folded = std::fs::read_to_string(&folded).unwrap();
    let line = folded
        .lines()
        .find(|l| l.contains("export_outputs::keep_7777"))
        .unwrap_or_else(|| panic!("keep_7777 missing:\n{folded}"));
    assert!(line.ends_with(" 7777"), "{line}");

    let tsv = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(".tsv"))
        .expect("the TSV file");
    assert!(tsv.starts_with("live-export_outputs-"), "%e expands: {tsv}");
    assert!(dir.join("live.pb.gz").exists(), "{stderr}");
    assert!(
        stderr.contains("unknown.txt: unknown file ending; use one of .pb.gz"),
        "{stderr}"
    );
    assert!(
        stderr.contains("missing/dir/x.dhat.json: No such file or directory"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("memprof: wrote").count(), 3, "{stderr}");
}
