//! Shared by the preload library's tests: where the library and the `memprof` command are, C and
//! C++ programs compiled at test time, running a program under the library with a deadline, and
//! reading the TSV log (`log_allocations`) the library writes at exit.
//!
//! A missing compiler or tool fails the test: nothing here skips.

#![allow(dead_code)]

#[path = "../../../tests/common/mod.rs"]
pub mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// This test executable's `target/<profile>/` (it is `target/<profile>/deps/name-hash`).
fn test_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    exe.parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is not under target/<profile>/deps", exe.display()))
        .to_owned()
}

/// Where the library and the command under test are: `target/preload-tests/<profile>/`.
pub fn profile_dir() -> PathBuf {
    let tests = test_profile_dir();
    tests
        .parent()
        .unwrap()
        .join("preload-tests")
        .join(tests.file_name().unwrap())
}

/// Builds `libmemprof_preload.so` and the `memprof` command (the tests' profile) into a target
/// directory of their own, `target/preload-tests/`, once per test process: cargo does not build a
/// `cdylib`-only library for its own package's integration tests, so without this the tests
/// would run a stale library (or none). A directory of their own, because a build here selects
/// other packages and features than the run that built the tests: into the same directory, it
/// would replace the `memprof` command other packages' tests are running at the same time. After
/// the first, the build is a no-op that takes cargo's lock briefly. A failing build fails the
/// test.
fn build_once() {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let profile_dir = profile_dir();
        let profile = profile_dir
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let target = profile_dir.parent().unwrap();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let mut command = Command::new(cargo);
        command
            .args([
                "build",
                "--quiet",
                "-p",
                "memprof-preload",
                "-p",
                "memprof-cli",
            ])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"))
            .arg("--target-dir")
            .arg(target);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                command.arg("--release");
            }
            other => {
                command.args(["--profile", other]);
            }
        }
        let output = command
            .output()
            .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
        assert!(
            output.status.success(),
            "{command:?} failed: the tests need libmemprof_preload.so and memprof built \
             (`cargo build -p memprof-preload -p memprof-cli --target-dir {}`):\n{}",
            target.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

/// `libmemprof_preload.so`, built (or found up to date) by [`build_once`].
pub fn library() -> PathBuf {
    build_once();
    let library = profile_dir().join("libmemprof_preload.so");
    assert!(
        library.is_file(),
        "{} is missing after the build",
        library.display()
    );
    library
}

/// The `memprof` command (package memprof-cli), built (or found up to date) by [`build_once`].
pub fn memprof_command() -> PathBuf {
    build_once();
    let command = profile_dir().join("memprof");
    assert!(
        command.is_file(),
        "{} is missing after the build",
        command.display()
    );
    command
}

/// A fresh scratch directory for one test, under cargo's temporary directory for tests.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("preload-tests")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The path of a source under `tests/programs/`.
pub fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(name)
}

/// The 1-based line of `source` (under `tests/programs/`) holding the comment `/* marker */`,
/// which must be there exactly once.
pub fn line_of(name: &str, marker: &str) -> u32 {
    let text = std::fs::read_to_string(source(name)).unwrap();
    let marker = &format!("/* {marker} */");
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(marker))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(lines.len(), 1, "{marker} in {name}: {lines:?}");
    lines[0] as u32
}

/// Compiles `sources` (under `tests/programs/`) into `dir/output` with `cc` (or `c++` when a
/// source is C++), with `args` after the sources. A missing compiler fails the test.
pub fn compile(dir: &Path, sources: &[&str], output: &str, args: &[&str]) -> PathBuf {
    let cxx = sources
        .iter()
        .any(|s| s.ends_with(".cpp") || s.ends_with(".cc"));
    let compiler = if cxx { "c++" } else { "cc" };
    let out = dir.join(output);
    let mut command = Command::new(compiler);
    command.arg("-o").arg(&out);
    for s in sources {
        command.arg(source(s));
    }
    command.args(args);
    let result = command.output().unwrap_or_else(|e| {
        panic!("{compiler} is required by these tests and cannot be run: {e} (apt-get install -y build-essential)")
    });
    assert!(
        result.status.success(),
        "{command:?} failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// Checks that a tool runs (`tool args`), failing the test with how to install it otherwise.
pub fn require_tool(tool: &str, args: &[&str], install: &str) {
    match Command::new(tool).args(args).output() {
        Ok(_) => {}
        Err(e) => panic!("{tool} is required by this test and cannot be run: {e} ({install})"),
    }
}

/// A command for `program` with every `MEMPROF_*` and `LD_PRELOAD` variable of this process
/// removed, so that only what the test sets reaches it.
pub fn clean_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("MEMPROF_") || key == "LD_PRELOAD" || key.starts_with("LD_DEBUG") {
            command.env_remove(&key);
        }
    }
    command
}

/// A command for `program` with the library preloaded and the TSV log at exit showing every group.
pub fn preloaded(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = clean_command(program);
    command
        .env("LD_PRELOAD", library())
        .env("MEMPROF_PRINT_AT_EXIT", "1")
        .env("MEMPROF_MIN_BYTES", "0");
    command
}

/// Runs `command` with piped output (stdin closed) and waits for it at most `deadline`: a child
/// still running then is killed and fails the test as `what` hung.
pub fn run_within(command: &mut Command, deadline: Duration, what: &str) -> Output {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what} ({command:?}): {e}"));
    common::wait_within(child, deadline, what)
}

/// Runs `command` within two minutes and asserts it exited with status 0; returns its output.
pub fn run_ok(command: &mut Command, what: &str) -> Output {
    let output = run_within(command, Duration::from_secs(120), what);
    assert!(
        output.status.success(),
        "{what} failed: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// One line of the TSV log: a group of live blocks with one context.
#[derive(Clone, Debug)]
pub struct Group {
    pub count: u64,
    pub bytes: u64,
    pub frames: Vec<String>,
}

/// The TSV logs (`log_allocations`: the number of groups, then `count\tbytes\tframe...` per
/// group) found in `text`, in order: one per process that wrote one there.
pub fn tsv_logs(text: &str) -> Vec<Vec<Group>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut logs = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Ok(n) = lines[i].trim().parse::<usize>()
            && i + n < lines.len() + 1
            && lines[i + 1..i + 1 + n]
                .iter()
                .all(|l| parse_group(l).is_some())
        {
            logs.push(
                lines[i + 1..i + 1 + n]
                    .iter()
                    .map(|l| parse_group(l).unwrap())
                    .collect(),
            );
            i += n + 1;
        } else {
            i += 1;
        }
    }
    logs
}

fn parse_group(line: &str) -> Option<Group> {
    let mut fields = line.split('\t');
    let count = fields.next()?.parse().ok()?;
    let bytes = fields.next()?.parse().ok()?;
    Some(Group {
        count,
        bytes,
        frames: fields.map(str::to_owned).collect(),
    })
}

/// The single TSV log in a process's stderr.
pub fn tsv_log(stderr: &[u8]) -> Vec<Group> {
    let text = String::from_utf8_lossy(stderr);
    let mut logs = tsv_logs(&text);
    assert_eq!(logs.len(), 1, "expected one TSV log in:\n{text}");
    logs.pop().unwrap()
}

/// The groups whose first frame contains `needle`.
pub fn groups_at<'a>(log: &'a [Group], needle: &str) -> Vec<&'a Group> {
    log.iter()
        .filter(|g| g.frames.first().is_some_and(|f| f.contains(needle)))
        .collect()
}

/// Total live blocks and bytes of a log.
pub fn totals(log: &[Group]) -> (u64, u64) {
    log.iter()
        .fold((0, 0), |(c, b), g| (c + g.count, b + g.bytes))
}

/// Shows a log for failure messages.
pub fn show(log: &[Group]) -> String {
    log.iter()
        .map(|g| format!("{}\t{}\t{}\n", g.count, g.bytes, g.frames.join("\t")))
        .collect()
}

/// Text of both streams of an output, for failure messages.
pub fn both(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
