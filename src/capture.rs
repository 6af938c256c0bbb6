//! The allocation path: capture a stack and record the event in the live table.
//!
//! Allocations are recorded inside the reentrancy guard (they take a `&Guard` as proof); frees are
//! applied even inside it. Nothing here allocates on its own (the stack buffer is thread-local),
//! takes a lock but the table's futexes, prints or reads the environment.

pub mod guard;
pub mod modules;
pub mod sampling;
pub mod stack;

pub use guard::{Guard, untracked};
pub use stack::ReturnAddress;

use crate::config::Config;
use crate::table::{Block, StackId, TABLE};
use std::cell::RefCell;

/// Most return addresses captured for one allocation.
pub const MAX_FRAMES: usize = 128;

thread_local! {
    /// Where a thread's stack is captured: thread-local, so the allocation path needs neither a
    /// large zeroed array on its own stack nor an allocation.
    static FRAMES: RefCell<[ReturnAddress; MAX_FRAMES]> =
        const { RefCell::new([ReturnAddress(0); MAX_FRAMES]) };
}

/// Records a new block, capturing the current stack; returns its stack. `entry` is the frame
/// pointer of one of the callers, where a frame-pointer walk starts (see [`stack::capture`]).
#[inline]
pub fn alloc(
    _guard: &Guard,
    config: &Config,
    address: usize,
    size: usize,
    entry: usize,
) -> Option<StackId> {
    let depth = config.capture_depth();
    // The block's word in the table is likely out of the cache (the allocator hands out addresses
    // all over the heap): fetch it while the stack is walked.
    if let Some(word) = TABLE.shadow_word(address) {
        prefetch(word.as_ptr());
    }
    let recorded = FRAMES.try_with(|frames| {
        let mut frames = frames.try_borrow_mut().ok()?;
        let budget = stack::Budget::new(config.shown_depth());
        let n = stack::capture(config.unwinder, &mut frames[..depth], budget, entry);
        Some(TABLE.insert(address, size, &frames[..n]))
    });
    // The thread is tearing down its locals: record the block without a stack rather than lose it,
    // so totals stay balanced when it is freed.
    recorded.unwrap_or_else(|_| Some(TABLE.insert(address, size, &[])))
}

/// Asks the processor to bring the cache line of `at` in, without waiting for it.
#[inline(always)]
fn prefetch(at: *const u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing into the program, faults on no address and
    // changes no state the program can observe; `sse` is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Forgets a block about to be freed; returns what the table knew of it. Needs no guard: it
/// never allocates.
#[inline]
pub fn free(address: usize) -> Option<Block> {
    TABLE.remove(address)
}

/// Puts back a block that [`free`] removed, when its free did not happen (a failed `realloc`).
pub fn restore(_guard: &Guard, address: usize, block: Block) {
    TABLE.restore(address, block);
}
