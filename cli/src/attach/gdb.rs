//! The injection, driven by gdb in batch mode: gdb stops the process (every thread), picks a thread
//! that holds none of the C library's locks, calls functions in it by address, and lets it go. gdb
//! rather than a ptrace injector of the command's own: it restarts a system call it interrupted
//! (`read` on a pipe, `sleep`), steps out of a signal handler's frame, follows threads created or
//! ended during the call, and lets the other threads run while the called function runs (so a
//! lock another thread holds is released), all of which a new injector would have to learn.
//!
//! gdb reads no symbol file, of the program or its libraries (a sysroot and a debug directory
//! that do not exist, no `libthread_db`, no init files, no debuginfod): reading them took most of
//! a second of the process's pause, against 15 ms without. Every address is the command's, computed from `/proc/PID/maps` and the ELF symbol tables
//! ([`Addresses`]). Strings are written into a page the process maps for the call (gdb would
//! call `malloc` in the process to place a string literal).

use super::target::FileId;
use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The addresses the calls need, in the process.
pub struct Addresses {
    pub mmap: u64,
    pub munmap: u64,
    pub dlopen: u64,
    pub dlsym: u64,
    pub dlerror: u64,
    /// The C library's code, and the dynamic loader's: a thread stopped there may hold a lock
    /// that `dlopen` or `malloc` takes, unless it is blocked in one of [`SAFE_SYSCALLS`].
    pub libc_code: (u64, u64),
    pub loader_code: (u64, u64),
}

/// System calls (x86-64 numbers) a thread can be blocked in while holding none of the allocator's
/// or the loader's locks: reading, writing, sending, receiving, waiting (for a child, a signal, a
/// file lock, a semaphore, a message queue), sleeping; and `restart_syscall` (219), in which a
/// sleep or a `poll` with a timeout goes on once a tracer interrupted it (an earlier attach, a
/// debugger). The allocator's own calls (`mmap`, `munmap`, `mprotect`, `brk`, `madvise`) are
/// not among them, and the loader makes its calls from its own code. A thread inside the C
/// library anywhere else (its allocator, `fork`, `dlopen`) is not called into.
const SAFE_SYSCALLS: &[u32] = &[
    0, 1, 7, 17, 19, 20, 23, 34, 35, 42, 43, 44, 45, 46, 47, 61, 65, 70, 72, 73, 128, 130, 202,
    208, 219, 220, 230, 232, 242, 243, 247, 270, 271, 281, 288, 299, 307, 441, 449,
];

/// What a session printed: the values of the `MEMPROF:` lines.
pub struct Answer {
    pub lines: Vec<(String, String)>,
    /// How long the process was stopped, in gdb's own measure (attach to detach, less the calls
    /// while the other threads ran): the whole session, as an upper bound.
    pub session: Duration,
    pub stderr: String,
}

impl Answer {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.lines
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The opening of every session: no init file, no symbol files of the libraries, no questions,
/// every signal passed to the process unseen; then the attach and the choice of a thread, the
/// main one first (`$memprof_chosen`), or `MEMPROF:BUSY` and the detach when every thread may
/// hold a lock. memprof's own threads (`memprof-*`, a copy attached before) are never chosen: the
/// detach waits for them.
fn opening(pid: u32, at: &Addresses) -> String {
    let safe: Vec<String> = SAFE_SYSCALLS.iter().map(u32::to_string).collect();
    let (libc_lo, libc_hi) = at.libc_code;
    let (ld_lo, ld_hi) = at.loader_code;
    format!(
        "set pagination off\n\
         set confirm off\n\
         set width 0\n\
         set auto-solib-add off\n\
         set auto-load off\n\
         set sysroot /nonexistent\n\
         set debug-file-directory /nonexistent\n\
         set libthread-db-search-path /nonexistent\n\
         set debuginfod enabled off\n\
         set print thread-events off\n\
         set print inferior-events off\n\
         set exec-file-mismatch off\n\
         set unwindonsignal on\n\
         handle all nostop noprint pass\n\
         python import time; memprof_t0 = time.monotonic()\n\
         attach {pid}\n\
         python\n\
         chosen = 0\n\
         for t in sorted(gdb.selected_inferior().threads(), key=lambda t: t.num):\n\
         \x20   if (t.name or '').startswith('memprof-'):\n\
         \x20       continue\n\
         \x20   t.switch()\n\
         \x20   pc = int(gdb.parse_and_eval('$pc')) & 0xffffffffffffffff\n\
         \x20   call = int(gdb.parse_and_eval('$orig_rax'))\n\
         \x20   if {ld_lo} <= pc < {ld_hi}:\n\
         \x20       continue\n\
         \x20   if {libc_lo} <= pc < {libc_hi} and call not in ({safe},):\n\
         \x20       continue\n\
         \x20   chosen = t.num\n\
         \x20   break\n\
         gdb.set_convenience_variable('memprof_chosen', chosen)\n\
         end\n\
         if $memprof_chosen == 0\n\
         printf \"MEMPROF:BUSY=1\\n\"\n\
         detach\n\
         {STOPPED}\
         quit\n\
         end\n\
         eval \"thread %d\", $memprof_chosen\n",
        safe = safe.join(", "),
    )
}

/// Prints how long the process was stopped (`MEMPROF:STOPPED_US`): from the attach to the
/// detach, gdb's own start and end aside.
const STOPPED: &str =
    "python print('MEMPROF:STOPPED_US=%d' % ((time.monotonic() - memprof_t0) * 1e6))\n";

/// gdb commands that write `bytes` (NUL added) at `$memprof_page + offset`.
fn write_bytes(script: &mut String, offset: usize, bytes: &[u8]) {
    let mut padded = bytes.to_vec();
    padded.push(0);
    while !padded.len().is_multiple_of(8) {
        padded.push(0);
    }
    for (i, chunk) in padded.chunks(8).enumerate() {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let _ = writeln!(
            script,
            "set *(unsigned long *)($memprof_page + {}) = {word:#x}",
            offset + i * 8
        );
    }
}

/// The script that loads `library` and calls `memprof_attach(settings)`: prints the attach's
/// answer and the address of `memprof_detach` (`MEMPROF:ATTACH`, `MEMPROF:DETACH_AT`), or
/// `MEMPROF:DLOPEN=0` and the loader's error.
pub fn attach_script(pid: u32, at: &Addresses, library: &Path, settings: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    let path = library.as_os_str().as_bytes();
    let names = [b"memprof_attach".as_slice(), b"memprof_detach".as_slice()];
    let size = (path.len() + settings.len() + 256).next_multiple_of(4096);
    let mut script = opening(pid, at);
    let _ = writeln!(
        script,
        "set $memprof_page = ((void *(*)(void *, unsigned long, int, int, int, long)) {:#x})(0, {size}, 3, 0x22, -1, 0)",
        at.mmap
    );
    let name_at = 0;
    let detach_at = 32;
    let path_at = 64;
    let settings_at = (path_at + path.len() + 8).next_multiple_of(8);
    write_bytes(&mut script, name_at, names[0]);
    write_bytes(&mut script, detach_at, names[1]);
    write_bytes(&mut script, path_at, path);
    write_bytes(&mut script, settings_at, settings.as_bytes());
    let _ = write!(
        script,
        "set $memprof_handle = ((void *(*)(const char *, int)) {dlopen:#x})($memprof_page + {path_at}, 2)\n\
         if $memprof_handle == 0\n\
         printf \"MEMPROF:DLOPEN=0\\n\"\n\
         printf \"MEMPROF:DLERROR=%s\\n\", ((char *(*)(void)) {dlerror:#x})()\n\
         else\n\
         set $memprof_attach = ((void *(*)(void *, const char *)) {dlsym:#x})($memprof_handle, $memprof_page + {name_at})\n\
         set $memprof_detach = ((void *(*)(void *, const char *)) {dlsym:#x})($memprof_handle, $memprof_page + {detach_at})\n\
         if $memprof_attach == 0 || $memprof_detach == 0\n\
         printf \"MEMPROF:SYMBOLS=0\\n\"\n\
         else\n\
         printf \"MEMPROF:DETACH_AT=%lu\\n\", (unsigned long) $memprof_detach\n\
         printf \"MEMPROF:ATTACH=%d\\n\", ((int (*)(const char *)) $memprof_attach)($memprof_page + {settings_at})\n\
         end\n\
         end\n\
         call ((int (*)(void *, unsigned long)) {munmap:#x})($memprof_page, {size})\n\
         detach\n\
         {STOPPED}\
         quit\n",
        dlopen = at.dlopen,
        dlerror = at.dlerror,
        dlsym = at.dlsym,
        munmap = at.munmap,
    );
    script
}

/// What `MEMPROF:DETACHED` says when the library is no longer mapped (the process replaced its
/// image): nothing was called.
pub const LIBRARY_GONE: i64 = -9;

/// The script that calls `memprof_detach` at `function`, in `library`'s copy: prints
/// `MEMPROF:DETACHED`. The copy is looked for in the process's mappings while gdb holds it
/// stopped, so that an `exec` since the command last looked has no address called in the new
/// program.
pub fn detach_script(pid: u32, at: &Addresses, function: u64, library: &FileId) -> String {
    let mut script = opening(pid, at);
    let _ = write!(
        script,
        "python\n\
         memprof_want = (bytes.fromhex('{path}'), b'{device}', b'{inode}')\n\
         memprof_is = lambda f: (len(f) == 6 and f[5] == memprof_want[0]) or f[3:5] == [memprof_want[1], memprof_want[2]]\n\
         memprof_mapped = any(memprof_is(l.rstrip(b'\\n').split(None, 5)) for l in open('/proc/{pid}/maps', 'rb'))\n\
         gdb.set_convenience_variable('memprof_mapped', 1 if memprof_mapped else 0)\n\
         end\n\
         if $memprof_mapped\n\
         printf \"MEMPROF:DETACHED=%d\\n\", ((int (*)(void)) {function:#x})()\n\
         else\n\
         printf \"MEMPROF:DETACHED={LIBRARY_GONE}\\n\"\n\
         end\n\
         detach\n\
         {STOPPED}\
         quit\n",
        path = library
            .path
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        device = library.device,
        inode = library.inode,
    );
    script
}

/// Runs gdb on `script` (written as `name` in `dir`, the command's own new directory), in a
/// process group of its own (a Ctrl-C at the terminal is the command's, never gdb's in the middle
/// of a call), for at most `deadline`.
pub fn run(dir: &Path, name: &str, script: &str, deadline: Duration) -> io::Result<Answer> {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let file = dir.join(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&file)?
        .write_all(script.as_bytes())?;
    let started = Instant::now();
    let child = Command::new("gdb")
        .args(["-nx", "-nh", "-q", "-batch", "-x"])
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(e) => {
            let _ = std::fs::remove_file(&file);
            return Err(if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    e.kind(),
                    "gdb is not installed: memprof attach loads the library through it \
                     (apt-get install gdb, or scripts/install-deps.sh)",
                )
            } else {
                e
            });
        }
    };
    let output = wait_within(child, deadline);
    let _ = std::fs::remove_file(&file);
    let output = output?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("MEMPROF:"))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Ok(Answer {
        lines,
        session: started.elapsed(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// Waits for gdb at most `deadline`; past it, gdb is interrupted (which makes it abandon a call
/// and detach), then killed.
fn wait_within(
    mut child: std::process::Child,
    deadline: Duration,
) -> io::Result<std::process::Output> {
    let start = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            return child.wait_with_output();
        }
        if start.elapsed() > deadline {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            std::thread::sleep(Duration::from_secs(2));
            if child.try_wait()?.is_none() {
                let _ = child.kill();
            }
            let output = child.wait_with_output()?;
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "gdb did not finish within {} s: {}",
                    deadline.as_secs(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
