//! Files memprof writes (the library's `MEMPROF_OUTPUT` exports and trace, the `memprof`
//! command's outputs, the viewer's index cache): created afresh under a temporary name beside
//! their destination with `O_CREAT | O_EXCL | O_NOFOLLOW`, so that no link planted at a
//! predictable name is followed, then renamed over the destination, and only over a regular file
//! or a symbolic link (the link is replaced, never followed).
//!
//! A crate of its own, below both the library and the trace format, so that the one copy serves
//! both without bringing the trace codec into builds that do not trace.

use std::collections::hash_map::RandomState;
use std::fs::{File, OpenOptions};
use std::hash::BuildHasher;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Temporary names tried before giving up (each one taken already by someone else).
const ATTEMPTS: u32 = 16;

/// A file being written under a temporary name beside its destination; removed when dropped
/// before [`Replacement::commit`].
#[derive(Debug)]
pub struct Replacement {
    file: Option<File>,
    temporary: PathBuf,
    destination: PathBuf,
}

/// Fails when `destination` exists and is neither a regular file nor a symbolic link: a FIFO, a
/// device, a socket or a directory is not replaced by a file.
pub fn check_replaceable(destination: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(destination) {
        Ok(meta) if !meta.is_file() && !meta.file_type().is_symlink() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} is there, not a regular file; left as it was",
                kind(&meta)
            ),
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens the file at `path` for reading without following a link there (a link is an error,
/// `ELOOP`), nor blocking on a FIFO (`O_NONBLOCK`: check the kind before reading).
pub fn open_no_follow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// What a file that is not a regular file is, for messages.
pub fn kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a regular file"
    }
}

impl Replacement {
    /// Creates a new, empty temporary file beside `destination`, after checking that
    /// `destination` may be replaced ([`check_replaceable`]).
    pub fn create(destination: &Path) -> io::Result<Replacement> {
        check_replaceable(destination)?;
        let name = destination
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
        let random = RandomState::new();
        let mut attempt = 0;
        loop {
            let unique = random.hash_one((std::process::id(), attempt));
            let temporary = destination
                .with_file_name(format!(".{name}.{}-{unique:016x}.tmp", std::process::id()));
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&temporary)
            {
                Ok(file) => {
                    return Ok(Replacement {
                        file: Some(file),
                        temporary,
                        destination: destination.to_path_buf(),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt + 1 < ATTEMPTS => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The file, to write to.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("present until committed")
    }

    /// Renames the file over the destination (checked again first), and returns it, still open.
    pub fn commit(mut self) -> io::Result<File> {
        check_replaceable(&self.destination)?;
        std::fs::rename(&self.temporary, &self.destination)?;
        Ok(self.file.take().expect("present until committed"))
    }
}

impl Drop for Replacement {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}
