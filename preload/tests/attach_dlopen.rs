//! Attach mode from the inside: a C program (`-O2`, no frame pointers) loads the library with
//! `dlopen`, as `memprof attach` has a running process do, and calls `memprof_attach` with its
//! settings (never read from the environment) and `memprof_detach`. The TSV file written at the
//! detach holds exactly the blocks leaked while attached: its own module's calls, the C library's
//! own (`strdup`) and a library `dlopen`ed while attached; the blocks made before the attach and
//! freed or reallocated meanwhile disturb no figure, and a leak after the detach is not there.
//! Nothing of memprof's is written on the program's stderr.

mod support;

use support::*;

const SOURCE: &str = "attach_self.c";

#[test]
fn attach_and_detach_from_inside_the_process() {
    let dir = scratch("attach_dlopen");
    let program = compile(
        &dir,
        &[SOURCE],
        "attach_self",
        &["-O2", "-g", "-fomit-frame-pointer", "-ldl"],
    );
    let lib = compile(
        &dir,
        &["dlopen_lib.c"],
        "libdlopen_lib.so",
        &["-O2", "-g", "-shared", "-fPIC", "-fomit-frame-pointer"],
    );
    let tsv = dir.join("attached.tsv");
    let settings = format!(
        "MEMPROF_OUTPUT={}\nMEMPROF_STACK_DEPTH=3\nMEMPROF_MIN_BYTES=0\n",
        tsv.display()
    );
    let output = run_ok(
        clean_command(&program)
            .arg(library())
            .arg(&settings)
            .arg(&lib)
            // Ignored: the settings are the ones given to memprof_attach.
            .env("MEMPROF_STACK_DEPTH", "1")
            .env("MEMPROF_OUTPUT", dir.join("from-env.tsv")),
        "attach_self",
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "ok\n",
        "{}",
        both(&output)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "",
        "memprof wrote on the program's stderr"
    );
    assert!(
        !dir.join("from-env.tsv").exists(),
        "the environment's MEMPROF_OUTPUT was read"
    );
    let text = std::fs::read_to_string(&tsv).unwrap();
    let log = tsv_logs(&text).remove(0);
    let shown = show(&log);

    let leak_line = line_of(SOURCE, "LEAK_LINE");
    let at_leak = groups_at(&log, &format!("attach_self.c:{leak_line}"));
    assert_eq!(at_leak.len(), 1, "one group at the leak's line in\n{shown}");
    assert_eq!(
        (at_leak[0].count, at_leak[0].bytes),
        (25, 25 * 700),
        "{shown}"
    );
    let strdup = groups_at(&log, "'strdup'");
    assert_eq!(strdup.len(), 1, "the C library's strdup in\n{shown}");
    assert!(strdup[0].frames[1].contains("'leak_strdup'"), "{shown}");
    assert_eq!((strdup[0].count, strdup[0].bytes), (1, 24), "{shown}");
    let later = groups_at(&log, "'lib_work'");
    assert_eq!(
        later.len(),
        1,
        "the library dlopened while attached in\n{shown}"
    );
    assert_eq!((later[0].count, later[0].bytes), (1, 777), "{shown}");
    // Nothing else: the pre-attach blocks' frees and the reallocated one (freed again) left no
    // group, and the leak after the detach was not recorded.
    assert_eq!(totals(&log), (27, 25 * 700 + 24 + 777), "{shown}");
}
