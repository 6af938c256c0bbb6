//! `memprof attach` on programs of other languages, none built with memprof, each driven by its
//! stdin (its main thread blocked in `read` during the attach), with two threads allocating
//! through the attach and the detach: a C++ program (`new`, through libstdc++'s `operator new`
//! and its call to `malloc`), a Rust program (std's allocator, the C library's), `python3` with
//! pymalloc and with `PYTHONMALLOC=malloc`. Each leak made while attached is one group with its
//! exact count and bytes; the program's output is unchanged.

#[path = "support/attach.rs"]
mod attach;

use attach::*;
use std::io::Write;

/// Attaches to `target` for 2 s, has it leak once, and returns the TSV written at the detach;
/// then checks that the program goes on and ends as it would have.
fn leak_while_attached(dir: &std::path::Path, mut target: Target) -> Vec<Group> {
    let tsv_path = dir.join("attached.tsv");
    let (status, said) = attach_during(
        memprof(dir),
        &[
            "--duration",
            "2",
            "--depth",
            "8",
            "--trace",
            "t-%p.mptrace",
            "--output",
            "attached.tsv",
        ],
        &mut target,
        |target, _, _| {
            let stdin = target.stdin.as_mut().unwrap();
            stdin.write_all(b"leak\n").unwrap();
            stdin.flush().unwrap();
            target.expect("leaked 1");
        },
    );
    assert!(status.success(), "{said}");
    let log = tsv(&tsv_path);
    let stdin = target.stdin.as_mut().unwrap();
    stdin.write_all(b"leak\nalive\n").unwrap();
    stdin.flush().unwrap();
    target.expect("alive");
    let (lines, stderr) = target.finish();
    assert_eq!(lines, ["ready", "leaked 1", "leaked 2", "alive", "bye"]);
    assert_eq!(stderr, "");
    log
}

/// The one group of `log` with `count` blocks and `bytes` bytes whose frames hold `needle`.
fn one_group(log: &[Group], count: u64, bytes: u64, needle: &str) {
    let found: Vec<&Group> = log
        .iter()
        .filter(|g| g.frames.iter().any(|f| f.contains(needle)))
        .collect();
    assert_eq!(found.len(), 1, "{needle} in\n{}", show(log));
    assert_eq!(
        (found[0].count, found[0].bytes),
        (count, bytes),
        "{}",
        show(log)
    );
}

#[test]
fn cxx() {
    let dir = scratch("cxx");
    let program = compile("c++", &dir, &["attach_lines.cpp"], "cxx", &["-pthread"]);
    let target = Target::start(Command::new(&program), "ready");
    let log = leak_while_attached(&dir, target);
    one_group(&log, 37, 37 * 1500, "'leak_site");
}

#[test]
fn rust_without_memprof() {
    let dir = scratch("rust");
    let program = dir.join("rust");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(rustc)
        .args([
            "-O",
            "-C",
            "debuginfo=1",
            "-C",
            "force-frame-pointers=no",
            "-o",
        ])
        .arg(&program)
        .arg(source("attach_lines.rs"))
        .output()
        .expect("rustc");
    assert!(output.status.success(), "{}", both(&output));
    let target = Target::start(Command::new(&program), "ready");
    let log = leak_while_attached(&dir, target);
    one_group(&log, 37, 37 * 1500, "leak_site");
}

fn python(dir: &std::path::Path, pymalloc: bool) {
    let mut command = Command::new("python3");
    command
        .arg(source("attach_lines.py"))
        .env_remove("PYTHONMALLOC");
    if !pymalloc {
        command.env("PYTHONMALLOC", "malloc");
    }
    let target = Target::start(command, "ready");
    let log = leak_while_attached(dir, target);
    // `bytes(1500)` is one block of 1533 bytes (the object's header and the final NUL).
    let found: Vec<&Group> = log
        .iter()
        .filter(|g| g.count == 37 && g.bytes == 37 * 1533)
        .collect();
    assert_eq!(found.len(), 1, "{}", show(&log));
}

#[test]
fn python_with_pymalloc() {
    python(&scratch("python"), true);
}

#[test]
fn python_with_malloc() {
    python(&scratch("python_malloc"), false);
}
