//! Files: file-name patterns (`%p`, `%t`, `%e`), one snapshot written to a file whose ending
//! names its format, and the list of files `MEMPROF_OUTPUT` asks for at exit. Every step runs
//! untracked, so writing an export does not show up in the profile.

#![forbid(unsafe_code)]

use super::{ExportOptions, Format, write};
use crate::guard::untracked;
use crate::snapshot::Snapshot;
use crate::symbolize::{self, Resolve};
use memprof_files::Replacement;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::time::Duration;

/// Expands a file-name pattern: `%p` the process id, `%t` seconds since the Unix epoch, `%e` the
/// name given for the program (in memprof's own files, the name the process was started by: the
/// last part of the path given to `exec`), `%%` a percent sign; anything else stays as written.
pub fn expand_path(pattern: &str, pid: u32, time: Duration, executable: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('t') => out.push_str(&time.as_secs().to_string()),
            Some('e') => out.push_str(executable),
            Some('%') => out.push('%'),
            _ => {
                out.push('%');
                continue;
            }
        }
        chars.next();
    }
    out
}

/// Writes `snapshot` to the file `path` names, after expanding `%p`, `%t` and `%e`
/// ([`expand_path`]); the format comes from the file's ending ([`Format::EXTENSIONS`]). Returns
/// the path written.
///
/// The file is written under a new temporary name in the same directory
/// (`.NAME.PID-RANDOM.tmp`, created with `O_EXCL | O_NOFOLLOW`, so a link planted there is never
/// followed), then renamed over `path`: a reader sees the old file or the whole new one, never a
/// part, and a failed write leaves the old file as it was. A regular file or a symbolic link at
/// `path` is replaced (the link itself, not what it points to); anything else there (a FIFO, a
/// device, a directory) is an error and stays as it was. A format this build cannot write (`.svg`
/// without the `flamegraph` feature) creates no file.
pub fn write_path(
    path: &str,
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
) -> io::Result<PathBuf> {
    untracked(|| {
        let Some(format) = Format::from_path(path) else {
            let known: Vec<&str> = Format::EXTENSIONS.iter().map(|(e, _)| *e).collect();
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown file ending; use one of {}", known.join(", ")),
            ));
        };
        #[cfg(not(feature = "flamegraph"))]
        if format == Format::Flamegraph {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "flamegraph SVG needs memprof built with the `flamegraph` feature; no file written",
            ));
        }
        let expanded = PathBuf::from(expand_path(
            path,
            options.pid,
            options.time,
            &crate::native::program_name(),
        ));
        let mut temporary = Replacement::create(&expanded)?;
        let mut file = BufWriter::new(temporary.file());
        write(format, snapshot, resolver, options, &mut file)?;
        file.into_inner().map_err(io::IntoInnerError::into_error)?;
        temporary.commit()?;
        Ok(expanded)
    })
}

/// Writes the process's heap now to every file of a comma-separated list (the value of
/// `MEMPROF_OUTPUT`), each in the format its name asks for ([`write_path`]). Each file written is
/// named on stderr; an unknown ending or a failed write is reported there too, and the other files
/// are still written. Never panics.
pub fn write_outputs(spec: &str) {
    write_listed(spec);
}

/// [`write_outputs`], returning the paths of the files written, and whether every file listed
/// was written whole.
pub(crate) fn write_listed(spec: &str) -> (Vec<PathBuf>, bool) {
    untracked(|| {
        let mut written_paths = Vec::new();
        let paths: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        if paths.is_empty() {
            return (written_paths, true);
        }
        let listed = paths.len();
        let options = ExportOptions::default();
        let all = paths
            .iter()
            .filter_map(|path| Format::from_path(path))
            .any(|format| format.shows_allocated(&options));
        let snapshot = match all {
            true => Snapshot::take_all(),
            false => Snapshot::take(),
        };
        symbolize::with_symbolizer(|symbolizer| {
            for path in paths {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    write_path(path, &snapshot, symbolizer, &options)
                }));
                let mut stderr = io::stderr().lock();
                if crate::config::quiet() {
                    if let Ok(Ok(written)) = result {
                        written_paths.push(written);
                    }
                    continue;
                }
                let _ = crate::native::without_sigpipe(|| match result {
                    Ok(Ok(written)) => {
                        let line = writeln!(stderr, "memprof: wrote {}", written.display());
                        written_paths.push(written);
                        line
                    }
                    Ok(Err(error)) => writeln!(stderr, "memprof: cannot write {path}: {error}"),
                    Err(_) => writeln!(stderr, "memprof: writing {path} failed"),
                });
            }
        });
        let whole = written_paths.len() == listed;
        (written_paths, whole)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_expand_placeholders() {
        let time = Duration::from_secs(1_700_000_000);
        assert_eq!(
            expand_path("/tmp/%e-%p-%t.pb.gz", 42, time, "app"),
            "/tmp/app-42-1700000000.pb.gz"
        );
        assert_eq!(expand_path("100%%-%x-%", 1, time, "a"), "100%-%x-%");
    }
}
