//! Offline symbolization of a trace: the source frames of every return address of its stacks,
//! read from the binaries its `MODULES` records name (or from their separate debug files), and
//! the trace written again with that symbol section. What `memprof symbolize` does for a trace
//! cut short (no symbol section) or recorded on another machine.

#![forbid(unsafe_code)]

use super::format::{ChunkEncoder, Compressor, ErrorKind, ModuleEntry, Reader, SymbolFrame, flags};
use super::replay::{Trace, TraceError};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

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
        .map(|f| SymbolFrame {
            function: f.function,
            file: f.file,
            line: f.line,
            column: f.column,
        })
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

/// Writes `trace` to `out` with `symbols` as its symbol section: every complete chunk of the
/// file as it is, but the chunks that hold only symbols, then the new symbol chunks, then the
/// `END` chunk if the trace has one. A trace cut short stays without `END`, and loses the
/// incomplete chunk at its end. `out` may be the trace's own path: the file is written under a
/// temporary name beside it and renamed over it.
pub fn write_symbolized(
    trace: &Trace,
    symbols: &[(u64, Vec<SymbolFrame>)],
    out: &Path,
) -> Result<(), TraceError> {
    let path = trace.path();
    let fail = |offset: u64, e: io::Error| TraceError {
        path: path.to_path_buf(),
        error: super::format::Error {
            offset,
            record_offset: None,
            kind: ErrorKind::Io(e),
        },
    };
    let mut partial = out.as_os_str().to_owned();
    partial.push(".symbolizing");
    let partial = PathBuf::from(partial);
    let written = (|| -> Result<(), TraceError> {
        let mut reader = Reader::new(BufReader::new(File::open(path).map_err(|e| fail(0, e))?))
            .map_err(|error| TraceError {
                path: path.to_path_buf(),
                error,
            })?;
        let mut copy = File::open(path).map_err(|e| fail(0, e))?;
        let mut sink = BufWriter::new(File::create(&partial).map_err(|e| fail(0, e))?);
        let put = |sink: &mut BufWriter<File>, e: io::Result<()>| {
            e.map_err(|e| TraceError {
                path: partial.clone(),
                error: super::format::Error {
                    offset: sink.get_ref().stream_position().unwrap_or(0),
                    record_offset: None,
                    kind: ErrorKind::Io(e),
                },
            })
        };
        let header_len = reader.offset();
        let result = io::copy(&mut (&mut copy).take(header_len), &mut sink).map(|_| ());
        put(&mut sink, result)?;
        let mut end_chunk = None;
        loop {
            let (offset, chunk) = match reader.next_chunk_header() {
                Ok(Some(found)) => found,
                Ok(None) => break,
                Err(error) if matches!(error.kind, ErrorKind::Truncated) => break,
                Err(error) => {
                    return Err(TraceError {
                        path: path.to_path_buf(),
                        error,
                    });
                }
            };
            match reader.skip_payload() {
                Ok(()) => {}
                Err(error) if matches!(error.kind, ErrorKind::Truncated) => break,
                Err(error) => {
                    return Err(TraceError {
                        path: path.to_path_buf(),
                        error,
                    });
                }
            }
            let len = reader.offset() - offset;
            if chunk.events == 0 && chunk.flags & !flags::SYMBOLS == 0 {
                continue;
            }
            if chunk.events == 0 && chunk.flags == flags::END {
                end_chunk = Some((offset, len));
                continue;
            }
            let result = copy
                .seek(SeekFrom::Start(offset))
                .and_then(|_| io::copy(&mut (&mut copy).take(len), &mut sink))
                .map(|_| ());
            put(&mut sink, result)?;
        }
        let mut compressor = Compressor::new(3).map_err(|e| fail(0, e))?;
        let mut encoder = ChunkEncoder::new(0);
        let mut bytes = Vec::new();
        for (address, frames) in symbols {
            encoder.symbol(*address, frames);
            if encoder.len() >= 1 << 20 {
                bytes.clear();
                let result = encoder
                    .finish(Some(&mut compressor), &mut bytes)
                    .and_then(|()| sink.write_all(&bytes));
                put(&mut sink, result)?;
                encoder.reset(0);
            }
        }
        if !encoder.is_empty() {
            bytes.clear();
            let result = encoder
                .finish(Some(&mut compressor), &mut bytes)
                .and_then(|()| sink.write_all(&bytes));
            put(&mut sink, result)?;
        }
        if let Some((offset, len)) = end_chunk {
            let result = copy
                .seek(SeekFrom::Start(offset))
                .and_then(|_| io::copy(&mut (&mut copy).take(len), &mut sink))
                .map(|_| ());
            put(&mut sink, result)?;
        }
        let result = sink.flush();
        put(&mut sink, result)?;
        let result = sink.get_ref().sync_all();
        put(&mut sink, result)
    })();
    match written {
        Ok(()) => std::fs::rename(&partial, out).map_err(|e| TraceError {
            path: out.to_path_buf(),
            error: super::format::Error {
                offset: 0,
                record_offset: None,
                kind: ErrorKind::Io(e),
            },
        }),
        Err(error) => {
            let _ = std::fs::remove_file(&partial);
            Err(error)
        }
    }
}
