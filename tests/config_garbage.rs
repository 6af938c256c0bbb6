//! Every `MEMPROF_*` variable fed garbage at once, text and bytes that are not UTF-8: the program
//! runs to its end, with a report, and each variable that cannot be read is named in a warning.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child.
const CHILD: &str = "MEMPROF_TEST_CONFIG_GARBAGE";

/// The variables whose garbage must be named in a warning. `MEMPROF_TRACE_TARGET` takes any text
/// as a type name, and `MEMPROF_OUTPUT` any text as a file name (the test sets it to one whose
/// ending no format has, which is named in the warning at exit).
const READ: &[&str] = &[
    "MEMPROF_ENABLED",
    "MEMPROF_STACK_DEPTH",
    "MEMPROF_STACK_SKIP",
    "MEMPROF_MIN_BYTES",
    "MEMPROF_PRINT_AT_EXIT",
    "MEMPROF_REF_LIMIT",
    "MEMPROF_REF_LEVEL",
    "MEMPROF_TRACE_MIN_COUNT",
    "MEMPROF_DUMP_SIGNAL",
    "MEMPROF_PEAK",
    "MEMPROF_SAMPLE_INTERVAL",
    "MEMPROF_TOGGLE_SIGNAL",
    "MEMPROF_UNWINDER",
    "MEMPROF_HTTP",
];

#[test]
fn garbage_in_every_variable() {
    if std::env::var_os(CHILD).is_some() {
        let kept: Vec<Vec<u8>> = (0..100).map(|i| vec![i as u8; 2000]).collect();
        memprof::pretty_log_allocations(&mut std::io::stdout()).unwrap();
        assert_eq!(kept.len(), 100);
        return;
    }
    let garbage: [&OsStr; 3] = [
        OsStr::new("\u{1F4A5} -1e9x"),
        OsStr::from_bytes(b"\xff\xfe\x01garbage"),
        OsStr::new("bytes:-3,999999999999999999999999"),
    ];
    for (round, value) in garbage.iter().enumerate() {
        let dir = std::env::temp_dir().join(format!("memprof-garbage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", "garbage_in_every_variable", "--nocapture"])
            .env(CHILD, "1")
            .env("MEMPROF_TRACE_TARGET", value)
            .env("MEMPROF_OUTPUT", dir.join("heap.unknown-ending"));
        for name in READ {
            command.env(name, value);
        }
        let child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let output = common::wait_within(
            child,
            Duration::from_secs(60),
            &format!("round {round}'s child"),
        );
        let _ = std::fs::remove_dir_all(&dir);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "round {round}: {:?}\n{stderr}",
            output.status
        );
        for name in READ {
            assert!(
                stderr.contains(name),
                "round {round}: no warning names {name}:\n{stderr}"
            );
        }
        eprintln!(
            "round {round}: {} warnings, exit {:?}",
            stderr.matches("memprof:").count(),
            output.status
        );
    }
}
