//! `memprof run`: runs any program with a trace, then prints the trace's summary. A program with
//! memprof built in records itself; any other is run with the preloaded library
//! (`libmemprof_preload.so`, docs/preload.md) in `LD_PRELOAD`.

mod embedded;
mod follow;
pub(crate) mod traces;

use crate::common::{bar, open, report_options};
use crate::{Failure, ReportArgs, summary};
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

/// The preloaded library's file name.
const LIBRARY: &str = "libmemprof_preload.so";

/// The options of `memprof run`, each a `MEMPROF_*` variable for the program.
#[derive(clap::Args, Debug)]
pub struct RunOptions {
    /// The trace to write, each process of the run expanding `%p` (its pid), `%e` (the name it
    /// was started by: a link's own, a script's) and `%t` for itself; a plain path is written
    /// by every process of the run in turn, the last one's kept.
    #[arg(long, default_value = "memprof-%e-%p.mptrace")]
    trace: String,
    /// `MEMPROF_OUTPUT` for the program: exports written at its exit.
    #[arg(long)]
    output: Option<String>,
    /// `MEMPROF_STACK_DEPTH`: frames shown per context.
    #[arg(long)]
    depth: Option<usize>,
    /// `MEMPROF_SAMPLE_INTERVAL`: record one allocation per this many bytes on average
    /// (`bytes:N` or `N`; 0 records every one).
    #[arg(long)]
    sample: Option<String>,
    /// Start with recording paused: `SIGUSR1` (or `MEMPROF_TOGGLE_SIGNAL`) starts it.
    #[arg(long)]
    paused: bool,
    /// The preloaded library (default: `libmemprof_preload.so` beside this command, else the one
    /// the command carries, written to `~/.cache/memprof`).
    #[arg(long)]
    preload: Option<PathBuf>,
    /// The summary's short-lived bound: allocations freed within this long of their allocation,
    /// with its unit (`ns`, `us` or `µs`, `ms`, `s`).
    #[arg(long, default_value = "1ms", value_parser = crate::shortlived::parse)]
    short_lived: u64,
}

/// `memprof run`: the program with `MEMPROF_TRACE` (and the other options' variables) set, then
/// on stderr the summary of its trace and a line for the trace of each other process it started
/// (`docs/preload.md`). Exits as the program did: its exit status, or 128 and the number of the
/// signal that killed it; when it succeeded but wrote no trace, 1.
pub fn run_program(options: &RunOptions, command: &[OsString]) -> Result<(), Failure> {
    let program = Path::new(&command[0]);
    let executable = find_executable(program).ok_or_else(|| {
        Failure(
            format!("{}: no such program (nor in PATH)", program.display()),
            127,
        )
    })?;
    let kind = Kind::of(&executable)?;
    let spec = options.trace.trim();
    let pattern = if spec.starts_with("tcp://") {
        None
    } else {
        let absolute = std::env::current_dir()
            .map_err(|e| Failure(format!("cannot read the working directory: {e}"), 1))?
            .join(spec);
        let pattern =
            traces::Pattern::new(&absolute).map_err(|e| Failure(format!("--trace {e}"), 2))?;
        if let Some(fixed) = pattern.fixed() {
            memprof_files::check_replaceable(&fixed).map_err(|e| {
                Failure(
                    format!(
                        "--trace {}: {e}. memprof run reads its trace file after the program \
                         ends; to stream into a FIFO, set MEMPROF_TRACE and run the program \
                         without memprof run",
                        fixed.display()
                    ),
                    2,
                )
            })?;
        }
        Some((absolute, pattern))
    };
    let library = match kind {
        Kind::Preloaded => Some(preload_library(options.preload.as_deref())?),
        _ => None,
    };
    // Each process expands `%p`, `%e` and `%t` for itself: a child's trace never replaces the
    // program's, and the files are found again by the pattern after the run.
    let variable = match &pattern {
        Some((absolute, _)) => absolute.clone().into_os_string(),
        None => OsString::from(spec),
    };
    let setup = |child: &mut std::process::Command| {
        child.env("MEMPROF_TRACE", &variable);
        child.env("MEMPROF_RUN_PID", std::process::id().to_string());
        if let Some(output) = &options.output {
            child.env("MEMPROF_OUTPUT", output);
        }
        if let Some(depth) = options.depth {
            child.env("MEMPROF_STACK_DEPTH", depth.to_string());
        }
        if let Some(sample) = &options.sample {
            let sample = match sample.parse::<u64>() {
                Ok(0) => "0".to_owned(),
                Ok(bytes) => format!("bytes:{bytes}"),
                Err(_) => sample.clone(),
            };
            child.env("MEMPROF_SAMPLE_INTERVAL", sample);
        }
        if options.paused {
            child.env("MEMPROF_PAUSED", "1");
            if std::env::var_os("MEMPROF_TOGGLE_SIGNAL").is_none() {
                child.env("MEMPROF_TOGGLE_SIGNAL", "USR1");
            }
        }
        if let Some(library) = &library {
            let mut preload = library.clone().into_os_string();
            if let Some(others) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
                preload.push(":");
                preload.push(others);
            }
            child.env("LD_PRELOAD", preload);
        }
    };
    // Ctrl-C (or Ctrl-\) while the program runs is the program's to act on (the terminal sends
    // it to both), and the summary follows, as `time` prints its figures; while the summary is
    // made, it ends `memprof run`. One this process was started to ignore stays ignored, and so
    // the program's too.
    let program_ended = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGQUIT] {
        if !ignored(signal) {
            signal_hook::flag::register_conditional_default(signal, Arc::clone(&program_ended))
                .map_err(|e| Failure(format!("cannot handle Ctrl-C: {e}"), 1))?;
        }
    }
    let start = SystemTime::now();
    let started = start
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let mut child = std::process::Command::new(program);
    child.args(&command[1..]);
    setup(&mut child);
    let spawned = match child.spawn() {
        // A file of commands without `#!`: the shell runs it with `/bin/sh`, and so does this.
        Err(e) if e.raw_os_error() == Some(ENOEXEC) => {
            let mut shell = std::process::Command::new("/bin/sh");
            shell.arg(program).args(&command[1..]);
            setup(&mut shell);
            shell.spawn()
        }
        other => other,
    };
    let mut child = spawned.map_err(|e| {
        let status = if e.kind() == io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        Failure(format!("{}: cannot run: {e}", program.display()), status)
    })?;
    let pid = child.id();
    // The program's summary counted as its trace is written.
    let following = pattern
        .as_ref()
        .map(|(_, pattern)| follow::start(pattern.clone(), started, pid, options.short_lived));
    let status = child.wait();
    program_ended.store(true, Ordering::SeqCst);
    let followed = following.and_then(follow::Following::finish);
    let status = status.map_err(|e| Failure(format!("{}: {e}", program.display()), 1))?;
    let code = exit_code(status);
    let failed = |message: Option<String>| match (message, code) {
        (None, 0) => Ok(()),
        (Some(message), 0) => Err(Failure(message, 1)),
        (message, code) => {
            if let Some(message) = message {
                say!("memprof: {message}");
            }
            say!("memprof: {} ended: {status}", program.display());
            Err(Failure(String::new(), code))
        }
    };
    let Some((absolute, pattern)) = pattern else {
        say!("memprof: the trace was sent to {spec}; no summary here");
        return failed(None);
    };
    let found = pattern.traces_since(started);
    // The newest of the program's traces: after an `exec`, its last image's.
    let own = found.iter().rposition(|f| f.header.pid == pid);
    // A trace that cannot be read is said, and the status stays the program's.
    let message = match summarise(&found, own, options.short_lived, followed) {
        Ok(()) if own.is_some() => None,
        Ok(()) => Some(no_trace(&absolute, &pattern, start, program, pid, kind)),
        Err(Failure(why, _)) => Some(why),
    };
    failed(message)
}

/// Writes to stderr the summary of `found[own]`, the program's trace (counted as it was written
/// when `followed` is that trace, followed to its end), then a line for each other trace of
/// `found`; `short_lived`: the summary's bound, ns.
pub(crate) fn summarise(
    found: &[traces::Found],
    own: Option<usize>,
    short_lived: u64,
    followed: Option<follow::FollowedTrace>,
) -> Result<(), Failure> {
    let written = |e: io::Error| Failure(format!("cannot write: {e}"), 1);
    if let Some(index) = own {
        let path = &found[index].path;
        match followed.and_then(|followed| followed.print(path)) {
            Some(printed) => printed?,
            None => print_summary(path, short_lived)?,
        }
    }
    let mut err = io::stderr().lock();
    let others: Vec<&traces::Found> = found
        .iter()
        .enumerate()
        .filter(|&(i, _)| Some(i) != own)
        .map(|(_, f)| f)
        .collect();
    if others.is_empty() {
        return Ok(());
    }
    writeln!(
        err,
        "\nother processes this run traced (memprof summary FILE for each):"
    )
    .map_err(written)?;
    for found in others {
        let line = match open(&found.path).and_then(|t| summary::Summary::line(&t, &bar)) {
            Ok(line) => line,
            Err(Failure(why, _)) => format!("{}: {why}", found.path.display()),
        };
        writeln!(err, "  {line}").map_err(written)?;
    }
    Ok(())
}

/// Writes to stderr the summary of the trace at `path`, as `memprof run` prints its program's;
/// `short_lived`: the summary's bound, ns.
pub(crate) fn print_summary(path: &Path, short_lived: u64) -> Result<(), Failure> {
    let trace = open(path)?;
    let options = report_options(&trace, &ReportArgs::default());
    write_summary(&summary::Summary::of(
        &trace,
        &options,
        10,
        short_lived,
        &bar,
    )?)
}

/// Writes `summary` to stderr.
fn write_summary(summary: &summary::Summary) -> Result<(), Failure> {
    let written = |e: io::Error| Failure(format!("cannot write: {e}"), 1);
    summary.write(&mut io::stderr().lock()).map_err(written)
}

/// Whether this process ignores `signal` (`SigIgn` of `/proc/self/status`), as a program started
/// in the background by a shell without job control ignores Ctrl-C: its children, which inherit
/// that, must too.
fn ignored(signal: i32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}

/// Linux's `ENOEXEC`: a file the kernel cannot run.
const ENOEXEC: i32 = 8;

/// The status `memprof run` ends with for the program's: its exit status, or 128 and the signal's
/// number when a signal killed it, as a shell gives it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => (128 + signal) as u8,
        (None, None) => 1,
    }
}

/// Why the program (process `pid`) left no trace this run can show.
fn no_trace(
    absolute: &Path,
    pattern: &traces::Pattern,
    start: SystemTime,
    program: &Path,
    pid: u32,
    kind: Kind,
) -> String {
    let disabled = std::env::var("MEMPROF_ENABLED").is_ok_and(|v| v.trim() == "0");
    let empty: Vec<String> = pattern
        .headerless_since(start)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let headerless = format!(
        "{} left without a trace header: a process that ends by `_exit` (as dash does) or by a \
         signal before its trace's writer wrote anything leaves its file empty",
        empty.join(", ")
    );
    let why = match kind {
        _ if disabled => "MEMPROF_ENABLED=0 is in its environment",
        Kind::Preloaded if !empty.is_empty() => headerless.as_str(),
        Kind::BuiltIn => {
            "is it built with memprof's `trace` feature, and memprof its global allocator?"
        }
        Kind::Static => {
            "it is statically linked: no library can be preloaded into it, and it does not have \
             memprof built in"
        }
        Kind::Preloaded => {
            "the library did not start in it (a set-user-ID program ignores LD_PRELOAD), or it \
             was killed before its trace began"
        }
    };
    let earlier = pattern
        .fixed()
        .and_then(|path| Some((traces::header_of(&path)?, path)))
        .map(|(header, path)| {
            format!(
                "; {} is from an earlier run (process {}, {}), left as it was",
                path.display(),
                header.pid,
                header.executable
            )
        })
        .unwrap_or_default();
    format!(
        "no trace written by {} (process {pid}) to {}: {why}{earlier}",
        program.display(),
        absolute.display()
    )
}

/// How a program is profiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// It has memprof built in (its global allocator), and records itself.
    BuiltIn,
    /// Through the preloaded library.
    Preloaded,
    /// A statically linked program without memprof: nothing can reach it.
    Static,
}

impl Kind {
    /// How the program in `executable` is profiled: a name only memprof's configuration reader
    /// holds tells that memprof is built in; an ELF file without an interpreter is statically
    /// linked. A script (`#!`) runs its interpreter, which the library is preloaded into.
    fn of(executable: &Path) -> Result<Kind, Failure> {
        let fail = |e: io::Error| Failure(format!("{}: cannot read: {e}", executable.display()), 1);
        let mut file = std::fs::File::open(executable).map_err(fail)?;
        // Read a piece at a time (a program with its debug information may be gigabytes), each
        // piece after the last bytes of the one before, where the name may have begun.
        const MARKER: &[u8] = b"MEMPROF_TRACE_MIN_COUNT";
        let finder = memchr::memmem::Finder::new(MARKER);
        let mut window = vec![0u8; (1 << 20) + MARKER.len()];
        let (mut kept, mut first) = (0, None);
        loop {
            let read = io::Read::read(&mut file, &mut window[kept..]).map_err(fail)?;
            if read == 0 {
                break;
            }
            let filled = kept + read;
            if first.is_none() {
                // The ELF header and program headers are at the start.
                first = Some(window[..filled].to_vec());
            }
            if finder.find(&window[..filled]).is_some() {
                return Ok(Kind::BuiltIn);
            }
            kept = filled.min(MARKER.len() - 1);
            window.copy_within(filled - kept..filled, 0);
        }
        if first.as_deref().is_some_and(is_static_elf) {
            return Ok(Kind::Static);
        }
        Ok(Kind::Preloaded)
    }
}

/// Whether the program in `executable` has memprof built in: it holds a name only memprof's
/// configuration reader holds (`memprof attach` asks it of a running process's program too).
pub(crate) fn has_memprof_marker(executable: &Path) -> io::Result<bool> {
    match Kind::of(executable) {
        Ok(kind) => Ok(kind == Kind::BuiltIn),
        Err(Failure(why, _)) => Err(io::Error::other(why)),
    }
}

/// Whether `bytes` is a 64-bit little-endian ELF executable with no `PT_INTERP` program header.
fn is_static_elf(bytes: &[u8]) -> bool {
    let field = |at: usize, len: usize| -> Option<u64> {
        let raw = bytes.get(at..at + len)?;
        Some(raw.iter().rev().fold(0, |n, &b| n << 8 | u64::from(b)))
    };
    // Only the 64-bit little-endian layout is read; anything else is left to the loader.
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (field(32, 8), field(54, 2), field(56, 2))
    else {
        return false;
    };
    const PT_INTERP: u64 = 3;
    let mut types = (0..phnum).map(|i| field((phoff + i * phentsize) as usize, 4));
    types.all(|t| t.is_some_and(|t| t != PT_INTERP))
}

/// The file `program` runs: itself when it names a path, else the first executable file of that
/// name in `PATH`, as the shell finds it.
fn find_executable(program: &Path) -> Option<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return program.is_file().then(|| program.to_owned());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            use std::os::unix::fs::PermissionsExt;
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The preloaded library: `given`, or the one beside this command (or in `../lib` from it), or
/// the one it carries, written to the user's cache ([`embedded`]).
pub(crate) fn preload_library(given: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(given) = given {
        return match given.canonicalize() {
            Ok(path) if path.is_file() => Ok(path),
            Ok(_) => Err(Failure(format!("{}: not a file", given.display()), 2)),
            Err(e) => Err(Failure(format!("{}: {e}", given.display()), 2)),
        };
    }
    let exe = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .map_err(|e| Failure(format!("cannot find this command's own file: {e}"), 1))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [dir.join(LIBRARY), dir.join("../lib").join(LIBRARY)];
    if let Some(beside) = candidates.iter().find(|c| c.is_file()) {
        return Ok(beside.canonicalize().unwrap_or_else(|_| beside.clone()));
    }
    match embedded::library() {
        Some(Ok(path)) => Ok(path),
        Some(Err(e)) => Err(Failure(
            format!("cannot write the preloaded library this command carries: {e}"),
            1,
        )),
        None => Err(Failure(
            format!(
                "{LIBRARY} is not beside {} (nor in ../lib), and this build carries none (built \
                 without the `embedded-preload` feature): build it with `cargo build --release \
                 -p memprof-preload` and copy it there, or give --preload PATH",
                exe.display()
            ),
            1,
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn static_and_dynamic_executables_are_told_apart() {
        let dynamic = std::fs::read("/bin/sh").unwrap();
        assert!(!super::is_static_elf(&dynamic));
        assert!(!super::is_static_elf(b"#!/bin/sh\n"));
    }
}
