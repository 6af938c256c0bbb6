//! `MEMPROF_OUTPUT=heap.html`: at exit, a program with memprof as its global allocator writes the
//! HTML report, a file that names no URL (it opens offline) and whose call-site data starts with
//! the site that holds the most live bytes, named by the program's function. The test runs this
//! same binary as the child.

use std::path::PathBuf;
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Twenty blocks of 9000 bytes, kept to the end.
#[inline(never)]
fn keep_report_data() -> Vec<Vec<u8>> {
    let mut kept = Vec::with_capacity(20);
    for _ in 0..20 {
        kept.push(std::hint::black_box(Vec::<u8>::with_capacity(9000)));
    }
    kept
}

#[test]
fn html_output_at_exit() {
    if std::env::var_os("MEMPROF_TEST_CHILD").is_some() {
        std::mem::forget(keep_report_data());
        std::process::exit(0);
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("export_html_output");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "html_output_at_exit", "--nocapture"])
        .env("MEMPROF_TEST_CHILD", "1")
        .env("MEMPROF_OUTPUT", dir.join("heap-%p.html"))
        .env("MEMPROF_STACK_DEPTH", "20")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let path = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "html"))
        .unwrap_or_else(|| panic!("no HTML file in {}: {stderr}", dir.display()));
    assert!(
        stderr.contains(&format!("memprof: wrote {}", path.display())),
        "{stderr}"
    );
    let html = std::fs::read_to_string(&path).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{}", path.display());
    for scheme in ["http://", "https://"] {
        assert!(
            !html.contains(scheme),
            "{} names a URL ({scheme})",
            path.display()
        );
    }
    let sites = html
        .split_once("\"sites\":[\n")
        .unwrap_or_else(|| panic!("no site data in {}", path.display()))
        .1;
    let top = sites.lines().next().unwrap();
    assert!(
        top.starts_with("{\"function\":\"export_html_output::keep_report_data\""),
        "the top site: {top}"
    );
    assert!(
        top.contains("\"live_bytes\":180000,\"live_blocks\":20,"),
        "{top}"
    );
}
