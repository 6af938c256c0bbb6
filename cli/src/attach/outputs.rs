//! `memprof attach --output`: the files the process writes at the detach, checked before it is
//! touched and looked for after (the process says nothing on its stderr while attached).

use crate::Failure;
use crate::common::output_endings;
use std::path::PathBuf;
use std::time::SystemTime;

/// `--output`'s files (`spec`, separated by commas), absolute: each with an ending memprof
/// writes, in a directory that exists, or refused before the process is touched (the process
/// writes them at the detach, and says nothing on its stderr).
pub fn checked(spec: &str) -> Result<Vec<PathBuf>, Failure> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure(format!("cannot read the working directory: {e}"), 1))?;
    let mut files = Vec::new();
    for name in spec.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        if memprof::export::Format::from_path(name).is_none() {
            return Err(Failure(
                format!(
                    "--output {name}: unknown file ending; use one of {}",
                    output_endings()
                ),
                2,
            ));
        }
        let path = cwd.join(name);
        if let Some(dir) = path.parent()
            && !dir.to_string_lossy().contains('%')
            && !dir.is_dir()
        {
            return Err(Failure(
                format!(
                    "--output {name}: {} is not a directory: create it first (the process \
                     writes the file there, as its own user)",
                    dir.display()
                ),
                2,
            ));
        }
        files.push(path);
    }
    Ok(files)
}

/// Says which of `files` the process did not write since `since` (those without a `%`
/// pattern, whose names only the process knows).
pub fn unwritten(files: &[PathBuf], since: SystemTime) {
    for file in files.iter().filter(|f| !f.to_string_lossy().contains('%')) {
        let written = std::fs::metadata(file)
            .and_then(|m| m.modified())
            .is_ok_and(|at| at >= since);
        if !written {
            say!(
                "memprof: {} was not written: the process writes it as its own user, who must \
                 be able to create it there",
                file.display()
            );
        }
    }
}
