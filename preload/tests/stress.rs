//! Stress (tests/programs/stress.c): 8 threads allocate through every function and hand their
//! blocks to each other through a shared array under a mutex, while the main thread forks three
//! times (each child allocates and exits normally), for `MEMPROF_STRESS_SECONDS` seconds (10 by
//! default; the issue asks for a minute: `MEMPROF_STRESS_SECONDS=60`). The run is killed and fails
//! after `seconds + 120` seconds. The program frees everything but the blocks it keeps on purpose
//! (`keep_blocks`: 100 blocks, 16 * i + 7 bytes): memprof's live set at exit has exactly those
//! under `keep_blocks` and nothing under the workers; each child's export has the three blocks
//! it kept.

mod support;

use std::time::Duration;
use support::*;

#[test]
fn threads_hand_blocks_around_while_forking() {
    let seconds: u64 = std::env::var("MEMPROF_STRESS_SECONDS")
        .ok()
        .map(|s| s.parse().expect("MEMPROF_STRESS_SECONDS: whole seconds"))
        .unwrap_or(10);
    let dir = scratch("stress");
    let program = compile(&dir, &["stress.c"], "stress", &["-O2", "-g", "-pthread"]);
    let mut command = clean_command(&program);
    command
        .arg(seconds.to_string())
        .env("LD_PRELOAD", library())
        .env("MEMPROF_MIN_BYTES", "0")
        .env("MEMPROF_OUTPUT", dir.join("out-%p.tsv"));
    let started = std::time::Instant::now();
    let output = run_within(&mut command, Duration::from_secs(seconds + 120), "stress");
    eprintln!("stress ran {:?} for {seconds} s", started.elapsed());
    assert!(output.status.success(), "{}", both(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let fields: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(fields.len(), 7, "{stdout}");
    assert_eq!((fields[0], fields[3]), ("kept", "children"), "{stdout}");
    let kept: (u64, u64) = (fields[1].parse().unwrap(), fields[2].parse().unwrap());
    assert_eq!(kept, (100, (0..100).map(|i| 16 * i + 7).sum()));

    let read = |pid: &str| -> Vec<Group> {
        let path = dir.join(format!("out-{pid}.tsv"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut logs = tsv_logs(&text);
        assert_eq!(logs.len(), 1, "{text}");
        logs.pop().unwrap()
    };
    let mentioning = |log: &[Group], function: &str| -> (u64, u64) {
        log.iter()
            .filter(|g| g.frames.iter().any(|f| f.contains(function)))
            .fold((0, 0), |(c, b), g| (c + g.count, b + g.bytes))
    };
    // `command.spawn` does not give the pid to `run_within`'s caller: the parent's file is the
    // one that is not a child's.
    let children: Vec<&str> = fields[4..].to_vec();
    let mut parents = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(pid) = name
            .strip_prefix("out-")
            .and_then(|n| n.strip_suffix(".tsv"))
            && !children.contains(&pid)
        {
            parents.push(pid.to_owned());
        }
    }
    assert_eq!(parents.len(), 1, "{parents:?}");
    let log = read(&parents[0]);
    let shown = show(&log);
    assert_eq!(mentioning(&log, "keep_blocks"), kept, "{shown}");
    assert_eq!(mentioning(&log, "stress_worker"), (0, 0), "{shown}");
    assert_eq!(mentioning(&log, "stress_alloc"), (0, 0), "{shown}");
    assert_eq!(mentioning(&log, "child_keep"), (0, 0), "{shown}");
    for child in children {
        let log = read(child);
        assert_eq!(mentioning(&log, "child_keep"), (3, 2997), "{}", show(&log));
        assert_eq!(mentioning(&log, "keep_blocks"), (0, 0), "{}", show(&log));
    }
}
