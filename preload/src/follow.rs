//! Child processes: a program the process `exec`s inherits `LD_PRELOAD`, and with it this library,
//! unless `MEMPROF_FOLLOW_EXEC=0` takes the library out of the variable when the process starts.

use std::ffi::{CStr, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// Takes this library out of `LD_PRELOAD` when `MEMPROF_FOLLOW_EXEC=0`. Called from the
/// constructor, while the process has one thread: changing the environment is safe then.
pub(crate) fn apply() {
    match std::env::var_os("MEMPROF_FOLLOW_EXEC")
        .as_deref()
        .map(OsStr::as_bytes)
    {
        None | Some(b"1") => {}
        Some(b"0") => forget_self(),
        Some(other) => memprof::preload::warn(format_args!(
            "MEMPROF_FOLLOW_EXEC={:?} is neither 1 nor 0; using the default 1 (programs the \
             process runs are profiled too)",
            String::from_utf8_lossy(other)
        )),
    }
}

/// `LD_PRELOAD` without this library.
fn forget_self() {
    let Some(preload) = std::env::var_os("LD_PRELOAD") else {
        return;
    };
    let own = own_path();
    // The loader splits the list at spaces and colons.
    let kept: Vec<&[u8]> = preload
        .as_bytes()
        .split(|&b| b == b':' || b == b' ')
        .filter(|entry| !entry.is_empty() && !is_self(entry, own.as_deref()))
        .collect();
    // SAFETY: the constructor runs while the process has one thread: nothing reads the
    // environment at the same time.
    unsafe {
        if kept.is_empty() {
            std::env::remove_var("LD_PRELOAD");
        } else {
            std::env::set_var("LD_PRELOAD", OsString::from_vec(kept.join(&b':')));
        }
    }
}

/// Whether an entry of `LD_PRELOAD` names this library: the same file, or (when the loader found
/// it by name) the same file name.
fn is_self(entry: &[u8], own: Option<&Path>) -> bool {
    let entry = Path::new(OsStr::from_bytes(entry));
    match own {
        Some(own) => {
            entry == own
                || std::fs::canonicalize(entry).ok().as_deref()
                    == std::fs::canonicalize(own).ok().as_deref()
                || (entry.components().count() == 1 && entry.file_name() == own.file_name())
        }
        None => entry.file_name() == Some(OsStr::new("libmemprof_preload.so")),
    }
}

/// The path this library was loaded from.
fn own_path() -> Option<std::path::PathBuf> {
    // SAFETY: `info` is written by `dladdr` before it is read, when it returns non-zero.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: the address of a function of this library; `dladdr` only reads the loader's tables.
    if unsafe { libc::dladdr(apply as *const libc::c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return None;
    }
    // SAFETY: `dladdr` gives a NUL-terminated name that lives as long as the library.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(OsStr::from_bytes(name.to_bytes()).into())
}
