//! `MEMPROF_DUMP_NEAR_LIMIT`: a program that grows until it is killed with `SIGKILL` right after
//! crossing its memory limit leaves its near-limit dump on disk, whole, and every file at a dump's
//! name whole (a dump the kill cut short leaves at most a temporary file).
//!
//! Under a real limit when the machine lets the test make a cgroup (v2 with the memory
//! controller, or v1's memory controller, as root): the kernel's OOM killer ends the child. Where
//! it cannot, the child is given the near-limit threshold as a byte count and kills itself when
//! its resident memory reaches the limit. The test runs this same binary as the child; the child
//! grows by 1 MiB every 10 ms (100 MiB/s), well beyond a leaking service's pace.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// The memory limit: the cgroup's, or the one the child enforces on itself.
const LIMIT: u64 = 320 << 20;

/// Bytes the child adds at each step.
const STEP: usize = 1 << 20;

#[inline(never)]
fn grow_site() -> Vec<u8> {
    std::hint::black_box(vec![1u8; STEP])
}

fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// Grows until killed: by the OOM killer, or by itself when `MEMPROF_TEST_KILL_AT` is set and
/// its resident memory reaches it.
fn child() -> ! {
    let kill_at: Option<u64> = std::env::var("MEMPROF_TEST_KILL_AT")
        .ok()
        .map(|v| v.parse().unwrap());
    let mut held = Vec::new();
    loop {
        held.push(grow_site());
        if kill_at.is_some_and(|limit| resident() >= limit) {
            // SAFETY: raising a signal; SIGKILL ends the process at once.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A cgroup made for the child with the memory limit [`LIMIT`], removed when dropped.
struct Limited {
    dir: PathBuf,
}

impl Limited {
    /// Makes one under the cgroup v2 mount (with the memory controller), or v1's memory
    /// controller; `None` when neither can be made here (not root, read-only, no controller).
    fn make() -> Option<Limited> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let name = format!("memprof-test-{}", std::process::id());
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mut right = right.split_whitespace();
            let fstype = right.next().unwrap_or("");
            let options = right.nth(1).unwrap_or("");
            let mount = Path::new(left.split_whitespace().nth(4).unwrap_or("/"));
            let (limit_file, swap_file) = match fstype {
                "cgroup2" => ("memory.max", "memory.swap.max"),
                "cgroup" if options.split(',').any(|o| o == "memory") => {
                    ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
                }
                _ => continue,
            };
            let dir = mount.join(&name);
            if std::fs::create_dir(&dir).is_err() {
                continue;
            }
            let limited = Limited { dir };
            if std::fs::write(limited.dir.join(limit_file), LIMIT.to_string()).is_ok() {
                // No swap beyond the limit, where the machine has any: the OOM killer, not swap,
                // must end the child (v2: no swap at all; v1: memory and swap within the limit).
                let swap = if fstype == "cgroup2" { 0 } else { LIMIT };
                let _ = std::fs::write(limited.dir.join(swap_file), swap.to_string());
                return Some(limited);
            }
        }
        None
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn dump_near_limit() {
    if std::env::var_os("MEMPROF_TEST_CHILD").is_some() {
        child();
    }
    // Under a real limit where the machine allows it, and with the byte count always.
    match Limited::make() {
        Some(limited) => run(Some(&limited)),
        None => eprintln!(
            "no cgroup with a memory limit can be made here: only the byte count is tested"
        ),
    }
    run(None);
}

fn run(cgroup: Option<&Limited>) {
    let dir = std::env::temp_dir().join(format!(
        "memprof-near-limit-{}-{}",
        std::process::id(),
        cgroup.is_some()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut command = match cgroup {
        // The shell moves itself into the cgroup, then becomes the child.
        Some(limited) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
                .arg(&limited.dir)
                .arg(&exe);
            // A backstop: if the limit is not enforced, the child ends itself at twice it, and
            // the test fails saying the OOM killer did not end it.
            c.env("MEMPROF_DUMP_NEAR_LIMIT", "75%")
                .env("MEMPROF_TEST_KILL_AT", (2 * LIMIT).to_string());
            c
        }
        None => {
            let mut c = Command::new(&exe);
            c.env("MEMPROF_DUMP_NEAR_LIMIT", format!("{}", LIMIT / 4 * 3))
                .env("MEMPROF_TEST_KILL_AT", LIMIT.to_string());
            c
        }
    };
    let running = command
        .args(["--exact", "dump_near_limit", "--nocapture"])
        .env("MEMPROF_TEST_CHILD", "1")
        .env("MEMPROF_OUTPUT", format!("{}/heap-%n.pb.gz", dir.display()))
        // Dumps on growth before the limit, and after it, until the kill cuts one short.
        .env("MEMPROF_DUMP_ON_GROWTH", "8MiB")
        .env("MEMPROF_STACK_DEPTH", "20")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(running, Duration::from_secs(240), "the growing child");
    let stderr = String::from_utf8_lossy(&output.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(output.status.signal(), Some(libc::SIGKILL), "{stderr}");
    if let Some(limited) = cgroup {
        let events = ["memory.events", "memory.oom_control"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(limited.dir.join(f)).ok())
            .collect::<String>();
        assert!(
            events
                .lines()
                .any(|l| l.starts_with("oom_kill ") && l != "oom_kill 0"),
            "not killed by the OOM killer: {events}\n{stderr}"
        );
    }

    // The near-limit dump was written, as dump number n.
    let near = stderr
        .lines()
        .position(|l| l.contains("(MEMPROF_DUMP_NEAR_LIMIT)"))
        .unwrap_or_else(|| panic!("no near-limit dump:\n{stderr}"));
    let near_file = stderr
        .lines()
        .skip(near)
        .find_map(|l| l.strip_prefix("memprof: wrote "))
        .unwrap_or_else(|| panic!("the near-limit dump was not finished:\n{stderr}"));
    assert_eq!(
        stderr.matches("(MEMPROF_DUMP_NEAR_LIMIT)").count(),
        1,
        "one crossing, one dump:\n{stderr}"
    );

    // Every file at a dump's name is whole: a gzip stream to its end, a profile that names the
    // growth site; the near-limit one among them. Anything else is a temporary of a dump cut short.
    let mut whole = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') && name.ends_with(".tmp") {
            eprintln!("left by the kill: {name}");
            continue;
        }
        let profile = common::decode_pprof(&std::fs::read(&path).unwrap());
        let sums = common::pprof_cumulative(&profile, "dump_near_limit::grow_site");
        assert!(sums.iter().all(|&s| s > 0), "{name}: {sums:?}");
        whole.push(path);
    }
    assert!(
        whole.iter().any(|p| p == Path::new(near_file)),
        "{near_file} not among {whole:?}\n{stderr}"
    );
    // A real reader agrees on the near-limit dump.
    if let Some(pprof) = common::pprof_binary() {
        let out = Command::new(pprof)
            .args(["-top", "-sample_index=inuse_space", "-nodecount=1000"])
            .arg(near_file)
            .env("PPROF_TMPDIR", &dir)
            .env("HOME", &dir)
            .output()
            .unwrap();
        let top = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && top.contains("dump_near_limit::grow_site"),
            "{top}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "{}\n{} whole dumps; near-limit dump {near_file}; killed by {}",
        stderr.lines().nth(near).unwrap(),
        whole.len(),
        if cgroup.is_some() {
            "the OOM killer"
        } else {
            "itself"
        }
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
