//! `MEMPROF_OUTPUT` files are written at exit, and `MEMPROF_DUMP_SIGNAL` writes them while the
//! program runs on. The test runs this same binary as the child.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn keep_alive() -> Vec<Vec<u8>> {
    std::hint::black_box((0..20).map(|_| vec![0u8; 7000]).collect())
}

fn child(mode: &str, dir: &Path, extra: &[(&str, &str)]) -> String {
    let spec = format!("{0}/heap-%p.folded,{0}/heap.md", dir.display());
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "output_and_dump", "--nocapture"])
        .env("MEMPROF_TEST_CHILD", mode)
        .env("MEMPROF_OUTPUT", spec)
        // Exports go as deep as the reports: deep enough for `keep_alive`'s caller under the
        // iterator adapters of an unoptimized build.
        .env("MEMPROF_STACK_DEPTH", "20")
        .envs(extra.iter().copied())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stderr).unwrap()
}

/// The folded file (its name carries the child's pid) and the Markdown file in `dir`.
fn written(dir: &Path) -> (String, String) {
    let folded: PathBuf = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "folded"))
        .unwrap_or_else(|| panic!("no folded file in {}", dir.display()));
    assert!(
        folded
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("heap-")
    );
    assert!(!folded.to_str().unwrap().contains("%p"));
    (
        std::fs::read_to_string(folded).unwrap(),
        std::fs::read_to_string(dir.join("heap.md")).unwrap(),
    )
}

fn check(folded: &str, markdown: &str) {
    // The 20 buffers of 7000 bytes (and, on a line of its own, the vector that holds them).
    assert!(
        folded
            .lines()
            .any(|l| l.contains(";output_and_dump::keep_alive;") && l.ends_with(" 140000")),
        "{folded}"
    );
    let row = markdown
        .lines()
        .find(|l| l.contains("in 'output_and_dump::keep_alive"))
        .unwrap_or_else(|| panic!("{markdown}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[1..3], ["20", "140,000"], "{row}");
}

#[test]
fn output_and_dump() {
    match std::env::var("MEMPROF_TEST_CHILD").as_deref() {
        Ok("exit") => {
            std::mem::forget(keep_alive());
            std::process::exit(0);
        }
        Ok("dump") => {
            let kept = keep_alive();
            let dir = PathBuf::from(std::env::var("MEMPROF_TEST_DIR").unwrap());
            // SAFETY: raising a signal whose handler memprof installed.
            unsafe { libc::raise(libc::SIGUSR1) };
            let start = Instant::now();
            while !dir.join("heap.md").exists() {
                assert!(start.elapsed() < Duration::from_secs(20), "no dump written");
                std::thread::sleep(Duration::from_millis(20));
            }
            // Give the dump thread time to finish both files, check them, and go on running (at
            // exit, the files are written again, without the buffers).
            std::thread::sleep(Duration::from_millis(300));
            let (folded, markdown) = written(&dir);
            check(&folded, &markdown);
            eprintln!("still running");
            drop(kept);
        }
        _ => {
            let base = std::env::temp_dir().join(format!("memprof-output-{}", std::process::id()));
            let (at_exit, on_signal) = (base.join("exit"), base.join("dump"));
            for dir in [&at_exit, &on_signal] {
                std::fs::create_dir_all(dir).unwrap();
            }
            child("exit", &at_exit, &[]);
            let (folded, markdown) = written(&at_exit);
            check(&folded, &markdown);

            let stderr = child(
                "dump",
                &on_signal,
                &[
                    ("MEMPROF_DUMP_SIGNAL", "USR1"),
                    ("MEMPROF_TEST_DIR", on_signal.to_str().unwrap()),
                ],
            );
            assert!(stderr.contains("still running"), "{stderr}");
            std::fs::remove_dir_all(&base).unwrap();
        }
    }
}
