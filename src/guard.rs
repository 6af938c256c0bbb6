//! The reentrancy guard: while a thread holds it, that thread's allocations are not recorded.
//!
//! memprof allocates for itself (the live table grows, stacks are interned, reports format
//! strings). Those allocations go through the global allocator, which is memprof again; the guard
//! makes them pass straight to the wrapped allocator, so they are never recorded and the allocation
//! path never re-enters itself.

#![forbid(unsafe_code)]

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    /// Whether this thread is inside memprof. `const`-initialized and without a destructor, so
    /// reading it never allocates and still works while the thread's other locals are torn down.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Proof that the current thread is inside memprof; leaving the scope lets recording resume.
#[must_use = "the guard protects only while it is alive"]
pub(crate) struct Guard {
    /// The guard belongs to the thread that made it.
    _not_send: PhantomData<*const ()>,
}

impl Guard {
    /// Enters memprof on this thread, or `None` when this thread is inside already.
    #[inline]
    pub(crate) fn enter() -> Option<Guard> {
        INSIDE
            .try_with(|inside| {
                if inside.replace(true) {
                    None
                } else {
                    Some(Guard {
                        _not_send: PhantomData,
                    })
                }
            })
            .ok()
            .flatten()
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|inside| inside.set(false));
    }
}

/// Whether this thread is inside memprof now.
#[inline]
pub(crate) fn inside() -> bool {
    INSIDE.try_with(Cell::get).unwrap_or(true)
}

/// Runs `f` with this thread's allocations unrecorded (reports use this for their own work).
pub fn untracked<R>(f: impl FnOnce() -> R) -> R {
    let _guard = Guard::enter();
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_entry_is_refused_and_drop_resets() {
        let outer = Guard::enter().expect("first entry");
        assert!(Guard::enter().is_none());
        drop(outer);
        assert!(Guard::enter().is_some());
    }

    #[test]
    fn untracked_nests() {
        let value = untracked(|| untracked(|| 7));
        assert_eq!(value, 7);
        assert!(Guard::enter().is_some());
    }
}
