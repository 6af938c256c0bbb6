//! `memprof attach PID` on a program with
//! memprof built in: the example `attach_target` (`cli/examples/attach_target.rs`).
//! The target leaks at a known site when told on its stdin; the command traces it for two
//! seconds, asks for a report, pauses and resumes it; a socket another process planted under the
//! target's name is not trusted, another user's connection is not answered, a program without
//! memprof is told apart and gets no signal, and a stripped copy of the target is still found.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::Duration;

/// Blocks and bytes the target (`cli/examples/attach_target.rs`) leaks at `leak_here`.
const LEAKED: usize = 37;
const LEAKED_SIZE: usize = 4321;

/// The target: the example `attach_target`, which `cargo test` builds beside the tests
/// (`target/PROFILE/examples/`).
fn the_target() -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let program = deps
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/attach_target");
    assert!(
        program.exists(),
        "{} is not built: `cargo test -p memprof-cli` and nextest build it; with `--test` alone, \
         `cargo build -p memprof-cli --example attach_target` first",
        program.display()
    );
    program
}

/// A target started from `program` (this test binary, or a copy) with `env` more.
struct Target {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Target {
    fn start(program: &Path, env: &[(&str, &str)]) -> Target {
        let mut child = Command::new(program)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut target = Target {
            child,
            stdin,
            stdout,
        };
        target.wait_for("ready");
        target
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_for(&mut self, word: &str) {
        let mut line = String::new();
        loop {
            line.clear();
            assert_ne!(self.stdout.read_line(&mut line).unwrap(), 0, "target ended");
            if line.trim_end() == word {
                return;
            }
        }
    }

    /// Has the target leak at a site, and waits until it did.
    fn ask(&mut self, what: &str) {
        writeln!(self.stdin, "{what}").unwrap();
        self.wait_for("done");
    }

    /// Whether the target still runs.
    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn memprof(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_memprof"));
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn finish(child: Child, what: &str) -> (Output, String) {
    let output = common::wait_within(child, Duration::from_secs(120), what);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output, text)
}

/// The head lines (`COUNT  BYTES bytes`, `BYTES  bytes in COUNT blocks`) of the summary's groups
/// whose frames name `function`.
fn groups_naming(summary: &str, function: &str) -> Vec<String> {
    let mut head = "";
    let mut heads = Vec::new();
    for line in summary.lines() {
        if line.contains(" in '") {
            if line.contains(&format!("::{function}'")) {
                heads.push(head.trim().to_owned());
            }
        } else {
            head = line;
        }
    }
    heads
}

/// The lines of `text` that name `function`.
fn lines_naming<'a>(text: &'a str, function: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(function)).collect()
}

#[test]
fn trace_and_report_name_the_leak() {
    let dir = scratch("attach_builtin_trace");
    let mut target = Target::start(&the_target(), &[]);
    let pid = target.pid().to_string();
    let trace = dir.join("attached-%p.mptrace");
    let report = dir.join("heap-%p.md");
    let mut attach = memprof(&[
        "attach",
        &pid,
        "--duration",
        "2",
        "--trace",
        trace.to_str().unwrap(),
        "--output",
        report.to_str().unwrap(),
    ])
    .spawn()
    .unwrap();
    // Once the trace runs (the command says so), the target leaks.
    let mut stderr = BufReader::new(attach.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(first.contains("tracing process"), "{first}");
    target.ask("leak");
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let (output, _) = finish(attach, "memprof attach");
    assert!(output.status.success(), "{first}{rest}");
    assert!(target.alive(), "the target ended");

    // The summary printed as `memprof run` prints it: the leak's site, with its count and bytes,
    // among the most allocations and the largest at the peak.
    let total = (LEAKED * LEAKED_SIZE).to_string();
    let heads = groups_naming(&rest, "leak_here");
    assert!(
        heads.contains(&format!("{LEAKED}  {total} bytes")),
        "{heads:?}\n{rest}"
    );
    assert!(
        heads.contains(&format!("{total}  bytes in {LEAKED} blocks")),
        "{heads:?}\n{rest}"
    );

    // The trace file: `memprof report` at its end names the site with the exact count and bytes.
    let trace = dir.join(format!("attached-{pid}.mptrace"));
    let output = memprof(&["report", trace.to_str().unwrap(), "--format", "tsv"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows = lines_naming(&text, "leak_here");
    assert!(!rows.is_empty(), "{text}");
    assert!(
        rows.iter().any(|row| {
            let fields: Vec<&str> = row.split('\t').collect();
            fields.contains(&total.as_str()) && fields.contains(&LEAKED.to_string().as_str())
        }),
        "{rows:?}"
    );

    // The report the target wrote itself, of its whole heap.
    let report = std::fs::read_to_string(dir.join(format!("heap-{pid}.md"))).unwrap();
    let rows = lines_naming(&report, "leak_here");
    assert!(!rows.is_empty(), "{report}");
    assert!(rest.contains(&format!("heap-{pid}.md")), "{rest}");
}

/// SIGTERM or a closed terminal (SIGHUP) ends the trace as Ctrl-C does: kept whole, not cut.
#[test]
fn a_terminated_command_keeps_the_trace() {
    let dir = scratch("attach_builtin_term");
    // One trace per process: a process each.
    for signal in [libc::SIGTERM, libc::SIGHUP] {
        let mut target = Target::start(&the_target(), &[]);
        let pid = target.pid().to_string();
        let trace = dir.join(format!("t-{signal}.mptrace"));
        let mut attach = memprof(&["attach", &pid, "--trace", trace.to_str().unwrap()])
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(attach.stderr.take().unwrap());
        let mut first = String::new();
        stderr.read_line(&mut first).unwrap();
        assert!(first.contains("tracing process"), "{first}");
        target.ask("leak");
        // SAFETY: a signal to the child this test started and has not waited for.
        assert_eq!(unsafe { libc::kill(attach.id() as libc::pid_t, signal) }, 0);
        let mut rest = String::new();
        stderr.read_to_string(&mut rest).unwrap();
        let (output, _) = finish(attach, "memprof attach");
        assert!(output.status.success(), "signal {signal}: {first}{rest}");
        let (output, text) = finish(
            memprof(&["summary", trace.to_str().unwrap()])
                .spawn()
                .unwrap(),
            "summary",
        );
        assert!(output.status.success(), "{text}");
        assert!(text.contains("closed normally"), "signal {signal}: {text}");
        assert!(!groups_naming(&text, "leak_here").is_empty(), "{text}");
        assert!(target.alive());
    }
}

#[test]
fn pause_and_resume() {
    let dir = scratch("attach_builtin_pause");
    let mut target = Target::start(&the_target(), &[]);
    let pid = target.pid().to_string();
    let (output, text) = finish(
        memprof(&["attach", &pid, "--pause"]).spawn().unwrap(),
        "pause",
    );
    assert!(output.status.success(), "{text}");
    assert!(text.contains("paused, was recording"), "{text}");
    target.ask("paused");
    let (output, text) = finish(
        memprof(&["attach", &pid, "--resume"]).spawn().unwrap(),
        "resume",
    );
    assert!(output.status.success(), "{text}");
    assert!(text.contains("resumed, was paused"), "{text}");
    target.ask("leak");
    let report = dir.join("heap.tsv");
    let (output, text) = finish(
        memprof(&[
            "attach",
            &pid,
            "--duration",
            "0",
            "--trace",
            dir.join("t.mptrace").to_str().unwrap(),
            "--output",
            report.to_str().unwrap(),
        ])
        .spawn()
        .unwrap(),
        "output",
    );
    assert!(output.status.success(), "{text}");
    let report = std::fs::read_to_string(&report).unwrap();
    // Recorded after the resume; nothing of what was allocated while paused.
    assert!(!lines_naming(&report, "leak_here").is_empty(), "{report}");
    assert!(
        lines_naming(&report, "leak_while_paused").is_empty(),
        "{report}"
    );
    assert!(target.alive());
}

#[test]
fn a_planted_socket_is_not_trusted() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let mut target = Target::start(&the_target(), &[]);
    let pid = target.pid();
    // This process takes the target's name first: the target cannot bind it, and the command
    // connects here.
    let name = SocketAddr::from_abstract_name(format!("memprof-control-{pid}")).unwrap();
    let planted = UnixListener::bind_addr(&name).unwrap();
    let (output, text) = finish(
        memprof(&["attach", &pid.to_string(), "--pause"])
            .spawn()
            .unwrap(),
        "attach to a planted socket",
    );
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("not trusted"), "{text}");
    assert!(
        text.contains(&format!("held by process {}", std::process::id())),
        "{text}"
    );
    // The command asked nothing of it.
    let (mut connection, _) = planted.accept().unwrap();
    connection
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut asked = Vec::new();
    connection.read_to_end(&mut asked).unwrap();
    assert!(asked.is_empty(), "{:?}", String::from_utf8_lossy(&asked));
    assert!(target.alive());
}

/// A connection of another user (`nobody`) to the target's channel is closed unanswered, and its
/// request is not carried out. Needs root to become another user.
#[test]
fn another_users_connection_is_refused() {
    // SAFETY: `geteuid` takes nothing and cannot fail.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test becomes another user, which needs root"
    );
    let mut target = Target::start(&the_target(), &[]);
    let pid = target.pid();
    let name = format!("memprof-control-{pid}");
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (i, b) in name.bytes().enumerate() {
        address.sun_path[i + 1] = b as libc::c_char;
    }
    let length = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    // SAFETY: signals the target, which handles the control signal (59).
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, 59) }, 0);
    // SAFETY: the child makes system calls only (no allocation, no lock) and ends with `_exit`.
    let child = unsafe { libc::fork() };
    if child == 0 {
        unsafe {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(3);
            }
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            let mut tries = 0;
            while libc::connect(fd, (&address as *const libc::sockaddr_un).cast(), length) != 0 {
                tries += 1;
                if tries > 500 {
                    libc::_exit(4);
                }
                libc::usleep(10_000);
            }
            libc::write(fd, b"pause\n".as_ptr().cast(), 6);
            let mut answer = [0u8; 64];
            let n = libc::read(fd, answer.as_mut_ptr().cast(), answer.len());
            // Closed unread: an end of file, or a reset for the request left unread.
            let closed = n == 0 || (n < 0 && *libc::__errno_location() == libc::ECONNRESET);
            libc::_exit(if closed {
                0
            } else if n > 0 {
                1
            } else {
                5
            });
        }
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    unsafe { libc::waitpid(child, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "{status}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "1: answered; 3: no setuid; 4: no connect; 5: a read error"
    );
    // The channel still waits for its own user, and recording was never paused.
    let (output, text) = finish(
        memprof(&["attach", &pid.to_string(), "--pause"])
            .spawn()
            .unwrap(),
        "pause",
    );
    assert!(output.status.success(), "{text}");
    assert!(text.contains("paused, was recording"), "{text}");
    assert!(target.alive());
}

#[test]
fn a_program_without_memprof_gets_no_signal() {
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let (output, text) = finish(
        memprof(&["attach", &sleeper.id().to_string(), "--pause"])
            .spawn()
            .unwrap(),
        "attach to sleep",
    );
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("does not have memprof built in"), "{text}");
    // Signal 59 would have ended it.
    std::thread::sleep(Duration::from_millis(200));
    assert!(sleeper.try_wait().unwrap().is_none(), "sleep was signalled");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}

#[test]
fn a_closed_channel_gets_no_signal() {
    let mut target = Target::start(&the_target(), &[("MEMPROF_CONTROL_SIGNAL", "off")]);
    let (output, text) = finish(
        memprof(&["attach", &target.pid().to_string(), "--pause"])
            .spawn()
            .unwrap(),
        "attach to a closed channel",
    );
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("control channel off"), "{text}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(target.alive(), "the target was signalled");
}

#[test]
fn a_stripped_program_is_found() {
    let dir = scratch("attach_builtin_strip");
    let stripped = dir.join("stripped");
    let status = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(the_target())
        .status()
        .unwrap();
    assert!(status.success());
    let symbols = Command::new("nm").arg(&stripped).output().unwrap();
    assert!(
        String::from_utf8_lossy(&symbols.stderr).contains("no symbols"),
        "not stripped"
    );
    let mut target = Target::start(&stripped, &[]);
    let (output, text) = finish(
        memprof(&["attach", &target.pid().to_string(), "--pause"])
            .spawn()
            .unwrap(),
        "attach to the stripped program",
    );
    assert!(output.status.success(), "{text}");
    assert!(text.contains("paused, was recording"), "{text}");
    assert!(target.alive());
}
