//! A `MEMPROF_TRACE` path without `%p` shared by a parent and the child it runs (which inherits
//! the variable): the child finds the parent's file being written (locked) and writes
//! `PATH.PID` instead, saying so; the parent's trace stays at `PATH`, its own. And a trace file
//! replaced by another file while its process writes it is reported lost at close, never as
//! written. Before, the child renamed its file over the parent's, and the parent still said
//! "trace written".

#![cfg(feature = "trace")]

mod common;

use memprof_trace::Reader;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

const NAME: &str = "a_shared_trace_path_keeps_both_traces";

fn pid_of(path: &Path) -> u32 {
    let bytes = std::fs::read(path).unwrap();
    Reader::new(&bytes[..]).unwrap().header().pid
}

/// The traced parent: runs a child with the same environment, then closes its trace.
fn parent(dir: &Path) {
    let kept = vec![1u8; 4321];
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture"])
        .env("MEMPROF_TEST_MODE", "child")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let result = memprof::close_trace();
    memprof::untracked(|| {
        std::fs::write(dir.join("child.stderr"), &output.stderr).unwrap();
        std::fs::write(dir.join("parent.result"), format!("{result:?}")).unwrap();
    });
    drop(kept);
}

/// The traced child: its own trace, closed while the parent's is open.
fn child() {
    let kept = vec![2u8; 1234];
    let dir = PathBuf::from(std::env::var_os("MEMPROF_TEST_DIR").unwrap());
    memprof::untracked(|| {
        std::fs::write(dir.join("child.pid"), std::process::id().to_string()).unwrap()
    });
    let path = memprof::close_trace().unwrap().expect("a trace was open");
    eprintln!("child trace: {}", path.display());
    drop(kept);
}

/// A traced process whose file is replaced under it before it closes.
fn replaced(path: &Path) {
    let kept = vec![3u8; 999];
    let other = path.with_extension("other");
    std::fs::write(&other, b"not this process's trace").unwrap();
    std::fs::rename(&other, path).unwrap();
    let result = memprof::close_trace();
    eprintln!("replaced result: {result:?}");
    assert!(result.is_err(), "{result:?}");
    drop(kept);
}

fn run(mode: &str, trace: &Path, dir: &Path) -> std::process::Output {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture"])
        .env("MEMPROF_TEST_MODE", mode)
        .env("MEMPROF_TEST_DIR", dir)
        .env("MEMPROF_TRACE", trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_within(child, Duration::from_secs(120), mode)
}

#[test]
fn a_shared_trace_path_keeps_both_traces() {
    match std::env::var("MEMPROF_TEST_MODE").as_deref() {
        Ok("parent") => {
            return parent(&PathBuf::from(
                std::env::var_os("MEMPROF_TEST_DIR").unwrap(),
            ));
        }
        Ok("child") => return child(),
        Ok("replaced") => {
            return replaced(Path::new(&std::env::var_os("MEMPROF_TRACE").unwrap()));
        }
        _ => {}
    }
    let dir = std::env::temp_dir().join(format!("memprof-trace-same-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("shared.mptrace");

    let output = run("parent", &trace, &dir);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let parent_pid = pid_of(&trace);
    let child_pid: u32 = std::fs::read_to_string(dir.join("child.pid"))
        .unwrap()
        .parse()
        .unwrap();
    let child_stderr = std::fs::read_to_string(dir.join("child.stderr")).unwrap();
    let parent_result = std::fs::read_to_string(dir.join("parent.result")).unwrap();
    assert_ne!(
        parent_pid, child_pid,
        "the child's trace replaced the parent's"
    );
    assert!(parent_result.starts_with("Ok(Some("), "{parent_result}");
    assert!(
        parent_result.contains("shared.mptrace\")"),
        "{parent_result}"
    );
    // The child's trace is beside it, named by its pid, and the child said so.
    let own = dir.join(format!("shared.mptrace.{child_pid}"));
    assert!(
        child_stderr.contains("is being written by another process"),
        "{child_stderr}"
    );
    assert!(
        child_stderr.contains(&format!("child trace: {}", own.display())),
        "{child_stderr}"
    );
    assert_eq!(pid_of(&own), child_pid);

    // A file replaced under its process is reported lost, not written.
    let lost = dir.join("replaced.mptrace");
    let output = run("replaced", &lost, &dir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("was replaced by another process's file"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
