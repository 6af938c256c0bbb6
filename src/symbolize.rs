//! Addresses to source frames: function, file, line and column, inlined calls expanded.
//!
//! Runs only when a report or export is rendered, on a [`Snapshot`](crate::Snapshot), never while
//! the live table is locked. Lookups are cached per address, so a second report costs only its
//! formatting. Each return address is looked up at address − 1 (inside the call instruction) and
//! with its module's load bias, so PIE executables and shared libraries resolve too.
//!
//! # Libraries unloaded and loaded
//!
//! Before each lookup the symbolizer compares the dynamic loader's generation with the one its list
//! of modules was read at; when modules came or went, it reads the list again and forgets what it
//! knew of the code of every module gone or come: cached answers for addresses in their code, and
//! the debug information of the files gone. So a library loaded where an unloaded one was is named
//! from its own file while it is loaded.
//!
//! An address in no loaded module is looked up in the modules seen loaded and since unloaded
//! ([`modules::seen_holding`]): the preloaded library's `dlclose` notes the modules loaded before
//! each unloading, the DWARF unwinder notes them each time a walk meets code of a library it did
//! not know, and every listing of the modules (this symbolizer's, the trace writer's) notes them
//! too. The module seen latest at the address is named from its file, read again (debug
//! information, else the symbol table) at the address less the load bias it had, when the file's
//! build id is still the one the module had in memory; a file deleted or replaced since names
//! its path alone. Such answers are asked again once modules come or go. Direct calls in an
//! unloaded module's code are not decoded (its code can no longer be read).
//!
//! # Frames recovered from direct calls
//!
//! A function whose last act is a call may jump to the callee instead (a tail call): its frame is
//! gone before the callee runs, and no unwinder can find it. In optimized builds this is common:
//! `fn grow(v: &mut Vec<u8>) { v.reserve(200) }` jumps into `RawVec`'s out-of-line growth
//! function, and the block would be blamed on `grow`'s caller. But the caller's return address
//! follows its own `call grow`. So when a stack is resolved as a whole ([`Resolve::resolve_stack`]),
//! each return address but the innermost is checked: if the instruction before it is a direct call
//! (x86-64 `call rel32`, aarch64 `bl`), read from the module's code in memory, to the first
//! instruction of a function in the module's symbol table, and the next-younger frame's address
//! lies outside that function, the function is added as a frame, younger than the caller's
//! frames. It is shown at the line of its first instruction (where the jump was is not known).
//! This costs nothing while recording: it runs when a report or export is rendered.
//!
//! Limits: only one frame is recovered per call, so of a chain of tail calls only the first
//! callee shows; a call through a register, a pointer or the PLT (another module's function) is
//! not decoded; a module without a symbol table (stripped of it) recovers nothing; and a function
//! split into pieces (a `.cold` part) counts its pieces as other functions. Addresses resolved one
//! by one ([`Resolve::resolve`]) have no younger frame and recover nothing; a trace records, beside
//! each address's symbols, the function its direct call went to and that function's code (a
//! `CALLEE` record), and its readers apply the same rule when they resolve a stack.
//!
//! The live table keeps raw addresses only: a block allocated from a library since unloaded, at
//! an address that another library loaded there later also uses, resolves to the later library's
//! code (while it is loaded, or once it is unloaded too, as the module seen latest there).

#![forbid(unsafe_code)]

use crate::address::ReturnAddress;
use crate::frames::{self, Frame};
use crate::guard::untracked;
use crate::modules::{self, Generation, Module};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// Turns return addresses into frames. The process's [`Symbolizer`] is one; tests use tables.
pub trait Resolve {
    /// The frames of one return address, innermost (most inlined) first; never empty.
    fn resolve(&mut self, address: ReturnAddress) -> Arc<[Frame]>;

    /// The frames of each return address of a stack (innermost first), each never empty. The
    /// frames of an address may depend on the younger frames: the process's [`Symbolizer`] adds
    /// the function a direct call went to when that function's frame is gone (see the module's
    /// documentation). By default, each address is resolved alone.
    fn resolve_stack(&mut self, stack: &[ReturnAddress]) -> Vec<Arc<[Frame]>> {
        stack.iter().map(|&address| self.resolve(address)).collect()
    }

    /// The file name of the module (executable or shared object) whose code holds `address`
    /// (`libsqlite3.so.0`), when known: what names the frames of C and C++ code in the crate
    /// table ([`log_crates`](crate::log_crates)). By default, unknown.
    fn module_name(&mut self, address: ReturnAddress) -> Option<Arc<str>> {
        let _ = address;
        None
    }
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
    /// Loaded modules, re-read when the loader's generation moves (or, if the loader does not
    /// count, when an address falls in none of them).
    modules: Vec<Module>,
    /// The loader's generation `modules` was read at.
    generation: Option<Generation>,
    /// Modules seen loaded before and unloaded since, the latest first (at most
    /// [`UNLOADED_KEPT`]): what is known of addresses in their code now.
    unloaded: Vec<Module>,
    /// Debug information per module path; `None` when the file could not be read.
    loaders: HashMap<PathBuf, Option<addr2line::Loader>>,
    /// Debug information of the files of unloaded modules, read again by path (at most
    /// [`UNLOADED_FILES`]); `None` when the file could not be read or is not the one that was
    /// loaded. Forgotten when modules come or go.
    unloaded_loaders: HashMap<PathBuf, Option<addr2line::Loader>>,
    /// Addresses answered from the file of an unloaded module: asked again once modules came or
    /// went, as another module may have been at the address since.
    from_unloaded: Vec<ReturnAddress>,
    /// Answers by address.
    cache: HashMap<ReturnAddress, Arc<[Frame]>>,
    /// The function each return address's direct call went to, by address.
    callees: HashMap<ReturnAddress, Option<Callee>>,
    /// The function symbols (start and size, as the file gives them, by start) per module path.
    functions: HashMap<PathBuf, Vec<(u64, u64)>>,
    /// File names under this directory are shown relative to it.
    working_dir: Option<PathBuf>,
}

impl fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Symbolizer")
            .field("modules", &self.modules.len())
            .field("cached_addresses", &self.cache.len())
            .field("working_dir", &self.working_dir)
            .finish_non_exhaustive()
    }
}

/// Unloaded modules remembered, so that a program loading and unloading libraries in a loop keeps
/// a bounded list.
const UNLOADED_KEPT: usize = modules::UNLOADED_KEPT;

/// Files of unloaded modules whose debug information is kept open at once.
const UNLOADED_FILES: usize = 8;

impl Symbolizer {
    /// A symbolizer for this process, showing files relative to `working_dir`.
    pub fn new(working_dir: Option<PathBuf>) -> Symbolizer {
        let (generation, modules) = modules::listed();
        Symbolizer {
            modules,
            generation,
            unloaded: Vec::new(),
            loaders: HashMap::new(),
            unloaded_loaders: HashMap::new(),
            from_unloaded: Vec::new(),
            cache: HashMap::new(),
            callees: HashMap::new(),
            functions: HashMap::new(),
            working_dir,
        }
    }

    /// Lets go of the debug information read so far (the files mapped and the tables parsed
    /// from them), keeping the answers: a later lookup of another address reads its module's
    /// again. The trace's close calls it once its symbols are written, so that a program that
    /// goes on after `close_trace` does not keep them.
    #[cfg(feature = "trace")]
    pub(crate) fn release_debug_info(&mut self) {
        self.loaders = HashMap::new();
        self.unloaded_loaders = HashMap::new();
        self.functions = HashMap::new();
    }

    /// Reads the list of modules again if modules came or went since it was read, forgetting
    /// what was known of the code of those that went or came.
    fn follow_the_loader(&mut self) {
        let Some(now) = modules::generation() else {
            return;
        };
        if self.generation == Some(now) {
            return;
        }
        self.reread_modules();
    }

    /// Reads the list of modules, and forgets the answers for addresses in the code of modules
    /// gone or come since the last list, and the debug information of the files gone.
    fn reread_modules(&mut self) {
        let (generation, modules) = modules::listed();
        let gone: Vec<Module> = self
            .modules
            .iter()
            .filter(|m| !modules.contains(m))
            .cloned()
            .collect();
        let changed: Vec<&Module> = modules
            .iter()
            .filter(|m| !self.modules.contains(m))
            .chain(&gone)
            .collect();
        if !changed.is_empty() {
            self.cache
                .retain(|a, _| !changed.iter().any(|m| m.contains(a.lookup_address())));
            self.callees
                .retain(|a, _| !changed.iter().any(|m| m.contains(a.lookup_address())));
        }
        for module in &gone {
            self.loaders.remove(&module.path);
            self.functions.remove(&module.path);
        }
        for address in self.from_unloaded.drain(..) {
            self.cache.remove(&address);
        }
        self.unloaded_loaders.clear();
        self.unloaded
            .retain(|old| !gone.iter().any(|m| m.path == old.path));
        self.unloaded.splice(0..0, gone);
        self.unloaded.truncate(UNLOADED_KEPT);
        self.modules = modules;
        self.generation = generation;
    }

    fn module_of(&mut self, pc: usize) -> Option<usize> {
        let find = |modules: &[Module]| modules.iter().position(|m| m.contains(pc));
        find(&self.modules).or_else(|| {
            // Without the loader's counters, a new module shows only by its code.
            if self.generation.is_none() {
                self.reread_modules();
            }
            find(&self.modules)
        })
    }

    fn lookup(&mut self, address: ReturnAddress) -> Arc<[Frame]> {
        let pc = address.lookup_address();
        let Some(index) = self.module_of(pc) else {
            return self.lookup_unloaded(address);
        };
        let module_path = self.modules[index].path.clone();
        let probe = (pc - self.modules[index].bias) as u64;
        if is_own_library(&self.modules[index]) {
            return named_only(&self.modules[index], probe).into();
        }
        let loader = self
            .loaders
            .entry(module_path.clone())
            .or_insert_with(|| addr2line::Loader::new(&module_path).ok());
        let module_name = module_path.to_string_lossy().into_owned();
        let working_dir = self.working_dir.as_deref();
        frames_at(loader.as_ref(), probe, &module_name, |file| {
            display_path(working_dir, file)
        })
        .into()
    }
}

/// Whether `module` is the preloaded library itself: memprof's own code, in a module of its own
/// (its start said so, `capture::trim::count_outside`). The frames of it a stack holds are its
/// entries (`malloc` and the others), which every report trims by name, so they are named from
/// the symbol table alone: its debug information is tens of megabytes, which a trace's writer or
/// an at-exit report would otherwise map and parse into the program's memory to name them. A
/// crate linked into a program (or into a library of the program's) shares that module, whose
/// debug information names the program's frames: never this case, even with the `preload`
/// feature on.
fn is_own_library(module: &Module) -> bool {
    crate::capture::trim::counts_outside()
        && module.contains(is_own_library as fn(&Module) -> bool as usize)
}

/// The frame of the code at `probe` in `module`, from its symbol table alone (read again for each
/// address, which stays cheap: the preloaded library's frames on stacks are a handful of entries,
/// and the answers are cached): the function's name, demangled, and the module as its file.
fn named_only(module: &Module, probe: u64) -> Vec<Frame> {
    let mut function = None;
    modules::for_each_function(&module.path, true, |start, size, name| {
        if function.is_none() && (start..start.saturating_add(size)).contains(&probe) {
            let name = String::from_utf8_lossy(name);
            function = Some(addr2line::demangle_auto(name, None).into_owned());
        }
    });
    vec![Frame {
        function,
        file: Some(module.path.to_string_lossy().into_owned()),
        line: 0,
        column: 0,
    }]
}

impl Symbolizer {
    /// The frames of an address in no loaded module: from the file of the module seen latest
    /// there (noted by whoever listed the modules while it was loaded, else seen by this
    /// symbolizer), read again, when it is still the file that was loaded; else that file's path
    /// alone; else nothing.
    fn lookup_unloaded(&mut self, address: ReturnAddress) -> Arc<[Frame]> {
        let pc = address.lookup_address();
        let Some(module) = modules::seen_holding(pc)
            .or_else(|| self.unloaded.iter().find(|m| m.contains(pc)).cloned())
        else {
            return unknown();
        };
        self.from_unloaded.push(address);
        if self.unloaded_loaders.len() >= UNLOADED_FILES
            && !self.unloaded_loaders.contains_key(&module.path)
        {
            self.unloaded_loaders.clear();
        }
        let loader = self
            .unloaded_loaders
            .entry(module.path.clone())
            .or_insert_with(|| {
                // A file rebuilt or replaced since would give another code's names.
                let same = module.build_id.is_empty()
                    || modules::build_id(&module.path).as_ref() == Some(&module.build_id);
                same.then(|| addr2line::Loader::new(&module.path).ok())
                    .flatten()
            });
        let module_name = module.path.to_string_lossy().into_owned();
        let working_dir = self.working_dir.as_deref();
        frames_at(
            loader.as_ref(),
            pc.wrapping_sub(module.bias) as u64,
            &module_name,
            |file| display_path(working_dir, file),
        )
        .into()
    }

    /// The function the direct call before `address` went to, when its first instruction is a
    /// function's in the module's symbol table; cached per address.
    fn callee(&mut self, address: ReturnAddress) -> Option<Callee> {
        if let Some(known) = self.callees.get(&address) {
            return known.clone();
        }
        let callee = self.find_callee(address);
        self.callees.insert(address, callee.clone());
        callee
    }

    /// The function the direct call before `address` went to: its code, as actual addresses,
    /// and its frame. What a trace's `CALLEE` records carry, for its readers to apply the rule
    /// [`Resolve::resolve_stack`] applies here.
    #[cfg(feature = "trace")]
    pub(crate) fn direct_callee(
        &mut self,
        address: ReturnAddress,
    ) -> Option<(std::ops::Range<usize>, Frame)> {
        self.callee(address).map(|c| (c.function, c.frame))
    }

    fn find_callee(&mut self, address: ReturnAddress) -> Option<Callee> {
        let index = self.module_of(address.lookup_address())?;
        let module = self.modules[index].clone();
        let mut call = [0u8; CALL_LEN];
        let at = address.0.checked_sub(CALL_LEN)?;
        if !modules::read_text(&module, at, &mut call) {
            return None;
        }
        let target = direct_call_target(at, call)?;
        if !module.contains(target) {
            return None;
        }
        let probe = (target - module.bias) as u64;
        let functions = self
            .functions
            .entry(module.path.clone())
            .or_insert_with(|| {
                let mut functions = Vec::new();
                modules::for_each_function(&module.path, true, |start, size, _| {
                    functions.push((start, size));
                });
                functions.sort_unstable();
                functions
            });
        let at = functions.partition_point(|&(start, _)| start < probe);
        let size = functions
            .iter()
            .skip(at)
            .take_while(|&&(start, _)| start == probe)
            .map(|&(_, size)| size)
            .max()?;
        let frame = if is_own_library(&module) {
            named_only(&module, probe)
        } else {
            let loader = self
                .loaders
                .entry(module.path.clone())
                .or_insert_with(|| addr2line::Loader::new(&module.path).ok());
            let module_name = module.path.to_string_lossy().into_owned();
            let working_dir = self.working_dir.as_deref();
            frames_at(loader.as_ref(), probe, &module_name, |file| {
                display_path(working_dir, file)
            })
        }
        .pop()
        // A function of memprof's that calls the program's code back is no frame of the
        // program's, and the walk left its frame out on purpose.
        .filter(|frame| frame.function.is_some() && !frames::calls_program(frame))?;
        Some(Callee {
            function: target..target.saturating_add(size as usize),
            frame,
        })
    }
}

/// A function a direct call went to.
#[derive(Clone, Debug)]
struct Callee {
    /// Its code, as actual addresses.
    function: std::ops::Range<usize>,
    /// Its frame: the function, at the line of its first instruction.
    frame: Frame,
}

/// The length of the direct call instruction decoded before a return address.
#[cfg(target_arch = "aarch64")]
const CALL_LEN: usize = 4;
/// The length of the direct call instruction decoded before a return address.
#[cfg(not(target_arch = "aarch64"))]
const CALL_LEN: usize = 5;

/// Where the direct call instruction `code`, found at `at`, goes: x86-64's `call rel32` (`E8`
/// and a 32-bit displacement from the next instruction); `None` for any other instruction.
#[cfg(not(target_arch = "aarch64"))]
fn direct_call_target(at: usize, code: [u8; CALL_LEN]) -> Option<usize> {
    let [0xE8, d0, d1, d2, d3] = code else {
        return None;
    };
    let displacement = i32::from_le_bytes([d0, d1, d2, d3]) as isize;
    at.checked_add(CALL_LEN)?.checked_add_signed(displacement)
}

/// Where the direct call instruction `code`, found at `at`, goes: aarch64's `bl` (`100101` and a
/// 26-bit word offset from the instruction); `None` for any other instruction.
#[cfg(target_arch = "aarch64")]
fn direct_call_target(at: usize, code: [u8; CALL_LEN]) -> Option<usize> {
    let instruction = u32::from_le_bytes(code);
    if instruction >> 26 != 0b100101 {
        return None;
    }
    let words = ((instruction << 6) as i32 >> 6) as isize;
    at.checked_add_signed(words * 4)
}

/// `file` as frames keep it: relative to `working_dir` when under it, else as the debug
/// information names it (absolute). Two exceptions keep the path whole wherever the program ran:
/// the sources of the standard library and of registry crates, which reports shorten to the same
/// form by their own rule ([`crate::frames::short_path`]: `core/src/...`, `serde-1.0.0/src/...`),
/// and a working directory of `/` (a service's), under which every path is and none is made
/// relative.
pub(crate) fn display_path(working_dir: Option<&Path>, file: &str) -> String {
    if crate::frames::short_path(file).len() != file.len() {
        return file.to_owned();
    }
    let path = Path::new(file);
    match working_dir
        .filter(|dir| dir.parent().is_some())
        .map(|dir| path.strip_prefix(dir))
    {
        Some(Ok(relative)) if !relative.as_os_str().is_empty() => {
            relative.to_string_lossy().into_owned()
        }
        _ => file.to_owned(),
    }
}

/// The frames of the code at `probe` (an address as the module's file states it) in the module
/// named `module_name`, read with `loader` (its debug information, else its symbol table);
/// innermost first, never empty. Source files are shown through `display`.
pub(crate) fn frames_at(
    loader: Option<&addr2line::Loader>,
    probe: u64,
    module_name: &str,
    display: impl Fn(&str) -> String,
) -> Vec<Frame> {
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
                // Rust's names, else C++'s (a C++ library's `_Znwm` is `operator new`).
                .map(|s| addr2line::demangle_auto(s.into(), None).into_owned());
        }
    }
    if raw.is_empty() {
        raw.push((None, None, 0, 0));
    }
    if let Some(symbol) = symbol {
        raw.last_mut().expect("not empty").0 = Some(symbol);
    }
    let frames: Vec<Frame> = raw
        .into_iter()
        .map(|(function, file, line, column)| match file {
            Some(file) => Frame {
                function,
                file: Some(display(&file)),
                line,
                column,
            },
            None => Frame {
                // The module, when known, even without a name: `/lib/libc.so.6` says more than
                // `???`, and marks the C library's start of the process below `main`.
                file: (!module_name.is_empty()).then(|| module_name.to_owned()),
                function,
                line: 0,
                column: 0,
            },
        })
        .collect();
    without_calls_of_the_program(frames)
}

/// `frames` (an address's, innermost first) without those of memprof's functions that call the
/// program's code back, inlined there ([`frames::calls_program`]): they stand between the
/// program's frames, and no report shows them. Unless they are all there is (the address is in
/// such a function's own code, which the stack walk leaves out).
fn without_calls_of_the_program(mut list: Vec<Frame>) -> Vec<Frame> {
    if list.iter().any(frames::calls_program) && !list.iter().all(frames::calls_program) {
        list.retain(|frame| !frames::calls_program(frame));
    }
    list
}

impl Resolve for Symbolizer {
    fn resolve(&mut self, address: ReturnAddress) -> Arc<[Frame]> {
        self.follow_the_loader();
        if let Some(frames) = self.cache.get(&address) {
            return frames.clone();
        }
        let frames = self.lookup(address);
        self.cache.insert(address, frames.clone());
        frames
    }

    fn module_name(&mut self, address: ReturnAddress) -> Option<Arc<str>> {
        self.follow_the_loader();
        let index = self.module_of(address.lookup_address())?;
        let path = &self.modules[index].path;
        Some(Arc::from(path.file_name()?.to_string_lossy().as_ref()))
    }

    /// Each address's frames, and before the frames of a caller whose direct call went to a
    /// function that is not the next-younger frame's, that function (see the module's
    /// documentation).
    fn resolve_stack(&mut self, stack: &[ReturnAddress]) -> Vec<Arc<[Frame]>> {
        let mut resolved = Vec::with_capacity(stack.len());
        for (index, &address) in stack.iter().enumerate() {
            let frames = self.resolve(address);
            let younger = index.checked_sub(1).map(|i| stack[i].lookup_address());
            let recovered = younger.and_then(|younger| {
                self.callee(address)
                    .filter(|callee| !callee.function.contains(&younger))
            });
            resolved.push(match recovered {
                Some(callee) => std::iter::once(callee.frame)
                    .chain(frames.iter().cloned())
                    .collect(),
                None => frames,
            });
        }
        resolved
    }
}

/// The process's symbolizer, made on first use and kept with its cache.
static SYMBOLIZER: Mutex<Option<Symbolizer>> = Mutex::new(None);

/// The symbolizer's lock, for the forking thread to hold across `fork` (dropping the result lets
/// it go): a child must not get it held by a thread that did not come along.
pub(crate) fn lock_for_fork() -> impl Sized + 'static {
    SYMBOLIZER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `f` with the process's symbolizer, inside the reentrancy guard.
pub fn with_symbolizer<R>(f: impl FnOnce(&mut Symbolizer) -> R) -> R {
    untracked(|| {
        let mut slot = SYMBOLIZER.lock().unwrap_or_else(PoisonError::into_inner);
        let symbolizer = slot.get_or_insert_with(|| {
            warn_without_debug_info();
            Symbolizer::new(crate::config::get().working_dir.clone())
        });
        f(symbolizer)
    })
}

/// Says once, when the process's symbolizer is made (at the first report or export), that the
/// executable has no debug information, naming it and the Cargo setting that gives it: without
/// it, frames have no file or line, inlined calls merge into their callers, and types read as
/// unknown, silently. A file that cannot be read says nothing; under `memprof run`, only the
/// processes it started itself say it (`MEMPROF_RUN_PID`), not every process they start.
fn warn_without_debug_info() {
    if !crate::config::get().warns_of_missing_debug_info() {
        return;
    }
    let Ok(executable) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    if modules::has_debug_info(&executable) == Some(false) {
        crate::config::warn(format_args!("{}", no_debug_info_warning(&executable)));
    }
}

/// The warning for an executable without debug information.
fn no_debug_info_warning(executable: &Path) -> String {
    format!(
        "{} has no debug information: frames show no file or line, inlined functions merge into \
         their callers and types read as unknown. Build it with `debug = \"limited\"` (or \
         `\"line-tables-only\"`, or `true`) in the Cargo.toml section of its profile, such as \
         `[profile.release]`, and no `strip` of the debug information (a C or C++ program: \
         with `-g`)",
        executable.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlined_calls_of_the_program_are_left_out() {
        let frame = |function: &str| Frame {
            function: Some(function.into()),
            file: Some("src/main.rs".into()),
            line: 1,
            column: 1,
        };
        let names = |frames: Vec<Frame>| -> Vec<String> {
            frames.into_iter().filter_map(|f| f.function).collect()
        };
        let inlined = vec![
            frame("app::serve::{{closure}}"),
            frame("memprof::labels::with_labels"),
            frame("<memprof::labels::Attached<F> as core::future::future::Future>::poll"),
            frame("memprof::labels::Labels::attach::{{closure}}"),
            frame("app::serve"),
        ];
        assert_eq!(
            names(without_calls_of_the_program(inlined)),
            ["app::serve::{{closure}}", "app::serve"]
        );
        // An address in such a function's own code keeps its frame: it is never empty.
        let own = vec![frame("memprof::labels::with_labels")];
        assert_eq!(
            names(without_calls_of_the_program(own)),
            ["memprof::labels::with_labels"]
        );
        // memprof's other functions are the reports' to trim.
        let other = vec![frame("memprof::record::alloc"), frame("app::main")];
        assert_eq!(
            names(without_calls_of_the_program(other)),
            ["memprof::record::alloc", "app::main"]
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

    /// Files under the working directory are shown relative to it, others whole; the standard
    /// library's and registry crates' sources whole, for reports to shorten them the same way
    /// from any directory; and nothing made relative to `/`.
    #[test]
    fn paths_are_relative_only_under_a_working_directory_other_than_the_root() {
        let std_file = "/rustc/0123abcd/library/core/src/iter/traits/iterator.rs";
        let registry_file =
            "/home/u/.cargo/registry/src/index.crates.io-0123456789abcdef/serde-1.0.0/src/de.rs";
        let cases = [
            ("/home/u/app", "/home/u/app/src/main.rs", "src/main.rs"),
            ("/home/u/app/src", "/home/u/app/src/main.rs", "main.rs"),
            (
                "/home/u/app2",
                "/home/u/app/src/main.rs",
                "/home/u/app/src/main.rs",
            ),
            ("/home/u/app", "/home/u/app", "/home/u/app"),
            ("/", "/srv/app/src/main.rs", "/srv/app/src/main.rs"),
            ("/", std_file, std_file),
            ("/home/u", registry_file, registry_file),
            ("/home/u", "/home/u/app/src/main.rs", "app/src/main.rs"),
        ];
        for (dir, file, shown) in cases {
            assert_eq!(
                display_path(Some(Path::new(dir)), file),
                shown,
                "{dir} {file}"
            );
        }
        assert_eq!(display_path(None, "/a/b.rs"), "/a/b.rs");
        // Shortened for reports, the standard library's file reads the same under `/`.
        let frame = Frame {
            file: Some(display_path(Some(Path::new("/")), std_file)),
            ..Frame::default()
        };
        assert_eq!(frame.short_file(), Some("core/src/iter/traits/iterator.rs"));
    }

    #[test]
    #[cfg(not(target_arch = "aarch64"))]
    fn direct_calls_are_decoded_and_nothing_else() {
        // `call` 0x10 bytes past its end, and 0x20 bytes before it.
        assert_eq!(
            direct_call_target(0x1000, [0xE8, 0x10, 0, 0, 0]),
            Some(0x1015)
        );
        assert_eq!(
            direct_call_target(0x1000, [0xE8, 0xE0, 0xFF, 0xFF, 0xFF]),
            Some(0x0FE5)
        );
        // The last bytes of `call *0x10(%rip)` (FF 15 disp32) are no direct call.
        assert_eq!(direct_call_target(0x1000, [0x15, 0x10, 0, 0, 0]), None);
    }

    #[test]
    #[cfg(target_arch = "aarch64")]
    fn direct_calls_are_decoded_and_nothing_else() {
        // `bl` 4 instructions on, and 2 back.
        assert_eq!(
            direct_call_target(0x1000, 0x9400_0004u32.to_le_bytes()),
            Some(0x1010)
        );
        assert_eq!(
            direct_call_target(0x1000, 0x97FF_FFFEu32.to_le_bytes()),
            Some(0x0FF8)
        );
        // `b` (a jump, no call) is not one.
        assert_eq!(
            direct_call_target(0x1000, 0x1400_0004u32.to_le_bytes()),
            None
        );
    }

    /// A library of the system, unloaded before any symbolizer listed the modules, is named from
    /// its file when it was noted while loaded (as the preloaded library's `dlclose` does), and
    /// by nothing more than the address otherwise.
    #[test]
    fn a_library_noted_before_it_is_unloaded_is_named_from_its_file() {
        use crate::modules::testing;
        // No other test of this binary opens it.
        let handle = testing::open(c"libbz2.so.1.0");
        let function = testing::symbol(handle, c"BZ2_bzlibVersion");
        modules::note_loaded();
        testing::close(handle);
        if modules::loaded().iter().any(|m| m.contains(function)) {
            return; // Still loaded (by some other part of the process): nothing to check.
        }
        let mut symbolizer = Symbolizer::new(None);
        let frames = symbolizer.resolve(ReturnAddress(function + 1));
        let frame = frames.last().unwrap();
        assert_eq!(
            frame.function.as_deref(),
            Some("BZ2_bzlibVersion"),
            "{frames:?}"
        );
        assert!(
            frame.file.as_ref().is_some_and(|f| f.contains("libbz2")),
            "{frames:?}"
        );
    }
}
