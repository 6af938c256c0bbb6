//! `memprof attach` at awkward moments: the program's main thread asleep in `sleep(3)` (the
//! attach's call interrupts it; it sleeps on, its output unchanged) with four threads
//! allocating through the attach and the detach; attached twice in a row (each time a copy of the
//! library of its own: the second records the leak made while it was attached, the first leak
//! being a block from before it); the second detached by Ctrl-C (SIGINT to the command) rather
//! than `--duration`. The program keeps working after each detach. And a process attached to and
//! detached from while its main thread forks children that allocate, one after another.

#[path = "support/attach.rs"]
mod attach;

use attach::*;

#[test]
fn twice_in_a_row_while_asleep_the_second_ended_by_ctrl_c() {
    let dir = scratch("timing");
    let program = compile("cc", &dir, &["attach_target.c"], "target", &["-pthread"]);
    let mut command = Command::new(&program);
    command.args(["4", "sleep"]);
    let mut target = Target::start(command, "ready");
    let line = line_of("attach_target.c", "LEAK_LINE");
    let site = format!("attach_target.c:{line}");

    let first = dir.join("first.tsv");
    let (status, said) = attach_during(
        memprof(&dir),
        &[
            "--duration",
            "2",
            "--trace",
            "first-%p.mptrace",
            "--output",
            "first.tsv",
        ],
        &mut target,
        |target, _, _| {
            target.signal("-USR1");
            target.expect("leaked 1");
        },
    );
    assert!(status.success(), "{said}");
    let log = tsv(&first);
    let leak = at(&log, &site);
    assert_eq!(leak.len(), 1, "{}", show(&log));
    assert_eq!(
        (leak[0].count, leak[0].bytes),
        (37, 37 * 1500),
        "{}",
        show(&log)
    );

    target.signal("-USR2");
    target.expect("alive 1");

    let second = dir.join("second.tsv");
    let (status, said) = attach_during(
        memprof(&dir),
        &["--trace", "second-%p.mptrace", "--output", "second.tsv"],
        &mut target,
        |target, memprof, _| {
            target.signal("-USR1");
            target.expect("leaked 2");
            interrupt(memprof);
        },
    );
    assert!(status.success(), "{said}");
    assert!(said.contains("memprof: detached from process"), "{said}");
    let log = tsv(&second);
    let leak = at(&log, &site);
    assert_eq!(leak.len(), 1, "{}", show(&log));
    // The second leak only: the first one's blocks are from before this attach.
    assert_eq!(
        (leak[0].count, leak[0].bytes),
        (37, 37 * 1500),
        "{}",
        show(&log)
    );
    assert!(said.contains("leaked at end: "), "the summary: {said}");

    target.signal("-USR2");
    target.expect("alive 2");
    let (lines, stderr) = target.finish();
    assert_eq!(
        lines,
        ["ready", "leaked 1", "alive 1", "leaked 2", "alive 2", "bye"]
    );
    assert_eq!(stderr, "");
}

#[test]
fn inside_a_signal_handler() {
    let dir = scratch("handler");
    let program = compile("cc", &dir, &["attach_target.c"], "target", &["-pthread"]);
    let mut command = Command::new(&program);
    command.args(["2", "read"]);
    let mut target = Target::start(command, "ready");
    // The main thread sleeps 3 s inside SIGHUP's handler while memprof attaches.
    target.signal("-HUP");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (status, said) = attach_during(
        memprof(&dir),
        &[
            "--duration",
            "5",
            "--output",
            "handler.tsv",
            "--trace",
            "h-%p.mptrace",
        ],
        &mut target,
        |target, _, _| {
            target.expect("slept");
            target.signal("-USR1");
            target.expect("leaked 1");
        },
    );
    assert!(status.success(), "{said}");
    let line = line_of("attach_target.c", "LEAK_LINE");
    let log = tsv(&dir.join("handler.tsv"));
    let leak = at(&log, &format!("attach_target.c:{line}"));
    assert_eq!(leak.len(), 1, "{}", show(&log));
    assert_eq!((leak[0].count, leak[0].bytes), (37, 37 * 1500));
    let (lines, stderr) = target.finish();
    assert_eq!(lines, ["ready", "slept", "leaked 1", "bye"]);
    assert_eq!(stderr, "");
}

#[test]
fn the_process_ends_while_attached() {
    let dir = scratch("ends");
    let program = compile("cc", &dir, &["attach_target.c"], "target", &["-pthread"]);
    let mut command = Command::new(&program);
    command.args(["2", "read"]);
    let mut target = Target::start(command, "ready");
    let (status, said) = attach_during(
        memprof(&dir),
        &["--output", "ends.tsv", "--trace", "e-%p.mptrace"],
        &mut target,
        |target, _, _| {
            target.signal("-USR1");
            target.expect("leaked 1");
            // Its stdin's end ends it: the library closes the trace and writes the files at its
            // exit, and the command prints the summary.
            drop(target.stdin.take());
        },
    );
    assert!(status.success(), "{said}");
    assert!(said.contains("ended"), "{said}");
    assert!(said.contains("leaked at end: "), "{said}");
    let line = line_of("attach_target.c", "LEAK_LINE");
    let log = tsv(&dir.join("ends.tsv"));
    let leak = at(&log, &format!("attach_target.c:{line}"));
    assert_eq!(leak.len(), 1, "{}", show(&log));
    assert_eq!((leak[0].count, leak[0].bytes), (37, 37 * 1500));
}

#[test]
fn while_it_forks() {
    let dir = scratch("forks");
    let program = compile("cc", &dir, &["attach_target.c"], "target", &["-pthread"]);
    let mut command = Command::new(&program);
    command.args(["2", "fork"]);
    let mut target = Target::start(command, "ready");
    let (status, said) = attach_during(
        memprof(&dir),
        &[
            "--duration",
            "2",
            "--output",
            "forks.tsv",
            "--trace",
            "f-%p.mptrace",
        ],
        &mut target,
        |target, _, _| {
            target.signal("-USR1");
            target.expect("leaked 1");
        },
    );
    assert!(status.success(), "{said}");
    let line = line_of("attach_target.c", "LEAK_LINE");
    let log = tsv(&dir.join("forks.tsv"));
    let leak = at(&log, &format!("attach_target.c:{line}"));
    assert_eq!(leak.len(), 1, "{}", show(&log));
    assert_eq!((leak[0].count, leak[0].bytes), (37, 37 * 1500));
    // It forks on after the detach, its children and their output as before.
    target.signal("-USR2");
    target.expect("alive 1");
    let (lines, stderr) = target.finish();
    assert_eq!(lines, ["ready", "leaked 1", "alive 1", "bye"]);
    assert_eq!(stderr, "");
}
