//! The preloaded library the command carries (feature `embedded-preload`, a default): written to
//! the user's cache the first time `memprof run` needs it and finds none beside the command, so
//! that one `cargo install` is all `memprof run` needs.
//!
//! The copy is `CACHE/memprof/libmemprof_preload-HASH.so` (`CACHE`: `$XDG_CACHE_HOME`, else
//! `~/.cache`), `HASH` naming the build it came from. The directory is made private to the user
//! (mode 0700) and must be theirs; the file is read without following links and used only when
//! it is a regular file of the user's, writable by no one else, whose bytes are the command's
//! own; anything else at that name (another build's bytes, a truncated copy, a link planted
//! there) is replaced, through a new file renamed over it, never written through.

use std::fs::{self, DirBuilder, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The library's bytes, built with this command (empty without the feature).
const LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libmemprof_preload.so"));

/// A hash of [`LIBRARY`], from the build script.
const HASH: &str = include_str!(concat!(env!("OUT_DIR"), "/preload_hash.txt"));

/// The carried library, in the user's cache: `None` when the command carries none (built
/// without the feature); an error names the path that could not be used.
pub fn library() -> Option<Result<PathBuf, String>> {
    if LIBRARY.is_empty() {
        return None;
    }
    let Some(cache) = cache_dir() else {
        return Some(Err(
            "neither XDG_CACHE_HOME nor HOME names a directory for the carried preloaded library"
                .into(),
        ));
    };
    let dir = cache.join("memprof");
    let path = dir.join(format!("libmemprof_preload-{HASH}.so"));
    Some(
        install(&dir, &path)
            .map(|()| path.clone())
            .map_err(|e| format!("{}: {e}", path.display())),
    )
}

/// `$XDG_CACHE_HOME` when absolute, else `$HOME/.cache`.
fn cache_dir() -> Option<PathBuf> {
    let absolute = |name| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    absolute("XDG_CACHE_HOME").or_else(|| absolute("HOME").map(|home| home.join(".cache")))
}

/// Makes sure `path`, in `dir`, holds [`LIBRARY`].
fn install(dir: &Path, path: &Path) -> io::Result<()> {
    private_dir(dir)?;
    if holds_library(path) {
        return Ok(());
    }
    let mut replacement = memprof_files::Replacement::create(path)?;
    replacement.file().write_all(LIBRARY)?;
    // Whatever the umask: a copy others could write to would be refused, and written again, on
    // every run (`holds_library`).
    replacement
        .file()
        .set_permissions(fs::Permissions::from_mode(0o644))?;
    replacement.file().sync_all()?;
    replacement.commit()?;
    Ok(())
}

/// Creates `dir` (and its parents) if needed, the last one private; checks that it is a
/// directory of this user's that no one else may write to.
fn private_dir(dir: &Path) -> io::Result<()> {
    match DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(dir)?;
    let problem = if !meta.file_type().is_dir() {
        Some(format!(
            "{} is {}, not a directory",
            dir.display(),
            memprof_files::kind(&meta)
        ))
    } else if Some(meta.uid()) != euid() {
        Some(format!("{} belongs to another user", dir.display()))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!("{} may be written by other users", dir.display()))
    } else {
        None
    };
    match problem {
        Some(problem) => Err(io::Error::new(io::ErrorKind::PermissionDenied, problem)),
        None => Ok(()),
    }
}

/// Whether `path` is a regular file of this user's, writable by no one else, holding
/// [`LIBRARY`] (opened without following a link).
fn holds_library(path: &Path) -> bool {
    let Ok(mut file) = memprof_files::open_no_follow(path) else {
        return false;
    };
    let Ok(meta) = file.metadata() else {
        return false;
    };
    if !meta.file_type().is_file()
        || Some(meta.uid()) != euid()
        || meta.mode() & 0o022 != 0
        || meta.len() != LIBRARY.len() as u64
    {
        return false;
    }
    same_bytes(&mut file)
}

/// Whether `file` holds exactly [`LIBRARY`].
fn same_bytes(file: &mut File) -> bool {
    let mut bytes = Vec::with_capacity(LIBRARY.len());
    file.read_to_end(&mut bytes).is_ok() && bytes == LIBRARY
}

/// The effective user id: the owner Linux gives the process's own `/proc` directory; `None`
/// matches no owner, so that nothing is trusted when it cannot be read.
fn euid() -> Option<u32> {
    fs::metadata("/proc/self").ok().map(|meta| meta.uid())
}
