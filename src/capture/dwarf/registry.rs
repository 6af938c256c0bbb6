//! The registry: the modules the DWARF walk knows and their unwind tables, as of one generation of
//! the dynamic loader.
//!
//! It lists every module [`loaded`](crate::modules::loaded) and keeps each one's `.eh_frame_hdr`
//! (the sorted index of functions) and `.eh_frame` (the rules) as slices straight into the mapped
//! image: nothing is copied, and only the index's header is parsed up front. Each module is given
//! to framehop too. The first walk of the process builds it, inside the caller's reentrancy guard,
//! so its allocations are not recorded. It is published through an atomic pointer and never freed,
//! so a walk never waits for it once it exists and never sees it go away.
//!
//! The modules present at the first build are [`Kind::Permanent`]: the dynamic loader never unloads
//! the objects a program starts with, and the first walk normally comes at the program's first
//! allocation. Modules registered later are [`Kind::Unloadable`], since `dlclose` may unload them:
//! before a walk trusts one, or when it meets code in no module, [`confirm`] compares the loader's
//! load and unload counters with the registry's and rebuilds the registry when they differ.
//! Superseded registries are leaked, since walks on other threads may still be reading them.

use super::rules::Cfi;
use super::tables::{Section, cfi_of, unwind_tables};
use crate::modules;
use framehop::x86_64::UnwinderX86_64;
use framehop::{MustNotAllocateDuringUnwind, Unwinder};
use std::ops::Range;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};

/// framehop's unwinder over in-memory sections, never allocating while it unwinds.
pub(super) type Framehop = UnwinderX86_64<Section, MustNotAllocateDuringUnwind>;

/// How far the walk may trust a range of code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Loaded before the first walk: stays loaded, its tables can always be read.
    Permanent,
    /// Loaded later: `dlclose` may unload it, so the registry must be confirmed current first.
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
}

/// The dynamic loader's counters of objects loaded and unloaded so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Generation {
    adds: u64,
    subs: u64,
}

/// The modules known to the unwinder, as of one loader generation.
pub(super) struct Registry {
    pub(super) framehop: Framehop,
    /// Every executable segment, sorted by start, disjoint.
    code: Vec<CodeRange>,
    /// The call-frame information of each module that has it.
    pub(super) cfi: Vec<Cfi>,
    /// The loader's counters just before the modules were listed (`None`: unknown).
    generation: Option<Generation>,
}

/// The current registry: null until the first walk, then a leaked `Box<Registry>`. Replaced
/// (never freed) when modules come or go.
static CURRENT: AtomicPtr<Registry> = AtomicPtr::new(std::ptr::null_mut());
/// Serializes building registries.
static BUILD: Mutex<()> = Mutex::new(());
/// The executable segments loaded when the first registry was built: they stay loaded.
static PERMANENT: OnceLock<Vec<Range<usize>>> = OnceLock::new();

/// The current registry, built by the first call of the process.
#[inline]
pub(super) fn current() -> &'static Registry {
    let registry = CURRENT.load(Ordering::Acquire);
    if registry.is_null() {
        return build_first();
    }
    // SAFETY: a non-null `CURRENT` always comes from `Box::into_raw` in `publish` and is never
    // freed, so it is valid and immutable for the rest of the process.
    unsafe { &*registry }
}

/// Builds the first registry, or waits for the thread building it: the one time a walk may
/// wait, at the process's first allocations. The builder allocates inside the reentrancy
/// guard, so it never comes back here while holding the lock.
#[cold]
#[inline(never)]
fn build_first() -> &'static Registry {
    let _lock = lock(BUILD.lock());
    let registry = CURRENT.load(Ordering::Acquire);
    if !registry.is_null() {
        // SAFETY: as in `current`: published by `publish`, never freed.
        return unsafe { &*registry };
    }
    publish(Registry::build())
}

/// The build lock, for the forking thread to hold across `fork` (dropping the result lets it go):
/// a child must not get it held by a thread that did not come along.
pub(crate) fn lock_for_fork() -> impl Sized + 'static {
    lock(BUILD.lock())
}

/// Takes the build lock whatever a panicking builder left: the registry is replaced whole, so
/// a poisoned lock guards nothing half-done.
fn lock(result: std::sync::LockResult<MutexGuard<'static, ()>>) -> MutexGuard<'static, ()> {
    result.unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Makes `registry` current, leaking it: walks on other threads may still be reading the one
/// it replaces, and will until they end, so neither is ever freed.
fn publish(registry: Registry) -> &'static Registry {
    let registry = Box::into_raw(Box::new(registry));
    CURRENT.store(registry, Ordering::Release);
    // SAFETY: just made from a `Box`, and never freed.
    unsafe { &*registry }
}

/// A registry that matches the loaded modules now: `registry` itself if the loader's counters
/// have not moved since it was built, else a rebuilt one. `None` when that cannot be known
/// without waiting (a rebuild under way elsewhere, counters unavailable) or, for code outside
/// every module (`unknown`), when this thread has checked too recently: counted in `misses`,
/// such code makes a thread check only on its 1st, 2nd, 4th, 8th... miss and every 4096th after
/// that, so programs that run much code outside every module (JIT-compiled code) do not take
/// the loader's lock on every allocation.
#[cold]
#[inline(never)]
pub(super) fn confirm(
    registry: &'static Registry,
    unknown: bool,
    misses: &mut u32,
) -> Option<&'static Registry> {
    if unknown {
        *misses = misses.wrapping_add(1);
        if !misses.is_power_of_two() && !misses.is_multiple_of(4096) {
            return None;
        }
    }
    let now = loader_generation()?;
    if registry.generation == Some(now) {
        return Some(registry);
    }
    let _lock = match BUILD.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    // SAFETY: as in `current`: a non-null `CURRENT` is published by `publish`, never freed.
    let latest = unsafe { CURRENT.load(Ordering::Acquire).as_ref() }.unwrap_or(registry);
    if latest.generation == Some(now) {
        return Some(latest);
    }
    *misses = 0;
    Some(publish(Registry::build()))
}

impl Registry {
    /// Lists the loaded modules and registers the unwind tables of each. Allocates.
    pub(super) fn build() -> Registry {
        // Counters first: a module loaded in between makes the next check rebuild again,
        // never the other way round.
        let generation = loader_generation();
        let modules = modules::loaded();
        let permanent = PERMANENT.get_or_init(|| {
            modules
                .iter()
                .flat_map(|m| m.text.iter().cloned())
                .collect()
        });
        let mut framehop = Framehop::new();
        let mut code = Vec::new();
        let mut cfi = Vec::new();
        for module in &modules {
            let tables = unwind_tables(module);
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
        }
        code.sort_by_key(|r| r.start);
        Registry {
            framehop,
            code,
            cfi,
            generation,
        }
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

/// The dynamic loader's load and unload counters now (`dl_iterate_phdr`'s `dlpi_adds` and
/// `dlpi_subs`). Takes the loader's lock briefly; never allocates.
fn loader_generation() -> Option<Generation> {
    let mut generation: Option<Generation> = None;
    // SAFETY: `first_object` only reads the `dl_phdr_info` that `dl_iterate_phdr` keeps valid
    // during the call, and writes `data`, which is `&mut generation`, alive and borrowed by
    // nobody else meanwhile.
    unsafe {
        libc::dl_iterate_phdr(
            Some(first_object),
            (&mut generation as *mut Option<Generation>).cast(),
        );
    }
    generation
}

/// `dl_iterate_phdr` callback: copies the counters from the first object, then stops.
///
/// # Safety
///
/// `info` must point to a `dl_phdr_info` of at least `size` bytes, valid for the call, and
/// `data` to an `Option<Generation>` that nothing else uses during the call.
unsafe extern "C" fn first_object(
    info: *mut libc::dl_phdr_info,
    size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    let needed = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + size_of::<u64>();
    if info.is_null() || data.is_null() || size < needed {
        return 1;
    }
    // SAFETY: `info` is valid for `size` bytes, enough for both counters (checked above);
    // `data` is the caller's `Option<Generation>`, exclusively ours for the call.
    unsafe {
        let info = &*info;
        *data.cast::<Option<Generation>>() = Some(Generation {
            adds: info.dlpi_adds,
            subs: info.dlpi_subs,
        });
    }
    1
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
    fn a_library_loaded_later_is_picked_up() {
        let before = Registry::build();
        assert!(
            loader_generation().is_some(),
            "glibc and musl keep the counters"
        );
        let name = c"libresolv.so.2";
        // SAFETY: loading a C library from the system with no constructors of note.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null());
        let module = modules::loaded()
            .into_iter()
            .find(|m| m.path.to_string_lossy().contains("libresolv"))
            .expect("libresolv is loaded");
        let inside = module.text[0].start;
        let mut hint = 0;
        let already_loaded = before.kind_of(inside, &mut hint).is_some();
        let mut misses = 0;
        let before: &'static Registry = Box::leak(Box::new(before));
        let after = confirm(before, true, &mut misses).expect("rebuilt");
        if already_loaded {
            // Another test loaded it first: nothing to learn here but that it is known.
            assert!(after.kind_of(inside, &mut hint).is_some());
        } else {
            assert_eq!(after.kind_of(inside, &mut hint), Some(Kind::Unloadable));
        }
        // A current registry is confirmed as is; a third miss in a row is not even checked.
        assert!(std::ptr::eq(
            confirm(after, false, &mut misses).unwrap(),
            after
        ));
        let mut misses = 2;
        assert!(confirm(after, true, &mut misses).is_none());
    }
}
