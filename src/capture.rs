//! The allocation path's stack capture into a fixed array: raw return addresses only, never names.
//!
//! Two walkers, chosen once from the configuration:
//! - [`fp`]: follows saved frame pointers, validated frame by frame against the thread's stack;
//!   a handful of nanoseconds a frame, and exact when every frame keeps its frame pointer
//!   (`-C force-frame-pointers=yes`; std keeps them already).
//! - [`dwarf`]: unwinds with each module's `.eh_frame` call-frame information, for default builds
//!   in which the user's own code reuses the frame-pointer register.
//!
//! Neither allocates while walking; both run inside the reentrancy guard. Both stop once they hold
//! the frames a report shows ([`trim`]).

pub(crate) mod dwarf;
pub(crate) mod fp;
pub(crate) mod trim;

pub(crate) use trim::Budget;

use crate::address::ReturnAddress;
use crate::config::Unwinder;

/// Captures up to `out.len()` return addresses of the current thread, innermost first, ending
/// early once it holds the frames `budget` wants. `entry` is the frame pointer of one of the
/// callers (`record::alloc_checked`'s own, read with [`fp::frame_pointer`]), where a frame-pointer
/// walk starts instead of at its own frame, leaving out the frames in between; 0 for none.
#[inline]
pub(crate) fn capture(
    unwinder: Unwinder,
    out: &mut [ReturnAddress],
    budget: Budget,
    entry: usize,
) -> usize {
    match unwinder {
        Unwinder::FramePointer => fp::walk_from(entry, out, budget),
        Unwinder::Dwarf => dwarf::walk(out, budget),
    }
}

/// Keeps the call just before it from becoming a tail call: a jump that would leave the current
/// function before the call runs, taking its frame (and so the function that allocated) off the
/// stack that the call walks. An empty instruction the optimizer must keep, after the call: it
/// costs nothing but the return into this function.
#[inline(always)]
pub(crate) fn stay_in_frame() {
    // SAFETY: an empty instruction sequence: it reads and writes no register, memory or flag and
    // leaves the stack as it was. Without `pure`, the compiler keeps it, after the call before it.
    unsafe { std::arch::asm!("", options(nomem, nostack, preserves_flags)) }
}
