//! Helpers shared by the integration tests.

#![allow(dead_code)]

mod golden;
pub mod c_library;
#[cfg(feature = "trace")]
pub mod trace_replay;

#[allow(unused_imports)]
pub use golden::golden;

/// The groups of the live report whose context mentions `needle`, with every frame shown.
pub fn groups_mentioning(needle: &str, depth: usize) -> Vec<memprof::Group> {
    let snapshot = memprof::Snapshot::take();
    let options = memprof::ReportOptions::default().min_bytes(0).depth(depth);
    let report = memprof::with_symbolizer(|symbolizer| {
        memprof::Report::live(&snapshot, symbolizer, &options)
    });
    report
        .groups
        .into_iter()
        .filter(|g| g.context.iter().any(|f| f.contains(needle)))
        .collect()
}

/// Synthetic live blocks, 4 KiB apart from 0x10_0000: `count` blocks of `size` bytes per
/// `(stack, size, count)`, in that order.
pub fn blocks(spec: &[(u32, u64, usize)]) -> Vec<memprof::LiveBlock> {
    let mut at = 0x10_0000;
    let mut blocks = Vec::new();
    for &(stack, size, count) in spec {
        for _ in 0..count {
            blocks.push(memprof::LiveBlock {
                address: at,
                size,
                stack: memprof::StackId(stack),
                tag: 0,
            });
            at += 0x1000;
        }
    }
    blocks
}

/// A synthetic frame with a function, a file and a position.
pub fn frame(function: &str, file: &str, line: u32, column: u32) -> memprof::Frame {
    memprof::Frame {
        function: Some(function.into()),
        file: Some(file.into()),
        line,
        column,
    }
}

/// A synthetic stack with its allocated totals (live counts are derived from the blocks).
pub fn stack(
    frames: &[usize],
    allocated_blocks: u64,
    allocated_bytes: u64,
) -> memprof::StackSummary {
    memprof::StackSummary {
        frames: frames.iter().map(|&a| memprof::ReturnAddress(a)).collect(),
        allocated_blocks,
        allocated_bytes,
        ..Default::default()
    }
}

/// Runs a command and returns its stdout, failing the test with its stderr when it fails.
pub fn run(command: &mut std::process::Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The Chromium on this machine, if any.
pub fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            std::process::Command::new(name)
                .arg("--version")
                .output()
                .is_ok()
        })
}

/// Loads `page` in headless `chromium`, with a fresh profile under `profile`, lets its scripts
/// run for up to `budget_ms` of virtual time, and returns the page's DOM.
pub fn headless_dom(
    chromium: &str,
    page: &std::path::Path,
    profile: &std::path::Path,
    budget_ms: u32,
) -> String {
    run(std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--allow-file-access-from-files",
            "--dump-dom",
        ])
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", page.display()))
        .env("LANG", "en_US.UTF-8")
        .env("LANGUAGE", "en_US"))
}

/// Says that a real reader of an output is missing: a failure when the README's test command runs
/// (`scripts/test.sh` sets `MEMPROF_REQUIRE_TOOLS=1`, and `scripts/install-deps.sh` installs every
/// reader), a skip with a message when a test is run on its own.
pub fn missing_tool(check: &str, install: &str) {
    let message =
        format!("{check}: the tool is missing ({install}, or bash scripts/install-deps.sh)");
    if std::env::var_os("MEMPROF_REQUIRE_TOOLS").is_some_and(|v| v == "1") {
        panic!("{message}");
    }
    eprintln!("SKIPPED {message}");
}

/// Waits for `child` and collects what it writes to its piped stdout and stderr (read while it
/// runs, so that a chatty child never blocks on a full pipe). A child still running after
/// `deadline` is killed and fails the test, as `what` hung: a hang fails instead of stalling.
pub fn wait_within(
    mut child: std::process::Child,
    deadline: std::time::Duration,
    what: &str,
) -> std::process::Output {
    use std::io::Read;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                pipe.read_to_end(&mut bytes).ok();
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "{what} hung for {deadline:?} and was killed\n{}\n{}",
                String::from_utf8_lossy(&stdout.join().unwrap()),
                String::from_utf8_lossy(&stderr.join().unwrap())
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}
