//! The DWARF unwinder: walks the stack with each module's `.eh_frame` call-frame information, so it
//! works in default builds, where functions may use the frame-pointer register for anything.
//!
//! gimli reads the rules and framehop unwinds the frames they cannot describe. Three parts, none
//! of which allocates or locks once the process and the thread have each walked once, as long as
//! the walk stays in the modules the program started with:
//!
//! - [The registry](registry): every loaded module's unwind tables, read in place from its mapped
//!   image ([`tables`]), built by the first walk of the process and never freed, so a walk never
//!   waits for it nor sees it go away (though the modules it lists may go).
//! - [The per-thread rule cache](rules): for each address a walk met, the row of call-frame
//!   information that covers it, boiled down to the few offsets that describe nearly every frame of
//!   compiled code, or to "ask framehop" for the others.
//! - [The walk](mod@walk): from the registers [`walk()`] reads on entry, frame after frame, reading
//!   only aligned words of this thread's stack above the walk's own frame, each frame's canonical
//!   frame address above the last, so it always ends.
//!
//! # Modules loaded or unloaded later
//!
//! `dlclose` unmaps a library's tables while other threads walk, so a walk reads a module's tables
//! only where that module is known to be mapped. The modules the program started with (recorded
//! before `main`) are never unloaded, and are read freely. From the first frame in any other
//! module, the rest of the walk runs holding the dynamic loader's lock, once the registry is
//! known to match the loaded modules: at the loader's generation it last checked them, or after
//! checking them again, which marks the modules since unloaded gone. Code in no registered module
//! (or in one marked gone) makes the walk refresh the registry, rebuilding it if modules came or
//! went since it was built: the one allocation a walk may make, inside the reentrancy guard. Code
//! that stays unknown (JIT-compiled code, or a rebuild another thread is making) ends the walk at
//! its return address, which is still recorded; so does a walk that cannot check the registry
//! without waiting, while modules keep changing.
//!
//! # Limits
//!
//! - Signal frames: the signal trampoline's rules are a DWARF expression that neither the rule
//!   cache nor framehop evaluates, so a walk from inside a signal handler stops or goes astray at
//!   the trampoline; a handler running on an alternate signal stack (`sigaltstack`) captures
//!   nothing, since its stack pointer is outside the thread's stack.
//! - Modules without `.eh_frame_hdr` end the walk at their first frame.
//! - A walk that starts less than `HEADROOM` above the end of the thread's stack captures nothing,
//!   rather than risk overflowing it.
//! - A function that ends in a tail call has no frame left by then, so it cannot appear (true of
//!   every unwinder).
//! - Only x86-64 unwinds with DWARF; other architectures use the frame-pointer walker for now.

use super::{Budget, ReturnAddress};

#[cfg(target_arch = "x86_64")]
mod registry;
#[cfg(target_arch = "x86_64")]
pub(crate) use registry::lock_for_fork;
#[cfg(target_arch = "x86_64")]
mod rules;
#[cfg(target_arch = "x86_64")]
mod tables;
#[cfg(all(test, target_arch = "x86_64"))]
mod tests;
#[cfg(target_arch = "x86_64")]
mod walk;

/// Captures up to `out.len()` return addresses of the current thread, innermost first, until it
/// holds the frames `budget` wants.
///
/// The first address is the return address into this function's caller. Never allocates once the
/// process's registry and this thread's cache exist (the first walk of each makes them) and the
/// modules stay the same.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
pub(crate) fn walk(out: &mut [ReturnAddress], budget: Budget) -> usize {
    let (pc, sp, bp) = registers();
    walk::unwind::<true>(pc, sp, bp, out, budget)
}

/// Builds the registry of loaded modules now, if no walk built it yet: the first walk builds it
/// otherwise, and walks on other threads meanwhile capture nothing. For a library attached to a
/// running process, whose threads all allocate from the first moment. Allocates: call it inside
/// the reentrancy guard.
#[cfg(all(feature = "preload", target_arch = "x86_64"))]
pub(crate) fn prepare() {
    let _ = registry::current();
}

/// [`prepare`] elsewhere: the frame-pointer walk has nothing to build.
#[cfg(all(feature = "preload", not(target_arch = "x86_64")))]
pub(crate) fn prepare() {}

/// [`walk()`] with framehop alone, without the rule cache: what the cache must agree with.
#[cfg(all(test, target_arch = "x86_64"))]
#[inline(never)]
fn walk_with_framehop(out: &mut [ReturnAddress]) -> usize {
    let (pc, sp, bp) = registers();
    walk::unwind::<false>(pc, sp, bp, out, Budget::unlimited())
}

/// The instruction pointer, stack pointer and frame-pointer register of the function this is
/// inlined into.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn registers() -> (usize, usize, usize) {
    let (pc, sp, bp): (usize, usize, usize);
    // SAFETY: copies the instruction pointer, the stack pointer and the frame-pointer register into
    // locals; reads and writes no memory and leaves the stack and flags as they were.
    unsafe {
        std::arch::asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    (pc, sp, bp)
}

/// Captures up to `out.len()` return addresses of the current thread, innermost first, until it
/// holds the frames `budget` wants.
///
/// Only x86-64 unwinds with DWARF so far: elsewhere this follows frame pointers.
#[cfg(not(target_arch = "x86_64"))]
#[inline(never)]
pub fn walk(out: &mut [ReturnAddress], budget: Budget) -> usize {
    super::fp::walk(out, budget)
}
