//! A Rust program under the library, directly and through `memprof run`: Rust's standard library
//! asks the C library for each thread's stack (`pthread_getattr_np`) at the start of `main` and of
//! every thread it spawns, and glibc allocates there while holding the thread's own lock. The
//! library must not ask the same of the C library from inside that allocation (it did, and the
//! program hung before `main`). The program's threads and a deep recursion on the main thread,
//! which grows the main stack far below where it was when its bounds were first looked up, leak
//! blocks that the log at exit (and the trace's summary) must show with exact counts under their
//! functions.

mod support;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const SOURCE: &str = "rust_threads.rs";
/// From the program: `THREADS * THREAD_BLOCKS` blocks of `THREAD_SIZE` bytes, `DEPTH` of
/// `DEEP_SIZE`.
const THREAD_BLOCKS: u64 = 4 * 25;
const THREAD_BYTES: u64 = THREAD_BLOCKS * 333;
const DEEP_BLOCKS: u64 = 600;
const DEEP_BYTES: u64 = DEEP_BLOCKS * 77;

/// The program built with `rustc` (the one running the tests) into `dir`, with `flags`.
fn build(dir: &Path, flags: &[&str]) -> PathBuf {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = dir.join("rust_threads");
    let mut command = Command::new(&rustc);
    command
        .args(["--edition", "2021", "-g", "-C", "opt-level=1", "-o"])
        .arg(&out)
        .arg(source(SOURCE))
        .args(flags);
    let result = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        result.status.success(),
        "{command:?} failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// Blocks and bytes of the groups of `log` with a frame in `function`.
fn under(log: &[Group], function: &str) -> (u64, u64) {
    let needle = format!("{function}'");
    log.iter()
        .filter(|g| g.frames.iter().any(|f| f.contains(&needle)))
        .fold((0, 0), |(n, b), g| (n + g.count, b + g.bytes))
}

/// Runs `command` (the program, preloaded or through `memprof run`) within a minute: a program
/// that hangs fails the test. It runs in a process group of its own, with its output in files, so
/// that a hung program that `memprof run` started is killed with it, and cannot hold the test's
/// pipes open.
fn run(command: &mut Command, what: &str) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let name: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let dir = scratch(&format!("rust_program_output_{name}"));
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = command
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what} ({command:?}): {e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            // The whole process group the child leads: `memprof run` and the program it started.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            panic!("{what} hung for 60s and was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = std::process::Output {
        status,
        stdout: std::fs::read(&out).unwrap(),
        stderr: std::fs::read(&err).unwrap(),
    };
    assert!(
        output.status.success(),
        "{what} failed: {}\n{}",
        output.status,
        both(&output)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).lines().next(),
        Some("ok"),
        "{what}:\n{}",
        both(&output)
    );
    output
}

fn check_log(output: &std::process::Output, what: &str) {
    let log = tsv_log(&output.stderr);
    let shown = show(&log);
    assert_eq!(
        under(&log, "thread_leak"),
        (THREAD_BLOCKS, THREAD_BYTES),
        "{what}: the threads' leaks in\n{shown}"
    );
    assert_eq!(
        under(&log, "deep_leak"),
        (DEEP_BLOCKS, DEEP_BYTES),
        "{what}: the recursion's leaks in\n{shown}"
    );
}

#[test]
fn a_rust_program_with_threads_and_a_deep_stack() {
    let dir = scratch("rust_program");
    let program = build(&dir, &[]);
    for unwinder in ["dwarf", "fp"] {
        let what = format!("rust_threads under the library, MEMPROF_UNWINDER={unwinder}");
        let output = run(
            preloaded(&program)
                .env("MEMPROF_UNWINDER", unwinder)
                .env("MEMPROF_STACK_DEPTH", "64"),
            &what,
        );
        if unwinder == "dwarf" {
            check_log(&output, &what);
        }
    }
}

#[test]
fn a_rust_program_with_frame_pointers_walked_by_them() {
    let dir = scratch("rust_program_fp");
    let program = build(&dir, &["-C", "force-frame-pointers=yes"]);
    let what = "rust_threads with frame pointers, MEMPROF_UNWINDER=fp";
    let output = run(
        preloaded(&program)
            .env("MEMPROF_UNWINDER", "fp")
            .env("MEMPROF_STACK_DEPTH", "64"),
        what,
    );
    check_log(&output, what);
}

#[test]
fn a_rust_program_through_memprof_run() {
    let dir = scratch("rust_program_run");
    let program = build(&dir, &[]);
    let trace = dir.join("rust.mptrace");
    let mut command = clean_command(memprof_command());
    command
        .arg("run")
        .arg("--preload")
        .arg(library())
        .arg("--trace")
        .arg(&trace)
        .arg("--")
        .arg(&program)
        .env("MEMPROF_PRINT_AT_EXIT", "1")
        .env("MEMPROF_MIN_BYTES", "0")
        .env("MEMPROF_STACK_DEPTH", "64");
    let output = run(&mut command, "memprof run rust_threads");
    check_log(&output, "memprof run rust_threads");
    assert!(trace.is_file(), "no trace at {}", trace.display());
}
