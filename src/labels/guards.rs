//! The guards entered on this thread ([`super::Labels::enter`]), innermost last, each with the
//! label set it replaced: a guard dropped out of order (two futures polled on one thread, each
//! holding a guard across an `.await`) leaves the chain, and the guard entered after it takes
//! over the set it replaced, so that once every guard is dropped, in any order, the thread's
//! labels are those current before the first `enter`.
//!
//! Off the allocation path: the chain grows inside the reentrancy guard.

#![forbid(unsafe_code)]

use super::{current, replace, sets};
use crate::guard::untracked;
use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// One entered guard.
#[derive(Clone, Copy, Debug)]
struct Entered {
    /// The guard's number on this thread (from 1).
    number: u64,
    /// The set the guard was made with.
    own: u32,
    /// The set current before it, restored when it drops.
    replaced: u32,
    /// Its own set merged over `replaced`: the labels current while it is the innermost guard.
    state: u32,
}

/// This thread's entered guards.
struct Chain {
    /// The number of the last guard entered.
    last: u64,
    /// Innermost last.
    entered: Vec<Entered>,
}

thread_local! {
    static CHAIN: RefCell<Chain> = const {
        RefCell::new(Chain {
            last: 0,
            entered: Vec::new(),
        })
    };
}

/// Guards dropped while labels other than their own were current, over the process.
static MISNESTED: AtomicU64 = AtomicU64::new(0);

/// Guards dropped while labels other than their own were current, over the process.
#[cfg(test)]
pub(crate) fn misnested_count() -> u64 {
    MISNESTED.load(Relaxed)
}

/// `own` merged over `outer` (the inner values override the outer ones for the same key).
pub(super) fn merge(outer: u32, own: u32) -> u32 {
    match (outer, own) {
        (0, id) => id,
        (outer, 0) => outer,
        (outer, inner) if outer == inner => inner,
        (outer, inner) => untracked(|| sets::SETS.merge(outer, inner)),
    }
}

/// Makes `own`, merged over the current labels, current; returns the guard's number (0 when
/// the chain is gone, as while the thread's locals are torn down) and the set it replaced.
pub(super) fn enter(own: u32) -> (u64, u32) {
    let replaced = current();
    let state = merge(replaced, own);
    replace(state);
    let number = CHAIN
        .try_with(|chain| {
            let Ok(mut chain) = chain.try_borrow_mut() else {
                return 0;
            };
            chain.last += 1;
            let number = chain.last;
            untracked(|| {
                chain.entered.push(Entered {
                    number,
                    own,
                    replaced,
                    state,
                })
            });
            number
        })
        .unwrap_or(0);
    (number, replaced)
}

/// Drops guard `number`, which replaced `replaced`: the innermost guard restores the set it
/// replaced; another one leaves the chain, and the guards entered after it are current as if
/// it had never been entered.
pub(super) fn exit(number: u64, replaced: u32) {
    let done = number != 0
        && CHAIN
            .try_with(|chain| {
                let Ok(mut chain) = chain.try_borrow_mut() else {
                    return false;
                };
                let Some(at) = chain.entered.iter().rposition(|e| e.number == number) else {
                    return false;
                };
                remove(&mut chain.entered, at);
                true
            })
            .unwrap_or(false);
    if !done {
        replace(replaced);
    }
}

/// Removes the guard at `at` from `entered`, and makes current what is current without it.
fn remove(entered: &mut Vec<Entered>, at: usize) {
    let gone = entered.remove(at);
    let Some(innermost) = entered.get(at..).and_then(|after| after.last().copied()) else {
        // The innermost guard: what it replaced is current again.
        if current() != gone.state {
            misnested();
        }
        replace(gone.replaced);
        return;
    };
    // Out of order: a guard entered after it is current.
    misnested();
    let mut outer = gone.replaced;
    for guard in &mut entered[at..] {
        guard.replaced = outer;
        guard.state = merge(outer, guard.own);
        outer = guard.state;
    }
    // Unless something else (a `tracing` span) set labels over the innermost guard, the labels
    // current are now those of the guards left.
    if current() == innermost.state {
        replace(outer);
    }
}

/// Counts a guard dropped while labels other than its own were current, and says so once in a
/// debug build: its future held it across an `.await`, and what was allocated meanwhile went to
/// the wrong labels.
fn misnested() {
    if MISNESTED.fetch_add(1, Relaxed) == 0 && cfg!(debug_assertions) {
        untracked(|| {
            let _ = writeln!(
                std::io::stderr(),
                "memprof: a labels guard was dropped while other labels were current: a guard \
                 held across an `.await` (two futures polled on one thread) misattributes what \
                 is allocated meanwhile; wrap the future with `Labels::attach` instead \
                 (docs/labels.md)"
            );
        });
    }
}
