//! The allocation path's tap into trace mode: the events of the blocks the table records, appended
//! to the thread's trace buffer (`record::buffer`) beside the table's own calls, so that
//! pausing and sampling apply to the trace as to the table.
//!
//! The path calls [`alloc`], [`free`] and the two halves of a reallocation ([`realloc_start`],
//! [`realloc_end`]), and the preloaded library's mappings [`mmap`] and [`munmap`] (at a time
//! read with [`now`]); each costs one relaxed load of [`ON`] when no trace is open. The trace's
//! writer side (`crate::trace`) opens and closes it by setting [`ON`], and reads the buffers.

#![forbid(unsafe_code)]

use crate::address::StackId;
use crate::native::MallocBlock;
#[cfg(feature = "trace")]
use crate::native::clock;
#[cfg(feature = "trace")]
use crate::record::buffer;
#[cfg(feature = "trace")]
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether events are recorded into the trace.
#[cfg(feature = "trace")]
pub(crate) static ON: AtomicBool = AtomicBool::new(false);

/// Records a new block (the table recorded it from `stack`); `malloc`, the block as the C
/// library's allocator returned it, gives its chunk flags ([`MallocBlock::flags`], read only
/// here, when tracing), carried in the high half of the stack's word.
#[inline(always)]
pub(crate) fn alloc(address: usize, size: usize, stack: StackId, malloc: MallocBlock) {
    #[cfg(feature = "trace")]
    if ON.load(Ordering::Relaxed) {
        let ticks = clock::ticks();
        let stack = u64::from(stack.0) | malloc.flags() << buffer::CHUNK_FLAGS_SHIFT;
        match buffer::take_pending() {
            None => buffer::append(&[
                ticks << 3 | buffer::ALLOC,
                address as u64,
                size as u64,
                stack,
            ]),
            Some((old, freed)) => buffer::append(&[
                freed << 3 | buffer::REALLOC,
                address as u64,
                size as u64,
                stack,
                old,
                ticks,
            ]),
        }
    }
    #[cfg(not(feature = "trace"))]
    let _ = (address, size, stack, malloc);
}

/// Records the free of a block the table held.
#[inline(always)]
pub(crate) fn free(address: usize) {
    #[cfg(feature = "trace")]
    if ON.load(Ordering::Relaxed) {
        buffer::append(&[clock::ticks() << 3 | buffer::FREE, address as u64]);
    }
    #[cfg(not(feature = "trace"))]
    let _ = address;
}

/// The first half of a reallocation, before the wrapped allocator runs: `recorded` says whether
/// the table held the old block. Its free is joined to the new block's allocation when that is
/// recorded, or written alone by [`realloc_end`].
#[inline(always)]
pub(crate) fn realloc_start(old_address: usize, recorded: bool) {
    #[cfg(feature = "trace")]
    if recorded && ON.load(Ordering::Relaxed) {
        buffer::set_pending(old_address as u64, clock::ticks());
    }
    #[cfg(not(feature = "trace"))]
    let _ = (old_address, recorded);
}

/// The end of a reallocation: when it `failed`, the old block stays and nothing is written;
/// otherwise a free not joined to a recorded allocation is written alone. Tracing off, nothing
/// was made pending ([`realloc_start`]) and the thread-local is not touched; tracing stopped in
/// between, what is pending is never written.
#[inline(always)]
pub(crate) fn realloc_end(failed: bool) {
    #[cfg(feature = "trace")]
    if ON.load(Ordering::Relaxed)
        && let Some((old, freed)) = buffer::take_pending()
        && !failed
    {
        buffer::append(&[freed << 3 | buffer::FREE, old]);
    }
    #[cfg(not(feature = "trace"))]
    let _ = failed;
}

/// The clock now when a trace is open (0 otherwise): the time of a mapping event, read before or
/// after the call it records.
#[cfg(feature = "preload")]
#[inline]
pub(crate) fn now() -> u64 {
    #[cfg(feature = "trace")]
    if ON.load(Ordering::Relaxed) {
        return clock::ticks();
    }
    0
}

/// Records a mapping the program made at `ticks` ([`now`]).
#[cfg(feature = "preload")]
pub(crate) fn mmap(ticks: u64, address: u64, length: u64, stack: StackId, prot: u32, flags: u32) {
    #[cfg(feature = "trace")]
    if ON.load(Ordering::Relaxed) {
        buffer::append(&[
            ticks << 3 | buffer::MMAP,
            address,
            length,
            u64::from(stack.0),
            u64::from(prot) << 32 | u64::from(flags),
        ]);
    }
    #[cfg(not(feature = "trace"))]
    let _ = (ticks, address, length, stack, prot, flags);
}

/// Records pages of a recorded mapping unmapped at `ticks` ([`now`]).
#[cfg(feature = "preload")]
pub(crate) fn munmap(ticks: u64, address: u64, length: u64) {
    #[cfg(feature = "trace")]
    if ON.load(Ordering::Relaxed) {
        buffer::append(&[ticks << 3 | buffer::MUNMAP, address, length]);
    }
    #[cfg(not(feature = "trace"))]
    let _ = (ticks, address, length);
}
