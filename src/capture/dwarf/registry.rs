//! The registry: the modules the DWARF walk knows and their unwind tables.
//!
//! It lists every loaded module and keeps each one's `.eh_frame_hdr` (the sorted index of
//! functions) and `.eh_frame` (the rules) as slices straight into the mapped image: nothing is
//! copied, and only the index's header is parsed up front. Each module is given to framehop too.
//! The first walk of the process builds it, inside the caller's reentrancy guard, so its
//! allocations are not recorded. It is published through an atomic pointer and never freed, so a
//! walk never waits for it once it exists and never sees it go away.
//!
//! # Reading a module's memory only while it is mapped
//!
//! `dlclose` unmaps a library while another thread may be walking, so every read of a module's
//! memory happens where the module is known to be mapped:
//!
//! - Building reads each module's headers inside the loader's listing of it
//!   ([`modules::with_loaded`]), holding the loader's lock, which `dlclose` needs to unmap.
//! - The modules loaded when the program started are [`Kind::Permanent`]: the loader never unloads
//!   the objects a program starts with. Their tables are read at any time, without a lock. Which
//!   they are is recorded before `main`, by a constructor, so a registry first built late (recording
//!   paused or sampled at first) does not take a library loaded since for one of them.
//! - Every other module is [`Kind::Unloadable`]: the walk reads its tables (and trusts rules cached
//!   from them) only inside [`Registry::locked`], which runs the rest of the walk holding the
//!   loader's lock, once it has seen that the loader's [`Generation`] is one at which every
//!   registered module not marked gone was checked to be loaded as registered. When the generation
//!   has moved, [`Registry::validate`] checks the modules again and marks the ones no longer
//!   loaded gone; a walk treats their code as unknown.
//!
//! Code in no registered module (or in one marked gone) makes the walk [`refresh`] the registry:
//! it is rebuilt when the loader's generation has moved since it was built, the one allocation a
//! walk may make, inside the reentrancy guard. Superseded registries are leaked, since walks on
//! other threads may still be reading them. A library loaded and unloaded in a loop by another
//! thread therefore costs a walk one validation per change and no rebuild, unless its code is on
//! the walking thread's stack.
//!
//! Each registry built notes its modules as seen ([`modules::note`], only if no other thread is
//! noting: never waited for), so that the symbolizer can name the code of a library that a walk
//! met and that was unloaded before any report listed it.

use super::rules::Cfi;
use super::tables::{Section, cfi_of, unwind_tables};
use crate::modules::{self, Generation, Module};
use framehop::x86_64::UnwinderX86_64;
use framehop::{MustNotAllocateDuringUnwind, Unwinder};
use std::ops::{ControlFlow, Range};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};

/// framehop's unwinder over in-memory sections, never allocating while it unwinds.
pub(super) type Framehop = UnwinderX86_64<Section, MustNotAllocateDuringUnwind>;

/// How far the walk may trust a range of code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Loaded when the program started: stays loaded, its tables can always be read.
    Permanent,
    /// Loaded later: `dlclose` may unload it, so its tables are read only under the loader's lock,
    /// in a registry checked against the loader.
    Unloadable,
    /// No unwind tables: the walk ends here.
    Opaque,
}

/// One executable segment of a registered module.
#[derive(Clone, Debug)]
pub(super) struct CodeRange {
    start: usize,
    end: usize,
    pub(super) kind: Kind,
    /// The module's call-frame information in [`Registry::cfi`] (past its end: none).
    pub(super) cfi: usize,
    /// The module in [`Registry::modules`].
    module: usize,
}

/// A registered module, as the loader listed it.
struct Registered {
    module: Module,
    kind: Kind,
    /// No longer loaded as registered (found so by [`Registry::validate`]); never cleared.
    gone: AtomicBool,
    /// The last generation at which [`Registry::validate`] found it loaded (written only under
    /// [`BUILD`]).
    seen: AtomicU64,
}

/// No generation: the loader does not count.
const UNKNOWN: u64 = u64::MAX;

/// The modules known to the unwinder.
pub(super) struct Registry {
    pub(super) framehop: Framehop,
    /// Every executable segment, sorted by start, disjoint.
    code: Vec<CodeRange>,
    /// The call-frame information of each module that has it.
    pub(super) cfi: Vec<Cfi>,
    /// Every module listed, in the loader's order.
    modules: Vec<Registered>,
    /// The loader's generation when the modules were listed (`None`: unknown).
    built: Option<Generation>,
    /// The latest generation at which every module not marked gone was checked to be loaded as
    /// registered ([`UNKNOWN`]: none).
    valid_at: AtomicU64,
    /// Modules marked gone so far: rules cached from this registry are forgotten when it changes.
    gone: AtomicU32,
}

/// The current registry: null until the first walk, then a leaked `Box<Registry>`. Replaced
/// (never freed) when modules come.
static CURRENT: AtomicPtr<Registry> = AtomicPtr::new(std::ptr::null_mut());
/// Serializes building and validating registries. Only ever tried on the allocation path, never
/// waited for: a walk that finds it taken goes without what it wanted.
static BUILD: Mutex<()> = Mutex::new(());
/// The executable segments of the modules the program started with: they stay loaded.
static PERMANENT: OnceLock<Vec<Range<usize>>> = OnceLock::new();

/// Records the modules loaded when the program starts, before `main` (the dynamic loader has
/// mapped every object the program starts with before it runs any constructor).
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static RECORD_PERMANENT: extern "C" fn() = record_permanent;

/// The constructor behind [`RECORD_PERMANENT`].
#[cfg(target_os = "linux")]
extern "C" fn record_permanent() {
    crate::guard::untracked(permanent);
}

/// The executable segments of the modules the program started with, recorded by the
/// constructor, or else now (by the first registry built).
fn permanent() -> &'static [Range<usize>] {
    PERMANENT.get_or_init(|| {
        modules::loaded()
            .iter()
            .flat_map(|m| m.text.iter().cloned())
            .collect()
    })
}

/// The current registry, built by the first call of the process. `None` while another thread
/// builds the first one.
#[inline]
pub(super) fn current() -> Option<&'static Registry> {
    let registry = CURRENT.load(Ordering::Acquire);
    if registry.is_null() {
        return build_first();
    }
    // SAFETY: a non-null `CURRENT` always comes from `Box::into_raw` in `publish` and is never
    // freed, so it is valid and immutable (but for its atomics) for the rest of the process.
    Some(unsafe { &*registry })
}

/// Builds the first registry, unless another thread is building it. The builder allocates inside
/// the reentrancy guard, so it never comes back here while holding the lock.
#[cold]
#[inline(never)]
fn build_first() -> Option<&'static Registry> {
    let _lock = try_lock()?;
    // SAFETY: as in `current`: a non-null `CURRENT` is published by `publish`, never freed.
    if let Some(registry) = unsafe { CURRENT.load(Ordering::Acquire).as_ref() } {
        return Some(registry);
    }
    Some(publish(Registry::build()))
}

/// The build lock, for the forking thread to hold across `fork` (dropping the result lets it go):
/// a child must not get it held by a thread that did not come along.
pub(crate) fn lock_for_fork() -> impl Sized + 'static {
    BUILD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Takes the build lock if it is free, whatever a panicking holder left: registries are
/// replaced whole and validation only ever marks modules gone, so a poisoned lock guards nothing
/// half-done.
fn try_lock() -> Option<MutexGuard<'static, ()>> {
    match BUILD.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Makes `registry` current, leaking it: walks on other threads may still be reading the one
/// it replaces, and will until they end, so neither is ever freed.
fn publish(registry: Registry) -> &'static Registry {
    let registry = Box::into_raw(Box::new(registry));
    CURRENT.store(registry, Ordering::Release);
    // SAFETY: just made from a `Box`, and never freed.
    unsafe { &*registry }
}

/// A registry that may know the code a walk found in none of `registry`'s modules (or in one
/// marked gone): the current one if another thread replaced `registry`, else one rebuilt if
/// modules came or went since `registry` was built. `None` when nothing better can be had
/// without waiting (a build under way elsewhere, counters unavailable, nothing changed) or when
/// this thread has checked too recently: counted in `misses` (which the walk resets when a
/// refresh made the code known), such code makes a thread check only on its 1st, 2nd, 4th,
/// 8th... miss and every 4096th after that, so programs that run much code outside every module
/// (JIT-compiled code) do not list the modules on every allocation.
#[cold]
#[inline(never)]
pub(super) fn refresh(registry: &'static Registry, misses: &mut u32) -> Option<&'static Registry> {
    *misses = misses.wrapping_add(1);
    if !misses.is_power_of_two() && !misses.is_multiple_of(4096) {
        return None;
    }
    let _lock = try_lock()?;
    // SAFETY: as in `current`: a non-null `CURRENT` is published by `publish`, never freed.
    let latest = unsafe { CURRENT.load(Ordering::Acquire).as_ref() }.unwrap_or(registry);
    if !std::ptr::eq(latest, registry) {
        return Some(latest);
    }
    let now = modules::generation()?;
    if registry.built == Some(now) {
        return None;
    }
    Some(publish(Registry::build()))
}

impl Registry {
    /// Lists the loaded modules and registers the unwind tables of each, reading them while the
    /// loader lists the module. Allocates.
    pub(super) fn build() -> Registry {
        let permanent = permanent();
        let mut built = None;
        let mut framehop = Framehop::new();
        let mut code = Vec::new();
        let mut cfi = Vec::new();
        let mut registered = Vec::new();
        modules::with_loaded(|object| {
            built = built.or(object.generation());
            let Some(module) = object.module() else {
                return ControlFlow::Continue(());
            };
            // SAFETY: `module` is the object the loader is listing, so it stays mapped until
            // `with_loaded` returns. The tables are read here only for parsing their headers;
            // later reads follow the rules of the module's `Kind` (see the module docs).
            let tables = unsafe { unwind_tables(&module) };
            let kind = if tables.is_none() {
                Kind::Opaque
            } else if module.text.iter().all(|r| permanent.contains(r)) {
                Kind::Permanent
            } else {
                Kind::Unloadable
            };
            let index = match tables.as_ref().and_then(|t| cfi_of(t, module.bias)) {
                Some(tables) => {
                    cfi.push(tables);
                    cfi.len() - 1
                }
                None => usize::MAX,
            };
            code.extend(module.text.iter().map(|r| CodeRange {
                start: r.start,
                end: r.end,
                kind,
                cfi: index,
                module: registered.len(),
            }));
            if let Some(tables) = tables {
                let start = module.text.iter().map(|r| r.start).min().unwrap_or(0);
                let end = module.text.iter().map(|r| r.end).max().unwrap_or(0);
                framehop.add_module(framehop::Module::new(
                    module.path.to_string_lossy().into_owned(),
                    start as u64..end as u64,
                    module.bias as u64,
                    tables,
                ));
            }
            registered.push(Registered {
                module,
                kind,
                gone: AtomicBool::new(false),
                seen: AtomicU64::new(built.map_or(UNKNOWN, |g| g.0)),
            });
            ControlFlow::Continue(())
        });
        code.sort_by_key(|r| r.start);
        // What names a module's code once it is unloaded: a walk met code of a module not
        // registered yet, a library loaded since, which may be unloaded before any report.
        modules::note(built, registered.iter().map(|r| &r.module), false);
        Registry {
            framehop,
            code,
            cfi,
            modules: registered,
            built,
            valid_at: AtomicU64::new(built.map_or(UNKNOWN, |g| g.0)),
            gone: AtomicU32::new(0),
        }
    }

    /// Runs `f` holding the loader's lock, if this registry is valid at the loader's generation
    /// then: while `f` runs, every registered module not marked gone is loaded as registered, and
    /// its tables can be read. Checks the modules again ([`Registry::validate`]) once when the
    /// generation has moved. `None` (and `f` not run) when validity cannot be had without
    /// waiting, or the modules keep changing.
    ///
    /// `f` runs inside the loader's callback: it must not panic, allocate or take a lock, and
    /// should be short (every `dlopen` and `dlclose` waits for it).
    pub(super) fn locked<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let mut f = Some(f);
        let mut result = None;
        for attempt in 0..2 {
            modules::with_loaded(|object| {
                let valid_at = self.valid_at.load(Ordering::Acquire);
                if object.generation().is_some_and(|g| g.0 == valid_at)
                    && let Some(f) = f.take()
                {
                    result = Some(f());
                }
                ControlFlow::Break(())
            });
            if result.is_some() || attempt == 1 || !self.validate() {
                break;
            }
        }
        result
    }

    /// Checks every registered module not marked gone against the loader's list, marks gone the
    /// ones no longer loaded as registered, and makes the registry valid at the generation seen.
    /// `false` if another thread is building or validating (nothing is waited for) or the loader
    /// does not count. Never allocates.
    #[cold]
    #[inline(never)]
    fn validate(&self) -> bool {
        let Some(_lock) = try_lock() else {
            return false;
        };
        let mut now = None;
        modules::with_loaded(|object| {
            let Some(generation) = object.generation() else {
                return ControlFlow::Break(());
            };
            now = Some(generation);
            for registered in self.unloadable() {
                if object.is(&registered.module) {
                    registered.seen.store(generation.0, Ordering::Relaxed);
                }
            }
            ControlFlow::Continue(())
        });
        let Some(now) = now else {
            return false;
        };
        let mut gone = 0;
        for registered in self.unloadable() {
            if registered.seen.load(Ordering::Relaxed) != now.0 {
                registered.gone.store(true, Ordering::Relaxed);
                gone += 1;
            }
        }
        if gone > 0 {
            self.gone.fetch_add(gone, Ordering::Release);
        }
        // Release: a walk that sees this generation sees the modules marked gone before it.
        self.valid_at.fetch_max(now.0, Ordering::Release);
        true
    }

    /// The registered modules that may be unloaded and are not yet marked gone.
    fn unloadable(&self) -> impl Iterator<Item = &Registered> {
        self.modules
            .iter()
            .filter(|r| r.kind == Kind::Unloadable && !r.gone.load(Ordering::Relaxed))
    }

    /// How many modules were marked gone so far: rules cached from this registry hold only while
    /// it stays the same.
    #[inline]
    pub(super) fn epoch(&self) -> u32 {
        self.gone.load(Ordering::Acquire)
    }

    /// Whether the module of `range` was found no longer loaded.
    #[inline]
    pub(super) fn is_gone(&self, range: &CodeRange) -> bool {
        self.modules
            .get(range.module)
            .is_none_or(|r| r.gone.load(Ordering::Relaxed))
    }

    /// What the code at `address` is.
    #[cfg(test)]
    fn kind_of(&self, address: usize, hint: &mut usize) -> Option<Kind> {
        self.range_of(address, hint).map(|range| range.kind)
    }

    /// The code range that holds `address`, trying the one at `hint` first and leaving there
    /// the one found.
    #[inline]
    pub(super) fn range_of(&self, address: usize, hint: &mut usize) -> Option<&CodeRange> {
        if let Some(range) = self.code.get(*hint)
            && range.start <= address
            && address < range.end
        {
            return Some(range);
        }
        let index = self
            .code
            .partition_point(|r| r.start <= address)
            .checked_sub(1)?;
        let range = self.code.get(index)?;
        if address < range.end {
            *hint = index;
            Some(range)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_of_the_test_binary_has_tables() {
        let registry = Registry::build();
        let mut hint = 0;
        let here = every_module_of_the_test_binary_has_tables as *const () as usize;
        assert_eq!(registry.kind_of(here, &mut hint), Some(Kind::Permanent));
        assert_eq!(registry.kind_of(1, &mut hint), None);
        for module in modules::loaded() {
            for range in &module.text {
                assert_ne!(
                    registry.kind_of(range.start, &mut hint),
                    Some(Kind::Opaque),
                    "{module:?}"
                );
            }
        }
    }

    #[test]
    fn the_modules_the_program_started_with_are_recorded_before_main() {
        // Nothing in this binary walks before its tests run (its allocator is the system's):
        // only the constructor can have recorded them.
        let recorded = PERMANENT.get().expect("recorded by the constructor");
        let here = the_modules_the_program_started_with_are_recorded_before_main as *const ();
        assert!(recorded.iter().any(|r| r.contains(&(here as usize))));
    }

    /// Opens a system library (one no other test of this binary opens), returning its handle.
    fn open(name: &std::ffi::CStr) -> *mut libc::c_void {
        // SAFETY: loading a C library from the system with no constructors of note.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null());
        handle
    }

    /// The first executable byte of the loaded module whose path contains `name`.
    fn code_of(name: &str) -> Option<usize> {
        modules::loaded()
            .into_iter()
            .find(|m| m.path.to_string_lossy().contains(name))
            .map(|m| m.text[0].start)
    }

    #[test]
    fn a_library_loaded_later_is_unloadable_and_marked_gone_once_unloaded() {
        let handle = open(c"libresolv.so.2");
        let inside = code_of("libresolv").expect("libresolv is loaded");
        let registry: &'static Registry = Box::leak(Box::new(Registry::build()));
        let mut hint = 0;
        assert_eq!(registry.kind_of(inside, &mut hint), Some(Kind::Unloadable));
        let range = registry.range_of(inside, &mut hint).unwrap();
        // Valid as built: `locked` runs at once, with the library not gone.
        assert_eq!(registry.locked(|| registry.is_gone(range)), Some(false));
        // Unloaded (no other test of this binary keeps it): validation marks it gone.
        // SAFETY: the handle came from `dlopen`, nothing of the library is in use.
        assert_eq!(unsafe { libc::dlclose(handle) }, 0);
        if code_of("libresolv").is_none() {
            let epoch = registry.epoch();
            assert_eq!(registry.locked(|| registry.is_gone(range)), Some(true));
            assert_eq!(registry.epoch(), epoch + 1);
        }
    }

    #[test]
    fn code_in_no_module_rebuilds_when_due_and_modules_changed() {
        let before = publish(Registry::build());
        let handle = open(c"libutil.so.1");
        let inside = code_of("libutil.so").expect("libutil is loaded");
        let mut hint = 0;
        // The third miss in a row is not even checked.
        let mut misses = 2;
        assert!(refresh(before, &mut misses).is_none());
        // The first is, and rebuilds: a library was loaded since.
        let mut misses = 0;
        let after = refresh(before, &mut misses).expect("rebuilt");
        assert_eq!(after.kind_of(inside, &mut hint), Some(Kind::Unloadable));
        // A walk still on the old registry takes the current one as it is.
        let mut misses = 0;
        let again = refresh(before, &mut misses).expect("the current registry");
        // SAFETY: as in `current`.
        let current = unsafe { CURRENT.load(Ordering::Acquire).as_ref() }.unwrap();
        assert!(std::ptr::eq(again, current));
        // SAFETY: the handle came from `dlopen`, nothing of the library is in use.
        assert_eq!(unsafe { libc::dlclose(handle) }, 0);
    }
}
