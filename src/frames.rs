//! Frames and the rules on their names: what a source frame is, which frames are memprof's own,
//! the allocator's or the standard library's, and which of them a report's context shows.
//!
//! A shared building block: the symbolizer makes frames, the stack walk asks which code a report
//! shows, and the reports trim contexts with [`context`].

#![forbid(unsafe_code)]

use std::fmt;
use std::ops::Range;

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
    /// 0, `:line:col` when the line is 0, and an unknown frame reads `???`. The files of the
    /// standard library and of crates from a registry are shortened: `core/src/...`,
    /// `serde-1.0.219/src/...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, &self.function) {
            (None, None) => f.write_str("???"),
            (None, Some(function)) => write!(f, "'{function}'"),
            (Some(file), function) => {
                f.write_str(short_path(file))?;
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

impl Frame {
    /// The source file as a report prints it: the standard library's from its crate's directory
    /// on (`core/src/...`), a registry crate's from its `name-version` directory on.
    pub fn short_file(&self) -> Option<&str> {
        self.file.as_deref().map(short_path)
    }

    /// Whether the frame is in the standard library (Rust's `std`, `core`, `alloc` or a crate std
    /// vendors; or C++'s): by its source file when known, by its function's path otherwise. Of
    /// a context's frames, the first that is not is the program's own.
    pub fn is_std(&self) -> bool {
        is_std_frame(self)
    }
}

/// A source file as a report prints it: the standard library's sources, which its debug
/// information places under `/rustc/<commit>/library/`, from their crate's directory on
/// (`core/src/iter/traits/iterator.rs`, as in the `library` directory of Rust's repository and
/// of the `rust-src` component); the crates std vendors (`/rust/deps/hashbrown-0.15.2/...`) and
/// those from a Cargo registry (`~/.cargo/registry/src/index.crates.io-<hash>/serde-1.0.0/...`)
/// from their `name-version` directory on. Every other path is left as it is.
pub(crate) fn short_path(file: &str) -> &str {
    if let Some(rest) = file.strip_prefix("/rustc/")
        && let Some((_commit, path)) = rest.split_once('/')
    {
        return path.strip_prefix("library/").unwrap_or(path);
    }
    if let Some(path) = file.strip_prefix("/rust/deps/") {
        return path;
    }
    const REGISTRY: &str = "/registry/src/";
    if let Some(at) = file.find(REGISTRY)
        && let Some((index, path)) = file[at + REGISTRY.len()..].split_once('/')
        && is_registry_index(index)
    {
        return path;
    }
    file
}

/// Whether a directory name is one Cargo gives a registry's sources: `<host>-<16 hex digits>`.
fn is_registry_index(name: &str) -> bool {
    name.rsplit_once('-').is_some_and(|(host, hash)| {
        !host.is_empty() && hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// memprof's own source directory, as its debug information names it.
const OWN_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/");

/// Whether a frame is memprof's own: by its path, or by its source file when the debug information
/// names it without a path (`debug = "line-tables-only"`), or, named by nothing but its module (a
/// trace without symbols), by the preloaded library's file. Everything above the last such frame
/// on a stack (std code inlined into memprof, such as thread-local access) is memprof's too.
pub(crate) fn is_profiler_frame(frame: &Frame) -> bool {
    is_profiler_function(frame.function.as_deref().unwrap_or(""))
        || frame.file.as_deref().is_some_and(|f| {
            f.starts_with(OWN_SOURCE)
                || (frame.function.is_none() && frame.line == 0 && is_preload_module(f))
        })
}

/// Whether `path` is a file of the preloaded library: `libmemprof_preload.so`, the copies
/// `memprof run` carries (`libmemprof_preload-HASH.so`) and `memprof attach` loads.
fn is_preload_module(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|name| name.starts_with("libmemprof_preload"))
}

/// Whether a frame of memprof's is one that calls the program's code back (the closure given to
/// `with_labels`, the future given to `Labels::attach`): what the program allocates below it is
/// the program's, so it does not mark where memprof's frames end; and it stands between the
/// program's frames, where no report shows it (see `calls`).
pub(crate) fn calls_program(frame: &Frame) -> bool {
    match frame.function.as_deref() {
        Some(function) => calls_program_by_name(function),
        None => frame
            .file
            .as_deref()
            .is_some_and(|f| f == concat!(env!("CARGO_MANIFEST_DIR"), "/src/labels.rs")),
    }
}

/// Whether `function` (demangled, without its hash) is one of memprof's that call the
/// program's code back: `with_labels`, the body of the future `Labels::attach` returns, and
/// that future's `poll`.
pub(crate) fn calls_program_by_name(function: &str) -> bool {
    const FUNCTIONS: [&str; 3] = [
        "memprof::labels::with_labels",
        "memprof::labels::Labels::attach",
        "<memprof::labels::Attached<",
    ];
    FUNCTIONS.iter().any(|f| function.starts_with(f))
}

/// Whether a function, by its name, is memprof's own.
fn is_profiler_function(function: &str) -> bool {
    function.starts_with("memprof::")
        || function.starts_with("<memprof::")
        || function.starts_with("memprof_record_")
        || function.starts_with("memprof_preload::")
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
/// `<u64 as core::fmt::Display>::fmt`) counts as shown. Nor does the runtime below the
/// program's entry, which a report hides: the C library's start of the process and its threads,
/// the `main` that calls std's runtime, and libtest's functions, which call each test.
pub(crate) fn is_shown_by_name(function: &str) -> bool {
    !(is_profiler_function(function)
        || is_allocator_frame(function)
        || mentions_std(function)
        || is_process_start(function)
        || function == "main"
        || function.trim_start_matches('<').starts_with("test::"))
}

/// Whether a frame belongs to the allocator shim or std's allocation internals: after memprof's
/// own frames, these are trimmed from the top of every context before its depth is applied.
pub(crate) fn is_allocator_frame(function: &str) -> bool {
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
    /// The C library's allocation and mapping functions, as the preloaded library defines them,
    /// and C++'s allocation operators, which call them.
    const C_FUNCTIONS: &[&str] = &[
        "malloc",
        "calloc",
        "realloc",
        "reallocarray",
        "free",
        "posix_memalign",
        "aligned_alloc",
        "memalign",
        "valloc",
        "pvalloc",
        "mmap",
        "mmap64",
        "munmap",
        "mremap",
    ];
    PREFIXES.iter().any(|p| function.starts_with(p))
        || C_FUNCTIONS.contains(&function)
        || function.starts_with("operator new")
        || function.starts_with("operator delete")
}

/// Whether a frame is in the standard library (`std`, `core`, `alloc` or a crate std vendors, such
/// as its `hashbrown`; or C++'s): by its source file when known, by its path otherwise.
pub(crate) fn is_std_frame(frame: &Frame) -> bool {
    if let Some(file) = &frame.file
        && frame.line != 0
    {
        // Rust's standard library, or C++'s (its headers, where its templates are compiled into
        // the program).
        return file.starts_with("/rustc/")
            || file.starts_with("/rust/deps/")
            || file.contains("/include/c++/");
    }
    is_std_function(frame.function.as_deref().unwrap_or(""))
}

/// The context of a stack, innermost first: memprof's own frames and the allocator's are trimmed
/// from the top, the runtime that calls the program from the bottom ([`program_frames`]); of the
/// standard-library frames at the top, only the outermost stays (the collection operation the
/// program called: `Vec::push`, `Box::new`, `HashMap::insert`); then `skip` more frames are
/// dropped and at most `depth` kept.
pub(crate) fn context<'a>(frames: &[&'a Frame], skip: usize, depth: usize) -> Vec<&'a Frame> {
    frames[context_range(frames, skip, depth)].to_vec()
}

/// Where [`context`] lies in `frames`: one run, within [`program_frames`].
pub(crate) fn context_range(frames: &[&Frame], skip: usize, depth: usize) -> Range<usize> {
    let program = program_frames(frames);
    let start = program.start.saturating_add(skip).min(program.end);
    start..start + (program.end - start).min(depth)
}

/// The frames of a stack (innermost first) that a context is made of, before its skip and depth:
/// a contiguous run, so that the exports can map it back to return addresses.
///
/// - At the top, memprof's own frames, then the allocator's, are left out, and of the standard
///   library's frames that follow only the last, unless std is all there is.
/// - At the bottom, the runtime below the program: std's `__rust_begin_short_backtrace`, which
///   calls `main` and the closure of every thread std starts, with everything below it
///   (`std::rt::lang_start`, the C library's start of the process or thread) and the `call_once`
///   shims between it and the program's code; on a stack without it (a thread the program's C
///   code started), the C library's own start of the process or thread.
pub(crate) fn program_frames(frames: &[&Frame]) -> Range<usize> {
    fn name(f: &Frame) -> &str {
        f.function.as_deref().unwrap_or("")
    }
    let after_profiler = frames
        .iter()
        .rposition(|f| is_profiler_frame(f) && !calls_program(f))
        .map_or(0, |last| last + 1);
    let start = frames[after_profiler..]
        .iter()
        .position(|f| !is_allocator_frame(name(f)))
        .map_or(frames.len(), |first| after_profiler + first);
    let rest = &frames[start..];
    let end = match rest.iter().position(|f| is_program_entry(name(f))) {
        Some(entry) => {
            let shims = rest[..entry]
                .iter()
                .rev()
                .take_while(|f| is_call_shim(f))
                .count();
            match entry - shims {
                0 => entry,
                end => end,
            }
        }
        None => {
            let started = rest
                .iter()
                .rev()
                .take_while(|f| is_process_start(name(f)) || is_unnamed_libc(f))
                .count();
            rest.len() - started
        }
    };
    let end = match end {
        0 => rest.len(),
        end => end,
    };
    // Collapse the leading run of std frames to its last one, unless std is all there is.
    let std_run = rest[..end].iter().take_while(|f| is_std_frame(f)).count();
    let first = if std_run > 1 && std_run < end {
        std_run - 1
    } else {
        0
    };
    start + first..start + end
}

/// Whether a frame is in the C library with no name to tell: at the bottom of a stack, its start
/// of the process or of a thread (`__libc_start_call_main`, `start_thread`), which a stripped
/// C library names only in its separate debug information.
fn is_unnamed_libc(frame: &Frame) -> bool {
    frame.function.is_none()
        && frame.file.as_deref().is_some_and(|file| {
            let name = file.rsplit('/').next().unwrap_or(file);
            name.starts_with("libc.so") || name.starts_with("libc-")
        })
}

/// Whether a function is where Rust's runtime hands a thread to the program: std's
/// `__rust_begin_short_backtrace` (`std::sys::backtrace::`, `std::sys_common::backtrace::` in
/// older releases), which calls `main` and the closure of every thread std spawns, and libtest's
/// (`test::`), which calls each test.
fn is_program_entry(function: &str) -> bool {
    let path = function.trim_start_matches('<');
    (path.starts_with("std::") || path.starts_with("test::"))
        && path
            .split("::")
            .any(|segment| segment == "__rust_begin_short_backtrace")
}

/// Whether a frame is one of the standard library's `FnOnce::call_once` shims, through which the
/// runtime calls `main`, a thread's closure or a test (`<fn() as FnOnce<()>>::call_once` too, named
/// after no std path but in std's source).
fn is_call_shim(frame: &Frame) -> bool {
    is_std_frame(frame)
        && frame
            .function
            .as_deref()
            .is_some_and(|f| f.contains("::call_once"))
}

/// Whether a function is the C library's start of the process (`_start`,
/// `__libc_start_main`) or of a thread (`start_thread`, `clone3`).
fn is_process_start(function: &str) -> bool {
    const NAMES: &[&str] = &[
        "_start",
        "__libc_start_main",
        "__libc_start_main_impl",
        "__libc_start_call_main",
        "start_thread",
        "clone",
        "clone3",
        "__clone",
        "__clone3",
        "__clone_internal",
    ];
    NAMES.contains(&function)
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

    /// A frame of std's source, whatever its function's name.
    fn std_frame(function: &str) -> Frame {
        Frame {
            file: Some("/rustc/0/library/core/src/ops/function.rs".into()),
            ..frame(function)
        }
    }

    /// A frame of a module without debug information.
    fn module_frame(function: &str, module: &str) -> Frame {
        Frame {
            function: Some(function.into()),
            file: Some(module.into()),
            line: 0,
            column: 0,
        }
    }

    /// The functions of `frames`.
    fn names(frames: Vec<&Frame>) -> Vec<String> {
        frames.iter().map(|f| f.function.clone().unwrap()).collect()
    }

    const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

    /// What a release build's main thread has below `app::main`.
    fn below_main() -> Vec<Frame> {
        vec![
            frame("core::ops::function::FnOnce::call_once"),
            frame("std::sys::backtrace::__rust_begin_short_backtrace"),
            frame("std::rt::lang_start::{{closure}}"),
            std_frame(
                "core::ops::function::impls::<impl core::ops::function::FnOnce<A> for &F>::call_once",
            ),
            frame("std::panicking::catch_unwind::do_call"),
            frame("std::rt::lang_start_internal"),
            frame("std::rt::lang_start"),
            module_frame("main", "target/release/app"),
            module_frame("__libc_start_call_main", LIBC),
            module_frame("__libc_start_main_impl", LIBC),
            module_frame("_start", "target/release/app"),
        ]
    }

    /// What a thread std spawned has below the closure it runs.
    fn below_thread() -> Vec<Frame> {
        vec![
            frame("std::sys::backtrace::__rust_begin_short_backtrace"),
            frame("std::thread::Builder::spawn_unchecked_::{{closure}}::{{closure}}"),
            std_frame(
                "<core::panic::unwind_safe::AssertUnwindSafe<F> as core::ops::function::FnOnce<()>>::call_once",
            ),
            frame("std::thread::Builder::spawn_unchecked_::{{closure}}"),
            frame("core::ops::function::FnOnce::call_once{{vtable.shim}}"),
            std_frame("<alloc::boxed::Box<F,A> as core::ops::function::FnOnce<Args>>::call_once"),
            frame("std::sys::pal::unix::thread::Thread::new::thread_start"),
            module_frame("start_thread", LIBC),
            module_frame("clone3", LIBC),
        ]
    }

    /// What a test has below its function, in its thread of libtest.
    fn below_test() -> Vec<Frame> {
        let mut frames = vec![
            frame("app::tests::builds::{{closure}}"),
            frame("core::ops::function::FnOnce::call_once"),
            std_frame(
                "<fn() -> core::result::Result<(), alloc::string::String> as core::ops::function::FnOnce<()>>::call_once",
            ),
            std_frame(
                "test::__rust_begin_short_backtrace::<core::result::Result<(), alloc::string::String>, fn() -> core::result::Result<(), alloc::string::String>>",
            ),
            std_frame("test::run_test_in_process::{closure#0}"),
            std_frame("test::run_test::{closure#0}"),
        ];
        frames.extend(below_thread());
        frames
    }

    /// An allocation of `Vec::with_capacity` in `program`'s innermost function, called by the
    /// rest of `program`, above `runtime`.
    fn allocation(program: &[&str], runtime: Vec<Frame>) -> Vec<Frame> {
        let mut frames = vec![
            frame("memprof::hooks::record_alloc"),
            frame("__rustc::__rust_alloc"),
            frame("alloc::raw_vec::RawVecInner<A>::try_allocate_in"),
            frame("alloc::vec::Vec<T>::with_capacity"),
        ];
        frames.extend(program.iter().map(|f| frame(f)));
        frames.extend(runtime);
        frames
    }

    #[test]
    fn context_trims_the_runtime_below_the_program() {
        let cases: [(&[&str], Vec<Frame>, &[&str]); 5] = [
            (
                &["app::build", "app::main"],
                below_main(),
                &["app::build", "app::main"],
            ),
            (
                &["app::spawn::{{closure}}"],
                below_thread(),
                &["app::spawn::{{closure}}"],
            ),
            // A thread that runs a function, called through `FnOnce::call_once`.
            (
                &["app::worker"],
                [
                    vec![frame("core::ops::function::FnOnce::call_once")],
                    below_thread(),
                ]
                .concat(),
                &["app::worker"],
            ),
            // A test, which libtest calls through `<fn() as FnOnce<()>>::call_once`.
            (
                &["app::tests::builds"],
                below_test(),
                &["app::tests::builds", "app::tests::builds::{{closure}}"],
            ),
            // A thread the program's C code started.
            (
                &["worker_main"],
                vec![
                    module_frame("start_thread", LIBC),
                    module_frame("clone3", LIBC),
                ],
                &["worker_main"],
            ),
        ];
        for (program, runtime, shown) in cases {
            let frames = allocation(program, runtime);
            let frames: Vec<&Frame> = frames.iter().collect();
            let mut expected = vec!["alloc::vec::Vec<T>::with_capacity"];
            expected.extend(shown);
            assert_eq!(names(context(&frames, 0, 64)), expected, "{program:?}");
        }
    }

    #[test]
    fn context_of_a_c_program_starts_at_its_function_and_ends_at_main() {
        // The preloaded library's `malloc` and C++'s `operator new` above the program, the C
        // library's start (unnamed in a stripped libc) below `main`; C++'s own templates, by
        // their headers, collapse to the outermost.
        let source = |function: &str, file: &str| Frame {
            function: Some(function.into()),
            file: Some(file.into()),
            line: 7,
            column: 3,
        };
        let frames = [
            frame("memprof::record::alloc_checked"),
            frame("memprof_preload::recorded"),
            module_frame("malloc", "/opt/memprof/libmemprof_preload.so"),
            module_frame("operator new(unsigned long)", "/usr/lib/libstdc++.so.6"),
            source(
                "std::__new_allocator<int>::allocate",
                "/usr/include/c++/12/bits/new_allocator.h",
            ),
            source(
                "std::vector<int>::vector",
                "/usr/include/c++/12/bits/stl_vector.h",
            ),
            source("build(int)", "cxx.cpp"),
            source("main", "cxx.cpp"),
            Frame {
                function: None,
                file: Some(LIBC.into()),
                line: 0,
                column: 0,
            },
            module_frame("__libc_start_main", LIBC),
            module_frame("_start", "/tmp/cxx"),
        ];
        let frames: Vec<&Frame> = frames.iter().collect();
        let names: Vec<&str> = context(&frames, 0, 10)
            .iter()
            .map(|f| f.function.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["std::vector<int>::vector", "build(int)", "main"]);
    }

    #[test]
    fn context_keeps_a_runtime_that_is_all_there_is() {
        // std's start-up allocates before `main`: only the C library's start is trimmed, and std's
        // frames collapse to their outermost.
        let frames = [
            frame("memprof::hooks::record_alloc"),
            frame("__rustc::__rust_alloc"),
            frame("std::rt::init"),
            frame("std::rt::lang_start_internal"),
            frame("std::rt::lang_start"),
            module_frame("main", "target/release/app"),
            module_frame("__libc_start_call_main", LIBC),
            module_frame("_start", "target/release/app"),
        ];
        let frames: Vec<&Frame> = frames.iter().collect();
        assert_eq!(
            names(context(&frames, 0, 64)),
            ["std::rt::lang_start", "main"]
        );
        // A thread std spawned to run a std function: the function stays, not its shim.
        let frames = allocation(
            &[],
            [
                vec![frame("core::ops::function::FnOnce::call_once")],
                below_thread(),
            ]
            .concat(),
        );
        let frames: Vec<&Frame> = frames.iter().collect();
        assert_eq!(
            names(context(&frames, 0, 64)),
            ["alloc::vec::Vec<T>::with_capacity"]
        );
        // Nothing but the shim above the entry: the shim stays.
        let frames = [
            vec![
                frame("__rustc::__rust_alloc"),
                frame("core::ops::function::FnOnce::call_once"),
            ],
            below_thread(),
        ]
        .concat();
        let frames: Vec<&Frame> = frames.iter().collect();
        assert_eq!(
            names(context(&frames, 0, 64)),
            ["core::ops::function::FnOnce::call_once"]
        );
        // Nothing but the C library.
        let frames = [
            module_frame("start_thread", LIBC),
            module_frame("clone3", LIBC),
        ];
        let frames: Vec<&Frame> = frames.iter().collect();
        assert_eq!(names(context(&frames, 0, 64)), ["start_thread", "clone3"]);
    }

    /// The stack walk starts counting at the first frame whose name says a report shows it, so
    /// no frame a report hides may have such a name.
    #[test]
    fn every_frame_shown_by_name_is_shown_by_the_context() {
        let stacks = [
            allocation(&["app::build", "app::main"], below_main()),
            allocation(&["app::spawn::{{closure}}"], below_thread()),
            allocation(&["app::tests::builds"], below_test()),
        ];
        for stack in &stacks {
            let frames: Vec<&Frame> = stack.iter().collect();
            let shown = context(&frames, 0, 64);
            for frame in stack {
                let name = frame.function.as_deref().unwrap();
                if is_shown_by_name(name) {
                    assert!(
                        shown.contains(&frame),
                        "{name} counts as shown but is hidden"
                    );
                }
            }
        }
    }

    #[test]
    fn program_frames_are_one_run() {
        let frames = allocation(&["app::build", "app::main"], below_main());
        let frames: Vec<&Frame> = frames.iter().collect();
        assert_eq!(program_frames(&frames), 3..6);
        assert_eq!(context(&frames, 1, 1), [frames[4]]);
        assert_eq!(context_range(&frames, 1, 1), 4..5);
        assert_eq!(context_range(&frames, 0, usize::MAX), 3..6);
        assert_eq!(context_range(&frames, 5, 2), 6..6);
    }

    #[test]
    fn paths_of_std_and_registries_are_short() {
        let cases = [
            (
                "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/iter/traits/iterator.rs",
                "core/src/iter/traits/iterator.rs",
            ),
            ("/rustc/0/library/std/src/rt.rs", "std/src/rt.rs"),
            (
                "/rust/deps/hashbrown-0.15.5/src/raw/mod.rs",
                "hashbrown-0.15.5/src/raw/mod.rs",
            ),
            (
                "/home/me/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/serde_json-1.0.140/src/de.rs",
                "serde_json-1.0.140/src/de.rs",
            ),
            ("src/main.rs", "src/main.rs"),
            (
                "/home/me/registry/src/app/main.rs",
                "/home/me/registry/src/app/main.rs",
            ),
            (
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
            ),
            ("/rustc/", "/rustc/"),
        ];
        for (file, short) in cases {
            assert_eq!(short_path(file), short, "{file}");
        }
        let frame = Frame {
            function: Some("core::iter::traits::iterator::Iterator::collect".into()),
            file: Some(cases[0].0.into()),
            line: 2064,
            column: 9,
        };
        assert_eq!(
            frame.to_string(),
            "core/src/iter/traits/iterator.rs:2064:9 in 'core::iter::traits::iterator::Iterator::collect'"
        );
        // The frame itself keeps the path: std's frames are told by it.
        assert!(is_std_frame(&frame));
    }

    #[test]
    fn code_called_back_under_labels_is_the_programs() {
        let frames = [
            frame("memprof::record::alloc_checked"),
            frame("__rustc::__rust_alloc"),
            frame("app::build"),
            frame("app::main::{{closure}}"),
            frame("memprof::labels::with_labels<alloc::vec::Vec<u8>, app::main::{{closure}}>"),
            frame("app::main"),
        ];
        let refs: Vec<&Frame> = frames.iter().collect();
        assert_eq!(program_frames(&refs), 2..6);
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
            // Below the program's entry: the C library's start and the `main` that calls std's.
            ("main", false),
            ("_start", false),
            ("__libc_start_main", false),
            ("start_thread", false),
            ("clone3", false),
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
