//! The preloaded library the command carries: `memprof run` with no library beside the command
//! (a copy of it alone in a directory, as `cargo install` leaves it) writes the one it carries to
//! the user's cache, uses it again while it is intact, and replaces whatever else stands at its
//! name (other bytes, a link, which is never followed) through a new file; it refuses a cache
//! directory others may write to. The program run is `/bin/ls`, a program never built with
//! memprof.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Runs the copy of the command at `memprof` with `home` as `HOME` (and no `XDG_CACHE_HOME`).
fn run(memprof: &Path, home: &Path, dir: &Path) -> Output {
    let child = Command::new(memprof)
        .args(["run", "--trace"])
        .arg(dir.join("ls-%p.mptrace"))
        .args(["--", "/bin/ls", "-la", "/"])
        .env("HOME", home)
        .env_remove("XDG_CACHE_HOME")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_within(child, Duration::from_secs(120), "memprof run")
}

/// The one library in the cache directory.
fn cached(cache: &Path) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "so"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

#[test]
fn the_carried_library_is_written_to_the_cache_and_kept_intact() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("embedded_preload");
    let _ = std::fs::remove_dir_all(&dir);
    let bin = dir.join("bin");
    let home = dir.join("home");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    // Alone in its directory: no library beside it, nor in ../lib.
    let memprof = bin.join("memprof");
    std::fs::copy(env!("CARGO_BIN_EXE_memprof"), &memprof).unwrap();

    let first = run(&memprof, &home, &dir);
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{stderr}");
    assert!(stderr.contains("allocations: "), "{stderr}");
    let cache = home.join(".cache/memprof");
    assert_eq!(
        std::fs::metadata(&cache).unwrap().mode() & 0o777,
        0o700,
        "the cache directory is private"
    );
    let library = cached(&cache);
    let name = library.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("libmemprof_preload-"),
        "named with the build's hash: {name}"
    );
    let bytes = std::fs::read(&library).unwrap();
    assert!(bytes.starts_with(b"\x7fELF"), "a shared object");
    let inode = std::fs::metadata(&library).unwrap().ino();

    // Intact: used as it is.
    let again = run(&memprof, &home, &dir);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        std::fs::metadata(&library).unwrap().ino(),
        inode,
        "rewritten"
    );

    // Other bytes of the same length: replaced.
    let mut other = bytes.clone();
    let last = other.len() - 1;
    other[last] ^= 0xff;
    std::fs::write(&library, &other).unwrap();
    let fixed = run(&memprof, &home, &dir);
    assert!(
        fixed.status.success(),
        "{}",
        String::from_utf8_lossy(&fixed.stderr)
    );
    assert_eq!(std::fs::read(&library).unwrap(), bytes);

    // A link planted at the name: replaced by a file, its target untouched.
    let victim = dir.join("victim");
    std::fs::write(&victim, b"not to be written").unwrap();
    std::fs::remove_file(&library).unwrap();
    std::os::unix::fs::symlink(&victim, &library).unwrap();
    let unlinked = run(&memprof, &home, &dir);
    assert!(
        unlinked.status.success(),
        "{}",
        String::from_utf8_lossy(&unlinked.stderr)
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"not to be written");
    assert!(std::fs::symlink_metadata(&library).unwrap().is_file());
    assert_eq!(std::fs::read(&library).unwrap(), bytes);
    assert_eq!(cached(&cache), library, "no temporary file left behind");

    // A cache directory others may write to: refused, naming it.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let refused = run(&memprof, &home, &dir);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("may be written by other users") && stderr.contains(".cache/memprof"),
        "{stderr}"
    );
}
