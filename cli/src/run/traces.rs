//! The traces one `memprof run` wrote: the files its `--trace` pattern names, each process of the
//! run expanding `%p`, `%e` and `%t` for itself, and whose header says they started after the run
//! did. A file left by an earlier run is never taken for this run's.

use memprof_trace::{Header, Reader};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A piece of a file-name pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    /// Text as written (`%%` already made `%`).
    Text(String),
    /// `%p` or `%t`: one or more decimal digits.
    Digits,
    /// `%e`: the program's name, one or more characters.
    Name,
}

/// A `--trace` pattern split into its directory and the pieces of its file name.
#[derive(Clone, Debug)]
pub struct Pattern {
    dir: PathBuf,
    pieces: Vec<Piece>,
}

/// A trace of this run: its file and its header.
#[derive(Debug)]
pub struct Found {
    pub path: PathBuf,
    pub header: Header,
}

impl Pattern {
    /// `pattern` (already absolute); fails when a placeholder is in a directory's name, where the
    /// files could not be listed after the run.
    pub fn new(pattern: &Path) -> Result<Pattern, String> {
        let name = pattern
            .file_name()
            .ok_or_else(|| format!("{}: names no file", pattern.display()))?
            .to_string_lossy()
            .into_owned();
        let dir = pattern.parent().unwrap_or(Path::new("/")).to_owned();
        if pieces(&dir.to_string_lossy())
            .iter()
            .any(|p| !matches!(p, Piece::Text(_)))
        {
            return Err(format!(
                "{}: %p, %e and %t may be in the file's name only, not in its directory",
                pattern.display()
            ));
        }
        Ok(Pattern {
            dir,
            pieces: pieces(&name),
        })
    }

    /// The one file the pattern names when it has no placeholder.
    pub fn fixed(&self) -> Option<PathBuf> {
        match self.pieces.as_slice() {
            [Piece::Text(name)] => Some(self.dir.join(name)),
            [] => Some(self.dir.clone()),
            _ => None,
        }
    }

    /// Whether `name` is a file name the pattern can expand to.
    fn matches(&self, name: &str) -> bool {
        matches_from(&self.pieces, name)
    }

    /// The regular files the pattern names whose header tells a trace started at
    /// `started_ns` (nanoseconds since the Unix epoch) or later, oldest first. Only regular files
    /// are opened, so a FIFO or device of a matching name is never read; and only those changed
    /// since then (less a second, for file systems whose clock runs coarser), so that the traces
    /// of earlier runs in the directory are not opened.
    pub fn traces_since(&self, started_ns: u64) -> Vec<Found> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let since =
            SystemTime::UNIX_EPOCH + Duration::from_nanos(started_ns) - Duration::from_secs(1);
        let mut found: Vec<Found> = entries
            .filter_map(Result::ok)
            .filter(|e| self.matches(&e.file_name().to_string_lossy()))
            .filter(|e| {
                std::fs::symlink_metadata(e.path())
                    .is_ok_and(|m| m.is_file() && m.modified().is_ok_and(|t| t >= since))
            })
            .filter_map(|e| {
                let header = header_of(&e.path())?;
                (header.start_unix_ns >= started_ns).then(|| Found {
                    path: e.path(),
                    header,
                })
            })
            .collect();
        found.sort_by(|a, b| {
            (a.header.start_unix_ns, &a.path).cmp(&(b.header.start_unix_ns, &b.path))
        });
        found
    }
}

impl Pattern {
    /// The regular files the pattern names, changed at `since` or later (less a second, for file
    /// systems whose clock runs coarser), that hold no trace header: a process that ended by
    /// `_exit` or a signal before its trace's writer wrote anything leaves its file empty.
    pub fn headerless_since(&self, since: SystemTime) -> Vec<PathBuf> {
        let since = since - Duration::from_secs(1);
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| self.matches(&e.file_name().to_string_lossy()))
            .filter(|e| {
                std::fs::symlink_metadata(e.path())
                    .is_ok_and(|m| m.is_file() && m.modified().is_ok_and(|t| t >= since))
            })
            .map(|e| e.path())
            .filter(|path| header_of(path).is_none())
            .collect();
        found.sort();
        found
    }
}

/// The header of the trace in `path`, when it is one.
pub fn header_of(path: &Path) -> Option<Header> {
    let file = std::fs::File::open(path).ok()?;
    Reader::new(std::io::BufReader::new(file))
        .ok()
        .map(|r| r.header().clone())
}

/// The pieces of a file-name pattern; a `%` before anything else stays as written.
fn pieces(pattern: &str) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    let mut text = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        let piece = match (c, chars.peek()) {
            ('%', Some('p' | 't')) => Piece::Digits,
            ('%', Some('e')) => Piece::Name,
            ('%', Some('%')) => {
                chars.next();
                text.push('%');
                continue;
            }
            _ => {
                text.push(c);
                continue;
            }
        };
        chars.next();
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        out.push(piece);
    }
    if !text.is_empty() || out.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

/// Whether `name` matches `pieces` from its start to its end.
fn matches_from(pieces: &[Piece], name: &str) -> bool {
    let Some((first, rest)) = pieces.split_first() else {
        return name.is_empty();
    };
    match first {
        Piece::Text(text) => name
            .strip_prefix(text.as_str())
            .is_some_and(|after| matches_from(rest, after)),
        Piece::Digits => {
            let digits = name.bytes().take_while(u8::is_ascii_digit).count();
            (1..=digits).any(|n| matches_from(rest, &name[n..]))
        }
        Piece::Name => name
            .char_indices()
            .skip(1)
            .map(|(i, _)| i)
            .chain([name.len()])
            .filter(|&i| i > 0)
            .any(|i| matches_from(rest, &name[i..])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_match_their_pattern() {
        let pattern = Pattern::new(Path::new("/d/memprof-%e-%p.mptrace")).unwrap();
        assert!(pattern.matches("memprof-sh-12.mptrace"));
        assert!(pattern.matches("memprof-a-b-12.mptrace"));
        assert!(!pattern.matches("memprof--12.mptrace"));
        assert!(!pattern.matches("memprof-sh-.mptrace"));
        assert!(!pattern.matches("memprof-sh-12x.mptrace"));
        assert!(!pattern.matches("memprof-sh-12.mptrace.tmp"));
        let percent = Pattern::new(Path::new("/d/a%%p-%x")).unwrap();
        assert!(percent.matches("a%p-%x"));
        assert_eq!(percent.fixed(), Some(PathBuf::from("/d/a%p-%x")));
        assert!(Pattern::new(Path::new("/d/%e/t.mptrace")).is_err());
        assert_eq!(Pattern::new(Path::new("/d/t-%p")).unwrap().fixed(), None);
    }
}
