//! `memprof attach PID`: profiles a running, dynamically linked process from now on, without a
//! restart. The process is stopped briefly while gdb has it load a copy of the preloaded library
//! (`dlopen`) and call its `memprof_attach` with the command's settings (`preload/src/attach.rs`:
//! the library redirects every module's entries of the allocation functions to its own); at the
//! end (`--duration`, Ctrl-C, or the process's exit) `memprof_detach` puts them back, closes the
//! trace and writes the `--output` files, and the trace's summary is printed as `memprof run`
//! prints it (docs/preload.md, "Attach to a running process").
//!
//! Every check that can refuse is made before the process is touched: nothing in it changes when
//! the command refuses.

pub(crate) mod builtin;
mod gdb;
mod outputs;
mod target;

use crate::Failure;
use crate::run::{self, traces};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// The options of `memprof attach`.
#[derive(clap::Args, Debug)]
pub struct AttachOptions {
    /// The trace to write: `%p` is the process's id, `%e` its name, `%t` the time; relative to
    /// this command's working directory.
    #[arg(long, default_value = "memprof-%e-%p.mptrace")]
    trace: String,
    /// Exports written at the detach (`MEMPROF_OUTPUT`'s endings: `.pb.gz`, `.folded`, `.html`,
    /// `.dhat.json`, `.heaptrack.gz`, `.md`, `.tsv`), separated by commas.
    #[arg(long)]
    output: Option<String>,
    /// Frames shown per context (`MEMPROF_STACK_DEPTH`).
    #[arg(long)]
    depth: Option<usize>,
    /// Record one allocation per this many bytes on average (`bytes:N` or `N`; 0 records every one).
    #[arg(long)]
    sample: Option<String>,
    /// Detach by itself after this many seconds (default: at Ctrl-C, or when the process ends).
    #[arg(long, value_parser = seconds)]
    duration: Option<f64>,
    /// The viewer, live, on what arrives, at this address (`127.0.0.1:8080`; port 0 picks one);
    /// it stays up after the detach until Ctrl-C.
    #[arg(long)]
    serve: Option<String>,
    /// The preloaded library (default: the one `memprof run` uses: beside this command, else the
    /// one it carries).
    #[arg(long)]
    preload: Option<PathBuf>,
    /// The summary's short-lived bound, with its unit (`ns`, `us`, `ms`, `s`).
    #[arg(long, default_value = "1ms", value_parser = crate::shortlived::parse)]
    short_lived: u64,
    /// Only pause the recording of a program with memprof built in (no trace).
    #[arg(long, conflicts_with = "resume")]
    pause: bool,
    /// Only resume the recording of a program with memprof built in (no trace).
    #[arg(long)]
    resume: bool,
    /// The process to attach to.
    pid: u32,
}

/// How long one gdb session may take: loading the library and starting memprof, or detaching
/// (which writes the trace's symbols and the exports).
const SESSION_DEADLINE: Duration = Duration::from_secs(300);

/// The start of the name of the command's own directory, where the library's copy is.
const ATTACH_DIR: &str = "memprof-attach-";

/// How many times a process whose every thread is inside the C library is tried again.
const BUSY_TRIES: u32 = 20;

/// `memprof attach`.
pub fn attach(options: &AttachOptions) -> Result<(), Failure> {
    let pid = options.pid;
    check_process(pid)?;
    // A program with memprof built in answers on its control channel (`attach/builtin.rs`). A
    // process that cannot be read is not one: the checks below say why.
    if builtin::has_memprof_built_in(pid).unwrap_or(false) {
        return attach_built_in(options);
    }
    if options.pause || options.resume {
        return Err(Failure(
            format!(
                "--pause and --resume ask a program with memprof built in; process {pid} does \
                 not have memprof built in (to stop recording it, end the attach: Ctrl-C)"
            ),
            2,
        ));
    }
    let checked = check(pid)?;
    let spec = options.trace.trim();
    if spec.starts_with("tcp://") {
        return Err(Failure(
            "--trace tcp://: memprof attach reads its trace file at the detach; give a file".into(),
            2,
        ));
    }
    let absolute = std::env::current_dir()
        .map_err(|e| Failure(format!("cannot read the working directory: {e}"), 1))?
        .join(spec);
    let pattern =
        traces::Pattern::new(&absolute).map_err(|e| Failure(format!("--trace {e}"), 2))?;
    if let Some(dir) = absolute.parent()
        && !dir.is_dir()
    {
        return Err(Failure(
            format!(
                "--trace {}: {} is not a directory; nothing was changed in process {pid}",
                absolute.display(),
                dir.display()
            ),
            2,
        ));
    }
    if let Some(sample) = &options.sample {
        sample_setting(sample)?;
    }
    let library = run::preload_library(options.preload.as_deref())?;
    let dir = PrivateDir::new().map_err(|e| Failure(format!("cannot make a directory: {e}"), 1))?;
    attach_in(
        options, pid, &checked, &absolute, &pattern, &library, &dir.0,
    )
}

/// The command's own directory, removed when the command is done with it, a panic included.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn new() -> io::Result<PrivateDir> {
        private_dir().map(PrivateDir)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// [`attach`] on a program with memprof built in: its own settings hold, so the options that
/// would change them are refused rather than ignored.
fn attach_built_in(options: &AttachOptions) -> Result<(), Failure> {
    let refused = [
        ("--depth", options.depth.is_some()),
        ("--sample", options.sample.is_some()),
        ("--serve", options.serve.is_some()),
        ("--preload", options.preload.is_some()),
    ];
    if let Some((name, _)) = refused.iter().find(|(_, given)| *given) {
        return Err(Failure(
            format!(
                "{name}: process {} has memprof built in, which records with its own settings \
                 (MEMPROF_STACK_DEPTH, MEMPROF_SAMPLE_INTERVAL in its environment); run \
                 `memprof serve` on the trace instead of --serve",
                options.pid
            ),
            2,
        ));
    }
    let built_in = builtin::Options {
        trace: options.trace.clone(),
        output: options.output.clone(),
        duration: options.duration.map(Duration::from_secs_f64),
        pause: options.pause,
        resume: options.resume,
        short_lived: options.short_lived,
    };
    builtin::attach(options.pid, &built_in)
}

/// [`attach`] once checked, with `dir` the command's own directory for the library's copy and
/// gdb's scripts.
fn attach_in(
    options: &AttachOptions,
    pid: u32,
    checked: &gdb::Addresses,
    absolute: &Path,
    pattern: &traces::Pattern,
    library: &Path,
    dir: &Path,
) -> Result<(), Failure> {
    // A copy of its own for each attach: the loader gives a second `dlopen` of the same file the
    // copy loaded before, which has recorded and detached already.
    let copy = dir.join("libmemprof_preload.so");
    std::fs::copy(library, &copy)
        .map_err(|e| Failure(format!("cannot copy {}: {e}", library.display()), 1))?;
    // The library detaches by itself if this command ends without detaching it.
    let mut settings = format!(
        "memprof-attach-command={}\nMEMPROF_TRACE={}\n",
        std::process::id(),
        absolute.display()
    );
    let outputs = outputs::checked(options.output.as_deref().unwrap_or(""))?;
    if !outputs.is_empty() {
        let names: Vec<String> = outputs.iter().map(|o| o.display().to_string()).collect();
        settings.push_str(&format!("MEMPROF_OUTPUT={}\n", names.join(",")));
    }
    if let Some(depth) = options.depth {
        settings.push_str(&format!("MEMPROF_STACK_DEPTH={depth}\n"));
    }
    if let Some(sample) = &options.sample {
        settings.push_str(&format!(
            "MEMPROF_SAMPLE_INTERVAL={}\n",
            sample_setting(sample)?
        ));
    }
    // Ctrl-C (or SIGTERM, or the terminal closed) detaches; with --serve, the next one ends the
    // viewer.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| Failure(format!("cannot handle Ctrl-C: {e}"), 1))?;
    let mut interrupts = 0;
    let since = SystemTime::now();
    let started = since
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    // The viewer's address is had before the process is touched.
    let viewer = match &options.serve {
        Some(listen) => Some(crate::serve::bind_following(listen)?),
        None => None,
    };
    let script = gdb::attach_script(pid, checked, &copy, &settings);
    let answer = session(dir, "attach", &script)?;
    let detach_at = match (answer.get("ATTACH"), answer.get("DETACH_AT")) {
        (Some(count), Some(at)) => match count.trim().parse::<i64>() {
            Ok(n) if n > 0 => at
                .trim()
                .parse::<u64>()
                .map_err(|_| Failure(format!("gdb answered {at:?}"), 1))?,
            Ok(-1) => {
                return Err(Failure(
                    format!(
                        "process {pid} has libmemprof_preload.so preloaded already (memprof run, or \
                 LD_PRELOAD): it records itself; read its trace at its exit"
                    ),
                    1,
                ));
            }
            Ok(-3) => {
                return Err(Failure(
                    format!(
                        "process {pid} is being recorded by another memprof attach: stop that one first"
                    ),
                    1,
                ));
            }
            Ok(-7) => {
                return Err(Failure(
                    format!(
                        "process {pid} could not create its trace {}: the directory must exist \
                         and be writable by the process's user (it writes the file itself); \
                         nothing was changed",
                        absolute.display()
                    ),
                    1,
                ));
            }
            Ok(-4) => {
                return Err(Failure(
                    format!(
                        "process {pid}: no module calls the C library's malloc (an allocator of the \
                 program's own); nothing was changed, nothing to record"
                    ),
                    1,
                ));
            }
            other => {
                return Err(Failure(
                    format!(
                        "process {pid}: memprof_attach answered {other:?}; the library is loaded but \
                 does not record"
                    ),
                    1,
                ));
            }
        },
        _ if answer.get("DLOPEN") == Some("0") => {
            return Err(Failure(
                format!(
                    "process {pid} could not load {}: {}",
                    library.display(),
                    answer.get("DLERROR").unwrap_or("no reason given")
                ),
                1,
            ));
        }
        _ => return Err(gdb_failure(pid, &answer, "load the library")),
    };
    let followed = Arc::new(AtomicBool::new(false));
    if let Some(listener) = viewer {
        let path = trace_of(pattern, started, pid).ok_or_else(|| {
            Failure(
                format!(
                    "--serve: process {pid} opened no trace at {}",
                    absolute.display()
                ),
                1,
            )
        })?;
        crate::serve::serve_following(path, listener, Arc::clone(&followed))?;
    }
    say!(
        "memprof: attached to process {pid} (stopped {}); {}",
        stopped(&answer),
        match options.duration {
            Some(seconds) => format!("detaching after {seconds} s or at Ctrl-C"),
            None => "detaching at Ctrl-C or when it ends".to_owned(),
        }
    );
    let until = options
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    // An `exec` replaces the library with the rest of the image: the copy is looked for in the
    // process's mappings every half second, and again, with the process stopped, before the
    // detach calls into it.
    let library = target::FileId::of(&copy)
        .map_err(|e| Failure(format!("cannot read {}: {e}", copy.display()), 1))?;
    let mut polls = 0u32;
    let mut end = loop {
        if !Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid) {
            break End::Exited;
        }
        interrupts += signals.pending().count();
        if interrupts > 0 || until.is_some_and(|u| Instant::now() >= u) {
            break End::Detach;
        }
        polls += 1;
        if polls.is_multiple_of(25) && library.mapped_by(pid).is_ok_and(|mapped| !mapped) {
            break End::Replaced;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if matches!(end, End::Detach) {
        let script = gdb::detach_script(pid, checked, detach_at, &library);
        let answer = session(dir, "detach", &script)?;
        match answer.get("DETACHED").map(|v| v.trim().parse::<i64>()) {
            Some(Ok(n)) if n >= 0 => {}
            Some(Ok(-2)) => say!("memprof: the trace could not be closed whole"),
            Some(Ok(gdb::LIBRARY_GONE)) => end = End::Replaced,
            Some(Ok(-1)) => end = End::ExecFailed,
            _ if !Path::new(&format!("/proc/{pid}")).exists() => end = End::Exited,
            _ => return Err(gdb_failure(pid, &answer, "detach memprof")),
        }
        if matches!(end, End::Detach) {
            say!(
                "memprof: detached from process {pid} (stopped {})",
                stopped(&answer)
            );
        }
    }
    match end {
        End::Detach => {}
        // The library closed the trace and wrote the files in the process's exit handlers, which
        // ran before it became a zombie or went.
        End::Exited => say!("memprof: process {pid} ended"),
        // The library detaches before an `exec` (`memprof_detach`'s -1 after it: not attached).
        End::ExecFailed => say!(
            "memprof: process {pid} had detached memprof itself, at an exec that failed: \
             recorded until then (the trace and the files were written then)"
        ),
        // Through `execve` and its kin the library detached first; through `execl` (which the C
        // library calls within itself) the trace ends where its writer was.
        End::Replaced => say!(
            "memprof: process {pid} replaced its program (exec), memprof's library with it: \
             recorded until then; the new program is not recorded"
        ),
    }
    outputs::unwritten(&outputs, since);
    followed.store(true, Ordering::SeqCst);
    let found = pattern.traces_since(started);
    let own = found.iter().position(|f| f.header.pid == pid);
    let summary = match own {
        Some(index) => run::summarise(&found[index..=index], Some(0), options.short_lived, None),
        None => Err(Failure(
            format!(
                "no trace of process {pid} was found at {}",
                absolute.display()
            ),
            1,
        )),
    };
    if options.serve.is_some() && summary.is_ok() {
        say!("memprof: the viewer stays up on the whole trace; Ctrl-C ends it");
        interrupts += signals.pending().count();
        if interrupts < 2 {
            let _ = signals.forever().next();
        }
    }
    summary
}

/// The trace process `pid` opened since `started` (ns since the epoch) by `pattern`, once its
/// header is there (at most 5 s).
fn trace_of(pattern: &traces::Pattern, started: u64, pid: u32) -> Option<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = pattern.traces_since(started);
        if let Some(own) = found.into_iter().find(|f| f.header.pid == pid) {
            return Some(own.path);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a gdb session, trying again while every thread of the process is inside the C library.
fn session(dir: &Path, name: &str, script: &str) -> Result<gdb::Answer, Failure> {
    for attempt in 0..BUSY_TRIES {
        let answer = gdb::run(
            dir,
            &format!("{name}-{attempt}.gdb"),
            script,
            SESSION_DEADLINE,
        )
        .map_err(|e| Failure(format!("gdb: {e}"), 1))?;
        if answer.get("BUSY").is_none() {
            return Ok(answer);
        }
        std::thread::sleep(Duration::from_millis(10 + 10 * u64::from(attempt)));
    }
    let what = match name {
        "detach" => {
            "memprof could not be called to detach; the library detaches by itself once this \
             command has ended (it watches the command)"
        }
        _ => "nothing was changed: try again",
    };
    Err(Failure(
        format!(
            "every thread of the process was inside the C library at each of {BUSY_TRIES} tries \
             (an allocator lock may be held); {what}"
        ),
        1,
    ))
}

/// How long a session stopped the process, as gdb measured it.
fn stopped(answer: &gdb::Answer) -> String {
    match answer
        .get("STOPPED_US")
        .and_then(|us| us.trim().parse::<u64>().ok())
    {
        Some(us) => format!("{:.1} ms", us as f64 / 1000.0),
        None => format!("at most {} ms", answer.session.as_millis()),
    }
}

/// A failure of gdb's that the answers do not explain.
fn gdb_failure(pid: u32, answer: &gdb::Answer, what: &str) -> Failure {
    Failure(
        format!(
            "gdb could not make process {pid} {what}: {}",
            answer.stderr.trim()
        ),
        1,
    )
}

/// `--duration`: seconds, a number from 0 to a year (`nan`, `inf` and negative numbers, which
/// `f64` reads, are refused here rather than fail once the process is attached).
fn seconds(raw: &str) -> Result<f64, String> {
    const YEAR: f64 = 365.0 * 24.0 * 3600.0;
    match raw.trim().parse::<f64>() {
        Ok(seconds) if (0.0..=YEAR).contains(&seconds) => Ok(seconds),
        _ => Err(format!(
            "{raw:?} is not a number of seconds from 0 to {YEAR} (a year)"
        )),
    }
}

/// `--sample` as `MEMPROF_SAMPLE_INTERVAL`.
fn sample_setting(sample: &str) -> Result<String, Failure> {
    match sample.trim().parse::<u64>() {
        Ok(0) => Ok("0".to_owned()),
        Ok(bytes) => Ok(format!("bytes:{bytes}")),
        Err(_) if sample.trim().starts_with("bytes:") => Ok(sample.trim().to_owned()),
        Err(_) => Err(Failure(
            format!("--sample {sample:?}: a number of bytes, or bytes:N"),
            2,
        )),
    }
}

/// Whether process `pid` has ended and waits for its parent (`Z`).
fn is_zombie(pid: u32) -> bool {
    target::status_field(pid, "State")
        .ok()
        .flatten()
        .is_some_and(|s| s.starts_with('Z') || s.starts_with('X'))
}

/// A new directory of the command's own, readable by all (the process may be another user's,
/// for root) and writable by the command alone; made, never found, so nothing can be planted in
/// it.
fn private_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    for attempt in 0..100u32 {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let dir = base.join(format!(
            "{ATTACH_DIR}{}-{nanos:x}{attempt}",
            std::process::id()
        ));
        match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no new name"))
}

/// Whether the program of process `pid` has memprof built in: a symbol of the `memprof` crate or
/// of its C functions in its executable's symbol tables, or the name only memprof's configuration
/// reader holds. Such a program records itself; loading the library would record it twice.
pub fn has_memprof_built_in(pid: u32) -> io::Result<bool> {
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    let elf = target::read_elf(&exe, true)?;
    if elf
        .symbols
        .iter()
        .any(|(name, _, defined, _)| *defined && target::is_memprof_symbol(name))
    {
        return Ok(true);
    }
    run::has_memprof_marker(&exe)
}

/// How an attach ended.
enum End {
    /// The command detaches: Ctrl-C, `--duration`.
    Detach,
    /// The process exited.
    Exited,
    /// The process replaced its image (`exec`).
    Replaced,
    /// The process tried to replace its image, and failed: the library had detached.
    ExecFailed,
}

/// `pid` names a process, not one of its threads (`top -H` and `ps -L` list threads' ids, which
/// `/proc` answers for too): a thread is not attached to by itself.
fn check_process(pid: u32) -> Result<(), Failure> {
    let tgid = target::status_field(pid, "Tgid")
        .ok()
        .flatten()
        .and_then(|t| t.parse::<u32>().ok());
    match tgid {
        Some(process) if process != pid => Err(Failure(
            format!(
                "{pid} is a thread of process {process}, not a process: attach to the process \
                 (`memprof attach {process}`), which profiles all of its threads"
            ),
            2,
        )),
        _ => Ok(()),
    }
}

/// Every check made before the process is touched, each failure naming the cause and the fix;
/// returns the addresses the injection calls.
fn check(pid: u32) -> Result<gdb::Addresses, Failure> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    if pid == 0 || !proc.exists() || is_zombie(pid) {
        return Err(Failure(
            format!("no such process: {pid} (ps -e lists the running ones)"),
            1,
        ));
    }
    if pid == std::process::id() {
        return Err(Failure("memprof cannot attach to itself".into(), 2));
    }
    let fail = |e: io::Error| Failure(format!("process {pid}: {e}"), 1);
    let euid = target::own_euid().unwrap_or(u32::MAX);
    let owner = target::status_field(pid, "Uid")
        .map_err(fail)?
        .and_then(|uid| uid.split_whitespace().nth(1)?.parse::<u32>().ok());
    if euid != 0 && owner != Some(euid) {
        return Err(Failure(
            format!(
                "process {pid} belongs to another user (uid {}): attach as that user, or as root",
                owner.map_or("unknown".to_owned(), |o| o.to_string())
            ),
            1,
        ));
    }
    let exe = proc.join("exe");
    let elf = target::read_elf(&exe, false).map_err(|e| {
        if e.kind() == io::ErrorKind::PermissionDenied && owner == Some(euid) {
            // Its own user is refused: the process is not dumpable.
            Failure(
                format!(
                    "process {pid} cannot be read nor traced by its own user: it is not dumpable \
                     (it called prctl(PR_SET_DUMPABLE, 0), or it was started from a set-user-ID \
                     program or changed its user), which only root may override: attach as root"
                ),
                1,
            )
        } else if e.kind() == io::ErrorKind::PermissionDenied {
            Failure(
                format!(
                    "process {pid}: its program cannot be read ({e}): attach as its user, or as \
                     root"
                ),
                1,
            )
        } else if e.kind() == io::ErrorKind::NotFound {
            Failure(
                format!(
                    "process {pid} has no program file: a kernel thread, which has no heap of \
                     its own to profile"
                ),
                1,
            )
        } else {
            fail(e)
        }
    })?;
    if !elf.is_64 {
        return Err(Failure(
            format!(
                "process {pid} is a 32-bit program: memprof attach handles 64-bit (x86-64) \
                 programs only; rebuild it for 64 bits, or run it under `memprof run` built for \
                 32 bits"
            ),
            1,
        ));
    }
    if !elf.dynamic {
        return Err(Failure(
            format!(
                "process {pid} is a statically linked program: there is no dynamic loader to \
                 load the library into it, nor C library functions to redirect. Link it \
                 dynamically, or build memprof into it (docs/preload.md)"
            ),
            1,
        ));
    }
    if has_memprof_built_in(pid).map_err(fail)? {
        return Err(Failure(
            format!(
                "process {pid} has memprof built in and records itself, without the control \
                 channel of `memprof attach` (a memprof older than it, or \
                 MEMPROF_CONTROL_SIGNAL=off): loading the library would record it twice. Ask \
                 it for its profile through its own settings (MEMPROF_DUMP_SIGNAL, \
                 MEMPROF_HTTP: docs/configuration.md)"
            ),
            1,
        ));
    }
    let tracer = target::status_field(pid, "TracerPid")
        .map_err(fail)?
        .and_then(|t| t.parse::<u32>().ok())
        .unwrap_or(0);
    if tracer != 0 {
        let name = std::fs::read_to_string(format!("/proc/{tracer}/comm"))
            .map(|n| n.trim().to_owned())
            .unwrap_or_default();
        return Err(Failure(
            format!(
                "process {pid} is being traced already by process {tracer} ({name}): a process \
                 has one tracer at a time; detach that debugger or tracer first"
            ),
            1,
        ));
    }
    check_ptrace_scope(pid, euid)?;
    if target::status_field(pid, "State")
        .map_err(fail)?
        .is_some_and(|state| state.starts_with('T'))
    {
        return Err(Failure(
            format!(
                "process {pid} is stopped (SIGSTOP, or Ctrl-Z in its shell): it could not run \
                 the library's start, and nothing was changed. Continue it first \
                 (`kill -CONT {pid}`, or `fg`), then attach"
            ),
            1,
        ));
    }
    let modules = target::modules(pid).map_err(fail)?;
    let named = |prefix: &str| {
        modules
            .iter()
            .find(|m| m.file_name().starts_with(prefix) && !m.code.is_empty())
    };
    // A copy an earlier attach loaded (from its command's directory) is left mapped at its
    // detach: the library itself tells whether that one still records (`memprof_attach`'s -3),
    // and a new attach loads a copy of its own. One preloaded from the start records.
    let attached_copy = |m: &&target::Module| {
        m.path
            .parent()
            .and_then(|dir| dir.file_name())
            .is_some_and(|dir| dir.to_string_lossy().starts_with(ATTACH_DIR))
    };
    if let Some(preloaded) = modules.iter().find(|m| {
        !m.deleted && m.file_name().starts_with("libmemprof_preload") && !attached_copy(m)
    }) {
        return Err(Failure(
            format!(
                "process {pid} has {} loaded already (memprof run, LD_PRELOAD, or a memprof \
                 attach not detached): it is being recorded; read that trace",
                preloaded.path.display()
            ),
            1,
        ));
    }
    let (Some(libc), Some(loader)) = (named("libc.so"), named("ld-linux")) else {
        return Err(Failure(
            format!(
                "process {pid} has no GNU C library (libc.so.6, ld-linux) mapped: memprof attach \
                 needs glibc's dynamic loader (a musl or static program is not supported)"
            ),
            1,
        ));
    };
    if let Some(replaced) = [libc, loader].into_iter().find(|m| m.deleted) {
        return Err(Failure(
            format!(
                "process {pid} runs a {} that was deleted or replaced on disk since it started \
                 (an upgrade of the C library): the copy it runs cannot be read to find its \
                 functions, and nothing was changed. Restart it (under memprof run) to profile it",
                replaced.path.display()
            ),
            1,
        ));
    }
    for module in &modules {
        if module.code.is_empty()
            || module.deleted
            || attached_copy(&module)
            || module.path == libc.path
            || module.path == loader.path
        {
            continue;
        }
        let Ok(elf) = target::read_elf(&module.file(pid), true) else {
            continue;
        };
        if elf
            .symbols
            .iter()
            .any(|(name, _, defined, function)| name == "malloc" && *defined && *function)
        {
            return Err(Failure(
                format!(
                    "process {pid}: its malloc is {}'s, not the C library's (an allocator of its \
                     own, such as jemalloc or tcmalloc): the library records the C library's \
                     allocator only. Run the program with its allocator's own profiler, or \
                     without that allocator",
                    module.path.display()
                ),
                1,
            ));
        }
    }
    let libc_elf = target::read_elf(&libc.file(pid), true).map_err(fail)?;
    let function = |name: &str| {
        target::function_address(libc, &libc_elf, name).ok_or_else(|| {
            Failure(
                format!(
                    "{} has no {name}: memprof attach needs glibc 2.34 or later",
                    libc.path.display()
                ),
                1,
            )
        })
    };
    Ok(gdb::Addresses {
        mmap: function("mmap")?,
        munmap: function("munmap")?,
        dlopen: function("dlopen")?,
        dlsym: function("dlsym")?,
        dlerror: function("dlerror")?,
        libc_code: libc.code_span(),
        loader_code: loader.code_span(),
    })
}

/// `kernel.yama.ptrace_scope`: 1 lets a process trace its descendants only (and root any), 2
/// root only, 3 nobody.
fn check_ptrace_scope(pid: u32, euid: u32) -> Result<(), Failure> {
    let Ok(scope) = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") else {
        return Ok(());
    };
    match ptrace_scope_refusal(pid, scope.trim(), euid) {
        Some(message) => Err(Failure(message, 1)),
        None => Ok(()),
    }
}

/// Why `kernel.yama.ptrace_scope` at `scope` keeps a user `euid` from tracing `pid`, if it does.
fn ptrace_scope_refusal(pid: u32, scope: &str, euid: u32) -> Option<String> {
    let refuse = |why: &str| {
        Some(format!(
            "process {pid} cannot be traced: kernel.yama.ptrace_scope is {scope} ({why}). \
             Run memprof attach as root, or allow it for now with `sudo sysctl \
             kernel.yama.ptrace_scope=0`"
        ))
    };
    match scope {
        // gdb, the tracer, is never the process's ancestor.
        "1" if euid != 0 => refuse("only a process's ancestors may trace it"),
        "2" if euid != 0 => refuse("only root may trace"),
        "3" => Some(format!(
            "process {pid} cannot be traced: kernel.yama.ptrace_scope is 3 (no process may \
             trace another until the next boot)"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::ptrace_scope_refusal;

    #[test]
    fn ptrace_scope_refuses_with_the_cause_and_the_fix() {
        // 0: classic ptrace permissions, nothing more to check.
        assert_eq!(ptrace_scope_refusal(7, "0", 1000), None);
        // 1: gdb is no ancestor of the process: a user is refused, root is not.
        let user = ptrace_scope_refusal(7, "1", 1000).expect("scope 1 refuses a user");
        assert!(user.contains("process 7"), "{user}");
        assert!(user.contains("ptrace_scope is 1"), "{user}");
        assert!(user.contains("ancestors"), "{user}");
        assert!(
            user.contains("sudo sysctl kernel.yama.ptrace_scope=0"),
            "{user}"
        );
        assert!(!user.contains("  "), "a run of spaces in {user:?}");
        assert_eq!(ptrace_scope_refusal(7, "1", 0), None);
        // 2: root only.
        let user = ptrace_scope_refusal(7, "2", 1000).expect("scope 2 refuses a user");
        assert!(user.contains("only root may trace"), "{user}");
        assert_eq!(ptrace_scope_refusal(7, "2", 0), None);
        // 3: nobody, root included, and no fix but a reboot.
        let root = ptrace_scope_refusal(7, "3", 0).expect("scope 3 refuses root");
        assert!(root.contains("until the next boot"), "{root}");
        assert!(!root.contains("sysctl"), "{root}");
    }
}
