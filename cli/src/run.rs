//! `memprof run`: runs any program with a trace, then prints the trace's summary. A program with
//! memprof built in records itself; any other is run with the preloaded library
//! (`libmemprof_preload.so`, docs/preload.md) in `LD_PRELOAD`.

use crate::common::{bar, open, report_options};
use crate::{Failure, ReportArgs, summary};
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The preloaded library's file name.
const LIBRARY: &str = "libmemprof_preload.so";

/// The options of `memprof run`, each a `MEMPROF_*` variable for the program.
#[derive(clap::Args, Debug)]
pub struct RunOptions {
    /// The trace to write (`%p`: the program's pid; `%e`: its name as given, a link's own).
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
    /// The preloaded library (default: `libmemprof_preload.so` beside this command).
    #[arg(long)]
    preload: Option<PathBuf>,
}

/// `memprof run`: the program with `MEMPROF_TRACE` (and the other options' variables) set, then
/// the summary of its trace. Fails with the program's status when it failed, after the summary.
pub fn run_program(options: &RunOptions, command: &[OsString]) -> Result<(), Failure> {
    let trace = &options.trace;
    if trace.contains("%t") {
        return Err(Failure(
            "--trace: %t cannot be found again after the run; use %p or a plain path".into(),
            2,
        ));
    }
    let program = Path::new(&command[0]);
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let executable = find_executable(program).ok_or_else(|| {
        Failure(
            format!("{}: no such program (nor in PATH)", program.display()),
            1,
        )
    })?;
    let kind = Kind::of(&executable)?;
    // `%e` is the program's name as given here, expanded before the run: the program's own `%e`
    // would be the name of the file its executable is (`./link` names its target's), which this
    // command could not know.
    let trace = expand_name(trace, &name);
    let mut child = std::process::Command::new(program);
    child.args(&command[1..]).env("MEMPROF_TRACE", &trace);
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
    if kind == Kind::Preloaded {
        let library = preload_library(options.preload.as_deref())?;
        let mut preload = library.into_os_string();
        if let Some(others) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
            preload.push(":");
            preload.push(others);
        }
        child.env("LD_PRELOAD", preload);
    }
    let mut child = child
        .spawn()
        .map_err(|e| Failure(format!("{}: cannot run: {e}", program.display()), 1))?;
    let pid = child.id();
    let status = child
        .wait()
        .map_err(|e| Failure(format!("{}: {e}", program.display()), 1))?;
    let path = PathBuf::from(memprof::export::expand_path(
        &trace,
        pid,
        Duration::ZERO,
        &name,
    ));
    if !path.exists() {
        let why = match kind {
            Kind::BuiltIn => {
                "is it built with memprof's `trace` feature, and memprof its global allocator?"
            }
            Kind::Static => {
                "it is statically linked: no library can be preloaded into it, and it does not \
                 have memprof built in"
            }
            Kind::Preloaded => "did it start (MEMPROF_ENABLED=0 in its environment)?",
        };
        return Err(Failure(
            format!(
                "{}: no trace written by {} ({status}); {why}",
                path.display(),
                program.display()
            ),
            1,
        ));
    }
    let trace = open(&path)?;
    let options = report_options(&trace, &ReportArgs::default());
    let summary = summary::Summary::of(&trace, &options, 10, &bar)?;
    let mut out = io::stdout().lock();
    summary
        .write(&mut out)
        .map_err(|e| Failure(format!("cannot write: {e}"), 1))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure(
            format!("{} failed: {status}", program.display()),
            1,
        ))
    }
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

/// The preloaded library: `given`, or the one beside this command (or in `../lib` from it).
fn preload_library(given: Option<&Path>) -> Result<PathBuf, Failure> {
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
    candidates
        .iter()
        .find(|c| c.is_file())
        .map(|c| c.canonicalize().unwrap_or_else(|_| c.clone()))
        .ok_or_else(|| {
            Failure(
                format!(
                    "{LIBRARY} is not beside {} (nor in ../lib): build it with `cargo build \
                     --release -p memprof-preload` and copy it there, or give --preload PATH",
                    exe.display()
                ),
                1,
            )
        })
}

/// `pattern` with `%e` replaced by `name` (its own `%` doubled), every other placeholder kept.
fn expand_name(pattern: &str, name: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + name.len());
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '%' {
            continue;
        }
        match chars.peek() {
            Some('e') => {
                out.pop();
                out.push_str(&name.replace('%', "%%"));
                chars.next();
            }
            Some(&next) => {
                out.push(next);
                chars.next();
            }
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_name_is_expanded() {
        assert_eq!(
            super::expand_name("m-%e-%p-%%e-%x.%", "a%pp"),
            "m-a%%pp-%p-%%e-%x.%"
        );
    }

    #[test]
    fn static_and_dynamic_executables_are_told_apart() {
        let dynamic = std::fs::read("/bin/sh").unwrap();
        assert!(!super::is_static_elf(&dynamic));
        assert!(!super::is_static_elf(b"#!/bin/sh\n"));
    }
}
