//! A dump signal that arrives shortly before the program ends: the dump thread and the at-exit
//! writer write the same `MEMPROF_OUTPUT` files. They must take turns, the exit writer's files
//! must be the last ones, whole, and no temporary file may be left behind. The test runs this
//! same binary as the child, a few times, the signal raised at varying delays after the
//! program's end began.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child: how many milliseconds after its end began the dump signal arrives.
const CHILD: &str = "MEMPROF_TEST_DUMP_RACE_DELAY";

/// When the dump signal arrives in each run, in milliseconds after the program's end began: the
/// exit writer symbolizes and writes for a good part of a second in an unoptimized build.
const DELAYS_MS: [u64; 3] = [0, 30, 150];

#[inline(never)]
fn kept_all_along() -> Vec<Vec<u8>> {
    std::hint::black_box((0..10).map(|_| vec![0u8; 3000]).collect())
}

/// The size of one block kept to the end.
const AT_EXIT: usize = 77_777;

#[inline(never)]
fn allocated_at_exit() -> Box<[u8]> {
    std::hint::black_box(vec![0u8; AT_EXIT].into_boxed_slice())
}

/// Runs the child with the dump signal `delay_ms` after its end began, writing into `dir`; returns its
/// stderr. A child that runs past a deadline is killed and fails the test.
fn run_child(dir: &Path, delay_ms: u64) -> String {
    let spec = format!("{0}/heap.tsv,{0}/heap.folded", dir.display());
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "dump_races_exit", "--nocapture"])
        .env(CHILD, delay_ms.to_string())
        .env("MEMPROF_OUTPUT", spec)
        .env("MEMPROF_DUMP_SIGNAL", "USR1")
        // Deep enough for the allocating functions under the iterator adapters of an
        // unoptimized build.
        .env("MEMPROF_STACK_DEPTH", "20")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(
        child,
        Duration::from_secs(60),
        &format!("the child (delay {delay_ms} ms)"),
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{}\n{stderr}", output.status);
    stderr
}

/// Checks the exit writer's files in `dir`: whole, with the blocks allocated just before exit.
fn check_exit_files(dir: &Path, delay_ms: u64, stderr: &str) {
    let tsv = std::fs::read_to_string(dir.join("heap.tsv")).unwrap();
    let lines: Vec<&str> = tsv.lines().collect();
    let count: usize = lines
        .first()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| {
            panic!("delay {delay_ms} ms: heap.tsv has no count line:\n{tsv}\n{stderr}")
        });
    assert_eq!(
        lines.len(),
        count + 1,
        "delay {delay_ms} ms: heap.tsv is cut short:\n{tsv}\n{stderr}"
    );
    assert!(
        lines[1..]
            .iter()
            .any(|l| l.split('\t').take(2).eq(["1", &AT_EXIT.to_string()])),
        "delay {delay_ms} ms: not the exit's heap.tsv:\n{tsv}\n{stderr}"
    );
    assert!(tsv.contains("kept_all_along"), "{tsv}");

    let folded = std::fs::read_to_string(dir.join("heap.folded")).unwrap();
    assert!(
        folded.ends_with('\n') && folded.lines().any(|l| l.ends_with(&format!(" {AT_EXIT}"))),
        "delay {delay_ms} ms: not the exit's whole heap.folded:\n{folded}\n{stderr}"
    );
    let left: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap() != "heap.tsv" && p.file_name().unwrap() != "heap.folded")
        .collect();
    assert!(
        left.is_empty(),
        "delay {delay_ms} ms: files left behind: {left:?}"
    );
}

#[test]
fn dump_races_exit() {
    if let Ok(delay) = std::env::var(CHILD) {
        std::mem::forget(kept_all_along());
        std::mem::forget(allocated_at_exit());
        // The signal arrives while the program ends, most likely while the exit writer writes.
        let delay = Duration::from_millis(delay.parse().unwrap());
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            // SAFETY: raising a signal whose handler memprof installed.
            unsafe { libc::raise(libc::SIGUSR1) };
        });
        return;
    }
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dump_races_exit");
    let started = Instant::now();
    for (run, &delay_ms) in DELAYS_MS.iter().enumerate() {
        let dir = base.join(run.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let stderr = run_child(&dir, delay_ms);
        check_exit_files(&dir, delay_ms, &stderr);
    }
    eprintln!(
        "{} runs, the dump signal {DELAYS_MS:?} ms after the program's end began: {:.1} s",
        DELAYS_MS.len(),
        started.elapsed().as_secs_f64()
    );
    std::fs::remove_dir_all(&base).unwrap();
}
