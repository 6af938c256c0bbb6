//! `memprof attach` refuses, naming the cause and the fix, and changes nothing in the process: no
//! such process; a kernel thread; a statically linked program; a 32-bit one; a program whose
//! `malloc` is its own; one with memprof built in; one another tracer holds; another user's
//! process; one whose C library was replaced on disk since it started; a stopped one; a thread's
//! id given for a process's; one its own user may not trace (not dumpable). After
//! each, the process has no tracer, no library of memprof's mapped, and answers as before.
//!
//! `kernel.yama.ptrace_scope` cannot be set from a test (it is the machine's); its message is
//! built by the same check (`check_ptrace_scope`).

#[path = "support/attach.rs"]
mod attach;

use attach::*;

/// Runs `memprof attach PID` and checks that it failed with a message holding every one of
/// `words`; then that `target` was left alone and still answers.
fn refused(dir: &std::path::Path, mut memprof: Command, target: &mut Target, words: &[&str]) {
    let output = run(memprof
        .args(["attach", "--duration", "1"])
        .arg(target.pid().to_string()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{}", both(&output));
    for word in words {
        assert!(stderr.contains(word), "{word:?} in {stderr}");
    }
    left_alone(target.pid());
    target.signal("-USR2");
    target.expect("alive 1");
    assert!(
        std::fs::read_dir(dir).unwrap().all(|e| {
            let name = e.unwrap().file_name();
            !name.to_string_lossy().ends_with(".mptrace")
        }),
        "a trace was written"
    );
}

/// Process `pid` has no tracer and no library of memprof's.
fn left_alone(pid: u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.lines().any(|l| l == "TracerPid:\t0"), "{status}");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(!maps.contains("memprof"), "{maps}");
}

fn refused_program(name: &str, define: &str, words: &[&str]) {
    let dir = scratch(name);
    let program = compile("cc", &dir, &["attach_refused.c"], name, &[define]);
    let mut target = Target::start(Command::new(&program), "ready");
    refused(&dir, memprof(&dir), &mut target, words);
}

#[test]
fn no_such_process() {
    let dir = scratch("none");
    // Above the largest pid Linux gives (4194304).
    let output = run(memprof(&dir).args(["attach", "4194999"]));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no such process: 4194999"), "{stderr}");
}

#[test]
fn a_kernel_thread() {
    let dir = scratch("kernel_thread");
    // The first kernel thread listed (kthreadd, pid 2, on a machine of its own).
    let pid = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .is_ok_and(|s| s.lines().any(|l| l == "Kthread:\t1"))
        })
        .expect("a kernel thread in /proc");
    let output = run(memprof(&dir).args(["attach", &pid.to_string()]));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "process {pid} has no program file: a kernel thread"
        )),
        "{stderr}"
    );
}

#[test]
fn a_static_program() {
    refused_program(
        "static",
        "-static",
        &["statically linked", "Link it dynamically"],
    );
}

#[test]
fn a_program_with_its_own_malloc() {
    refused_program(
        "own_malloc",
        "-DOWN_MALLOC",
        &["its malloc is", "own_malloc's", "jemalloc or tcmalloc"],
    );
}

#[test]
fn a_program_with_memprof_built_in() {
    refused_program(
        "built_in",
        "-DBUILT_IN",
        &["has memprof built in", "record it twice"],
    );
}

#[test]
fn a_32_bit_program() {
    let dir = scratch("bits32");
    let object = dir.join("sleep32.o");
    let program = dir.join("sleep32");
    for command in [
        Command::new("as")
            .arg("--32")
            .arg("-o")
            .arg(&object)
            .arg(source("sleep32.s")),
        Command::new("ld")
            .args(["-m", "elf_i386", "-o"])
            .arg(&program)
            .arg(&object),
    ] {
        let output = command.output().expect("binutils (as, ld) are required");
        assert!(output.status.success(), "{}", both(&output));
    }
    let mut child = Command::new(&program).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let output = run(memprof(&dir).args(["attach"]).arg(child.id().to_string()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{}", both(&output));
    assert!(stderr.contains("is a 32-bit program"), "{stderr}");
    left_alone(child.id());
    assert!(child.try_wait().unwrap().is_none(), "the program ended");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_process_another_tracer_holds() {
    let dir = scratch("traced");
    let program = compile("cc", &dir, &["attach_refused.c"], "traced", &[]);
    let mut target = Target::start(Command::new(&program), "ready");
    let pid = target.pid();
    // gdb holds it for a few seconds, then lets it go.
    let mut gdb = Command::new("gdb")
        .args([
            "-nx",
            "-q",
            "-batch",
            "-p",
            &pid.to_string(),
            "-ex",
            "shell sleep 6",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("gdb is required (scripts/install-deps.sh)");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        if !status.lines().any(|l| l == "TracerPid:\t0") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "gdb did not attach");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let output = run(memprof(&dir).args(["attach"]).arg(pid.to_string()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{}", both(&output));
    assert!(
        stderr.contains("is being traced already by process"),
        "{stderr}"
    );
    assert!(stderr.contains("(gdb)"), "{stderr}");
    assert!(gdb.wait().unwrap().success());
    left_alone(pid);
    target.signal("-USR2");
    target.expect("alive 1");
}

#[test]
fn another_users_process() {
    let dir = scratch("other_user");
    let program = compile("cc", &dir, &["attach_refused.c"], "mine", &[]);
    let mut target = Target::start(Command::new(&program), "ready");
    let memprof = memprof(&dir);
    if effective_uid() == 0 {
        // The command as `nobody`, the process root's.
        let mut as_nobody = Command::new("setpriv");
        as_nobody
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(memprof.get_program())
            .env("HOME", dir.join("home"));
        refused(
            &dir,
            as_nobody,
            &mut target,
            &["belongs to another user (uid 0)", "as root"],
        );
    } else {
        // The command as this user, against init, root's.
        let output = run(Command::new(memprof.get_program()).args(["attach", "1"]));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("belongs to another user (uid 0)"),
            "{stderr}"
        );
    }
}

/// The C library the process runs was deleted since it started (as an upgrade replaces it): the
/// file at its path is not the one mapped, so its functions' addresses cannot be read from it.
#[test]
fn a_process_whose_c_library_was_replaced() {
    let dir = scratch("replaced_libc");
    let program = compile("cc", &dir, &["attach_refused.c"], "replaced", &[]);
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let libc = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            p.rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with("libc.so"))
        })
        .expect("this test's own C library")
        .to_owned();
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let copy = lib.join(std::path::Path::new(&libc).file_name().unwrap());
    std::fs::copy(&libc, &copy).unwrap();
    let mut command = Command::new(&program);
    command.env("LD_LIBRARY_PATH", &lib);
    let mut target = Target::start(command, "ready");
    let mapped = std::fs::read_to_string(format!("/proc/{}/maps", target.pid())).unwrap();
    assert!(mapped.contains(copy.to_str().unwrap()), "{mapped}");
    std::fs::remove_file(&copy).unwrap();
    refused(
        &dir,
        memprof(&dir),
        &mut target,
        &["deleted or replaced on disk", "Restart it"],
    );
}

/// A stopped process (SIGSTOP, Ctrl-Z) is refused at once, rather than waited for.
#[test]
fn a_stopped_process() {
    let dir = scratch("stopped");
    let program = compile("cc", &dir, &["attach_refused.c"], "stopped", &[]);
    let mut target = Target::start(Command::new(&program), "ready");
    target.signal("-STOP");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{}/status", target.pid()))
        .unwrap()
        .contains("State:\tT (stopped)")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the target did not stop"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let output = run(memprof(&dir)
        .args(["attach", "--duration", "1"])
        .arg(target.pid().to_string()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{}", both(&output));
    assert!(
        stderr.contains("is stopped") && stderr.contains("kill -CONT"),
        "{stderr}"
    );
    target.signal("-CONT");
    left_alone(target.pid());
    target.signal("-USR2");
    target.expect("alive 1");
}

/// A process that made itself not dumpable, attached by its own user: refused naming the cause
/// (`nobody` for both when the tests run as root).
#[test]
fn a_process_that_is_not_dumpable() {
    let dir = scratch("not_dumpable");
    let program = compile("cc", &dir, &["attach_refused.c"], "nodump", &["-DNODUMP"]);
    let as_user = |program: &std::ffi::OsStr| {
        let mut command = Command::new("setpriv");
        if effective_uid() == 0 {
            command.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        }
        command.arg("--").arg(program);
        command
    };
    let mut target = Target::start(as_user(program.as_os_str()), "ready");
    let memprof = memprof(&dir);
    let mut command = as_user(memprof.get_program());
    command.env("HOME", dir.join("home"));
    refused(
        &dir,
        command,
        &mut target,
        &[
            "cannot be read nor traced by its own user: it is not dumpable",
            "attach as root",
        ],
    );
}

/// This process's effective user id.
fn effective_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|u| u.split_whitespace().nth(1)?.parse().ok())
        .unwrap()
}

/// A thread's id (as `top -H` lists it) is refused, naming its process, for a program with
/// memprof built in too; the process's own id attaches.
#[test]
fn a_thread_of_a_process() {
    for (name, defines) in [
        ("thread", &["-DTHREAD"][..]),
        ("thread_built_in", &["-DTHREAD", "-DBUILT_IN"][..]),
    ] {
        let dir = scratch(name);
        let program = compile("cc", &dir, &["attach_refused.c"], name, defines);
        let mut target = Target::start(Command::new(&program), "ready");
        let pid = target.pid();
        let task = format!("/proc/{pid}/task");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let thread = loop {
            let other = std::fs::read_dir(&task)
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .find(|&tid| tid != pid);
            if let Some(tid) = other {
                break tid;
            }
            assert!(std::time::Instant::now() < deadline, "no second thread");
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let output = run(memprof(&dir)
            .args(["attach", "--duration", "1"])
            .arg(thread.to_string()));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{}", both(&output));
        assert!(
            stderr.contains(&format!("{thread} is a thread of process {pid}"))
                && stderr.contains(&format!("memprof attach {pid}")),
            "{stderr}"
        );
        left_alone(pid);
        target.signal("-USR2");
        target.expect("alive 1");
    }
}

/// `--output` files: an ending memprof does not write, or a directory that does not exist, is
/// refused before the process is touched; a file the process could not write (a directory in
/// its place) is named after the detach, rather than left unsaid.
#[test]
fn an_output_that_cannot_be_written() {
    let dir = scratch("outputs");
    let program = compile("cc", &dir, &["attach_refused.c"], "outputs", &[]);
    let mut target = Target::start(Command::new(&program), "ready");
    let pid = target.pid().to_string();
    for (output, words) in [
        (
            "heap.txt",
            &["--output heap.txt: unknown file ending", ".tsv"][..],
        ),
        (
            "none/heap.tsv",
            &["--output none/heap.tsv", "is not a directory"][..],
        ),
    ] {
        let output = run(memprof(&dir)
            .args(["attach", "--duration", "1", "--output", output])
            .arg(&pid));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{}", both(&output));
        for word in words {
            assert!(stderr.contains(word), "{word:?} in {stderr}");
        }
        left_alone(target.pid());
    }
    std::fs::create_dir(dir.join("taken.tsv")).unwrap();
    let output = run(memprof(&dir)
        .args([
            "attach",
            "--duration",
            "1",
            "--output",
            "taken.tsv,heap.tsv",
        ])
        .arg(&pid));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}", both(&output));
    assert!(
        stderr.contains(&format!(
            "{} was not written",
            dir.join("taken.tsv").display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("heap.tsv was not written"), "{stderr}");
    assert!(dir.join("heap.tsv").is_file());
    target.signal("-USR2");
    target.expect("alive 1");
}

/// A trace that cannot be made: in a directory that does not exist, the command refuses before
/// touching the process; at a path the process cannot create (a directory there), the library
/// changes nothing and says so, rather than record for no one. The process answers after each,
/// and a later attach records.
#[test]
fn a_trace_that_cannot_be_made() {
    let dir = scratch("no_trace");
    let program = compile("cc", &dir, &["attach_refused.c"], "untraced", &[]);
    let mut target = Target::start(Command::new(&program), "ready");
    let pid = target.pid().to_string();
    let output = run(memprof(&dir).args([
        "attach",
        "--duration",
        "1",
        "--trace",
        "missing/t.mptrace",
        &pid,
    ]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("missing is not a directory"), "{stderr}");
    left_alone(target.pid());

    std::fs::create_dir_all(dir.join("taken")).unwrap();
    let output = run(memprof(&dir).args(["attach", "--duration", "1", "--trace", "taken", &pid]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("could not create its trace") && stderr.contains("nothing was changed"),
        "{stderr}"
    );
    target.signal("-USR2");
    target.expect("alive 1");

    let output =
        run(memprof(&dir).args(["attach", "--duration", "1", "--trace", "t.mptrace", &pid]));
    assert!(output.status.success(), "{}", both(&output));
    assert!(dir.join("t.mptrace").is_file());
    target.signal("-USR2");
    target.expect("alive 2");
}

/// `--duration` is a number of seconds from 0 to a year: `nan`, `inf` and negative numbers are
/// refused before anything is done (they used to end the command once the process was attached).
#[test]
fn a_duration_that_is_not_seconds() {
    let dir = scratch("duration");
    for bad in ["nan", "inf", "-1", "1e30", "soon"] {
        let output = run(memprof(&dir).args(["attach", &format!("--duration={bad}"), "4194999"]));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.contains("is not a number of seconds"),
            "{bad}: {stderr}"
        );
    }
    let output = run(memprof(&dir).args(["attach", "--duration", "0.5", "4194999"]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no such process: 4194999"), "{stderr}");
}

/// A `--serve` address that cannot be had (taken, or not an address) is refused before the
/// process is touched.
#[test]
fn a_viewer_address_that_cannot_be_had() {
    let dir = scratch("serve_taken");
    let program = compile("cc", &dir, &["attach_refused.c"], "unserved", &[]);
    let mut target = Target::start(Command::new(&program), "ready");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    for address in [taken.as_str(), "not-an-address"] {
        let output = run(memprof(&dir)
            .args(["attach", "--duration", "1", "--serve", address])
            .arg(target.pid().to_string()));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{address}: {stderr}");
        assert!(
            stderr.contains(&format!("--serve {address}:")),
            "{address}: {stderr}"
        );
        left_alone(target.pid());
    }
    target.signal("-USR2");
    target.expect("alive 1");
}
