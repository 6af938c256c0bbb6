//! Frames and the rules on their names: what a source frame is, which frames are memprof's own,
//! the allocator's or the standard library's, and which of them a report's context shows.
//!
//! A shared building block: the symbolizer makes frames, the stack walk asks which code a report
//! shows, and the reports trim contexts with [`context`].

#![forbid(unsafe_code)]

use std::fmt;

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
}
