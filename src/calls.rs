//! memprof's functions that call the program's code back: how many of them are on this
//! thread's stack now.
//!
//! Such a function's frame lies between the program's own frames, where a report must not show
//! it, nor count it against its depth. Two kinds:
//!
//! - Those inlined into the program's code (`with_labels`, `#[inline(always)]`) have no frame of
//!   their own: the symbolizer leaves out the inlined frame that names them
//!   ([`crate::frames::calls_program`]), and the walk has nothing to do.
//! - Those that keep a frame (the body of the future `Labels::attach` returns, which an executor
//!   polls through a pointer) count here while they call the program: a walk made meanwhile
//!   goes one frame further for each, and leaves their frames out
//!   (`capture::trim::drop_calling`, knowing their code from the symbol table), so that the
//!   frames it keeps are still those a report shows. They call the program's code through a
//!   pointer the optimizer cannot see through, so that none of it is inlined into their frame,
//!   which the walk leaves out whole.
//!
//! A function of the first kind that the optimizer did not inline (called through a pointer)
//! keeps its frame, outside the count: it shows where it stands, as any frame does.

#![forbid(unsafe_code)]

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    /// Calls of the program's code by memprof's functions on this thread's stack now.
    /// `const`-initialized and without a destructor: read on the allocation path, it never
    /// allocates.
    static CALLS: Cell<u32> = const { Cell::new(0) };
}

/// How many of memprof's functions are calling the program's code on this thread's stack now
/// (0 nearly always): one thread-local load, for the allocation path.
#[inline(always)]
pub(crate) fn current() -> usize {
    CALLS.try_with(Cell::get).unwrap_or(0) as usize
}

/// One of memprof's functions calling the program's code, for as long as it lives.
#[must_use = "the call counts only while the guard lives"]
pub(crate) struct Calling {
    /// The guard belongs to the thread that made it.
    _not_send: PhantomData<*const ()>,
}

impl Calling {
    /// Counts a call of the program's code until the guard is dropped (also by a panic that
    /// unwinds through it).
    #[inline(always)]
    pub(crate) fn enter() -> Calling {
        let _ = CALLS.try_with(|calls| calls.set(calls.get().saturating_add(1)));
        Calling {
            _not_send: PhantomData,
        }
    }
}

impl Drop for Calling {
    #[inline(always)]
    fn drop(&mut self) {
        let _ = CALLS.try_with(|calls| calls.set(calls.get().saturating_sub(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_nest_and_unwind() {
        assert_eq!(current(), 0);
        {
            let _outer = Calling::enter();
            let _inner = Calling::enter();
            assert_eq!(current(), 2);
        }
        assert_eq!(current(), 0);
        let unwound = std::panic::catch_unwind(|| {
            let _call = Calling::enter();
            assert_eq!(current(), 1);
            panic!("unwinds");
        });
        assert!(unwound.is_err());
        assert_eq!(current(), 0);
    }
}
