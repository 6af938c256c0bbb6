//! The program's own live memory mappings (feature `preload`): what its `mmap` and `mremap` calls
//! mapped and its `munmap` calls have not unmapped yet, by range, each with the stack that made
//! it. Partial unmaps trim or split a mapping, and a mapping made over recorded pages
//! (`MAP_FIXED`) replaces them, as the kernel does ([`RangeMap`]); the trace is told each piece
//! that ends, so that its replay keeps the same ranges.
//!
//! Mappings are rare next to allocations: one `std::sync::Mutex` (a futex, which never allocates)
//! guards the map. It is taken inside the reentrancy guard, never around the system call itself,
//! and only for the map's own change and the trace events it makes; a thread that holds it already
//! (a signal handler that interrupted a change) leaves the map alone rather than wait for itself.

#![forbid(unsafe_code)]

use crate::address::StackId;
use memprof_trace::RangeMap;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// What is kept of one live mapping (its range is its key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapped {
    /// The stack of the `mmap` or `mremap` that made it.
    pub stack: StackId,
    /// `mmap`'s `prot`.
    pub prot: u32,
    /// `mmap`'s `flags`.
    pub flags: u32,
}

/// The live mappings.
pub(crate) type Mappings = RangeMap<Mapped>;

static MAPPINGS: Mutex<Mappings> = Mutex::new(RangeMap::new());

/// Set once a mapping was recorded: until then an unmap needs not look.
static ANY: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Whether this thread holds [`MAPPINGS`]. `const`, without a destructor.
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` on the live mappings; `None`, without waiting, when this thread holds them already
/// or is ending. Call inside the reentrancy guard (the map allocates as it grows).
pub(crate) fn with<R>(f: impl FnOnce(&mut Mappings) -> R) -> Option<R> {
    if HOLDING.try_with(|h| h.replace(true)).unwrap_or(true) {
        return None;
    }
    let result = {
        let mut mappings = MAPPINGS.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut mappings)
    };
    let _ = HOLDING.try_with(|h| h.set(false));
    Some(result)
}

/// Records a mapping of `[start, start + len)` with `mapped`: returns the pieces of recorded
/// mappings it replaced, and calls `f` with them before the lock is let go.
pub(crate) fn map(start: usize, len: usize, mapped: Mapped, f: impl FnOnce(&[(u64, u64, Mapped)])) {
    ANY.store(true, Ordering::Relaxed);
    let _ = with(|m| f(&m.insert(start as u64, len as u64, mapped)));
}

/// Removes what is recorded of `[start, start + len)`: the pieces removed (none when nothing was
/// ever recorded).
pub(crate) fn unmap(start: usize, len: usize) -> Vec<(u64, u64, Mapped)> {
    if !ANY.load(Ordering::Relaxed) {
        return Vec::new();
    }
    with(|m| m.remove(start as u64, len as u64)).unwrap_or_default()
}

/// Puts back pieces [`unmap`] removed, when the call that was to unmap them failed.
pub(crate) fn restore(pieces: &[(u64, u64, Mapped)]) {
    if pieces.is_empty() {
        return;
    }
    let _ = with(|m| {
        for &(start, len, mapped) in pieces {
            m.insert(start, len, mapped);
        }
    });
}

/// The recorded mapping holding `address`, if any.
pub(crate) fn get(address: usize) -> Option<Mapped> {
    if !ANY.load(Ordering::Relaxed) {
        return None;
    }
    with(|m| m.get(address as u64).map(|(_, _, &mapped)| mapped)).flatten()
}

/// Takes the lock for `fork` (see `hooks::fork`): the child gets the map whole.
pub(crate) fn lock_for_fork() -> impl Sized + 'static {
    MAPPINGS.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_unmap_splits_and_a_failed_one_is_put_back() {
        let mapped = Mapped {
            stack: StackId(1),
            prot: 3,
            flags: 0x22,
        };
        let base = 0x7e00_0000_0000usize;
        map(base, 3 * 4096, mapped, |replaced| {
            assert!(replaced.is_empty())
        });
        let removed = unmap(base + 4096, 4096);
        assert_eq!(removed, vec![((base + 4096) as u64, 4096, mapped)]);
        assert_eq!(get(base), Some(mapped));
        assert_eq!(get(base + 4096), None);
        assert_eq!(get(base + 2 * 4096), Some(mapped));
        restore(&removed);
        assert_eq!(get(base + 4096), Some(mapped));
        // Reentry from the same thread does not wait for itself.
        assert_eq!(with(|_| with(|_| ())), Some(None));
        assert_eq!(unmap(base, 3 * 4096).len(), 3);
    }
}
