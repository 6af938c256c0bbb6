//! Small C shared libraries compiled at test time with the system's `cc`, for tests that load and
//! unload code with `dlopen` and `dlclose`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh directory for one test process's libraries, under the system's temporary directory.
pub fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memprof-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles `source` into `dir/lib<name>.so` (`-shared -fPIC -g -O0`, so every function keeps its
/// frame and its own lines) and returns the library's path. Fails the test when `cc` is missing or
/// fails.
pub fn compile(dir: &Path, name: &str, source: &str) -> PathBuf {
    let c_file = dir.join(format!("{name}.c"));
    let library = dir.join(format!("lib{name}.so"));
    std::fs::write(&c_file, source).unwrap();
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-g", "-O0", "-Wall", "-Werror", "-o"])
        .arg(&library)
        .arg(&c_file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc (a C compiler is needed): {e}"));
    assert!(
        output.status.success(),
        "cc failed on {}: {}",
        c_file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    library
}

/// A handle from `dlopen(path, RTLD_NOW | RTLD_LOCAL)`; panics with `dlerror` when it fails.
pub fn open(path: &Path) -> *mut libc::c_void {
    let name = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: `name` is a NUL-terminated path; the libraries these tests build have no
    // constructors.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {}: {}", path.display(), error());
    handle
}

/// The address of `symbol` in the library behind `handle`; panics when it is missing.
pub fn symbol(handle: *mut libc::c_void, symbol: &str) -> *mut libc::c_void {
    let name = std::ffi::CString::new(symbol).unwrap();
    // SAFETY: `handle` came from `dlopen` and is still open; `name` is NUL-terminated.
    let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!address.is_null(), "dlsym {symbol}: {}", error());
    address
}

/// Closes a handle from [`open`].
pub fn close(handle: *mut libc::c_void) {
    // SAFETY: `handle` came from `dlopen` and is closed once; nothing of its library is in use.
    let status = unsafe { libc::dlclose(handle) };
    assert_eq!(status, 0, "dlclose: {}", error());
}

/// The loader's last error message.
fn error() -> String {
    // SAFETY: `dlerror` returns null or a NUL-terminated message owned by the loader, read at once.
    unsafe {
        let message = libc::dlerror();
        if message.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(message)
                .to_string_lossy()
                .into_owned()
        }
    }
}

/// Runs this test binary again as a child running only `test`, with `env` set, and kills it if it
/// has not finished after `deadline`: a child killed by the watchdog fails the test. Returns its
/// exit status and output.
pub fn run_child(
    test: &str,
    env: &[(&str, &str)],
    deadline: std::time::Duration,
) -> std::process::Output {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    super::wait_within(child, deadline, "the child")
}
