//! The allocation path: capture a stack and record the event in the live table.
//!
//! Every function here runs inside the reentrancy guard (it takes a `&Guard` as proof), allocates
//! nothing on its own (the stack buffer is thread-local), takes no lock but the table's futexes,
//! never prints and never reads the environment.

pub mod guard;
pub mod modules;
pub mod sampling;
pub mod stack;

pub use guard::{Guard, untracked};
pub use stack::ReturnAddress;

use crate::config::Config;
use crate::table::{Block, TABLE};
use std::cell::RefCell;

/// Most return addresses captured for one allocation.
pub const MAX_FRAMES: usize = 128;

thread_local! {
    /// Where a thread's stack is captured: thread-local, so the allocation path needs neither a
    /// large zeroed array on its own stack nor an allocation.
    static FRAMES: RefCell<[ReturnAddress; MAX_FRAMES]> =
        const { RefCell::new([ReturnAddress(0); MAX_FRAMES]) };
}

/// One thing that happened on the allocation path. The live table applies it; a trace writer can
/// receive the same stream.
#[derive(Clone, Copy, Debug)]
pub enum Event<'a> {
    /// A new block at `address` of `size` bytes, allocated from `stack` (innermost first).
    Alloc {
        /// Where the block starts.
        address: usize,
        /// Its size in bytes.
        size: usize,
        /// Where it was allocated from.
        stack: &'a [ReturnAddress],
    },
    /// The block at `address` is about to be freed.
    Free {
        /// Where the block starts.
        address: usize,
    },
}

/// Applies one event to the process's live table; returns the removed block of a `Free`.
#[inline]
pub fn record(_guard: &Guard, event: Event<'_>) -> Option<Block> {
    match event {
        Event::Alloc {
            address,
            size,
            stack,
        } => {
            TABLE.insert(address, size, stack);
            None
        }
        Event::Free { address } => TABLE.remove(address),
    }
}

/// Records a new block, capturing the current stack.
#[inline]
pub fn alloc(guard: &Guard, config: &Config, address: usize, size: usize) {
    let depth = config.capture_depth();
    let captured = FRAMES.try_with(|frames| {
        let Ok(mut frames) = frames.try_borrow_mut() else {
            return;
        };
        let n = stack::capture(config.unwinder, &mut frames[..depth]);
        record(
            guard,
            Event::Alloc {
                address,
                size,
                stack: &frames[..n],
            },
        );
    });
    if captured.is_err() {
        // The thread is tearing down its locals: record the block without a stack rather than lose
        // it, so totals stay balanced when it is freed.
        record(
            guard,
            Event::Alloc {
                address,
                size,
                stack: &[],
            },
        );
    }
}

/// Forgets a block about to be freed; returns what the table knew of it.
#[inline]
pub fn free(guard: &Guard, address: usize) -> Option<Block> {
    record(guard, Event::Free { address })
}

/// Puts back a block that [`free`] removed, when its free did not happen (a failed `realloc`).
pub fn restore(_guard: &Guard, address: usize, block: Block) {
    TABLE.restore(address, block);
}
