//! Offline symbolization of a trace: the source frames of every return address of its stacks,
//! read from the binaries its `MODULES` records name (or from their separate debug files). What
//! `memprof symbolize` does for a trace cut short (no symbol section) or recorded on another
//! machine; `memprof_trace::write_symbolized` writes the trace again with those frames.
//!
//! It lives in the library, not with the format, because it reads binaries as the live
//! symbolizer does (`symbolize::frames_at`: inlined frames, demangling, the symbol table when
//! there is no debug information) and checks build ids with the reader the writer records them
//! with (`modules::build_id`): offline frames read as the frames a trace gets at close. The
//! conversions between the library's [`Frame`] and the format's [`SymbolFrame`] are here too,
//! each written once.

#![forbid(unsafe_code)]

use crate::frames::Frame;
use memprof_trace::{ModuleEntry, SymbolFrame, Trace};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

impl From<SymbolFrame> for Frame {
    /// A trace's frame as the reports take it.
    fn from(frame: SymbolFrame) -> Frame {
        Frame {
            function: frame.function,
            file: frame.file,
            line: frame.line,
            column: frame.column,
        }
    }
}

impl From<Frame> for SymbolFrame {
    /// A frame as a trace's `SYMBOL` record holds it.
    fn from(frame: Frame) -> SymbolFrame {
        SymbolFrame {
            function: frame.function,
            file: frame.file,
            line: frame.line,
            column: frame.column,
        }
    }
}

/// Where the debug information of a module was found, or why it was not.
enum Source {
    /// Read from this file (the binary, or its separate debug file).
    Read(Box<addr2line::Loader>, PathBuf),
    /// Not readable: the reason.
    Missing(String),
}

/// A module whose addresses could not be resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unresolved {
    /// The module's path as the trace names it.
    pub path: String,
    /// Why: file missing, another build, unreadable.
    pub reason: String,
    /// Return addresses of the trace's stacks in that module.
    pub addresses: usize,
    /// Whether it is the traced executable.
    pub executable: bool,
}

/// Resolves a trace's return addresses with the files its `MODULES` records name.
///
/// An address is looked up at `address - 1` in the module whose executable range holds it, the
/// latest `MODULES` record first (a module loaded later at an address an unloaded one used is the
/// code the later stacks ran). The module's file is found, in order: in each debug directory
/// (`DIR/.build-id/xx/rest.debug` by build id, then `DIR/NAME.debug`, `DIR/NAME` and
/// `DIR/PATH.debug` by file name), then at its recorded path; a candidate whose build id differs
/// from the recorded one is another build and is passed over.
pub struct OfflineSymbolizer {
    /// The trace's module lists, latest first.
    lists: Vec<Vec<ModuleEntry>>,
    executable: String,
    debug_dirs: Vec<PathBuf>,
    /// Source files under this directory are shown relative to it.
    working_dir: Option<PathBuf>,
    sources: HashMap<(String, Vec<u8>), Source>,
    /// Addresses per module that could not be read, by module path.
    missed: HashMap<String, usize>,
}

impl std::fmt::Debug for OfflineSymbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfflineSymbolizer")
            .field("debug_dirs", &self.debug_dirs)
            .field("modules_read", &self.sources.len())
            .finish_non_exhaustive()
    }
}

impl OfflineSymbolizer {
    /// A symbolizer for `trace`'s modules, looking for separate debug files in `debug_dirs`
    /// (then in `/usr/lib/debug`), showing source files relative to `working_dir`.
    pub fn new(
        trace: &Trace,
        debug_dirs: Vec<PathBuf>,
        working_dir: Option<PathBuf>,
    ) -> OfflineSymbolizer {
        let mut debug_dirs = debug_dirs;
        debug_dirs.push(PathBuf::from("/usr/lib/debug"));
        OfflineSymbolizer {
            lists: trace.modules().iter().rev().cloned().collect(),
            executable: trace.header().executable.clone(),
            debug_dirs,
            working_dir,
            sources: HashMap::new(),
            missed: HashMap::new(),
        }
    }

    /// The frames of one return address, innermost first; never empty (one unknown frame, or the
    /// module's path alone when its file could not be read).
    pub fn resolve(&mut self, address: u64) -> Vec<SymbolFrame> {
        let pc = address.wrapping_sub(1);
        let Some(module) = self
            .lists
            .iter()
            .flatten()
            .find(|m| {
                m.text
                    .iter()
                    .any(|&(start, end)| (start..end).contains(&pc))
            })
            .cloned()
        else {
            return vec![SymbolFrame::default()];
        };
        let dirs = &self.debug_dirs;
        let source = self
            .sources
            .entry((module.path.clone(), module.build_id.clone()))
            .or_insert_with(|| find_source(&module, dirs));
        let loader = match source {
            Source::Read(loader, _) => loader,
            Source::Missing(_) => {
                *self.missed.entry(module.path.clone()).or_default() += 1;
                return vec![SymbolFrame {
                    file: Some(module.path.clone()),
                    ..SymbolFrame::default()
                }];
            }
        };
        let working_dir = self.working_dir.as_deref();
        crate::symbolize::frames_at(
            Some(loader),
            pc.wrapping_sub(module.bias),
            &module.path,
            |file| crate::symbolize::display_path(working_dir, file),
        )
        .into_iter()
        .map(SymbolFrame::from)
        .collect()
    }

    /// The modules whose addresses could not be resolved so far, with why.
    pub fn unresolved(&self) -> Vec<Unresolved> {
        let mut list: Vec<Unresolved> = self
            .sources
            .iter()
            .filter_map(|((path, _), source)| match source {
                Source::Missing(reason) => Some(Unresolved {
                    path: path.clone(),
                    reason: reason.clone(),
                    addresses: self.missed.get(path).copied().unwrap_or(0),
                    executable: *path == self.executable,
                }),
                Source::Read(..) => None,
            })
            .collect();
        list.sort_by(|a, b| a.path.cmp(&b.path));
        list
    }

    /// The files read, by module path: the binary itself or its separate debug file.
    pub fn files_read(&self) -> Vec<(String, PathBuf)> {
        let mut list: Vec<(String, PathBuf)> = self
            .sources
            .iter()
            .filter_map(|((path, _), source)| match source {
                Source::Read(_, file) => Some((path.clone(), file.clone())),
                Source::Missing(_) => None,
            })
            .collect();
        list.sort();
        list
    }
}

/// The file to read `module`'s debug information from: a debug file in one of `dirs`, else the
/// binary at its recorded path; a candidate of another build (build ids differ) is skipped.
fn find_source(module: &ModuleEntry, dirs: &[PathBuf]) -> Source {
    let recorded = Path::new(&module.path);
    let name = recorded
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let mut candidates = Vec::new();
    for dir in dirs {
        if module.build_id.len() > 1 {
            let hex: String = module.build_id.iter().map(|b| format!("{b:02x}")).collect();
            candidates.push(
                dir.join(".build-id")
                    .join(&hex[..2])
                    .join(format!("{}.debug", &hex[2..])),
            );
        }
        if let Some(name) = &name {
            candidates.push(dir.join(format!("{name}.debug")));
            candidates.push(dir.join(name));
        }
        let relative = recorded.strip_prefix("/").unwrap_or(recorded);
        candidates.push(dir.join(format!("{}.debug", relative.display())));
    }
    candidates.push(recorded.to_path_buf());
    let mut reason = "no such file".to_owned();
    for candidate in candidates {
        if !candidate.is_file() {
            continue;
        }
        if !module.build_id.is_empty() {
            match crate::modules::build_id(&candidate) {
                Some(id) if id != module.build_id => {
                    if candidate == recorded {
                        reason =
                            "another build (its build id differs from the recorded one)".to_owned();
                    }
                    continue;
                }
                _ => {}
            }
        }
        match addr2line::Loader::new(&candidate) {
            Ok(loader) => return Source::Read(Box::new(loader), candidate),
            Err(e) => {
                if candidate == recorded {
                    reason = format!("cannot read it: {e}");
                }
            }
        }
    }
    Source::Missing(reason)
}
