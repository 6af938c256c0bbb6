//! `memprof attach` on a running C program (`-O2`, no frame pointers) that leaks at a known site
//! only after SIGUSR1, with four threads allocating, reallocating and freeing during the attach
//! and the detach, and its main thread blocked in `read` on a pipe: attach, send the signal,
//! detach after 2 s. The TSV file written at the detach names the site with the exact count and
//! bytes; the 2000 blocks made before the attach and freed while attached disturb no figure (the
//! summary's frees never outnumber its allocations, and the live heap at the end is the leak and
//! the threads' blocks in flight); a leak after the detach is not recorded. The target keeps
//! working, and its output is what it would have been without memprof.

#[path = "support/attach.rs"]
mod attach;

use attach::*;
use std::io::Write;

#[test]
fn a_leak_after_a_signal_is_named_with_its_count_and_bytes() {
    let dir = scratch("c");
    let program = compile("cc", &dir, &["attach_target.c"], "target", &["-pthread"]);
    let mut command = Command::new(&program);
    command.args(["4", "read"]);
    let mut target = Target::start(command, "ready");
    let tsv_path = dir.join("attached.tsv");
    let (status, said) = attach_during(
        memprof(&dir),
        &[
            "--duration",
            "2",
            "--depth",
            "3",
            "--trace",
            "t-%p.mptrace",
            "--output",
            "attached.tsv",
        ],
        &mut target,
        |target, _, _| {
            target.signal("-USR1");
            target.expect("leaked 1");
        },
    );
    assert!(status.success(), "{said}");
    assert!(said.contains("memprof: detached from process"), "{said}");

    let log = tsv(&tsv_path);
    let shown = show(&log);
    let line = line_of("attach_target.c", "LEAK_LINE");
    let leak = at(&log, &format!("attach_target.c:{line}"));
    assert_eq!(leak.len(), 1, "{shown}");
    assert_eq!((leak[0].count, leak[0].bytes), (37, 37 * 1500), "{shown}");
    assert!(leak[0].frames[1].contains("'main'"), "{shown}");
    // Every other live block is one of the threads' in flight (16 per thread at most).
    let others: u64 = log.iter().map(|g| g.count).sum::<u64>() - 37;
    assert!(others <= 4 * 16, "{shown}");

    // The summary, as memprof run prints it.
    let summary_line = |prefix: &str| {
        said.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("{prefix} in\n{said}"))
            .to_owned()
    };
    let allocations = summary_line("allocations: ");
    let numbers: Vec<u64> = allocations
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let (allocated, frees) = (numbers[0], numbers[2]);
    assert!(frees <= allocated && allocated > 37, "{allocations}");
    let leaked = summary_line("leaked at end: ");
    let leaked_bytes: u64 = leaked.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(
        (37 * 1500..=37 * 1500 + 4 * 16 * 850).contains(&leaked_bytes),
        "{leaked}"
    );
    assert!(said.contains("attach_target.c:"), "{said}");

    // After the detach: the program runs on as before, its leaks no longer recorded.
    target.signal("-USR1");
    target.expect("leaked 2");
    target.signal("-USR2");
    target.expect("alive 1");
    let log_again = tsv(&tsv_path);
    assert_eq!(
        show(&log_again),
        shown,
        "the file was written once, at the detach"
    );
    let (lines, stderr) = target.finish();
    assert_eq!(lines, ["ready", "leaked 1", "leaked 2", "alive 1", "bye"]);
    assert_eq!(stderr, "", "nothing of memprof's on the program's stderr");
}

/// The command killed while attached (`kill -9`): the library sees it end and detaches by itself,
/// closing the trace whole while the program runs on (the summary reads its end record before
/// the program ends); every block in it is the program's, with its stack; the copy left mapped
/// does not keep a new attach from recording; and the program runs on as before.
#[test]
fn the_process_detaches_itself_when_the_command_is_killed() {
    let dir = scratch("c-killed");
    let program = compile("cc", &dir, &["attach_target.c"], "target", &["-pthread"]);
    let mut command = Command::new(&program);
    command.args(["4", "read"]);
    let mut target = Target::start(command, "ready");
    let (status, said) = attach_during(
        memprof(&dir),
        &["--trace", "t-%p.mptrace"],
        &mut target,
        |target, attacher, _| {
            target.signal("-USR1");
            target.expect("leaked 1");
            let killed = Command::new("kill")
                .args(["-KILL", &attacher.to_string()])
                .status()
                .unwrap();
            assert!(killed.success());
        },
    );
    assert!(!status.success(), "{said}");
    let trace = dir.join(format!("t-{}.mptrace", target.pid()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let summary = loop {
        let output = run(memprof(&dir).arg("summary").arg(&trace));
        let text = both(&output);
        if output.status.success() && text.contains("closed normally") {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the trace was not closed: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(summary.contains("attach_target.c:"), "{summary}");
    // Every block the program's: none of the library's own threads' (its watch), none without
    // a stack (walks made while the first one built the unwinder's registry).
    let crates = run(memprof(&dir)
        .args(["report", "--by", "crate", "--format", "tsv"])
        .arg(&trace));
    let crates = both(&crates);
    assert!(
        !crates.contains("memprof") && !crates.contains("(unknown)") && crates.contains("target"),
        "{crates}"
    );
    // The copy the killed command loaded stays mapped, detached: a new attach records.
    let (status, said) = attach_during(
        memprof(&dir),
        &["--duration", "1", "--trace", "again-%p.mptrace"],
        &mut target,
        |_, _, _| {},
    );
    assert!(
        status.success() && said.contains("memprof: detached from process"),
        "{said}"
    );
    target.signal("-USR1");
    target.expect("leaked 2");
    target.signal("-USR2");
    target.expect("alive 1");
    let (lines, stderr) = target.finish();
    assert_eq!(lines, ["ready", "leaked 1", "leaked 2", "alive 1", "bye"]);
    assert_eq!(stderr, "", "nothing of memprof's on the program's stderr");
}

/// A child forked while attached (a pre-forking server's worker) is not the attached process:
/// it stops recording at its fork, and its exit, after the parent's detach, writes no file over
/// the `--output` files the detach wrote, nor a trace of its own.
#[test]
fn a_child_forked_while_attached_writes_nothing() {
    let dir = scratch("c-forked");
    let program = compile("cc", &dir, &["attach_worker.c"], "worker", &[]);
    let mut target = Target::start(Command::new(&program), "ready");
    let (status, said) = attach_during(
        memprof(&dir),
        &["--trace", "t-%p.mptrace", "--output", "heap.tsv"],
        &mut target,
        |target, attacher, _| {
            let stdin = target.stdin.as_mut().unwrap();
            stdin.write_all(b"fork\n").unwrap();
            stdin.flush().unwrap();
            target.expect("forked");
            // Ctrl-C: the detach writes heap.tsv.
            interrupt(attacher);
        },
    );
    assert!(status.success(), "{said}");
    let written = std::fs::read_to_string(dir.join("heap.tsv")).unwrap();
    let inode =
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(dir.join("heap.tsv")).unwrap());
    let stdin = target.stdin.as_mut().unwrap();
    stdin.write_all(b"wait\n").unwrap();
    stdin.flush().unwrap();
    target.expect("child ended 0");
    let after = std::fs::metadata(dir.join("heap.tsv")).unwrap();
    assert_eq!(
        (
            std::os::unix::fs::MetadataExt::ino(&after),
            std::fs::read_to_string(dir.join("heap.tsv")).unwrap()
        ),
        (inode, written),
        "the child's exit wrote heap.tsv again"
    );
    let traces: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".mptrace"))
        .collect();
    assert_eq!(traces, [format!("t-{}.mptrace", target.pid())]);
    let (lines, stderr) = target.finish();
    assert_eq!(lines, ["ready", "forked", "child ended 0", "bye"]);
    assert_eq!(stderr, "", "nothing of memprof's on the program's stderr");
}

/// The TSV file at `path` holds `attach_exec.c`'s leak, exactly: 10 blocks of 300 bytes.
fn the_exec_programs_leak(path: &std::path::Path) {
    let log = tsv(path);
    let line = line_of("attach_exec.c", "LEAK_LINE");
    let leak = at(&log, &format!("attach_exec.c:{line}"));
    assert_eq!(leak.len(), 1, "{}", show(&log));
    assert_eq!((leak[0].count, leak[0].bytes), (10, 3000), "{}", show(&log));
}

/// Sends `line` to the target's stdin.
fn say(target: &mut Target, line: &str) {
    let stdin = target.stdin.as_mut().unwrap();
    stdin.write_all(line.as_bytes()).unwrap();
    stdin.flush().unwrap();
}

/// A process that replaces its program (`execv`) while attached: the library detaches first (the
/// trace closed whole, the files written with what was recorded), the command sees the copy gone
/// and ends by itself with the summary, and the new program runs unrecorded.
#[test]
fn an_exec_while_attached_ends_the_attach_with_the_trace_whole() {
    let dir = scratch("c-exec");
    let program = compile("cc", &dir, &["attach_exec.c"], "exec", &[]);
    let mut target = Target::start(Command::new(&program), "ready");
    let (status, said) = attach_during(
        memprof(&dir),
        &["--trace", "t-%p.mptrace", "--output", "heap.tsv"],
        &mut target,
        |target, _, _| {
            say(target, "leak\n");
            target.expect("leaked");
            say(target, "execv\n");
            target.expect("replaced");
        },
    );
    assert!(status.success(), "{said}");
    assert!(
        said.contains("replaced its program (exec)") && !said.contains("not closed"),
        "{said}"
    );
    the_exec_programs_leak(&dir.join("heap.tsv"));
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", target.pid())).unwrap();
    assert!(!maps.contains("memprof"), "{maps}");
    let (lines, stderr) = target.finish();
    assert_eq!(lines, ["ready", "leaked", "replaced", "bye"]);
    assert_eq!(stderr, "", "nothing of memprof's on the program's stderr");
}

/// A process that ends by `_exit` while attached (no exit handler runs): the library's entry for
/// `_exit` closes the trace first, so the command's summary has it whole, the leak in it.
#[test]
fn an_underscore_exit_while_attached_ends_the_attach_with_the_trace_whole() {
    let dir = scratch("c-underscore-exit");
    let program = compile("cc", &dir, &["attach_exec.c"], "exec", &[]);
    let mut target = Target::start(Command::new(&program), "ready");
    let (status, said) = attach_during(
        memprof(&dir),
        &["--trace", "t-%p.mptrace"],
        &mut target,
        |target, _, _| {
            say(target, "leak\n");
            target.expect("leaked");
            say(target, "_exit\n");
        },
    );
    assert!(status.success(), "{said}");
    assert!(said.contains("(closed normally"), "{said}");
    assert!(!said.contains("without closing its trace"), "{said}");
    let trace = memprof_trace::Trace::open(dir.join(format!("t-{}.mptrace", target.pid())))
        .unwrap_or_else(|e| panic!("the trace: {e:?}\n{said}"));
    assert!(trace.end_record().is_some(), "{said}");
    let (lines, stderr) = target.finish();
    assert_eq!(lines, ["ready", "leaked"]);
    assert_eq!(stderr, "", "nothing of memprof's on the program's stderr");
}

/// `execl` replaces the program past the library (the C library calls its own `execve`), and
/// Ctrl-C follows at once: the detach finds the copy gone, with the process stopped, and calls
/// nothing in the new program, which runs on.
#[test]
fn an_exec_past_the_library_is_not_called_into() {
    let dir = scratch("c-execl");
    let program = compile("cc", &dir, &["attach_exec.c"], "execl", &[]);
    let mut target = Target::start(Command::new(&program), "ready");
    let (_, said) = attach_during(
        memprof(&dir),
        &["--trace", "t-%p.mptrace"],
        &mut target,
        |target, attacher, _| {
            say(target, "execl\n");
            target.expect("replaced");
            interrupt(attacher);
        },
    );
    assert!(said.contains("replaced its program (exec)"), "{said}");
    assert!(!said.contains("detached from process"), "{said}");
    let (lines, stderr) = target.finish();
    assert_eq!(lines, ["ready", "replaced", "bye"]);
    assert_eq!(stderr, "");
}

/// An `exec` that fails: the library detached before it (the trace and files written with what
/// was recorded), the process runs on unrecorded, and the command's Ctrl-C ends with the summary,
/// saying so.
#[test]
fn an_exec_that_fails_leaves_the_process_detached() {
    let dir = scratch("c-execfail");
    let program = compile("cc", &dir, &["attach_exec.c"], "execfail", &[]);
    let mut target = Target::start(Command::new(&program), "ready");
    let (status, said) = attach_during(
        memprof(&dir),
        &["--trace", "t-%p.mptrace", "--output", "heap.tsv"],
        &mut target,
        |target, attacher, _| {
            say(target, "leak\n");
            target.expect("leaked");
            say(target, "execfail\n");
            target.expect("execv failed");
            say(target, "leak\n");
            target.expect("leaked");
            interrupt(attacher);
        },
    );
    assert!(status.success(), "{said}");
    assert!(said.contains("at an exec that failed"), "{said}");
    the_exec_programs_leak(&dir.join("heap.tsv"));
    let (lines, stderr) = target.finish();
    assert_eq!(lines, ["ready", "leaked", "execv failed", "leaked", "bye"]);
    assert_eq!(stderr, "");
}

/// A process whose one thread sleeps in one long `sleep` (coreutils' `sleep 600`): the attach
/// interrupts the sleep, which the kernel then goes on with in `restart_syscall`; the detach and a
/// second attach call into that thread all the same (they found no thread to call in, and the
/// process was left attached), and the sleep is not cut short.
#[test]
fn a_process_in_one_long_sleep_is_attached_twice() {
    let dir = scratch("c-long-sleep");
    let mut sleeper = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = sleeper.id().to_string();
    // Until the sleep is entered.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.contains("sleep"))
    {
        assert!(std::time::Instant::now() < deadline, "sleep did not sleep");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for round in 1..=2 {
        let output = run(memprof(&dir)
            .args([
                "attach",
                "--duration",
                "0.5",
                "--trace",
                &format!("t{round}-%p.mptrace"),
            ])
            .arg(&pid));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "round {round}: {}", both(&output));
        assert!(
            stderr.contains(&format!("memprof: detached from process {pid}")),
            "round {round}: {stderr}"
        );
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(status.contains("TracerPid:\t0"), "{status}");
        assert!(
            maps.contains("libmemprof_preload"),
            "the library stays mapped: {maps}"
        );
    }
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "the sleep was cut short"
    );
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}

/// A process waiting for a file lock (util-linux's `flock`, blocked in flock(2) while another
/// holds the lock) is attached and detached, and takes the lock once it is let go.
#[test]
fn a_process_waiting_for_a_file_lock() {
    let dir = scratch("c-flock");
    let lock = dir.join("lock");
    // --no-fork: the lock is `sleep`'s own, let go when it is killed.
    let mut holder = Command::new("flock")
        .arg("--no-fork")
        .arg(&lock)
        .args(["sleep", "600"])
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !lock.exists() {
        assert!(std::time::Instant::now() < deadline, "no lock");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut waiter = Command::new("flock")
        .arg(&lock)
        .arg("true")
        .spawn()
        .unwrap();
    let pid = waiter.id().to_string();
    while !std::fs::read_to_string(format!("/proc/{pid}/syscall"))
        .is_ok_and(|s| s.starts_with("73 "))
    {
        assert!(std::time::Instant::now() < deadline, "flock did not wait");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let output = run(memprof(&dir)
        .args(["attach", "--duration", "0.3", "--trace", "t-%p.mptrace"])
        .arg(&pid));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}", both(&output));
    assert!(
        stderr.contains(&format!("memprof: detached from process {pid}")),
        "{stderr}"
    );
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "the wait was cut short"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = waiter.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = waiter.kill();
            panic!("flock did not take the lock once it was let go");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}
