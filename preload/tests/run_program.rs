//! `memprof run` as a careful user meets it: it passes on the program's exit status, writes its
//! summary to stderr after the program's own output, refuses a FIFO as `--trace` rather than
//! hang on it, never shows an earlier run's trace as this one's, keeps the trace of every
//! process it started (each expands `%e` and `%p` for itself) and lists them, gives the
//! reports' estimates for a sampled trace and says they are estimates, runs a script without
//! `#!` with `/bin/sh` as a shell does, says once per run that a program has no debug
//! information, prints the summary after a Ctrl-C that ended the program, summarises a program's
//! last image after an `exec`, and closes the trace of a shell that ends by `_exit`. The
//! preloaded library warns once for a misspelt `MEMPROF_` variable and for an empty value.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use support::*;

/// `memprof run ARGS` in `dir`, with no `MEMPROF_*` variable of the test's own.
fn memprof_run(dir: &Path, args: &[&str], what: &str) -> Output {
    run_within(
        clean_command(memprof_command())
            .arg("run")
            .args(args)
            .current_dir(dir),
        Duration::from_secs(120),
        what,
    )
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The trace files in `dir`, by name.
fn traces(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".mptrace"))
        .collect();
    names.sort();
    names
}

/// A scratch directory `name` holding `run_leak.c` built as `run_leak`, and a copy of it named
/// `hello`.
fn with_hello(name: &str) -> PathBuf {
    let dir = scratch(name);
    let leak = leak_program(&dir);
    std::fs::copy(&leak, dir.join("hello")).unwrap();
    dir
}

/// `run_leak.c` built into `dir`.
fn leak_program(dir: &Path) -> PathBuf {
    compile(dir, &["run_leak.c"], "run_leak", &["-O1", "-g"])
}

#[test]
fn exit_status_is_the_programs() {
    let dir = scratch("run_status");
    let program = leak_program(&dir);
    let program = program.to_str().unwrap();
    let output = memprof_run(&dir, &["--", program, "3"], "memprof run: exit(3)");
    assert_eq!(output.status.code(), Some(3), "{}", both(&output));
    for (signal, status) in [("TERM", 143), ("KILL", 137)] {
        let script = format!("{program}; kill -{signal} $$");
        let output = memprof_run(
            &dir,
            &["--", "bash", "-c", &script],
            "memprof run: a signal",
        );
        assert_eq!(output.status.code(), Some(status), "{}", both(&output));
    }
    let output = memprof_run(&dir, &["--", program], "memprof run: success");
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
}

/// Ctrl-C reaches every process of the terminal's foreground group, `memprof run` and its
/// program: the program ends on it (here as programs that catch it do, with status 130), and
/// `memprof run` prints the summary, then exits as the program did.
#[test]
fn ctrl_c_ends_the_program_and_the_summary_follows() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let dir = scratch("run_ctrl_c");
    let program = leak_program(&dir);
    let mut child = clean_command(memprof_command())
        .args(["run", "--", program.to_str().unwrap(), "0", "wait"])
        .current_dir(&dir)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The program has leaked and waits (a minute at most: then the test fails, never hangs).
    let stdout = child.stdout.take().unwrap();
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = send.send(line);
    });
    let line = lines.recv_timeout(Duration::from_secs(60));
    let group = format!("-{}", child.id());
    if line.as_deref() != Ok("leaked\n") {
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        panic!("the program did not say it leaked: {line:?}");
    }
    let sent = Command::new("kill")
        .args(["-INT", "--", &group])
        .status()
        .unwrap();
    assert!(sent.success());
    let output = support::common::wait_within(child, Duration::from_secs(60), "memprof run");
    let stderr = stderr(&output);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.lines().any(|l| l.trim() == "5000  640000 bytes"),
        "{stderr}"
    );
    assert!(stderr.contains("ended: exit status: 130"), "{stderr}");
}

/// A stderr nobody reads any more (`memprof run ... 2>&1 | head`, once `head` has its lines)
/// loses the summary, and the command still ends as the program did: it ended with a panic
/// (status 101) when it could not write the summary, nor then say so.
#[test]
fn a_closed_stderr_loses_the_summary_not_the_status() {
    use std::process::Stdio;
    let dir = scratch("run_closed_stderr");
    let program = leak_program(&dir);
    let mut child = clean_command(memprof_command())
        .args(["run", "--", program.to_str().unwrap(), "3"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let output = support::common::wait_within(child, Duration::from_secs(60), "memprof run");
    assert_eq!(output.status.code(), Some(3), "{:?}", output.status);
}

#[test]
fn summary_on_stderr_after_the_programs_output() {
    let dir = scratch("run_stderr");
    let program = leak_program(&dir);
    let output = memprof_run(
        &dir,
        &["--", program.to_str().unwrap()],
        "memprof run: summary",
    );
    assert!(output.status.success(), "{}", both(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "leaked\n");
    let stderr = stderr(&output);
    // Every allocation recorded: the counts are exact, and not marked as estimates.
    assert!(
        stderr.lines().any(|l| l.trim() == "5000  640000 bytes"),
        "{stderr}"
    );
    assert!(stderr.contains("in 'make_node'"), "{stderr}");
    assert!(!stderr.contains('≈'), "{stderr}");
    // The short-lived line, with its bound: 1 ms unless `--short-lived` gives another.
    let short_lived = |stderr: &str| {
        stderr
            .lines()
            .find(|l| l.starts_with("short-lived allocations: "))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no short-lived line in {stderr}"))
    };
    assert!(
        short_lived(&stderr).ends_with(" freed within 1 ms)"),
        "{stderr}"
    );
    let output = memprof_run(
        &dir,
        &["--short-lived", "5us", "--", program.to_str().unwrap()],
        "memprof run --short-lived 5us",
    );
    assert!(output.status.success(), "{}", both(&output));
    let stderr = self::stderr(&output);
    assert!(
        short_lived(&stderr).ends_with(" freed within 5 µs)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\nmost short-lived allocations (freed within 5 µs):\n"),
        "{stderr}"
    );
}

#[test]
fn a_fifo_as_trace_is_refused_up_front() {
    let dir = scratch("run_fifo");
    let fifo = dir.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // It hung for ever: the program gave the FIFO up, then `memprof run` opened it to read.
    let output = run_within(
        clean_command(memprof_command())
            .args(["run", "--trace"])
            .arg(&fifo)
            .args(["--", "/bin/true"])
            .current_dir(&dir),
        Duration::from_secs(20),
        "memprof run --trace FIFO",
    );
    assert_eq!(output.status.code(), Some(2), "{}", both(&output));
    assert!(stderr(&output).contains("a FIFO"), "{}", both(&output));
}

#[test]
fn an_earlier_runs_trace_is_not_shown_as_this_ones() {
    let dir = scratch("run_stale");
    let leak = leak_program(&dir);
    let fixed = dir.join("fixed.mptrace");
    let fixed = fixed.to_str().unwrap();
    let first = memprof_run(
        &dir,
        &["--trace", fixed, "--", leak.to_str().unwrap()],
        "memprof run: first",
    );
    assert!(first.status.success(), "{}", both(&first));
    let static_program = compile(
        &dir,
        &["static_hello.c"],
        "static_hello",
        &["-static", "-O2"],
    );
    let output = memprof_run(
        &dir,
        &["--trace", fixed, "--", static_program.to_str().unwrap()],
        "memprof run: a static program after a traced one",
    );
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    assert!(!text.contains("allocations:"), "{text}");
    assert!(
        text.contains("no trace written") && text.contains("statically linked"),
        "{text}"
    );
    assert!(text.contains("from an earlier run"), "{text}");
    let disabled = run_within(
        clean_command(memprof_command())
            .args(["run", "--trace", fixed, "--"])
            .arg(&leak)
            .env("MEMPROF_ENABLED", "0")
            .current_dir(&dir),
        Duration::from_secs(60),
        "memprof run with MEMPROF_ENABLED=0",
    );
    let text = stderr(&disabled);
    assert_eq!(disabled.status.code(), Some(1), "{}", both(&disabled));
    assert!(!text.contains("allocations:"), "{text}");
    assert!(text.contains("MEMPROF_ENABLED=0"), "{text}");
}

#[test]
fn every_process_keeps_its_trace() {
    let dir = with_hello("run_children");
    let output = memprof_run(
        &dir,
        &[
            "--trace",
            "x-%e.mptrace",
            "--",
            "bash",
            "-c",
            "./hello; true",
        ],
        "memprof run: a shell and its child",
    );
    assert!(output.status.success(), "{}", both(&output));
    assert_eq!(traces(&dir), ["x-bash.mptrace", "x-hello.mptrace"]);
    let text = stderr(&output);
    let process = text
        .lines()
        .find(|l| l.starts_with("process: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(process.ends_with("bash)"), "{text}");
    let child = text
        .lines()
        .find(|l| l.contains("x-hello.mptrace: process "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        child.contains("/hello): ") && child.contains(" allocations ("),
        "{text}"
    );

    // A script whose last command is `exec`: the same process id, a trace per program.
    let dir = with_hello("run_exec");
    let script = dir.join("script");
    std::fs::write(&script, "#!/bin/bash\n./hello\nexec ./run_leak\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let output = memprof_run(
        &dir,
        &["--trace", "t-%e-%p.mptrace", "--", "./script"],
        "memprof run: a script ending in exec",
    );
    assert!(output.status.success(), "{}", both(&output));
    let names = traces(&dir);
    assert_eq!(names.len(), 3, "{names:?}\n{}", both(&output));
    for prefix in ["t-script-", "t-hello-", "t-run_leak-"] {
        assert!(names.iter().any(|n| n.starts_with(prefix)), "{names:?}");
    }
    let text = stderr(&output);
    assert_eq!(text.matches(".mptrace: process ").count(), 2, "{text}");
    // The summary is the program's last image's, the one that ended; the others are listed.
    let process = text
        .lines()
        .find(|l| l.starts_with("process: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(process.ends_with("/run_leak)"), "{text}");
}

/// `sh` is `dash` on Debian, which ends by `_exit`: the library closes the trace there too.
#[test]
fn a_shell_that_ends_by_underscore_exit_has_its_trace_closed() {
    let dir = with_hello("run_sh_exit");
    let output = memprof_run(
        &dir,
        &["--", "sh", "-c", "./hello; echo done"],
        "memprof run: sh -c",
    );
    assert!(output.status.success(), "{}", both(&output));
    let text = stderr(&output);
    assert!(!text.contains("without closing its trace"), "{text}");
    let recorded = text
        .lines()
        .find(|l| l.starts_with("recorded: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(recorded.contains("(closed normally"), "{text}");
    let allocations: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("allocations: "))
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(allocations > 0, "{text}");
}

#[test]
fn sampled_summary_gives_the_reports_estimates() {
    let dir = scratch("run_sampled");
    let leak = leak_program(&dir);
    let output = memprof_run(
        &dir,
        &[
            "--sample",
            "512",
            "--trace",
            "s.mptrace",
            "--",
            leak.to_str().unwrap(),
        ],
        "memprof run --sample 512",
    );
    assert!(output.status.success(), "{}", both(&output));
    let text = stderr(&output);
    let report = run_ok(
        clean_command(memprof_command())
            .args(["report", "s.mptrace"])
            .current_dir(&dir),
        "memprof report",
    );
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    // `| 4,995 | 639,424 | ` leak.c ... 'make_node' ` ...`
    let row = report
        .lines()
        .find(|l| l.contains("'make_node'"))
        .unwrap_or_else(|| panic!("{report}"));
    let numbers: Vec<String> = row
        .split('|')
        .skip(1)
        .take(2)
        .map(|n| n.trim().replace(',', ""))
        .collect();
    let (blocks, bytes) = (&numbers[0], &numbers[1]);
    let estimate: u64 = blocks.parse().unwrap();
    assert!((4000..6000).contains(&estimate), "{report}");
    assert!(text.contains("estimated from these samples"), "{text}");
    assert!(text.contains("\nallocations: ≈"), "{text}");
    let site = format!("≈{blocks}  ≈{bytes} bytes");
    assert!(text.lines().any(|l| l.trim() == site), "{site}\n{text}");
    let summary = run_ok(
        clean_command(memprof_command())
            .args(["summary", "s.mptrace"])
            .current_dir(&dir),
        "memprof summary",
    );
    let summary = String::from_utf8_lossy(&summary.stdout).into_owned();
    assert!(
        summary.lines().any(|l| l.trim() == site),
        "{site}\n{summary}"
    );
}

#[test]
fn a_script_without_a_shebang_runs_with_sh() {
    let dir = scratch("run_no_shebang");
    let script = dir.join("plain");
    std::fs::write(&script, "echo from the script\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let output = memprof_run(&dir, &["--", "./plain"], "memprof run: a script without #!");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "from the script\n",
        "{}",
        both(&output)
    );
    assert!(
        !stderr(&output).contains("Exec format error"),
        "{}",
        both(&output)
    );
}

#[test]
fn no_debug_information_said_once_per_run() {
    let dir = scratch("run_debug_info");
    // bash has no debug information, nor have the programs it runs.
    let output = memprof_run(
        &dir,
        &[
            "--",
            "bash",
            "-c",
            "/usr/bin/env true; /usr/bin/env true; ls / > /dev/null; true",
        ],
        "memprof run: a shell running system programs",
    );
    assert!(output.status.success(), "{}", both(&output));
    let text = stderr(&output);
    assert_eq!(
        text.matches("has no debug information").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("/usr/bin/bash has no debug information")
            || text.contains("/bin/bash has no debug information"),
        "{text}"
    );
}

#[test]
fn unknown_variables_and_empty_values_warn() {
    let dir = scratch("run_variables");
    let leak = leak_program(&dir);
    let output = run_ok(
        clean_command(&leak)
            .env("LD_PRELOAD", library())
            .env("MEMPROF_DEPTH", "abc")
            .env("MEMPROF_SAMPLE", "-1")
            .env("MEMPROF_OUTPUT", "")
            .env("MEMPROF_BLESS", "1")
            .env("MEMPROF_REQUIRE_TOOLS", "1")
            .env("MEMPROF_EXPECT_FP", "1"),
        "misspelt variables",
    );
    let text = stderr(&output);
    let unknown: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("not one of memprof's variables"))
        .collect();
    assert_eq!(unknown.len(), 1, "{text}");
    assert!(
        unknown[0].starts_with("memprof: MEMPROF_DEPTH, MEMPROF_SAMPLE are"),
        "{text}"
    );
    assert_eq!(
        text.matches("MEMPROF_OUTPUT=\"\" is empty").count(),
        1,
        "{text}"
    );
    for quiet in [
        "MEMPROF_BLESS",
        "MEMPROF_REQUIRE_TOOLS",
        "MEMPROF_EXPECT_FP",
    ] {
        assert!(!text.contains(quiet), "{text}");
    }
}
