//! Files memprof writes never go through a link planted beside them: a symbolic link at the name
//! `MEMPROF_OUTPUT`'s temporary had before (`.NAME.PID-0.tmp`) and one at `MEMPROF_TRACE`'s path
//! leave the files they point to as they were; the output and the trace are written as new
//! files, the trace's path named on stderr. A FIFO at an output's path is not replaced. Everything
//! happens in the test's scratch directory; the child is this test run again.

#![cfg(feature = "trace")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child: the scratch directory.
const CHILD: &str = "MEMPROF_TEST_OUTPUT_NO_FOLLOW_DIR";

const KEPT: &str = "this file is not memprof's\n";

fn mkfifo(path: &Path) {
    let name = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
}

fn child(dir: &Path) {
    let kept = std::hint::black_box(vec![1u8; 5000]);
    // The name the output's temporary had: the process id and the first call's number.
    std::os::unix::fs::symlink(
        dir.join("victim-output"),
        dir.join(format!(".live.folded.{}-0.tmp", std::process::id())),
    )
    .unwrap();
    memprof::write_outputs(&format!("{0}/live.folded,{0}/fifo.folded", dir.display()));
    drop(kept);
}

#[test]
fn files_are_not_written_through_links() {
    if let Some(dir) = std::env::var_os(CHILD) {
        child(Path::new(&dir));
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("output_no_follow");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for victim in ["victim-output", "victim-trace"] {
        std::fs::write(dir.join(victim), KEPT).unwrap();
    }
    let trace = dir.join("trace.mptrace");
    std::os::unix::fs::symlink(dir.join("victim-trace"), &trace).unwrap();
    let fifo = dir.join("fifo.folded");
    mkfifo(&fifo);

    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "files_are_not_written_through_links",
            "--nocapture",
        ])
        .env(CHILD, &dir)
        .env("MEMPROF_TRACE", &trace)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(child, Duration::from_secs(120), "the traced child");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");

    for victim in ["victim-output", "victim-trace"] {
        assert_eq!(
            std::fs::read_to_string(dir.join(victim)).unwrap(),
            KEPT,
            "{victim} was written through a link\n{stderr}"
        );
    }
    let live = dir.join("live.folded");
    assert!(
        stderr.contains(&format!("memprof: wrote {}", live.display())),
        "{stderr}"
    );
    let folded = std::fs::read_to_string(&live).unwrap();
    assert!(folded.lines().any(|l| l.ends_with(" 5000")), "{folded}");

    let meta = std::fs::symlink_metadata(&trace).unwrap();
    assert!(meta.is_file(), "the link at the trace's path is replaced");
    let bytes = std::fs::read(&trace).unwrap();
    assert!(bytes.starts_with(&memprof_trace::MAGIC), "not a trace");
    assert!(
        stderr.contains(&format!("memprof: trace written to {}", trace.display())),
        "{stderr}"
    );

    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo(),
        "the FIFO at an output's path is left as it was"
    );
    assert!(
        stderr.contains(&format!(
            "cannot write {}: a FIFO is there, not a regular file",
            fifo.display()
        )),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
