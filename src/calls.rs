//! memprof's functions that call the program's code back (`with_labels` runs the closure it is
//! given; the future `Labels::attach` returns polls the program's): how many of them are on this
//! thread's stack now.
//!
//! Such a function's frame lies between the program's own frames, where a report must not show
//! it, nor count it against its depth. The stack walk leaves those frames out
//! (`capture::trim::drop_calling`, knowing the functions from the symbol table), and walks one
//! frame further for each call on this count, so that the frames it keeps are still those a
//! report shows. Where such a function is inlined into the program's code it has no frame of its
//! own, and the symbolizer leaves out the inlined frame it names ([`crate::frames::calls_program`]).
//!
//! A function that counts here must call the program's code so that none of it is inlined into
//! its own frame: the walk leaves out the whole frame, and with it anything inlined there.

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
