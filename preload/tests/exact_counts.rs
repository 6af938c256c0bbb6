//! Exact counts against a counting interposer, over real programs nobody here wrote (Python,
//! git, find, tar) and a C++ program.
//!
//! `counter.so` (tests/programs/counter.c) is preloaded before the library
//! (`LD_PRELOAD=counter.so:libmemprof_preload.so`): every allocation call reaches it first, and it
//! forwards it to the library with `dlsym(RTLD_NEXT)`. It keeps its own live set by address, with
//! each block's requested size.
//!
//! Both must start counting at the same moment for their live sets to be comparable. memprof
//! records from the end of its ELF constructor on. counter.so is linked with `DT_NEEDED` on
//! `libmemprof_preload.so`, so the loader runs memprof's constructor before counter.so's; the
//! counter counts from its own constructor on. Any allocation made between the two constructors
//! would be recorded by memprof and not counted; so each run also writes the loader's log
//! (`LD_DEBUG=files`), and the test checks, for every process, that counter.so's constructor is the
//! very next one the loader calls after memprof's: nothing runs between them.
//!
//! With the same start, "recorded since" and "counted since" are the same calls; frees of blocks
//! made earlier are no-ops in both (neither knows the address). So at exit the live sets must be
//! EQUAL: the same number of blocks and bytes. counter.so writes its set from an `atexit` handler
//! registered in its constructor, which runs before memprof's at-exit output (registered earlier,
//! in memprof's constructor), with nothing of the program's in between.
//!
//! memprof's side is the `.tsv` export (`MEMPROF_OUTPUT=memprof-%p.tsv`, the TSV log with
//! `MEMPROF_MIN_BYTES=0`): its groups partition the live table, so the sums of their counts and
//! bytes are exactly the live blocks and bytes, per process (`%p`), which the log on stderr would
//! mix up for programs that start others (git), and which GNU tools lose (they close stderr in an
//! at-exit handler that runs before memprof's). The TSV log holds no totals over the run, so the
//! blocks and bytes allocated since the start are compared too, from the `.dhat.json` export
//! (the sums of its program points' `tbk` and `tb`) against counter.so's.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::*;

/// Builds counter.so in `dir`, linked against the library.
fn counter(dir: &Path) -> PathBuf {
    let library = library();
    let lib_dir = library.parent().unwrap().to_str().unwrap().to_owned();
    compile(
        dir,
        &["counter.c"],
        "counter.so",
        &[
            "-O2",
            "-shared",
            "-fPIC",
            "-pthread",
            "-ldl",
            &format!("-L{lib_dir}"),
            "-l:libmemprof_preload.so",
            &format!("-Wl,-rpath,{lib_dir}"),
            "-Wl,--no-as-needed",
        ],
    )
}

/// Runs `command` under counter.so and the library, writing every process's files into `dir`,
/// and checks that each process's live set in memprof's export equals counter.so's. Returns the
/// output.
fn compare(dir: &Path, mut command: Command, what: &str) -> std::process::Output {
    let counter = counter(dir);
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    command
        .env(
            "LD_PRELOAD",
            format!("{}:{}", counter.display(), library().display()),
        )
        .env("COUNTER_DIR", &files)
        .env(
            "MEMPROF_OUTPUT",
            format!(
                "{},{}",
                files.join("memprof-%p.tsv").display(),
                files.join("memprof-%p.dhat.json").display()
            ),
        )
        .env("MEMPROF_MIN_BYTES", "0")
        .env("LD_DEBUG", "files")
        .env("LD_DEBUG_OUTPUT", files.join("ld"));
    let output = run_ok(&mut command, what);

    let mut counted = BTreeMap::new();
    let mut recorded = BTreeMap::new();
    let mut counted_total = BTreeMap::new();
    let mut recorded_total = BTreeMap::new();
    let mut loader_logs = 0;
    for entry in std::fs::read_dir(&files).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        if let Some(pid) = name
            .strip_prefix("counter-")
            .and_then(|n| n.strip_suffix(".txt"))
        {
            let fields: Vec<&str> = text.split_whitespace().collect();
            assert!(
                fields.len() == 6 && fields[0] == "live" && fields[3] == "total",
                "{name}: {text}"
            );
            let number = |i: usize| fields[i].parse::<u64>().unwrap();
            counted.insert(pid.to_owned(), (number(1), number(2)));
            counted_total.insert(pid.to_owned(), (number(4), number(5)));
        } else if let Some(pid) = name
            .strip_prefix("memprof-")
            .and_then(|n| n.strip_suffix(".tsv"))
        {
            let mut logs = tsv_logs(&text);
            assert_eq!(logs.len(), 1, "{name}:\n{text}");
            recorded.insert(pid.to_owned(), totals(&logs.pop().unwrap()));
        } else if let Some(pid) = name
            .strip_prefix("memprof-")
            .and_then(|n| n.strip_suffix(".dhat.json"))
        {
            recorded_total.insert(pid.to_owned(), (sum_of(&text, "tbk"), sum_of(&text, "tb")));
        } else if name.starts_with("ld.") {
            loader_logs += 1;
            check_init_order(&text, &name);
        }
    }
    assert!(
        loader_logs > 0,
        "no loader log (LD_DEBUG_OUTPUT) was written"
    );
    assert!(
        !counted.is_empty(),
        "counter.so wrote nothing:\n{}",
        both(&output)
    );
    assert_eq!(
        counted.keys().collect::<Vec<_>>(),
        recorded.keys().collect::<Vec<_>>(),
        "the processes that counter.so and memprof wrote files for differ"
    );
    for (pid, count) in &counted {
        assert_eq!(
            recorded[pid], *count,
            "{what}, process {pid}: memprof's live (blocks, bytes) differ from counter.so's"
        );
        // Any allocation memprof makes for itself through the public functions runs inside its
        // reentrancy guard: counter.so counts it, memprof does not record it (it is not the
        // program's). They are freed before memprof
        // returns, so the live sets above are untouched; over the run, memprof has a few blocks
        // fewer, and never more.
        let (recorded_blocks, recorded_bytes) = recorded_total[pid];
        let (counted_blocks, counted_bytes) = counted_total[pid];
        assert!(
            recorded_blocks <= counted_blocks
                && recorded_bytes <= counted_bytes
                && counted_blocks - recorded_blocks <= 64,
            "{what}, process {pid}: allocated (blocks, bytes): memprof {:?}, counter.so {:?}",
            recorded_total[pid],
            counted_total[pid]
        );
        eprintln!(
            "{what}, process {pid}: live (blocks, bytes) {count:?} in both; allocated: memprof \
             {:?}, counter.so {:?}",
            recorded_total[pid], counted_total[pid]
        );
    }
    output
}

/// The sum of every value of `key` in a DHAT file (`"tb":37000`): over its program points, the
/// blocks (`tbk`) or bytes (`tb`) allocated in the run.
fn sum_of(dhat: &str, key: &str) -> u64 {
    let pattern = format!("\"{key}\":");
    dhat.match_indices(&pattern)
        .map(|(at, _)| {
            let digits: String = dhat[at + pattern.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<u64>().unwrap()
        })
        .sum()
}

/// In one process's loader log, the constructor called after memprof's is counter.so's.
fn check_init_order(log: &str, name: &str) {
    let inits: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("calling init: ").map(|(_, lib)| lib.trim()))
        .collect();
    let Some(at) = inits
        .iter()
        .position(|l| l.ends_with("/libmemprof_preload.so"))
    else {
        // A process that did not load the library (none here) would have no memprof file.
        return;
    };
    assert!(
        inits
            .get(at + 1)
            .is_some_and(|l| l.ends_with("/counter.so")),
        "{name}: counter.so's constructor does not run right after memprof's: {inits:?}"
    );
}

/// The Python executable itself (`python3` may be a wrapper script that runs it).
fn python() -> String {
    let output = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is required by this test (apt-get install -y python3)");
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[test]
fn python_dicts_and_lists() {
    let dir = scratch("exact_python");
    let mut command = clean_command(python());
    // Every object through malloc, not Python's own small-object arenas.
    command.env("PYTHONMALLOC", "malloc").args([
        "-c",
        "d = {str(i): [i] * (i % 7) for i in range(20000)}\n\
         l = [list(range(i % 50)) for i in range(5000)]\n\
         s = {(i, str(i)) for i in range(10000)}\n\
         del l\n\
         kept = [bytearray(1000) for _ in range(100)]\n\
         print(len(d), len(s), sum(len(b) for b in kept))",
    ]);
    let output = compare(&dir, command, "python3");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "20000 10000 100000\n"
    );
}

/// A repository of a few commits in `dir`, made without the library.
fn repository(dir: &Path) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| {
        let output = clean_command("git")
            .args(args)
            .current_dir(&repo)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .expect("git is required by this test (apt-get install -y git)");
        assert!(output.status.success(), "git {args:?}: {}", both(&output));
    };
    git(&["init", "-q", "-b", "main"]);
    for i in 0..5 {
        for j in 0..20 {
            std::fs::write(
                repo.join(format!("file{j}.txt")),
                format!("round {i} file {j}\n").repeat(j + 1),
            )
            .unwrap();
        }
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", &format!("commit {i}")]);
    }
    std::fs::write(repo.join("untracked.txt"), "new\n").unwrap();
    std::fs::write(repo.join("file3.txt"), "changed\n").unwrap();
    repo
}

#[test]
fn git_log_and_status() {
    let dir = scratch("exact_git");
    let repo = repository(&dir);
    for (args, expect) in [
        (&["--no-pager", "log", "--oneline"][..], "commit 0"),
        (&["status", "--porcelain"][..], "untracked.txt"),
    ] {
        let mut command = clean_command("git");
        command
            .args(args)
            .current_dir(&repo)
            .env("GIT_PAGER", "cat");
        let run_dir = dir.join(args[1]);
        std::fs::create_dir_all(&run_dir).unwrap();
        let output = compare(&run_dir, command, &format!("git {args:?}"));
        assert!(
            String::from_utf8_lossy(&output.stdout).contains(expect),
            "{}",
            both(&output)
        );
    }
}

#[test]
fn find_headers() {
    let dir = scratch("exact_find");
    let mut command = clean_command("find");
    command.args(["/usr/include", "-name", "*.h"]);
    let output = compare(&dir, command, "find");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("/usr/include/stdio.h"),
        "{}",
        both(&output)
    );
}

#[test]
fn tar_headers() {
    let dir = scratch("exact_tar");
    let mut command = clean_command("tar");
    command.args(["cf", "/dev/null", "/usr/include"]);
    compare(&dir, command, "tar");
}

#[test]
fn cxx_program() {
    let dir = scratch("exact_cxx");
    let program = compile(&dir, &["cxx.cpp"], "cxx", &["-O2", "-g"]);
    let output = compare(&dir, clean_command(&program), "cxx");
    assert!(output.status.success());
}
