//! Shared by the `memprof attach` tests: programs compiled at test time, a running target whose
//! output is read line by line, the command run against it, and the TSV file it has the library
//! write at the detach.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
pub use std::process::Command;
use std::process::{Child, ChildStdin, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

/// A new directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("attach")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The `memprof` command under test, alone in a directory of its own (so the library it loads is
/// the one it carries, built from this tree, never a stale one beside it), with its `HOME`.
pub fn memprof(dir: &Path) -> Command {
    let bin = dir.join("bin");
    let home = dir.join("home");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let copy = bin.join("memprof");
    if !copy.exists() {
        std::fs::copy(env!("CARGO_BIN_EXE_memprof"), &copy).unwrap();
    }
    let mut command = Command::new(copy);
    command.env("HOME", home).current_dir(dir);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("MEMPROF_") {
            command.env_remove(key);
        }
    }
    command
}

/// The source `name` under `cli/tests/programs/`.
pub fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(name)
}

/// The 1-based line of `name` holding `/* marker */`.
pub fn line_of(name: &str, marker: &str) -> u32 {
    let text = std::fs::read_to_string(source(name)).unwrap();
    let marker = format!("/* {marker} */");
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(&marker))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(lines.len(), 1, "{marker} in {name}");
    lines[0] as u32
}

/// Compiles `sources` into `dir/output` with `compiler` (`cc`, `c++`) and `args`: `-O2`, no frame
/// pointers, with line tables. A missing compiler fails the test.
pub fn compile(
    compiler: &str,
    dir: &Path,
    sources: &[&str],
    output: &str,
    args: &[&str],
) -> PathBuf {
    let out = dir.join(output);
    let mut command = Command::new(compiler);
    command.arg("-o").arg(&out);
    for s in sources {
        command.arg(source(s));
    }
    command
        .args(["-O2", "-g", "-fomit-frame-pointer"])
        .args(args);
    let result = command
        .output()
        .unwrap_or_else(|e| panic!("{compiler} is required by these tests: {e}"));
    assert!(
        result.status.success(),
        "{command:?}:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// A running target: its stdin (a pipe), its stdout read line by line on a thread.
pub struct Target {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    pub seen: Vec<String>,
}

impl Target {
    /// Starts `command` and waits for its line `ready`.
    pub fn start(mut command: Command, ready: &str) -> Target {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut target = Target {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        };
        target.expect(ready);
        target
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (at most 60 s) for the line `line`.
    pub fn expect(&mut self, line: &str) {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(got) => {
                    self.seen.push(got.clone());
                    if got == line {
                        return;
                    }
                }
                Err(_) => panic!("no line {line:?} from the target; it said {:?}", self.seen),
            }
        }
    }

    /// Sends `signal` (`-USR1`) to the target.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Writes a byte to its stdin (wakes a `read`).
    pub fn poke(&mut self) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"x").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes its stdin and waits for its end (at most 60 s); returns every line it printed and
    /// its stderr.
    pub fn finish(mut self) -> (Vec<String>, String) {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "the target ended with {status}: {:?}",
                    self.seen
                );
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the target did not end: {:?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut err, &mut stderr);
        }
        (std::mem::take(&mut self.seen), stderr)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ctrl-C to process `pid` (the command, as a terminal sends it).
pub fn interrupt(pid: u32) {
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -INT {pid}");
}

/// Runs `command` (at most 120 s); its output.
pub fn run(command: &mut Command) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = child.id();
    let (send, done) = channel();
    std::thread::spawn(move || {
        let _ = send.send(child.wait_with_output());
    });
    match done.recv_timeout(Duration::from_secs(120)) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &id.to_string()]).status();
            panic!("{command:?} did not end within 120 s");
        }
    }
}

/// A group of a TSV log: count, bytes, frames.
#[derive(Debug)]
pub struct Group {
    pub count: u64,
    pub bytes: u64,
    pub frames: Vec<String>,
}

/// The TSV log (`MEMPROF_OUTPUT=x.tsv`) at `path`.
pub fn tsv(path: &Path) -> Vec<Group> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let n: usize = lines.next().unwrap().trim().parse().unwrap();
    let groups: Vec<Group> = lines
        .map(|l| {
            let mut fields = l.split('\t');
            Group {
                count: fields.next().unwrap().parse().unwrap(),
                bytes: fields.next().unwrap().parse().unwrap(),
                frames: fields.map(str::to_owned).collect(),
            }
        })
        .collect();
    assert_eq!(groups.len(), n, "{text}");
    groups
}

/// The groups of `log` whose first frame holds `needle`.
pub fn at<'a>(log: &'a [Group], needle: &str) -> Vec<&'a Group> {
    log.iter()
        .filter(|g| g.frames.first().is_some_and(|f| f.contains(needle)))
        .collect()
}

/// A log shown for a failure's message.
pub fn show(log: &[Group]) -> String {
    log.iter()
        .map(|g| format!("{}\t{}\t{}\n", g.count, g.bytes, g.frames.join("\t")))
        .collect()
}

/// Both outputs of a command, for a failure's message.
pub fn both(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `memprof attach ARGS PID` (`command` from [`memprof`]), calls `during` with the target
/// (with the command's pid and the lines it said so far) once the command says it attached, then waits for the command's end (at most 120 s): its
/// status, stdout and stderr.
pub fn attach_during(
    mut command: Command,
    args: &[&str],
    target: &mut Target,
    during: impl FnOnce(&mut Target, u32, &[String]),
) -> (std::process::ExitStatus, String) {
    let mut child = command
        .arg("attach")
        .args(args)
        .arg(target.pid().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (send, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let mut said = Vec::new();
    loop {
        match lines.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => {
                let attached = line.starts_with("memprof: attached to process");
                said.push(line);
                if attached {
                    break;
                }
            }
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().unwrap();
                return (status, said.join("\n"));
            }
        }
    }
    during(target, child.id(), &said);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("memprof attach did not end: {said:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(5)) {
        said.push(line);
    }
    (status, said.join("\n"))
}
