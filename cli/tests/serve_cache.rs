//! `memprof serve TRACE` keeps the index it built and its call sites beside the trace
//! (`TRACE.index`) and reads them the next time, with the same answers; a trace changed since, a damaged cache, or a link at the
//! cache's path is never trusted: the trace is indexed again, and nothing is written through the
//! link.

#[path = "support/server.rs"]
mod server;
mod support;

use server::Server;
use std::path::Path;

const ASKED: [&str; 4] = [
    "/api/summary",
    "/api/sites?limit=100",
    "/api/timeline?points=50",
    "/api/flame?what=live&at=peak",
];

/// Serves `trace`: whether the index was read from the cache, its messages, and its answers.
fn serve(trace: &Path) -> (bool, String, Vec<serde_json::Value>) {
    let server = Server::start(&[trace.to_str().unwrap()]);
    let messages = server.messages.join("\n");
    let read = messages.contains("index read from");
    let answers = ASKED.iter().map(|path| server.json(path)).collect();
    (read, messages, answers)
}

#[test]
fn the_index_kept_beside_the_trace() {
    let dir = std::env::temp_dir().join(format!("memprof-serve-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("known.mptrace");
    let cache = dir.join("known.mptrace.index");
    let (bytes, offsets) = support::known_trace();
    std::fs::write(&trace, &bytes).unwrap();

    // Built, then kept; read the second time, with the same answers.
    let (read, messages, built) = serve(&trace);
    assert!(!read, "{messages}");
    assert!(cache.is_file(), "{messages}");
    let (read, messages, again) = serve(&trace);
    assert!(read && !messages.contains("resolved again"), "{messages}");
    assert_eq!(again, built);

    // Damaged: ignored, rebuilt, kept again.
    let mut damaged = std::fs::read(&cache).unwrap();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x55;
    std::fs::write(&cache, &damaged).unwrap();
    let (read, messages, answers) = serve(&trace);
    assert!(!read && messages.contains("damaged; ignored"), "{messages}");
    assert_eq!(answers, built);
    assert!(serve(&trace).0);

    // A link at the cache's path, to a file holding a valid cache: not read through, and not
    // written through; the link is replaced by the cache.
    let victim = dir.join("victim");
    std::fs::rename(&cache, &victim).unwrap();
    let kept = std::fs::read(&victim).unwrap();
    std::os::unix::fs::symlink(&victim, &cache).unwrap();
    let (read, messages, _) = serve(&trace);
    assert!(
        !read && messages.contains("not a regular file"),
        "{messages}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), kept);
    assert!(std::fs::symlink_metadata(&cache).unwrap().is_file());

    // The trace changed (cut short after its worker's chunk): the cache is stale.
    std::fs::write(&trace, &bytes[..offsets[2]]).unwrap();
    let (read, messages, cut) = serve(&trace);
    assert!(!read && messages.contains("another trace"), "{messages}");
    assert_ne!(cut[0]["events"], built[0]["events"]);
    let (read, _, again) = serve(&trace);
    assert!(read);
    assert_eq!(again, cut);

    // A directory at the cache's path is left as it is, with one message.
    std::fs::remove_file(&cache).unwrap();
    std::fs::create_dir(&cache).unwrap();
    let (read, messages, answers) = serve(&trace);
    assert!(!read, "{messages}");
    assert_eq!(answers, cut);
    assert!(cache.is_dir());
    std::fs::remove_dir_all(&dir).unwrap();
}
