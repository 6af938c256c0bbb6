//! The code loaded in this process: executable and shared libraries, with where they sit in memory.
//!
//! Read with `dl_iterate_phdr`, off the allocation path (the DWARF unwinder reads it when the
//! modules change, the symbolizer when it renders a report), always holding the dynamic loader's
//! lock. That lock is what makes a module's memory safe to read: `dlclose` unmaps a module and
//! takes it off the loader's list in one hold of the same lock, so a module listed in a call of
//! [`with_loaded`] stays mapped until that call returns, and no longer. [`Module`] is a copy of
//! where a module was; reading its memory later needs another reason to know it is still there.
//!
//! # Modules seen
//!
//! A block's stack keeps raw addresses, and a library may be unloaded before they are named. So
//! every listing of the modules is noted ([`note`]): a copy of each module (path, load bias,
//! segments, and the build id read from its notes in memory) is kept while it is loaded and, once
//! it is no longer listed, among the [`UNLOADED_KEPT`] latest seen. [`seen_holding`] gives the
//! module seen latest at an address, which the symbolizer names from its file. Listings are
//! noted by whoever makes them: the symbolizer and the trace writer ([`listed`]), the DWARF
//! unwinder's registry each time it is built (a walk met code of a library it did not know), and
//! the preloaded library's `dlclose` before each call (`note_loaded`).

use std::ops::{ControlFlow, Range};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError, TryLockError};

/// One loaded ELF object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Module {
    /// Its file; the main executable is named by `/proc/self/exe`'s target.
    pub path: PathBuf,
    /// Load bias: actual virtual address minus the address the file states (0 for non-PIE).
    pub bias: usize,
    /// The executable `PT_LOAD` segments, as actual addresses.
    pub text: Vec<Range<usize>>,
    /// The `PT_GNU_EH_FRAME` segment (`.eh_frame_hdr`), as actual addresses, when present.
    pub eh_frame_hdr: Option<Range<usize>>,
    /// Every `PT_LOAD` segment, executable or not, as actual addresses (the DWARF unwinder bounds
    /// `.eh_frame` by the end of the segment holding it).
    pub segments: Vec<Range<usize>>,
    /// Where the loader keeps the module's program headers: with the path, the bias and the
    /// segments, what tells one loading of a module from another (a library unloaded and then
    /// loaded again at the same address from the same file compares equal, and is the same code).
    pub headers: usize,
    /// The GNU build id, read from the module's notes in memory when it was listed (empty when it
    /// has none): tells whether the file at [`Module::path`] is still the one that was loaded.
    pub build_id: Vec<u8>,
}

impl Module {
    /// Whether `address` falls in one of this module's executable segments.
    pub(crate) fn contains(&self, address: usize) -> bool {
        self.text.iter().any(|r| r.contains(&address))
    }
}

/// The dynamic loader's count of objects loaded plus objects unloaded so far (`dlpi_adds +
/// dlpi_subs`). Both counts only grow, so an equal count means no object came or went in
/// between: the list of modules is the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Generation(pub u64);

/// One object as the loader lists it, during a [`with_loaded`] callback. Its memory is mapped
/// until the [`with_loaded`] call that gave it returns.
pub(crate) struct Loaded<'a> {
    info: &'a libc::dl_phdr_info,
    /// The size of `info` as the loader gave it (older loaders have no counters).
    size: usize,
    /// Whether it is the first object listed, the main executable.
    first: bool,
}

impl Loaded<'_> {
    /// The loader's generation: the same for every object of one [`with_loaded`] call.
    pub(crate) fn generation(&self) -> Option<Generation> {
        let needed = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + size_of::<u64>();
        (self.size >= needed)
            .then(|| Generation(self.info.dlpi_adds.wrapping_add(self.info.dlpi_subs)))
    }

    /// Load bias: actual virtual address minus the address the file states.
    pub(crate) fn bias(&self) -> usize {
        self.info.dlpi_addr as usize
    }

    /// The program headers.
    fn headers(&self) -> &[libc::Elf64_Phdr] {
        if self.info.dlpi_phdr.is_null() {
            return &[];
        }
        // SAFETY: the loader guarantees `dlpi_phnum` program headers at a non-null `dlpi_phdr`,
        // valid while the object is listed, which outlasts `self`.
        unsafe {
            std::slice::from_raw_parts(self.info.dlpi_phdr, usize::from(self.info.dlpi_phnum))
        }
    }

    /// The name the loader gives, as bytes: empty for the main executable.
    fn name(&self) -> &[u8] {
        if self.info.dlpi_name.is_null() {
            return &[];
        }
        // SAFETY: a non-null `dlpi_name` is a NUL-terminated string owned by the loader, valid
        // while the object is listed, which outlasts `self`.
        unsafe { std::ffi::CStr::from_ptr(self.info.dlpi_name) }.to_bytes()
    }

    /// The segments of the object, as actual addresses: each with its type and whether it is
    /// executable.
    fn segments(&self) -> impl Iterator<Item = (u32, bool, Range<usize>)> + '_ {
        let bias = self.bias();
        self.headers().iter().map(move |header| {
            let start = bias.wrapping_add(header.p_vaddr as usize);
            let range = start..start.wrapping_add(header.p_memsz as usize);
            (header.p_type, header.p_flags & libc::PF_X != 0, range)
        })
    }

    /// A copy of where the object is, or `None` if it holds no code. Allocates.
    pub(crate) fn module(&self) -> Option<Module> {
        let mut text = Vec::new();
        let mut eh_frame_hdr = None;
        let mut segments = Vec::new();
        for (kind, executable, range) in self.segments() {
            match kind {
                libc::PT_LOAD => {
                    if executable {
                        text.push(range.clone());
                    }
                    segments.push(range);
                }
                libc::PT_GNU_EH_FRAME => eh_frame_hdr = Some(range),
                _ => {}
            }
        }
        if text.is_empty() {
            return None;
        }
        let name = self.name();
        let path = if name.is_empty() && self.first {
            std::fs::read_link("/proc/self/exe").unwrap_or_default()
        } else {
            PathBuf::from(String::from_utf8_lossy(name).into_owned())
        };
        Some(Module {
            path,
            bias: self.bias(),
            text,
            eh_frame_hdr,
            segments,
            headers: self.info.dlpi_phdr as usize,
            build_id: self.build_id().map(<[u8]>::to_vec).unwrap_or_default(),
        })
    }

    /// The GNU build id in the object's `PT_NOTE` segments, read in memory: only notes that lie
    /// in a readable `PT_LOAD` segment's bytes from the file are read.
    fn build_id(&self) -> Option<&[u8]> {
        let bias = self.bias();
        let mapped = |start: usize, end: usize| {
            self.headers().iter().any(|header| {
                let from = bias.wrapping_add(header.p_vaddr as usize);
                let size = header.p_memsz.min(header.p_filesz) as usize;
                header.p_type == libc::PT_LOAD
                    && header.p_flags & libc::PF_R != 0
                    && from <= start
                    && end <= from.wrapping_add(size)
            })
        };
        self.headers()
            .iter()
            .filter(|header| header.p_type == libc::PT_NOTE)
            .find_map(|header| {
                let start = bias.wrapping_add(header.p_vaddr as usize);
                let end = start.checked_add(header.p_filesz as usize)?;
                if !mapped(start, end) {
                    return None;
                }
                // SAFETY: the notes lie in a readable segment, backed by the file, of an object
                // the loader lists, which stays mapped while `self` lives.
                let notes = unsafe { std::slice::from_raw_parts(start as *const u8, end - start) };
                gnu_build_id(notes)
            })
    }

    /// Whether this object is the loading of a module that `module` copied: same bias, program
    /// headers, segments and name (the main executable's name is not compared: it never changes).
    /// Never allocates.
    pub(crate) fn is(&self, module: &Module) -> bool {
        if self.bias() != module.bias || self.info.dlpi_phdr as usize != module.headers {
            return false;
        }
        let (mut text, mut segments, mut eh_frame_hdr) = (0, 0, None);
        for (kind, executable, range) in self.segments() {
            match kind {
                libc::PT_LOAD => {
                    if executable {
                        if module.text.get(text) != Some(&range) {
                            return false;
                        }
                        text += 1;
                    }
                    if module.segments.get(segments) != Some(&range) {
                        return false;
                    }
                    segments += 1;
                }
                libc::PT_GNU_EH_FRAME => eh_frame_hdr = Some(range),
                _ => {}
            }
        }
        let named = (self.first && self.name().is_empty())
            || module.path.as_os_str().as_encoded_bytes() == self.name();
        named
            && text == module.text.len()
            && segments == module.segments.len()
            && eh_frame_hdr == module.eh_frame_hdr
    }
}

/// The type of a GNU build id note.
const NT_GNU_BUILD_ID: usize = 3;

/// The description of the first `NT_GNU_BUILD_ID` note named `GNU` in `notes` (ELF notes, 4-byte
/// aligned, in this machine's byte order).
fn gnu_build_id(mut notes: &[u8]) -> Option<&[u8]> {
    let word = |bytes: &[u8], at: usize| {
        let word: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        Some(u32::from_ne_bytes(word) as usize)
    };
    let padded = |size: usize| size.checked_add(3).map(|s| s & !3);
    while notes.len() >= 12 {
        let (name_size, desc_size, kind) = (word(notes, 0)?, word(notes, 4)?, word(notes, 8)?);
        let desc_at = 12usize.checked_add(padded(name_size)?)?;
        let next = desc_at.checked_add(padded(desc_size)?)?;
        let name = notes.get(12..12usize.checked_add(name_size)?)?;
        let desc = notes.get(desc_at..desc_at.checked_add(desc_size)?)?;
        if name == b"GNU\0" && kind == NT_GNU_BUILD_ID {
            return Some(desc);
        }
        notes = notes.get(next..)?;
    }
    None
}

/// Calls `f` with each loaded object in the loader's order, holding the loader's lock, until it
/// returns [`ControlFlow::Break`]. No object can be unloaded while `f` runs: the memory of every
/// object given in this call stays mapped until the call returns.
///
/// `f` runs inside a C callback: it must not panic (a panic aborts the process), and it should be
/// short, since every `dlopen`, `dlclose` and `dl_iterate_phdr` of the process waits for it. It
/// may allocate.
pub(crate) fn with_loaded<F: FnMut(&Loaded<'_>) -> ControlFlow<()>>(mut f: F) {
    let mut state = (&mut f, true);
    // SAFETY: `visit::<F>` receives a `dl_phdr_info` that `dl_iterate_phdr` keeps valid for the
    // duration of the callback, and `data` is `&mut state`, of the type `visit::<F>` expects,
    // used only inside this call on this thread.
    unsafe {
        libc::dl_iterate_phdr(Some(visit::<F>), (&mut state as *mut (&mut F, bool)).cast());
    }
}

/// `dl_iterate_phdr` callback: calls the closure behind `data` with the object.
///
/// # Safety
///
/// `info` must point to a `dl_phdr_info` of at least `size` bytes valid for the call, and `data`
/// to the `(&mut F, bool)` of [`with_loaded`] (the closure and whether no object was given to it
/// yet), which nothing else uses during the call.
unsafe extern "C" fn visit<F: FnMut(&Loaded<'_>) -> ControlFlow<()>>(
    info: *mut libc::dl_phdr_info,
    size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    if info.is_null() || data.is_null() {
        return 1;
    }
    // SAFETY: `dl_iterate_phdr` passes a valid `info` for this call, and `data` is the state of
    // `with_loaded`, borrowed by nobody else meanwhile.
    let (info, (f, first)) = unsafe { (&*info, &mut *data.cast::<(&mut F, bool)>()) };
    let loaded = Loaded {
        info,
        size,
        first: *first,
    };
    *first = false;
    match f(&loaded) {
        ControlFlow::Continue(()) => 0,
        ControlFlow::Break(()) => 1,
    }
}

/// Copies the code at `at` in `module` into `bytes`, from memory, while the loader keeps the module
/// mapped. `false`, reading nothing, when `module` is no longer loaded or the bytes are not all
/// inside one of its readable executable segments. Takes the loader's lock; never allocates.
pub(crate) fn read_text(module: &Module, at: usize, bytes: &mut [u8]) -> bool {
    let Some(end) = at.checked_add(bytes.len()) else {
        return false;
    };
    let mut read = false;
    with_loaded(|object| {
        if !object.is(module) {
            return ControlFlow::Continue(());
        }
        let bias = object.bias();
        let readable = object.headers().iter().any(|header| {
            let start = bias.wrapping_add(header.p_vaddr as usize);
            let size = header.p_memsz.min(header.p_filesz) as usize;
            header.p_type == libc::PT_LOAD
                && header.p_flags & libc::PF_X != 0
                && header.p_flags & libc::PF_R != 0
                && start <= at
                && end <= start.wrapping_add(size)
        });
        if readable {
            // SAFETY: the bytes lie in a readable segment, backed by the file, of an object the
            // loader lists, which stays mapped until `with_loaded` returns; `bytes` is ours.
            unsafe {
                std::ptr::copy_nonoverlapping(at as *const u8, bytes.as_mut_ptr(), bytes.len());
            }
            read = true;
        }
        ControlFlow::Break(())
    });
    read
}

/// Lists the modules loaded now. Allocates: call it outside the allocation path.
pub(crate) fn loaded() -> Vec<Module> {
    listed().1
}

/// Calls `f(address, size, name)` for every function symbol of the ELF file at `path` that has a
/// size, addresses as the file gives them (before the module's load bias). The symbols come from
/// the symbol table or, when `or_dynamic` and there is none, from the dynamic symbols. Only the
/// headers, the table and its strings are read, each in one piece. `None` when the file cannot
/// be read or has no such table. Allocates and reads a file: off the allocation path.
pub(crate) fn for_each_function(
    path: &Path,
    or_dynamic: bool,
    mut f: impl FnMut(u64, u64, &[u8]),
) -> Option<()> {
    use object::read::elf::{FileHeader, SectionHeader, Sym};
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&cache).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, &cache).ok()?;
    let kinds = [object::elf::SHT_SYMTAB, object::elf::SHT_DYNSYM];
    let kinds = if or_dynamic { &kinds[..] } else { &kinds[..1] };
    let symbols = kinds
        .iter()
        .filter_map(|&kind| sections.symbols(endian, &cache, kind).ok())
        .find(|table| !table.is_empty())?;
    let strings = sections
        .section(symbols.string_section())
        .ok()?
        .data(endian, &cache)
        .ok()?;
    let strings = object::StringTable::new(strings, 0, strings.len() as u64);
    for symbol in symbols.iter() {
        let size = symbol.st_size(endian);
        if symbol.st_type() != object::elf::STT_FUNC || size == 0 {
            continue;
        }
        if let Ok(name) = symbol.name(endian, strings) {
            f(symbol.st_value(endian), size, name);
        }
    }
    Some(())
}

/// Whether the ELF file at `path` carries DWARF debug information (a `.debug_info` section with
/// something in it, compressed or not). `None` when the file cannot be read as ELF. Reads only
/// the headers and the section names. Allocates and reads a file: off the allocation path.
///
/// A separate debug file (`.gnu_debuglink`, `/usr/lib/debug`) is not looked for: a binary whose
/// debug information was split off counts as having none.
pub(crate) fn has_debug_info(path: &Path) -> Option<bool> {
    use object::read::elf::{FileHeader, SectionHeader};
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&cache).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, &cache).ok()?;
    Some(sections.iter().any(|section| {
        let named = sections
            .section_name(endian, section)
            .is_ok_and(|name| name == b".debug_info" || name == b".zdebug_info");
        named && section.sh_type(endian) != object::elf::SHT_NOBITS && section.sh_size(endian) > 0
    }))
}

/// Whether the running executable carries debug information ([`has_debug_info`]), read once.
/// An executable that cannot be read counts as having it, as the warning says nothing then.
pub(crate) fn executable_has_debug_info() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::fs::read_link("/proc/self/exe")
            .ok()
            .and_then(|path| has_debug_info(&path))
            != Some(false)
    })
}

/// The GNU build id of the ELF file at `path` (its `NT_GNU_BUILD_ID` note), which names the
/// exact build of a binary for offline symbolization. Reads only the headers and the notes.
/// Allocates and reads a file: off the allocation path.
pub(crate) fn build_id(path: &Path) -> Option<Vec<u8>> {
    use object::read::elf::{FileHeader, SectionHeader};
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&cache).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, &cache).ok()?;
    for section in sections.iter() {
        let Ok(Some(mut notes)) = section.notes(endian, &cache) else {
            continue;
        };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == object::elf::ELF_NOTE_GNU
                && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID
            {
                return Some(note.desc().to_vec());
            }
        }
    }
    None
}

/// The index in `modules` of the module that holds `address`, listing the loaded modules again
/// into `modules` when none does (a library loaded since). Allocates, as [`loaded`] does.
pub(crate) fn find_or_reload(modules: &mut Vec<Module>, address: usize) -> Option<usize> {
    let find = |modules: &[Module]| modules.iter().position(|m| m.contains(address));
    match find(modules) {
        Some(index) => Some(index),
        None => {
            *modules = loaded();
            find(modules)
        }
    }
}

/// The loader's generation and the modules loaded at that generation (both read in one listing),
/// which are noted as seen ([`note`], unless another thread is noting). Allocates: call it
/// outside the allocation path.
pub(crate) fn listed() -> (Option<Generation>, Vec<Module>) {
    let (generation, modules) = list();
    note(generation, &modules, false);
    (generation, modules)
}

/// [`listed`] without noting.
fn list() -> (Option<Generation>, Vec<Module>) {
    let mut generation = None;
    let mut modules = Vec::new();
    with_loaded(|object| {
        generation = object.generation();
        modules.extend(object.module());
        ControlFlow::Continue(())
    });
    (generation, modules)
}

/// Modules seen loaded at some listing, kept after they are unloaded (see [`note`]).
struct Seen {
    /// Each module with the latest stamp it was listed at.
    modules: Vec<(Module, u64)>,
    /// The latest stamp: the loader's generation of the latest listing noted, or a count when
    /// the loader does not count.
    latest: u64,
    /// The loader's generation of the latest listing noted.
    generation: Option<Generation>,
}

/// The modules seen, behind a lock held only to copy modules in or out: nothing else is taken,
/// no file read, while it is held. On the allocation path it is only tried, never waited for.
static SEEN: Mutex<Seen> = Mutex::new(Seen {
    modules: Vec::new(),
    latest: 0,
    generation: None,
});

/// Modules seen and absent from the latest listing noted (unloaded, most of them) that are kept,
/// the latest seen first: a program loading and unloading libraries in a loop keeps a bounded
/// list.
pub(crate) const UNLOADED_KEPT: usize = 64;

/// The lock of the modules seen, for the forking thread to hold across `fork` (dropping the
/// result lets it go): a child must not get it held by a thread that did not come along.
pub(crate) fn lock_for_fork() -> impl Sized + 'static {
    SEEN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Notes `modules`, one whole listing made at `generation`, as seen: what is needed to name the
/// code of a module once it is unloaded ([`seen_holding`]). Of the modules no longer listed, the
/// [`UNLOADED_KEPT`] latest seen are kept. `wait`: wait for the lock if another thread holds it;
/// otherwise (on the allocation path, in the reentrancy guard) the listing is not noted then.
/// Allocates.
pub(crate) fn note<'a>(
    generation: Option<Generation>,
    modules: impl IntoIterator<Item = &'a Module>,
    wait: bool,
) {
    let mut seen = match SEEN.try_lock() {
        Ok(seen) => seen,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) if wait => {
            SEEN.lock().unwrap_or_else(PoisonError::into_inner)
        }
        Err(TryLockError::WouldBlock) => return,
    };
    seen.note(generation, modules);
}

impl Seen {
    /// What [`note`] does, once the lock is held.
    fn note<'a>(
        &mut self,
        generation: Option<Generation>,
        modules: impl IntoIterator<Item = &'a Module>,
    ) {
        // The loader's count orders listings made by different threads as the loader made them.
        let stamp = match generation {
            Some(generation) => generation.0,
            None => self.latest.saturating_add(1),
        };
        for module in modules {
            match self.modules.iter_mut().find(|(m, _)| m == module) {
                Some((_, at)) => *at = (*at).max(stamp),
                None => self.modules.push((module.clone(), stamp)),
            }
        }
        if stamp >= self.latest {
            self.latest = stamp;
            self.generation = generation;
        }
        let latest = self.latest;
        let absent = self.modules.iter().filter(|(_, at)| *at < latest).count();
        if absent > UNLOADED_KEPT {
            // The oldest go first: sorted by stamp, newest first, the tail past the bound goes.
            self.modules.sort_by_key(|&(_, at)| std::cmp::Reverse(at));
            let listed = self.modules.len() - absent;
            self.modules.truncate(listed + UNLOADED_KEPT);
        }
    }

    /// What [`seen_holding`] answers, once the lock is held.
    fn holding(&self, address: usize) -> Option<&Module> {
        self.modules
            .iter()
            .filter(|(m, _)| m.contains(address))
            .max_by_key(|&(_, at)| at)
            .map(|(m, _)| m)
    }
}

/// Notes the modules loaded now as seen, waiting for the lock, unless the latest listing noted
/// was made at the loader's generation now (nothing came or went since). For a caller about to
/// unload a library (the preloaded library's `dlclose`), off the allocation path. Allocates.
#[cfg(any(feature = "preload", test))]
pub(crate) fn note_loaded() {
    let now = generation();
    if now.is_some()
        && SEEN
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .generation
            == now
    {
        return;
    }
    let (generation, modules) = list();
    note(generation, &modules, true);
}

/// The module seen latest whose code holds `address`, among those noted ([`note`]): for an
/// address in no loaded module, the module it was in (or, if several were there in turn, the
/// last one). Waits for the lock; allocates (the copy).
pub(crate) fn seen_holding(address: usize) -> Option<Module> {
    let seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    seen.holding(address).cloned()
}

/// The loader's generation now: takes the loader's lock briefly and never allocates. `None` if
/// the loader does not count.
pub(crate) fn generation() -> Option<Generation> {
    let mut generation = None;
    with_loaded(|object| {
        generation = object.generation();
        ControlFlow::Break(())
    });
    generation
}

/// Libraries of the system loaded and unloaded by unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::ffi::{CStr, c_void};

    /// Opens the library `name` (`RTLD_NOW | RTLD_LOCAL`); panics when it cannot.
    pub(crate) fn open(name: &CStr) -> *mut c_void {
        // SAFETY: loading a C library of the system with no constructors of note.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "{name:?} is installed with the system");
        handle
    }

    /// The address of `symbol` in the library behind `handle`; panics when it is missing.
    pub(crate) fn symbol(handle: *mut c_void, symbol: &CStr) -> usize {
        // SAFETY: `handle` came from `open` and is still open; the name is NUL-terminated.
        let address = unsafe { libc::dlsym(handle, symbol.as_ptr()) } as usize;
        assert_ne!(address, 0, "{symbol:?}");
        address
    }

    /// Closes a handle from [`open`], nothing of its library being in use.
    pub(crate) fn close(handle: *mut c_void) {
        // SAFETY: the handle came from `dlopen` and is closed once.
        assert_eq!(unsafe { libc::dlclose(handle) }, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_executable_contains_this_function() {
        let here = the_executable_contains_this_function as *const () as usize;
        let modules = loaded();
        let module = modules
            .iter()
            .find(|m| m.contains(here))
            .expect("a module holds this code");
        assert_eq!(module.path, std::env::current_exe().unwrap());
        assert!(module.eh_frame_hdr.is_some());
    }

    #[test]
    fn each_module_is_itself_and_no_other() {
        let modules = loaded();
        assert!(modules.len() > 1, "{modules:?}");
        let mut checked = 0;
        with_loaded(|object| {
            if let Some(module) = object.module() {
                assert!(object.is(&module), "{module:?}");
                let others = modules.iter().filter(|m| object.is(m)).count();
                assert_eq!(others, 1, "{module:?}");
                let moved = Module {
                    bias: module.bias + 4096,
                    ..module.clone()
                };
                assert!(!object.is(&moved));
                let renamed = Module {
                    path: PathBuf::from("/elsewhere/libother.so"),
                    ..module
                };
                assert_eq!(
                    object.is(&renamed),
                    checked == 0,
                    "only the executable's name is free"
                );
                checked += 1;
            }
            ControlFlow::Continue(())
        });
        assert_eq!(checked, modules.len());
        assert!(generation().is_some(), "glibc and musl count loads");
    }

    /// A module of one executable segment at `start`, named `path`.
    fn fake(path: &str, start: usize) -> Module {
        Module {
            path: PathBuf::from(path),
            bias: start,
            text: std::iter::once(start..start + 0x1000).collect(),
            eh_frame_hdr: None,
            segments: std::iter::once(start..start + 0x1000).collect(),
            headers: start,
            build_id: Vec::new(),
        }
    }

    #[test]
    fn modules_seen_are_kept_once_gone_the_latest_at_an_address_first_and_bounded() {
        let mut seen = Seen {
            modules: Vec::new(),
            latest: 0,
            generation: None,
        };
        let exe = fake("/bin/program", 0x10_0000);
        let (a, b) = (fake("/lib/a.so", 0x70_0000), fake("/lib/b.so", 0x70_0000));
        seen.note(Some(Generation(1)), [&exe, &a]);
        // `a` unloaded, then `b` loaded at its address and listed.
        seen.note(Some(Generation(3)), [&exe, &b]);
        assert_eq!(seen.holding(0x70_0010), Some(&b));
        // A listing made earlier by another thread, noted late, does not make `a` the latest.
        seen.note(Some(Generation(2)), [&exe, &a]);
        assert_eq!(seen.holding(0x70_0010), Some(&b));
        assert_eq!(seen.generation, Some(Generation(3)));
        assert_eq!(seen.holding(0x10_0010), Some(&exe));
        assert_eq!(seen.holding(0x20_0000), None);
        // Libraries loaded and unloaded in a loop: the latest UNLOADED_KEPT absent ones stay,
        // and the modules of the latest listing.
        for i in 0..200 {
            let library = fake(&format!("/lib/loop{i}.so"), 0x1000_0000 + i * 0x10_0000);
            seen.note(Some(Generation(10 + 2 * i as u64)), [&exe, &library]);
        }
        assert_eq!(seen.modules.len(), 2 + UNLOADED_KEPT);
        assert_eq!(seen.holding(0x10_0010), Some(&exe));
        let last = 0x1000_0000 + 199 * 0x10_0000;
        assert_eq!(
            seen.holding(last).unwrap().path,
            Path::new("/lib/loop199.so")
        );
        let kept = 0x1000_0000 + (199 - UNLOADED_KEPT) * 0x10_0000;
        assert!(seen.holding(kept).is_some());
        assert_eq!(
            seen.holding(kept - 0x10_0000),
            None,
            "the oldest went first"
        );
        assert_eq!(seen.holding(0x70_0010), None);
    }

    #[test]
    fn build_ids_read_in_memory_are_the_files() {
        let mut compared = 0;
        for module in loaded() {
            if let Some(file) = build_id(&module.path) {
                assert_eq!(module.build_id, file, "{}", module.path.display());
                compared += usize::from(!file.is_empty());
            }
        }
        assert!(compared > 0, "no module with a build id");
    }
}
