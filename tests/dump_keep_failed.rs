//! `MEMPROF_DUMP_KEEP` when dumps fail: a dump that was not written whole never counts as kept
//! and removes no good dump. The test runs this same binary as the child and drives it through
//! its standard input: two dumps on the dump signal are written; then the child's files are
//! limited to one byte (`RLIMIT_FSIZE`, as a full disk would fail them), and two more dumps and
//! the one at exit fail. Both good dumps must still be on disk, whole, with no temporary file.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn kept_site() -> Vec<u8> {
    std::hint::black_box(vec![7u8; 100_000])
}

/// Does what the parent says, one line at a time: `dump`, `limit`, `exit`.
fn child() {
    let held = kept_site();
    for line in std::io::stdin().lock().lines() {
        match line.unwrap().as_str() {
            // SAFETY: raising a signal whose handler memprof installed.
            "dump" => unsafe {
                libc::raise(libc::SIGUSR1);
            },
            "limit" => {
                let limit = libc::rlimit {
                    rlim_cur: 1,
                    rlim_max: libc::RLIM_INFINITY,
                };
                // SAFETY: plain calls with a valid argument; SIGXFSZ ignored so that a write past
                // the limit fails with EFBIG instead of ending the process.
                unsafe {
                    libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                    assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
                }
                eprintln!("child: limited");
            }
            _ => break,
        }
    }
    drop(std::hint::black_box(held));
}

#[test]
fn failed_dumps_remove_no_good_dump() {
    if std::env::var_os("MEMPROF_TEST_CHILD").is_some() {
        return child();
    }
    let dir = std::env::temp_dir().join(format!("memprof-keep-failed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut running = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "failed_dumps_remove_no_good_dump", "--nocapture"])
        .env("MEMPROF_TEST_CHILD", "1")
        .env("MEMPROF_OUTPUT", dir.join("heap-%n.folded"))
        .env("MEMPROF_DUMP_KEEP", "2")
        .env("MEMPROF_DUMP_SIGNAL", "USR1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = running.stdin.take().unwrap();
    let stderr = BufReader::new(running.stderr.take().unwrap());
    let (lines, seen) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut log = Vec::new();
    let mut expect = |what: &str| loop {
        match seen.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let found = line.contains(what);
                log.push(line);
                if found {
                    return;
                }
            }
            Err(_) => panic!("no line with {what:?}; the child said:\n{}", log.join("\n")),
        }
    };
    let mut say = |what: &str| writeln!(stdin, "{what}").unwrap();

    say("dump");
    expect("wrote");
    say("dump");
    expect("wrote");
    say("limit");
    expect("child: limited");
    say("dump");
    expect("dump 3 was not written whole");
    say("dump");
    expect("dump 4 was not written whole");
    say("exit");
    expect("dump 5 was not written whole");
    drop(stdin);
    let status = running.wait().unwrap();
    assert!(status.success(), "{status}");

    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["heap-1.folded", "heap-2.folded"]);
    for n in [1, 2] {
        let text = std::fs::read_to_string(dir.join(format!("heap-{n}.folded"))).unwrap();
        let bytes: u64 = text
            .lines()
            .filter(|l| l.contains("dump_keep_failed::kept_site"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(bytes, 100_000, "dump {n}:\n{text}");
    }
    let _ = std::fs::remove_dir_all(PathBuf::from(&dir));
}
