//! The mapping path (feature `preload`): the program's own `mmap`, `munmap` and `mremap` calls,
//! which the preloaded library interposes, recorded with their stacks in the live mappings
//! (`table::mappings`) and in the trace.
//!
//! Only calls from outside the reentrancy guard make new mappings: memprof's own (the trace
//! writer's, the symbolizer's files), which reach the same functions in the preloaded library,
//! are never recorded. Unmaps are applied inside the guard too, as frees are. A new mapping is
//! recorded after the call returned it; what an unmap ends leaves the map before the call (as a
//! free leaves the table before the block is given back, so another thread mapped the same pages
//! at once is never the one forgotten), with its time read then, and goes back if the call fails.
//! Recording paused records no new mappings; unmaps still apply. Mappings are not sampled.

#![forbid(unsafe_code)]

use super::{Start, mapping_stack, trace_tap};
use crate::capture;
use crate::guard::Guard;
use crate::table::mappings::{self, Mapped};

/// Records a mapping the program's `mmap` just made at `address` (`length` rounded up to pages).
#[inline(never)]
pub(crate) fn mmap<S: Start>(address: usize, length: usize, prot: u32, flags: u32) {
    let entry = capture::fp::frame_pointer();
    let Some(guard) = Guard::enter() else { return };
    let Some(stack) = mapping_stack::<S>(&guard, entry) else {
        return;
    };
    let ticks = trace_tap::now();
    record_new(ticks, address, length, Mapped { stack, prot, flags });
    capture::stay_in_frame();
}

/// Records `mapped` at `[address, address + length)`, what it replaces unmapped, in the map and
/// the trace.
fn record_new(ticks: u64, address: usize, length: usize, mapped: Mapped) {
    mappings::map(address, length, mapped, |replaced| {
        for &(start, len, _) in replaced {
            trace_tap::munmap(ticks, start, len);
        }
        trace_tap::mmap(
            ticks,
            address as u64,
            length as u64,
            mapped.stack,
            mapped.prot,
            mapped.flags,
        );
    });
}

/// Unmaps `[address, address + length)` (`length` rounded up to pages) through `unmap`, which
/// returns whether it succeeded: what is recorded there leaves the map before it runs.
#[inline(always)]
pub(crate) fn munmap<R>(address: usize, length: usize, unmap: impl FnOnce() -> (bool, R)) -> R {
    let ticks = trace_tap::now();
    let removed = {
        let _guard = Guard::enter();
        mappings::unmap(address, length)
    };
    // The system call outside the guard: a signal handler that allocates meanwhile is recorded.
    let (done, result) = unmap();
    let _guard = Guard::enter();
    end_unmap(ticks, removed, done);
    result
}

/// After the call that was to unmap the pieces `removed` at `ticks`: traces them when it was
/// `done`, else puts them back. Inside the reentrancy guard.
fn end_unmap(ticks: u64, removed: Vec<(u64, u64, Mapped)>, done: bool) {
    if done {
        for &(start, len, _) in &removed {
            trace_tap::munmap(ticks, start, len);
        }
    } else {
        mappings::restore(&removed);
    }
}

/// Remaps `[old, old + old_length)` to `new_length` bytes through `remap`, which returns the new
/// address, or `None` when it failed (lengths rounded up to pages). `keeps_old`: the old range
/// stays mapped (`MREMAP_DONTUNMAP`, or an old length of 0, which duplicates a shared mapping).
/// The old range's recorded pieces end, and the new range is recorded with the remap's stack and
/// the old mapping's `prot` and `flags`.
#[inline(never)]
pub(crate) fn mremap<S: Start, R>(
    old: usize,
    old_length: usize,
    new_length: usize,
    keeps_old: bool,
    remap: impl FnOnce() -> (Option<usize>, R),
) -> R {
    let entry = capture::fp::frame_pointer();
    let (stack, ticks, removed, kind) = {
        let guard = Guard::enter();
        let stack = guard
            .as_ref()
            .and_then(|guard| mapping_stack::<S>(guard, entry));
        let ticks = trace_tap::now();
        let (removed, kind) = if keeps_old {
            (Vec::new(), mappings::get(old))
        } else {
            let removed = mappings::unmap(old, old_length);
            let kind = removed.first().map(|&(_, _, mapped)| mapped);
            (removed, kind)
        };
        (stack, ticks, removed, kind)
    };
    let (new, result) = remap();
    let _guard = Guard::enter();
    end_unmap(ticks, removed, new.is_some());
    if let (Some(new), Some(stack)) = (new, stack) {
        let (prot, flags) = kind.map_or((0, 0), |m| (m.prot, m.flags));
        record_new(
            trace_tap::now(),
            new,
            new_length,
            Mapped { stack, prot, flags },
        );
    }
    capture::stay_in_frame();
    result
}
