//! `MEMPROF_PRINT_AT_EXIT=1` writes the TSV log to stderr when the program ends: when `main`
//! returns and when it calls `std::process::exit`. The test runs this same binary as the child.

use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn leak_for_exit() -> Vec<Box<[u8]>> {
    (0..40)
        .map(|_| vec![0u8; 5000].into_boxed_slice())
        .collect()
}

/// Runs this test again in a child with `mode` set, and returns its stderr.
fn child(mode: &str) -> String {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "print_at_exit",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MEMPROF_TEST_CHILD", mode)
        .env("MEMPROF_PRINT_AT_EXIT", "1")
        .env("MEMPROF_MIN_BYTES", "100000")
        .output()
        .unwrap();
    assert!(output.status.success(), "child {mode} failed: {output:?}");
    String::from_utf8(output.stderr).unwrap()
}

/// The TSV log at the end of `stderr`: its count line, then the lines it announces.
fn check_log(stderr: &str) {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| l.parse::<usize>().is_ok())
        .unwrap_or_else(|| panic!("no TSV log in:\n{stderr}"));
    let count: usize = lines[start].parse().unwrap();
    let rows = &lines[start + 1..];
    assert_eq!(rows.len(), count, "{stderr}");
    let leak = rows
        .iter()
        .find(|r| r.contains("leak_for_exit"))
        .unwrap_or_else(|| panic!("the leak is not in the log:\n{stderr}"));
    let fields: Vec<&str> = leak.split('\t').collect();
    assert_eq!(fields[0], "40", "{leak}");
    assert_eq!(fields[1], "200000", "{leak}");
    for row in rows {
        let bytes: u64 = row.split('\t').nth(1).unwrap().parse().unwrap();
        assert!(bytes >= 100_000, "MEMPROF_MIN_BYTES not applied: {row}");
    }
}

#[test]
fn print_at_exit() {
    match std::env::var("MEMPROF_TEST_CHILD").as_deref() {
        Ok("return") => std::mem::forget(leak_for_exit()),
        Ok("exit") => {
            let kept = leak_for_exit();
            std::hint::black_box(&kept);
            std::process::exit(0);
        }
        _ => {
            check_log(&child("return"));
            check_log(&child("exit"));
        }
    }
}
