//! A library the program loads, allocates from and unloads before it exits: its frames are still
//! named (function, file and line) in the at-exit report and in `memprof report` of the trace,
//! from the library's file read again (tests/programs/unloaded.c, unloaded_lib.c).

mod support;

use std::path::Path;
use support::*;

/// The frame every group of the library's blocks starts with: `lib_alloc` at its `malloc` line.
fn assert_named(log: &[Group], what: &str) {
    let shown = show(log);
    let line = line_of("unloaded_lib.c", "LIB_ALLOC_LINE");
    let groups = groups_at(log, "'lib_alloc'");
    assert_eq!(groups.len(), 1, "{what}: no group at 'lib_alloc':\n{shown}");
    assert_eq!(
        (groups[0].count, groups[0].bytes),
        (3, 3 * 4321),
        "{what}:\n{shown}"
    );
    assert!(
        groups[0].frames[0].contains(&format!("unloaded_lib.c:{line}")),
        "{what}: the library's file and line:\n{shown}"
    );
    assert!(
        groups[0].frames.iter().any(|f| f.contains("'main'")),
        "{what}: the program's frames below:\n{shown}"
    );
    // The program's own frames, after the library went, are named as always.
    let line = line_of("unloaded.c", "AFTER_UNLOAD_LINE");
    let groups = groups_at(log, "'after_unload'");
    assert_eq!(groups.len(), 1, "{what}:\n{shown}");
    assert!(
        groups[0].frames[0].contains(&format!("unloaded.c:{line}")),
        "{what}:\n{shown}"
    );
    assert!(
        !shown.contains("???"),
        "{what}: a frame without a name:\n{shown}"
    );
}

#[test]
fn frames_of_an_unloaded_library_are_named() {
    let dir = scratch("unloaded_library");
    let program = compile(&dir, &["unloaded.c"], "unloaded", &["-O0", "-g", "-ldl"]);
    let library = compile(
        &dir,
        &["unloaded_lib.c"],
        "libunloaded.so",
        &["-O0", "-g", "-shared", "-fPIC"],
    );
    let trace = dir.join("unloaded.mptrace");
    let output = run_ok(
        preloaded(&program)
            .arg(&library)
            .env("MEMPROF_TRACE", &trace),
        "unloaded",
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "ok\n",
        "{}",
        both(&output)
    );
    assert_named(&tsv_log(&output.stderr), "the at-exit report");
    assert_named(&report(&trace), "memprof report of the trace");
}

/// `memprof report --format tsv` of the trace at its end, every group shown.
fn report(trace: &Path) -> Vec<Group> {
    let output = run_ok(
        clean_command(memprof_command())
            .args(["report", "--format", "tsv", "--min-bytes", "0"])
            .arg(trace),
        "memprof report",
    );
    tsv_log(&output.stdout)
}
