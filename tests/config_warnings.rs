//! Configuration warnings are written when the profiler starts, inside the program's first
//! allocation: a stderr that cannot be written (`/dev/full`, a pipe nobody reads) must not turn
//! them into a panic, and so an abort before `main`. An empty `MEMPROF_ENABLED` warns and keeps
//! recording on. The test runs this same binary as the child.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child: what it checks.
const CHILD: &str = "MEMPROF_TEST_CONFIG_WARNINGS";

/// Every variable given a value that warns.
const BAD: [(&str, &str); 5] = [
    ("MEMPROF_STACK_DEPTH", "deep"),
    ("MEMPROF_MIN_BYTES", "-1"),
    ("MEMPROF_UNWINDER", "libgcc"),
    ("MEMPROF_SAMPLE_INTERVAL", "512k"),
    ("MEMPROF_TOGGLE_SIGNAL", "KILL"),
];

/// Runs the child with `envs` and `stderr`, killed if it runs past a deadline; returns its exit
/// status and stdout.
fn child(mode: &str, envs: &[(&str, &str)], stderr: Stdio) -> (std::process::ExitStatus, String) {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "config_warnings", "--nocapture"])
        .env(CHILD, mode)
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let output = common::wait_within(child, Duration::from_secs(60), &format!("the child {mode}"));
    (output.status, String::from_utf8(output.stdout).unwrap())
}

#[test]
fn config_warnings() {
    match std::env::var(CHILD).as_deref() {
        Ok("allocate") => {
            let v: Vec<u64> = (0..1000).collect();
            println!("child ran: {}", v.len());
        }
        Ok("empty-enabled") => {
            assert!(memprof::Config::current().enabled);
            let kept = std::hint::black_box(vec![0u8; 5000]);
            assert!(memprof::HeapStats::get().live_bytes >= 5000);
            drop(kept);
        }
        _ => {
            let off = [("MEMPROF_ENABLED", "0")];
            for (name, envs) in [("recording", &BAD[..]), ("off", &[BAD[0], off[0]][..])] {
                let full = std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap();
                let (status, stdout) = child("allocate", envs, full.into());
                assert!(
                    status.success() && stdout.contains("child ran: 1000"),
                    "{name}, stderr on /dev/full: {status}\n{stdout}"
                );

                let (reader, writer) = std::io::pipe().unwrap();
                drop(reader);
                let (status, stdout) = child("allocate", envs, writer.into());
                assert!(
                    status.success() && stdout.contains("child ran: 1000"),
                    "{name}, stderr a pipe nobody reads: {status}\n{stdout}"
                );
            }

            let output = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "config_warnings", "--nocapture"])
                .env(CHILD, "empty-enabled")
                .env("MEMPROF_ENABLED", "")
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "{stderr}");
            assert!(
                stderr.contains("memprof: MEMPROF_ENABLED=\"\"")
                    && stderr.contains("using the default 1 (on)"),
                "{stderr}"
            );
        }
    }
}
