//! Helpers shared by the integration tests.

#![allow(dead_code)]

mod golden;
/// The messages of `profile.proto`, from the same file the library encodes them with.
#[path = "../../src/export/pprof/proto.rs"]
pub mod pprof_proto;
pub mod c_library;
pub mod foreign_thread;
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

/// Allocates forever, keeping about a thousand blocks live and marking `round` after each round
/// of 10,000 allocations: the program a test kills once its trace has grown.
#[inline(never)]
pub fn allocate_forever() -> ! {
    let mut kept = Vec::new();
    let mut round = 0u64;
    loop {
        for i in 0..10_000 {
            let block = vec![round as u8; 16 + i % 256];
            if i % 10 == 0 {
                kept.push(block);
            }
        }
        kept.truncate(1000);
        round += 1;
        memprof::mark("round");
    }
}

/// Runs `program` (a test binary re-run as [`allocate_forever`]) with its trace going to `trace`,
/// and kills it with `SIGKILL` once the trace holds `at_least` bytes.
pub fn trace_then_kill(
    program: &mut std::process::Command,
    trace: &std::path::Path,
    at_least: u64,
) {
    let mut child = program.env("MEMPROF_TRACE", trace).spawn().unwrap();
    let started = std::time::Instant::now();
    while std::fs::metadata(trace).map_or(0, |m| m.len()) < at_least {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the trace does not grow"
        );
        assert!(child.try_wait().unwrap().is_none(), "the child ended");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Opens the DHAT JSON `file` in Valgrind's own `dh_view.html` in headless Chromium (the page
/// and its scripts copied under `dir`), checks that the page loaded the file and showed no error,
/// and returns its DOM; `None`, through [`missing_tool`], without Chromium.
pub fn dh_view_dom(file: &std::path::Path, dir: &std::path::Path) -> Option<String> {
    let Some(chromium) = chromium() else {
        missing_tool("DHAT viewer check", "apt-get install -y chromium");
        return None;
    };
    let viewer =
        run(std::process::Command::new("sh").args(["-c", "dpkg -L valgrind | grep dh_view.html"]));
    let viewer = std::path::Path::new(viewer.trim());
    let page_dir = dir.join("dh_view");
    std::fs::create_dir_all(&page_dir).unwrap();
    for name in ["dh_view.js", "dh_view.css"] {
        std::fs::copy(viewer.with_file_name(name), page_dir.join(name)).unwrap();
    }
    let data = std::fs::read_to_string(file).unwrap().replace("</", "<\\/");
    let loader = include_str!("../tools/dh_view_loader.html").replace("@DATA@", &data);
    let page = std::fs::read_to_string(viewer)
        .unwrap()
        .replace("</head>", &format!("{loader}</head>"));
    let page_path = page_dir.join("view.html");
    std::fs::write(&page_path, page).unwrap();
    let dom = headless_dom(chromium, &page_path, &page_dir.join("profile"), 10_000);
    assert!(
        !dom.contains("id=\"memprof-data\""),
        "the page did not load the file"
    );
    assert!(
        !dom.contains("class=\"error\""),
        "the viewer reported an error:\n{dom}"
    );
    Some(dom)
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

/// pprof built from Debian's `golang-github-google-pprof-dev` sources, cached under `target/`.
pub fn pprof_binary() -> Option<std::path::PathBuf> {
    if std::process::Command::new("go")
        .arg("version")
        .output()
        .is_err()
    {
        missing_tool(
            "pprof check",
            "apt-get install -y golang-go golang-github-google-pprof-dev",
        );
        return None;
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pprof");
    let binary = dir.join("pprof");
    if binary.exists() {
        return Some(binary);
    }
    std::fs::create_dir_all(&dir).unwrap();
    let building = dir.join(format!("pprof.{}", std::process::id()));
    let output = std::process::Command::new("go")
        .args(["build", "-o"])
        .arg(&building)
        .arg("github.com/google/pprof")
        .env("GO111MODULE", "off")
        .env("GOPATH", "/usr/share/gocode")
        .env("GOCACHE", dir.join("gocache"))
        .env("GOFLAGS", "")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "building pprof failed (apt-get install -y golang-go golang-github-google-pprof-dev): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(&building, &binary).unwrap();
    Some(binary)
}

/// A response read by [`http_get`].
#[derive(Debug)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The head: status line and headers.
    pub head: String,
    /// The body.
    pub body: Vec<u8>,
}

/// `GET target` (a path with its query) from the server at `address`, over a connection of its
/// own that the server closes after its response.
pub fn http_get(address: std::net::SocketAddr, target: &str) -> std::io::Result<HttpResponse> {
    http_request(
        address,
        &format!("GET {target} HTTP/1.1\r\nHost: {address}\r\n\r\n"),
    )
}

/// Sends `request` as it is to the server at `address` and reads its response to the end.
pub fn http_request(address: std::net::SocketAddr, request: &str) -> std::io::Result<HttpResponse> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(120)))?;
    stream.write_all(request.as_bytes())?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes)?;
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of head"))?;
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {head:?}")))?;
    Ok(HttpResponse {
        status,
        head,
        body: bytes[split + 4..].to_vec(),
    })
}

/// The heap profile of `gz`, a gzip-compressed `profile.proto`.
pub fn decode_pprof(gz: &[u8]) -> pprof_proto::Profile {
    use prost::Message;
    use std::io::Read;
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut bytes)
        .expect("a gzip stream");
    pprof_proto::Profile::decode(&bytes[..]).expect("a profile")
}

/// Per sample type (`alloc_objects`, `alloc_space`, `inuse_objects`, `inuse_space`, in the
/// profile's order), the sum of the values of the samples whose stack names `function`.
pub fn pprof_cumulative(profile: &pprof_proto::Profile, function: &str) -> Vec<i64> {
    let s = |i: i64| profile.string_table[i as usize].as_str();
    let named: std::collections::HashSet<u64> = profile
        .function
        .iter()
        .filter(|f| s(f.name) == function)
        .map(|f| f.id)
        .collect();
    let locations: std::collections::HashSet<u64> = profile
        .location
        .iter()
        .filter(|l| l.line.iter().any(|line| named.contains(&line.function_id)))
        .map(|l| l.id)
        .collect();
    let mut sums = vec![0; profile.sample_type.len()];
    for sample in &profile.sample {
        if sample.location_id.iter().any(|l| locations.contains(l)) {
            for (sum, value) in sums.iter_mut().zip(&sample.value) {
                *sum += value;
            }
        }
    }
    sums
}
