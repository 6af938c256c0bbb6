//! Addresses to source frames: function, file, line and column, inlined calls expanded.
//!
//! Runs only when a report or export is rendered, on a [`Snapshot`](crate::Snapshot), never while
//! the live table is locked. Lookups are cached per address for the life of the process, so a
//! second report costs only its formatting. Each return address is looked up at address − 1 (inside
//! the call instruction) and with its module's load bias, so PIE executables and shared libraries
//! resolve too.

#![forbid(unsafe_code)]

use crate::capture::modules::{self, Module};
use crate::capture::{ReturnAddress, untracked};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// One source frame. A return address yields one per inlined call, innermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// The demangled function, without hash (`app::build_index`).
    pub function: Option<String>,
    /// The source file, relative to the working directory when under it; the module's path when
    /// the source is unknown (then `line` is 0).
    pub file: Option<String>,
    /// 1-based line; 0 when unknown.
    pub line: u32,
    /// 1-based column; 0 when unknown.
    pub column: u32,
}

impl fmt::Display for Frame {
    /// MemProf's frame string: `src/main.rs:12:5 in 'app::build_index'`; `:col` is left out when
    /// 0, `:line:col` when the line is 0, and an unknown frame reads `???`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, &self.function) {
            (None, None) => f.write_str("???"),
            (None, Some(function)) => write!(f, "'{function}'"),
            (Some(file), function) => {
                f.write_str(file)?;
                if self.line != 0 {
                    write!(f, ":{}", self.line)?;
                    if self.column != 0 {
                        write!(f, ":{}", self.column)?;
                    }
                }
                if let Some(function) = function {
                    write!(f, " in '{function}'")?;
                }
                Ok(())
            }
        }
    }
}

/// Turns return addresses into frames. The process's [`Symbolizer`] is one; tests use tables.
pub trait Resolve {
    /// The frames of one return address, innermost (most inlined) first; never empty.
    fn resolve(&mut self, address: ReturnAddress) -> Arc<[Frame]>;
}

/// The frame of an address nothing is known about.
fn unknown() -> Arc<[Frame]> {
    Arc::from([Frame::default()])
}

impl<S: std::hash::BuildHasher> Resolve for HashMap<ReturnAddress, Vec<Frame>, S> {
    fn resolve(&mut self, address: ReturnAddress) -> Arc<[Frame]> {
        match self.get(&address) {
            Some(frames) if !frames.is_empty() => Arc::from(frames.as_slice()),
            _ => unknown(),
        }
    }
}

/// Resolves addresses of this process with its own debug information (DWARF, else the symbol
/// table), caching every answer.
pub struct Symbolizer {
    /// Loaded modules, re-read when an address falls in none of them (after a `dlopen`).
    modules: Vec<Module>,
    /// Debug information per module path; `None` when the file could not be read.
    loaders: HashMap<PathBuf, Option<addr2line::Loader>>,
    /// Answers by address.
    cache: HashMap<ReturnAddress, Arc<[Frame]>>,
    /// File names under this directory are shown relative to it.
    working_dir: Option<PathBuf>,
}

impl Symbolizer {
    /// A symbolizer for this process, showing files relative to `working_dir`.
    pub fn new(working_dir: Option<PathBuf>) -> Symbolizer {
        Symbolizer {
            modules: modules::loaded(),
            loaders: HashMap::new(),
            cache: HashMap::new(),
            working_dir,
        }
    }

    fn module_of(&mut self, pc: usize) -> Option<usize> {
        let find = |modules: &[Module]| modules.iter().position(|m| m.contains(pc));
        find(&self.modules).or_else(|| {
            self.modules = modules::loaded();
            find(&self.modules)
        })
    }

    fn display_path(&self, file: &str) -> String {
        let path = Path::new(file);
        match &self.working_dir {
            Some(dir) => match path.strip_prefix(dir) {
                Ok(relative) => relative.to_string_lossy().into_owned(),
                Err(_) => file.to_owned(),
            },
            None => file.to_owned(),
        }
    }

    fn lookup(&mut self, address: ReturnAddress) -> Arc<[Frame]> {
        let pc = address.lookup_address();
        let Some(index) = self.module_of(pc) else {
            return unknown();
        };
        let module_path = self.modules[index].path.clone();
        let probe = (pc - self.modules[index].bias) as u64;
        let loader = self
            .loaders
            .entry(module_path.clone())
            .or_insert_with(|| addr2line::Loader::new(&module_path).ok());
        let mut raw: Vec<(Option<String>, Option<String>, u32, u32)> = Vec::new();
        let mut symbol = None;
        if let Some(loader) = loader {
            if let Ok(mut iter) = loader.find_frames(probe) {
                while let Ok(Some(frame)) = iter.next() {
                    let function = frame
                        .function
                        .as_ref()
                        .and_then(|f| f.demangle().ok())
                        .map(|name| name.into_owned());
                    let (file, line, column) = frame.location.map_or((None, 0, 0), |l| {
                        (
                            l.file.map(str::to_owned),
                            l.line.unwrap_or(0),
                            l.column.unwrap_or(0),
                        )
                    });
                    raw.push((function, file, line, column));
                }
            }
            if raw.last().is_none_or(|f| f.0.is_none()) {
                symbol = loader
                    .find_symbol(probe)
                    .map(|s| format!("{:#}", rustc_demangle::demangle(s)));
            }
        }
        if raw.is_empty() {
            raw.push((None, None, 0, 0));
        }
        if let Some(symbol) = symbol {
            raw.last_mut().expect("not empty").0 = Some(symbol);
        }
        let module_name = module_path.to_string_lossy().into_owned();
        raw.into_iter()
            .map(|(function, file, line, column)| match file {
                Some(file) => Frame {
                    function,
                    file: Some(self.display_path(&file)),
                    line,
                    column,
                },
                None => Frame {
                    file: function.as_ref().map(|_| module_name.clone()),
                    function,
                    line: 0,
                    column: 0,
                },
            })
            .collect()
    }
}

impl Resolve for Symbolizer {
    fn resolve(&mut self, address: ReturnAddress) -> Arc<[Frame]> {
        if let Some(frames) = self.cache.get(&address) {
            return frames.clone();
        }
        let frames = self.lookup(address);
        self.cache.insert(address, frames.clone());
        frames
    }
}

/// The process's symbolizer, made on first use and kept with its cache.
static SYMBOLIZER: Mutex<Option<Symbolizer>> = Mutex::new(None);

/// Runs `f` with the process's symbolizer, inside the reentrancy guard.
pub fn with_symbolizer<R>(f: impl FnOnce(&mut Symbolizer) -> R) -> R {
    untracked(|| {
        let mut slot = SYMBOLIZER.lock().unwrap_or_else(PoisonError::into_inner);
        let symbolizer =
            slot.get_or_insert_with(|| Symbolizer::new(crate::config::get().working_dir.clone()));
        f(symbolizer)
    })
}

/// memprof's own source directory, as its debug information names it.
const OWN_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/");

/// Whether a frame is memprof's own: by its path, or by its source file when the debug information
/// names it without a path (`debug = "line-tables-only"`). Everything above the last such frame
/// on a stack (std code inlined into memprof, such as thread-local access) is memprof's too.
pub fn is_profiler_frame(frame: &Frame) -> bool {
    is_profiler_function(frame.function.as_deref().unwrap_or(""))
        || frame
            .file
            .as_deref()
            .is_some_and(|f| f.starts_with(OWN_SOURCE))
}

/// Whether a function, by its name, is memprof's own.
fn is_profiler_function(function: &str) -> bool {
    function.starts_with("memprof::")
        || function.starts_with("<memprof::")
        || function.starts_with("memprof_record_")
}

/// The paths of the standard library's crates (and of a crate it vendors).
const STD_PATHS: [&str; 4] = ["alloc::", "core::", "std::", "hashbrown::"];

/// Whether a function is in the standard library, by its path.
fn is_std_function(function: &str) -> bool {
    let path = function.trim_start_matches('<');
    STD_PATHS.iter().any(|p| path.starts_with(p))
}

/// Whether a standard-library path appears anywhere in `function`'s name.
fn mentions_std(function: &str) -> bool {
    STD_PATHS.iter().any(|p| {
        function.match_indices(p).any(|(at, _)| {
            !function[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    })
}

/// Whether [`context`] shows a frame of `function` wherever it stands on a stack, as far as the
/// name alone tells (what a symbol table tells the stack walk, which stops once it holds the
/// frames a report shows). Where the name cannot settle it, the answer is no, which makes the
/// walk go deeper: memprof's own functions and the allocator's are trimmed, and a report tells
/// the standard library by source file, which a symbol table does not give, so no function whose
/// name mentions a standard-library path (`<&mut String as core::fmt::Write>::write_fmt`,
/// `<u64 as core::fmt::Display>::fmt`) counts as shown.
pub fn is_shown_by_name(function: &str) -> bool {
    !(is_profiler_function(function) || is_allocator_frame(function) || mentions_std(function))
}

/// Whether a frame belongs to the allocator shim or std's allocation internals: after memprof's
/// own frames, these are trimmed from the top of every context before its depth is applied.
pub fn is_allocator_frame(function: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "__rustc::",
        "__rust_alloc",
        "__rust_dealloc",
        "__rust_realloc",
        "__rdl_",
        "__rg_",
        "alloc::alloc::",
        "<alloc::alloc::",
        "alloc::raw_vec::",
        "<alloc::raw_vec::",
        "core::alloc::",
        "<core::alloc::",
        "std::alloc::",
        "<std::alloc::",
        "std::sys::alloc::",
        "<std::sys::alloc::",
        "std::sys::pal::unix::alloc::",
        "hashbrown::raw::",
        "<hashbrown::raw::",
    ];
    PREFIXES.iter().any(|p| function.starts_with(p))
}

/// Whether a frame is in the standard library (`std`, `core`, `alloc` or a crate std vendors, such
/// as its `hashbrown`): by its source file when known, by its path otherwise.
pub fn is_std_frame(frame: &Frame) -> bool {
    if let Some(file) = &frame.file
        && frame.line != 0
    {
        return file.starts_with("/rustc/") || file.starts_with("/rust/deps/");
    }
    is_std_function(frame.function.as_deref().unwrap_or(""))
}

/// The context of a stack, innermost first: memprof's own frames and the allocator's are trimmed
/// from the top; of the standard-library frames that follow, only the outermost stays (the
/// collection operation the program called: `Vec::push`, `Box::new`, `HashMap::insert`); then
/// `skip` more frames are dropped and at most `depth` kept.
pub fn context<'a>(frames: &[&'a Frame], skip: usize, depth: usize) -> Vec<&'a Frame> {
    fn name(f: &Frame) -> &str {
        f.function.as_deref().unwrap_or("")
    }
    let after_profiler = frames
        .iter()
        .rposition(|f| is_profiler_frame(f))
        .map_or(0, |last| last + 1);
    let rest = &frames[after_profiler..];
    let first = rest
        .iter()
        .position(|f| !is_allocator_frame(name(f)))
        .unwrap_or(rest.len());
    let rest = &rest[first..];
    // Collapse the leading run of std frames to its last one, unless std is all there is.
    let std_run = rest.iter().take_while(|f| is_std_frame(f)).count();
    let rest = if std_run > 1 && std_run < rest.len() {
        &rest[std_run - 1..]
    } else {
        rest
    };
    rest.iter().copied().skip(skip).take(depth).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str) -> Frame {
        let in_std = ["alloc::", "<alloc::", "std::", "core::"]
            .iter()
            .any(|p| function.starts_with(p));
        Frame {
            function: Some(function.into()),
            file: Some(
                if in_std {
                    "/rustc/0/library/x.rs"
                } else {
                    "src/lib.rs"
                }
                .into(),
            ),
            line: 1,
            column: 0,
        }
    }

    #[test]
    fn display_follows_memprof() {
        let mut f = Frame {
            function: Some("app::build_index".into()),
            file: Some("src/main.rs".into()),
            line: 12,
            column: 5,
        };
        assert_eq!(f.to_string(), "src/main.rs:12:5 in 'app::build_index'");
        f.column = 0;
        assert_eq!(f.to_string(), "src/main.rs:12 in 'app::build_index'");
        f.line = 0;
        assert_eq!(f.to_string(), "src/main.rs in 'app::build_index'");
        f.file = None;
        assert_eq!(f.to_string(), "'app::build_index'");
        assert_eq!(Frame::default().to_string(), "???");
    }

    #[test]
    fn names_shown_are_never_ones_a_report_may_hide() {
        let cases = [
            ("app::build_index", true),
            ("<app::Index as app::Load>::load", true),
            ("myalloc::pool::take", true),
            ("memcpy", true),
            ("memprof::types::tagged", false),
            (
                "<memprof::MemProf<A> as core::alloc::global::GlobalAlloc>::alloc",
                false,
            ),
            ("memprof_record_alloc", false),
            ("__rustc::__rust_alloc", false),
            ("alloc::raw_vec::RawVecInner<A>::finish_grow", false),
            ("<alloc::vec::Vec<T> as core::clone::Clone>::clone", false),
            ("hashbrown::raw::RawTable<T,A>::reserve_rehash", false),
            // Named after a type outside std but in std's source: the report hides them.
            ("<u64 as core::fmt::Display>::fmt", false),
            (
                "<&mut alloc::string::String as core::fmt::Write>::write_fmt",
                false,
            ),
            // The program's own type in a std trait: shown by a report, but the name cannot tell.
            ("<app::Index as core::fmt::Display>::fmt", false),
        ];
        for (name, shown) in cases {
            assert_eq!(is_shown_by_name(name), shown, "{name}");
        }
    }

    #[test]
    fn frames_named_without_path_are_trimmed_by_source() {
        let own = Frame {
            function: Some("record_alloc".into()),
            file: Some(format!("{OWN_SOURCE}hooks.rs")),
            line: 75,
            column: 9,
        };
        let user = frame("app::main");
        assert_eq!(context(&[&own, &user], 0, 5), [&user]);
    }

    #[test]
    fn context_trims_allocator_frames_then_skips_and_cuts() {
        let frames = [
            frame("std::thread::local::LocalKey<T>::try_with"),
            frame("memprof::hooks::record_alloc"),
            frame(
                "<memprof::hooks::global_alloc::MemProf<A> as core::alloc::global::GlobalAlloc>::alloc",
            ),
            frame("__rustc::__rust_alloc"),
            frame("alloc::alloc::alloc"),
            frame("<alloc::alloc::Global as core::alloc::Allocator>::allocate"),
            frame("alloc::raw_vec::RawVecInner<A>::try_allocate_in"),
            frame("alloc::vec::Vec<T,A>::with_capacity_in"),
            frame("alloc::vec::Vec<T>::with_capacity"),
            frame("app::build_index"),
            frame("app::main"),
            frame("std::rt::lang_start"),
        ];
        let frames: Vec<&Frame> = frames.iter().collect();
        let names = |v: Vec<&Frame>| {
            v.iter()
                .map(|f| f.function.clone().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(context(&frames, 0, 5)),
            [
                "alloc::vec::Vec<T>::with_capacity",
                "app::build_index",
                "app::main",
                "std::rt::lang_start"
            ]
        );
        assert_eq!(names(context(&frames, 1, 1)), ["app::build_index"]);
        // A stack of std frames only keeps them all.
        let std_only: Vec<&Frame> = frames[..9].iter().chain(&frames[11..]).copied().collect();
        assert_eq!(
            names(context(&std_only, 0, 5)),
            [
                "alloc::vec::Vec<T,A>::with_capacity_in",
                "alloc::vec::Vec<T>::with_capacity",
                "std::rt::lang_start"
            ]
        );
    }

    #[test]
    fn own_functions_resolve_with_file_and_line() {
        let mut symbolizer = Symbolizer::new(std::env::current_dir().ok());
        #[inline(never)]
        fn marker() -> u32 {
            std::hint::black_box(7)
        }
        // A return address one byte into `marker` is looked up at its first instruction.
        let address = ReturnAddress(marker as *const () as usize + 1);
        let frames = symbolizer.resolve(address);
        let names: Vec<String> = frames.iter().map(|f| f.to_string()).collect();
        assert!(
            names
                .iter()
                .any(|f| f.starts_with("src/symbolize.rs:") && f.contains("::marker'")),
            "{names:?}"
        );
    }
}
