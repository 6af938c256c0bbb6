//! Embeds the viewer's page: every file of `viewer/` becomes an entry of `VIEWER_FILES` (its
//! name, its bytes, its content type), so `memprof serve` serves whatever files the page is made
//! of, from the binary, with nothing fetched at run time. And tells which build of the index
//! wrote a cached index (`MEMPROF_INDEX_SCHEMA`). With the `embedded-preload` feature (a
//! default), builds the preloaded library and embeds it too, so that one `cargo install` gives
//! `memprof run` everything it needs (`embedded_preload`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "txt" | "md" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// The package's directory, as cargo gives it to the build script when it runs (not as it was when
/// the script was compiled: a script compiled once may run for a copy of the package elsewhere).
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .expect("cargo sets CARGO_MANIFEST_DIR")
        .into()
}

fn main() {
    let dir = manifest_dir().join("viewer");
    println!("cargo::rerun-if-changed={}", dir.display());
    let mut files = Vec::new();
    let mut pending = vec![dir.clone()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            println!("cargo::rerun-if-changed={}", path.display());
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(relative) = path.strip_prefix(&dir) {
                let name = relative.to_string_lossy().replace('\\', "/");
                // Tests and tooling of the page stay out of the binary.
                if !name.starts_with('.')
                    && !name.contains("node_modules")
                    && !name.contains("test")
                {
                    files.push((name, path.clone()));
                }
            }
        }
    }
    files.sort();
    assert!(
        files.iter().any(|(name, _)| name == "index.html"),
        "{}: no index.html to embed",
        dir.display()
    );
    let mut code = String::from(
        "/// The viewer's files: name, bytes, content type.\npub const VIEWER_FILES: &[(&str, &[u8], &str)] = &[\n",
    );
    for (name, path) in &files {
        let _ = writeln!(
            code,
            "    ({name:?}, include_bytes!({:?}), {:?}),",
            path.display().to_string(),
            content_type(name)
        );
    }
    code.push_str("];\n");
    let out =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("viewer_files.rs");
    std::fs::write(out, code).expect("OUT_DIR is writable");
    index_schema();
    embedded_preload();
}

/// Builds `libmemprof_preload.so` (release, without debug information: the library names its own
/// frames from its symbol table) with the cargo that runs this script, in a target directory of
/// its own, `target/embedded-preload` in the workspace (a nested build in this build's own would
/// wait for its lock), and copies
/// it to `OUT_DIR/libmemprof_preload.so` for `include_bytes!`, with `MEMPROF_PRELOAD_HASH` (a
/// hash of its bytes, which names the copy `memprof run` writes to the user's cache). Without the
/// feature the file is empty and the command looks for the library beside itself only.
fn embedded_preload() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let destination = out.join("libmemprof_preload.so");
    let bytes = if std::env::var_os("CARGO_FEATURE_EMBEDDED_PRELOAD").is_some() {
        build_preload()
    } else {
        Vec::new()
    };
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in &bytes {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    std::fs::write(&destination, &bytes).expect("OUT_DIR is writable");
    println!("cargo::rustc-env=MEMPROF_PRELOAD_HASH={hash:016x}");
}

/// The nested build of [`embedded_preload`]; its bytes.
fn build_preload() -> Vec<u8> {
    let workspace = manifest_dir()
        .parent()
        .expect("the command's package is in the workspace")
        .to_path_buf();
    // What the library is built from: a change to any of it builds it again.
    for part in [
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "src",
        "preload",
        "memprof-trace",
        "http",
        "files",
    ] {
        println!("cargo::rerun-if-changed={}", workspace.join(part).display());
    }
    // One place per checkout, whatever target directory and flags this build has: the library
    // carried is built the same way for every build of the command (debug, release, with frame
    // pointers), once.
    let target = workspace.join("target").join("embedded-preload");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "memprof-preload",
            "--manifest-path",
        ])
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        // `cargo clippy` checks this build's own crates through a wrapper that compiles nothing
        // to link: the library is built by rustc alone.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the preloaded library: {e}"));
    assert!(
        status.success(),
        "the preloaded library's build failed (build the command with \
         `--no-default-features` to leave it out)"
    );
    let library = target.join("release").join("libmemprof_preload.so");
    std::fs::read(&library).unwrap_or_else(|e| panic!("{}: {e}", library.display()))
}

/// `MEMPROF_INDEX_SCHEMA`: a hash of the sources that define the viewer's index (its model and
/// the pass that builds it), its call sites and its cache, so that an index cached beside a trace
/// by another build of them is never read as this one's.
fn index_schema() {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in [
        "src/serve/index.rs",
        "src/serve/index/model.rs",
        "src/serve/index/pass.rs",
        "src/serve/index/build.rs",
        "src/serve/index/bins.rs",
        "src/serve/index/scan.rs",
        "src/serve/state.rs",
        "src/serve/cache.rs",
    ] {
        let path = manifest_dir().join(file);
        println!("cargo::rerun-if-changed={}", path.display());
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (list the index's files here)", path.display()));
        for &byte in file.as_bytes().iter().chain(&bytes) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!("cargo::rustc-env=MEMPROF_INDEX_SCHEMA={hash:016x}");
}
