//! `MemProf::dump_on_growth` (`MEMPROF_DUMP_ON_GROWTH`) with `%n` and `MEMPROF_DUMP_KEEP`: a
//! program that grows in known steps writes exactly the expected dumps, each whole and naming the
//! growth site, and the oldest are removed. The test runs this same binary as the child.
//!
//! The child grows by 5 MiB blocks with a step of 8 MiB: the first dump comes at 10 MiB (its
//! high-water mark), the second at 20 MiB; then the child frees 10 MiB and grows back to 20 MiB,
//! which is below the second dump's mark plus the step, so no dump; the third comes at 30 MiB.
//! After each growth that must dump, the child waits for the dump's last file and checks it; at
//! the end it asks for a dump by signal, which the dump thread reads after any request the growth
//! made before (one pipe, in order): that dump is number 4 only if growth wrote exactly 3. The
//! dump at exit is number 5.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new().dump_on_growth(8 << 20);

const BLOCK: usize = 5 << 20;

#[inline(never)]
fn grow_site() -> Vec<u8> {
    std::hint::black_box(vec![1u8; BLOCK])
}

/// The files of dump `n`: the pprof profile and the folded stacks, written in that order.
fn files(dir: &Path, n: u64) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("heap-{n}.pb.gz")),
        dir.join(format!("heap-{n}.folded")),
    )
}

/// Waits for dump `n` (its last file appears when the dump is whole), then checks that both of
/// its files show `blocks` blocks live from `grow_site`.
fn expect_dump(dir: &Path, n: u64, blocks: u64) {
    let (pprof, folded) = files(dir, n);
    let start = Instant::now();
    while !folded.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "dump {n} was not written"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = std::fs::read_to_string(&folded).unwrap();
    let bytes: u64 = text
        .lines()
        .filter(|l| l.contains("dump_on_growth::grow_site"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(bytes, blocks * BLOCK as u64, "dump {n}:\n{text}");
    let profile = common::decode_pprof(&std::fs::read(&pprof).unwrap());
    let types: Vec<&str> = profile
        .sample_type
        .iter()
        .map(|t| profile.string_table[t.r#type as usize].as_str())
        .collect();
    let inuse = types.iter().position(|t| *t == "inuse_space").unwrap();
    let sums = common::pprof_cumulative(&profile, "dump_on_growth::grow_site");
    assert_eq!(sums[inuse], (blocks * BLOCK as u64) as i64, "dump {n}");
    eprintln!("child: dump {n} checked");
}

fn child() {
    let dir = PathBuf::from(std::env::var("MEMPROF_TEST_DIR").unwrap());
    let mut held = Vec::with_capacity(16);
    held.push(grow_site());
    held.push(grow_site());
    expect_dump(&dir, 1, 2);
    held.push(grow_site());
    held.push(grow_site());
    expect_dump(&dir, 2, 4);
    // Down to 10 MiB and back to 20: below the mark of dump 2 (20 MiB) plus the step.
    held.truncate(2);
    held.push(grow_site());
    held.push(grow_site());
    held.push(grow_site());
    held.push(grow_site());
    expect_dump(&dir, 3, 6);
    // SAFETY: raising a signal whose handler memprof installed.
    unsafe { libc::raise(libc::SIGUSR1) };
    expect_dump(&dir, 4, 6);
    drop(held);
    eprintln!("child: done");
}

#[test]
fn dump_on_growth() {
    if std::env::var_os("MEMPROF_TEST_CHILD").is_some() {
        return child();
    }
    let dir = std::env::temp_dir().join(format!("memprof-growth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = format!("{0}/heap-%n.pb.gz,{0}/heap-%n.folded", dir.display());
    let running = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "dump_on_growth", "--nocapture"])
        .env("MEMPROF_TEST_CHILD", "1")
        .env("MEMPROF_TEST_DIR", &dir)
        .env("MEMPROF_OUTPUT", spec)
        .env("MEMPROF_DUMP_KEEP", "2")
        .env("MEMPROF_DUMP_SIGNAL", "USR1")
        .env("MEMPROF_STACK_DEPTH", "20")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(running, Duration::from_secs(240), "the growing child");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("child: done"), "{stderr}");

    // Exactly five dumps, in order: three on growth, the signal's, the exit's.
    let wrote: Vec<String> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("memprof: wrote "))
        .map(|p| {
            Path::new(p)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let expected: Vec<String> = (1..=5)
        .flat_map(|n| [format!("heap-{n}.pb.gz"), format!("heap-{n}.folded")])
        .collect();
    assert_eq!(wrote, expected, "{stderr}");
    assert_eq!(
        stderr
            .matches("writing a dump (MEMPROF_DUMP_ON_GROWTH)")
            .count(),
        3,
        "{stderr}"
    );

    // MEMPROF_DUMP_KEEP=2: dumps 1 to 3 removed, 4 and 5 left, and nothing else (no temporary).
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "heap-4.folded",
            "heap-4.pb.gz",
            "heap-5.folded",
            "heap-5.pb.gz"
        ],
        "{stderr}"
    );
    for n in 1..=3 {
        assert!(
            stderr.contains(&format!("removed {}/heap-{n}.pb.gz", dir.display())),
            "{stderr}"
        );
    }

    // The kept profile of the signal's dump, read by pprof: the growth site holds 30 MiB.
    if let Some(pprof) = common::pprof_binary() {
        let out = Command::new(pprof)
            .args([
                "-top",
                "-sample_index=inuse_space",
                "-unit=byte",
                "-nodecount=1000",
            ])
            .arg(files(&dir, 4).0)
            .env("PPROF_TMPDIR", &dir)
            .env("HOME", &dir)
            .output()
            .unwrap();
        let top = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{top}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let row = top
            .lines()
            .find(|l| l.trim_end().ends_with("dump_on_growth::grow_site"))
            .unwrap_or_else(|| panic!("{top}"));
        // flat flat% sum% cum cum%: the site's cumulative bytes.
        let cum: u64 = row
            .split_whitespace()
            .nth(3)
            .unwrap()
            .trim_end_matches('B')
            .parse()
            .unwrap();
        assert_eq!(cum, 6 * BLOCK as u64, "{top}");
        // pprof leaves its files in PPROF_TMPDIR only with -output; none expected here.
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
