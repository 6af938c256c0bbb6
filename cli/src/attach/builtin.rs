//! `memprof attach PID` for a program with memprof built in: it records already, and answers on
//! its control channel (the library's `control` module, `docs/attach.md`).
//!
//! Nothing is sent to a process before it is known to answer: its executable must hold memprof's
//! mark (the section `.memprof.control`, which `strip` keeps), and the process must catch the
//! control signal now (`SigCgt` in `/proc/PID/status`): a signal it does not handle would end
//! it. The signal is `MEMPROF_CONTROL_SIGNAL` of its environment, else 59. Then the command
//! connects to the abstract socket the process opens for it and checks with `SO_PEERCRED` that
//! the process listening there is the target itself: a socket another process bound under that
//! name is not trusted, and nothing is asked of it. The process checks in turn that the command
//! is of its own user.

#![allow(unsafe_code)]

use crate::Failure;
use std::io::{self, BufRead, Read, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// The section of memprof's mark, and what it holds (`hooks::triggers::CONTROL_MARK`).
const MARK_SECTION: &[u8] = b".memprof.control";
const MARK: &[u8] = b"memprof control 1\0";

/// The control signal when the target's environment does not name one (`config::CONTROL_SIGNAL`).
const DEFAULT_SIGNAL: i32 = 59;

/// How long the command tries to connect after the signal.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// How long the command waits for an answer (the exports symbolize, which may take long).
const ANSWER_WAIT: Duration = Duration::from_secs(300);

/// How long the command waits for the end of the trace once it asked for it.
const END_WAIT: Duration = Duration::from_secs(30);

/// What `attach` asks of the process.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The trace to write (`%p` the target's pid, `%e` its name, `%t` seconds since the epoch).
    pub(crate) trace: String,
    /// Files the process writes of its heap at the end of the attach, as `MEMPROF_OUTPUT` names
    /// them.
    pub(crate) output: Option<String>,
    /// How long to trace; `None`: until Ctrl-C (or the process ends).
    pub(crate) duration: Option<Duration>,
    /// Only pause recording (no trace).
    pub(crate) pause: bool,
    /// Only resume recording (no trace).
    pub(crate) resume: bool,
    /// The summary's short-lived bound, ns.
    pub(crate) short_lived: u64,
}

/// Whether process `pid` runs a program with memprof built in (its executable holds memprof's
/// mark). Reads `/proc/PID/exe` only; sends nothing.
pub(crate) fn has_memprof_built_in(pid: u32) -> io::Result<bool> {
    let file = std::fs::File::open(format!("/proc/{pid}/exe"))?;
    Ok(elf_section(&file, MARK_SECTION)?.is_some_and(|content| content.starts_with(MARK)))
}

/// Attaches to process `pid`, which has memprof built in: a pause or a resume; or the trace from
/// now until `duration`, Ctrl-C or the process's end, written to `options.trace` and summarized
/// on stderr as `memprof run` does, then the `--output` files written by the process.
pub(crate) fn attach(pid: u32, options: &Options) -> Result<(), Failure> {
    if !has_memprof_built_in(pid).map_err(|e| cannot_read(pid, e))? {
        return Err(Failure(
            format!("process {pid} does not have memprof built in; nothing was sent to it"),
            1,
        ));
    }
    let signal = control_signal(pid)?;
    for (asked, verb) in [(options.pause, "pause"), (options.resume, "resume")] {
        if asked {
            let answer = request(pid, signal, verb)?.finish()?;
            say!("memprof: process {pid}: {answer}");
            return Ok(());
        }
    }
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let path = PathBuf::from(expand(&options.trace, pid, now.as_secs()));
    let traced = trace(pid, signal, &path, options.duration);
    // The files, even when the trace failed: they show the heap from the process's start.
    let outputs = match &options.output {
        Some(spec) => write_outputs(pid, signal, spec),
        None => Ok(()),
    };
    traced?;
    crate::run::print_summary(&path, options.short_lived)?;
    outputs
}

/// The connection to process `pid`'s control channel, its request sent.
struct Channel(UnixStream);

impl Channel {
    /// Reads the answer to the end; the last line, which is `ok` or `error WHY` (an error).
    fn finish(self) -> Result<String, Failure> {
        let mut lines = Vec::new();
        for line in io::BufReader::new(&self.0).lines() {
            lines.push(line.map_err(|e| Failure(format!("control channel: {e}"), 1))?);
        }
        answer_of(lines)
    }
}

/// What a full answer says: every line, the last `ok…` or `error WHY`.
fn answer_of(lines: Vec<String>) -> Result<String, Failure> {
    let last = lines.last().cloned().unwrap_or_default();
    if let Some(why) = last.strip_prefix("error ") {
        let before = lines[..lines.len() - 1].join("\n");
        let sep = if before.is_empty() { "" } else { "\n" };
        return Err(Failure(
            format!("{before}{sep}the process answers: {why}"),
            1,
        ));
    }
    if !last.starts_with("ok") {
        return Err(Failure(
            "the process closed its control channel without an answer".to_owned(),
            1,
        ));
    }
    Ok(lines.join("\n"))
}

/// Sends the control signal to process `pid`, connects to the socket it opens, checks that the
/// process listening there is `pid`, and sends `line`.
fn request(pid: u32, signal: i32, line: &str) -> Result<Channel, Failure> {
    // SAFETY: `kill` takes two integers; the process was checked to catch `signal`.
    if unsafe { libc::kill(pid as libc::pid_t, signal) } != 0 {
        let error = io::Error::last_os_error();
        return Err(Failure(format!("cannot signal process {pid}: {error}"), 1));
    }
    let address = SocketAddr::from_abstract_name(socket_name(pid))
        .map_err(|e| Failure(format!("control channel: {e}"), 1))?;
    let deadline = Instant::now() + CONNECT_WAIT;
    let stream = loop {
        match UnixStream::connect_addr(&address) {
            Ok(stream) => break stream,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(error) => {
                return Err(Failure(
                    format!(
                        "process {pid} opened no control channel within {} s of the signal \
                         ({error}); is its memprof's thread stopped, or the process?",
                        CONNECT_WAIT.as_secs()
                    ),
                    1,
                ));
            }
        }
    };
    check_peer(&stream, pid)?;
    // An answer that never comes (a process stopped meanwhile) is an error, not a hang.
    stream
        .set_read_timeout(Some(ANSWER_WAIT))
        .map_err(|e| Failure(format!("control channel: {e}"), 1))?;
    (&stream)
        .write_all(format!("{line}\n").as_bytes())
        .map_err(|e| Failure(format!("control channel: {e}"), 1))?;
    Ok(Channel(stream))
}

/// The abstract socket's name for process `pid` (the library's `control::socket_name`).
pub(crate) fn socket_name(pid: u32) -> String {
    format!("memprof-control-{pid}")
}

/// An error unless the process at the other end of `stream` is `pid`.
fn check_peer(stream: &UnixStream, pid: u32) -> Result<(), Failure> {
    let (peer, uid) = peer_credentials(stream)
        .map_err(|e| Failure(format!("control channel: cannot tell who listens: {e}"), 1))?;
    if peer != pid {
        return Err(Failure(
            format!(
                "the control socket of process {pid} is held by process {peer} (user {uid}), not \
                 by the process: not trusted, nothing asked"
            ),
            1,
        ));
    }
    Ok(())
}

/// The process id and user id of the peer of `stream` (`SO_PEERCRED`).
fn peer_credentials(stream: &UnixStream) -> io::Result<(u32, u32)> {
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut length = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `credentials` is a valid `ucred` of `length` bytes for `getsockopt` to fill; the
    // descriptor is the stream's, open for the call.
    let result = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut credentials as *mut libc::ucred).cast(),
            &mut length,
        )
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((credentials.pid as u32, credentials.uid))
}

/// The control signal of process `pid`, if it catches it now; else an error that says why not.
fn control_signal(pid: u32) -> Result<i32, Failure> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).map_err(|e| cannot_read(pid, e))?;
    let named = environ
        .split(|&b| b == 0)
        .find_map(|entry| entry.strip_prefix(b"MEMPROF_CONTROL_SIGNAL="))
        .map(|raw| String::from_utf8_lossy(raw).into_owned());
    let signal = match named.as_deref().map(str::trim) {
        None => DEFAULT_SIGNAL,
        Some("off" | "0") => {
            return Err(Failure(
                format!(
                    "process {pid} has its control channel off (MEMPROF_CONTROL_SIGNAL=off in its \
                     environment); nothing was sent to it"
                ),
                1,
            ));
        }
        Some(raw) => parse_signal(raw).unwrap_or(DEFAULT_SIGNAL),
    };
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| cannot_read(pid, e))?;
    let caught = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask >> (signal - 1) & 1 == 1);
    if !caught {
        return Err(Failure(
            format!(
                "process {pid} has memprof built in but does not handle its control signal \
                 ({signal}) now: memprof has not started in it yet, or the signal is another \
                 memprof signal's; nothing was sent to it"
            ),
            1,
        ));
    }
    Ok(signal)
}

/// A signal as `MEMPROF_CONTROL_SIGNAL` names it (the library's rules).
fn parse_signal(raw: &str) -> Option<i32> {
    let name = raw.strip_prefix("SIG").unwrap_or(raw);
    let named = [
        ("HUP", libc::SIGHUP),
        ("INT", libc::SIGINT),
        ("QUIT", libc::SIGQUIT),
        ("USR1", libc::SIGUSR1),
        ("USR2", libc::SIGUSR2),
        ("TERM", libc::SIGTERM),
        ("WINCH", libc::SIGWINCH),
    ];
    if let Some(&(_, signal)) = named.iter().find(|(n, _)| *n == name) {
        return Some(signal);
    }
    let number: i32 = name.parse().ok()?;
    let allowed = named.iter().any(|&(_, s)| s == number) || (34..=64).contains(&number);
    allowed.then_some(number)
}

/// An error reading `/proc/PID/...`.
fn cannot_read(pid: u32, error: io::Error) -> Failure {
    let why = match error.kind() {
        io::ErrorKind::NotFound => "no such process".to_owned(),
        io::ErrorKind::PermissionDenied => {
            "it is another user's: only its own user (or root) may attach".to_owned()
        }
        _ => error.to_string(),
    };
    Failure(format!("process {pid}: {why}"), 1)
}

/// Set by Ctrl-C (or SIGTERM, SIGHUP) while the trace streams.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Streams process `pid`'s trace into `path` until `duration`, Ctrl-C or the process's end.
fn trace(pid: u32, signal: i32, path: &Path, duration: Option<Duration>) -> Result<(), Failure> {
    let channel = request(pid, signal, "trace")?;
    let stream = channel.0;
    let mut first = Vec::new();
    // The answer's first line: `ok`, then the trace; or `error WHY`.
    // A byte at a time: what follows the line is the trace, for the file.
    let mut byte = [0u8; 1];
    while first.len() < 4096 {
        match (&stream).read(&mut byte) {
            Ok(0) => break,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => first.push(byte[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Failure(format!("control channel: {e}"), 1)),
        }
    }
    let first = String::from_utf8_lossy(&first).into_owned();
    if first != "ok" {
        let mut rest = String::new();
        let _ = (&stream).read_to_string(&mut rest);
        let lines = std::iter::once(first)
            .chain(rest.lines().map(str::to_owned))
            .filter(|l| !l.is_empty())
            .collect();
        answer_of(lines)?;
        return Err(Failure("the process did not start its trace".to_owned(), 1));
    }
    let written = |e: io::Error| Failure(format!("{}: cannot write: {e}", path.display()), 1);
    let mut file = memprof_files::Replacement::create(path).map_err(written)?;
    INTERRUPTED.store(false, Ordering::Relaxed);
    // Ctrl-C, SIGTERM or the terminal closed: the trace is ended and kept, not cut.
    let ending = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
    let previous = ending.map(|signal| {
        // SAFETY: `on_interrupt` only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(
                signal,
                on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        }
    });
    say!(
        "memprof: tracing process {pid} into {}{}",
        path.display(),
        match duration {
            Some(d) => format!(" for {} s", d.as_secs_f64()),
            None => " until Ctrl-C".to_owned(),
        }
    );
    let started = Instant::now();
    let mut end_asked: Option<Instant> = None;
    let mut buffer = vec![0u8; 1 << 16];
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(written)?;
    let result = loop {
        let due = duration.is_some_and(|d| started.elapsed() >= d);
        if end_asked.is_none() && (due || INTERRUPTED.load(Ordering::Relaxed)) {
            // The process closes its trace, writes what is left, and closes the connection.
            let _ = (&stream).write_all(b"end\n");
            end_asked = Some(Instant::now());
        }
        if end_asked.is_some_and(|at| at.elapsed() >= END_WAIT) {
            break Err(Failure(
                format!(
                    "process {pid} did not end its trace within {} s; the trace is cut short",
                    END_WAIT.as_secs()
                ),
                1,
            ));
        }
        match (&stream).read(&mut buffer) {
            Ok(0) => break Ok(()),
            Ok(n) => file.file().write_all(&buffer[..n]).map_err(written)?,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Err(Failure(format!("control channel: {e}"), 1)),
        }
    };
    for (signal, previous) in ending.into_iter().zip(previous) {
        // SAFETY: restores the disposition `signal` returned.
        unsafe {
            libc::signal(signal, previous);
        }
    }
    file.commit().map_err(written)?;
    result
}

/// Asks process `pid` to write the files of `spec`, relative paths taken from this command's
/// directory; names each file written on stderr.
fn write_outputs(pid: u32, signal: i32, spec: &str) -> Result<(), Failure> {
    let here = std::env::current_dir().unwrap_or_default();
    let absolute: Vec<String> = spec
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| here.join(p).to_string_lossy().into_owned())
        .collect();
    let answer = request(pid, signal, &format!("outputs {}", absolute.join(",")))?.finish();
    for line in answer.as_deref().unwrap_or("").lines() {
        if let Some(path) = line.strip_prefix("wrote ") {
            say!("memprof: process {pid} wrote {path}");
        }
    }
    answer.map(drop)
}

/// `%p`, `%e` and `%t` in `pattern`, for process `pid`.
fn expand(pattern: &str, pid: u32, seconds: u64) -> String {
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|n| n.trim_end().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    pattern
        .replace("%p", &pid.to_string())
        .replace("%e", &name)
        .replace("%t", &seconds.to_string())
}

/// The ELF section named `name` of `file` (64-bit little-endian), read whole if at most 4 KiB.
fn elf_section(file: &std::fs::File, name: &[u8]) -> io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    let read = |at: u64, len: usize| -> io::Result<Vec<u8>> {
        let mut bytes = vec![0u8; len];
        file.read_exact_at(&mut bytes, at)?;
        Ok(bytes)
    };
    let number = |bytes: &[u8], at: usize, len: usize| -> u64 {
        bytes[at..at + len]
            .iter()
            .rev()
            .fold(0, |n, &b| n << 8 | u64::from(b))
    };
    let header = read(0, 64)?;
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Ok(None);
    }
    let (offset, entry) = (number(&header, 0x28, 8), number(&header, 0x3A, 2));
    let (count, names) = (number(&header, 0x3C, 2), number(&header, 0x3E, 2));
    if offset == 0 || entry < 64 || count == 0 || count > 1 << 16 || names >= count {
        return Ok(None);
    }
    let table = read(offset, (entry * count) as usize)?;
    let section = |i: u64| &table[(i * entry) as usize..((i + 1) * entry) as usize];
    let strings = section(names);
    let (strings_at, strings_len) = (number(strings, 0x18, 8), number(strings, 0x20, 8));
    if strings_len > 1 << 24 {
        return Ok(None);
    }
    let strings = read(strings_at, strings_len as usize)?;
    for i in 0..count {
        let header = section(i);
        let at = number(header, 0, 4) as usize;
        let Some(rest) = strings.get(at..) else {
            continue;
        };
        if rest.starts_with(name) && rest.get(name.len()) == Some(&0) {
            let (start, len) = (number(header, 0x18, 8), number(header, 0x20, 8));
            if len > 4096 {
                return Ok(None);
            }
            return read(start, len as usize).map(Some);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse_as_the_library_reads_them() {
        assert_eq!(parse_signal("USR1"), Some(libc::SIGUSR1));
        assert_eq!(parse_signal("SIGUSR2"), Some(libc::SIGUSR2));
        assert_eq!(parse_signal("59"), Some(59));
        assert_eq!(parse_signal("9"), None);
        assert_eq!(parse_signal("KILL"), None);
    }

    #[test]
    fn answers_end_with_ok_or_an_error() {
        assert!(answer_of(vec!["wrote /a".into(), "ok".into()]).is_ok());
        let Err(Failure(why, _)) = answer_of(vec!["error no files named".into()]) else {
            panic!("an error answer taken for a success");
        };
        assert!(why.contains("no files named"), "{why}");
        assert!(answer_of(vec![]).is_err());
    }
}
