//! `MEMPROF_DUMP_SIGNAL` sent to a forked child writes the child's heap, to a file named with the
//! child's pid, and not the parent's. The test runs this same binary as the parent, which forks.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the parent: the directory the dumps go to.
const PARENT: &str = "MEMPROF_TEST_FORK_DUMP_DIR";

#[inline(never)]
fn parent_only() -> Vec<Vec<u8>> {
    std::hint::black_box((0..4).map(|_| vec![0u8; 6000]).collect())
}

#[inline(never)]
fn child_only() -> Vec<Vec<u8>> {
    std::hint::black_box((0..3).map(|_| vec![0u8; 7000]).collect())
}

/// The folded dump of the process `pid` in `dir`, once it exists, or `None` after `wait`.
fn dump_of(dir: &Path, pid: u32, wait: Duration) -> Option<String> {
    let path = dir.join(format!("heap-{pid}.folded"));
    let deadline = Instant::now() + wait;
    loop {
        if let Ok(text) = std::fs::read_to_string(&path) {
            return Some(text);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The forked child: tells the parent it is ready, then waits for its own dump and checks it.
/// Returns the exit code.
fn in_child(dir: &Path, ready: libc::c_int) -> i32 {
    let kept = child_only();
    let byte = 1u8;
    // SAFETY: writes one byte from a valid buffer to the pipe the parent reads.
    unsafe { libc::write(ready, (&byte as *const u8).cast(), 1) };
    let Some(folded) = dump_of(dir, std::process::id(), Duration::from_secs(15)) else {
        eprintln!("child: no dump of the child written");
        return 2;
    };
    let has = |name: &str, bytes: u64| {
        folded.lines().any(|l| {
            l.contains(&format!("fork_dump::{name};")) && l.ends_with(&format!(" {bytes}"))
        })
    };
    if !has("child_only", 21_000) || !has("parent_only", 24_000) {
        eprintln!("child: the dump is not the child's heap:\n{folded}");
        return 3;
    }
    drop(kept);
    0
}

/// The parent: forks, sends the dump signal to the child once it is ready, and waits for it.
fn in_parent(dir: &Path) {
    let kept = parent_only();
    let mut fds = [-1; 2];
    // SAFETY: `fds` is a valid array of two descriptors for `pipe` to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let [ready_read, ready_write] = fds;
    // SAFETY: the child only allocates, writes files and reads them, then leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = in_child(dir, ready_write);
        // SAFETY: ends the child without running the parent's at-exit handlers again.
        unsafe { libc::_exit(code) };
    }
    let mut byte = 0u8;
    // SAFETY: reads one byte into a valid buffer from the pipe's read end.
    let n = unsafe { libc::read(ready_read, (&mut byte as *mut u8).cast(), 1) };
    assert_eq!(n, 1, "the child never got ready");
    // SAFETY: signals the child this process just forked.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut status = 0;
    loop {
        // SAFETY: waits, without blocking, for the child forked above; `status` is valid.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: kills the hung child forked above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child failed: status {status:#x}"
    );
    // The signal went to the child only: the parent wrote nothing.
    let parent = dir.join(format!("heap-{}.folded", std::process::id()));
    assert!(!parent.exists(), "the child's signal dumped the parent");
    drop(kept);
}

#[test]
fn fork_dump() {
    if let Some(dir) = std::env::var_os(PARENT) {
        in_parent(Path::new(&dir));
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fork_dump");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let parent = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "fork_dump", "--nocapture"])
        .env(PARENT, &dir)
        .env(
            "MEMPROF_OUTPUT",
            format!("{}/heap-%p.folded", dir.display()),
        )
        .env("MEMPROF_DUMP_SIGNAL", "USR1")
        // Deep enough for the allocating functions under the iterator adapters of an
        // unoptimized build.
        .env("MEMPROF_STACK_DEPTH", "20")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(parent, Duration::from_secs(90), "the parent");
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
