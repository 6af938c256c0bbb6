//! The heap alarm: a level of live bytes at which the allocation path wakes memprof's dump
//! thread (for `MEMPROF_DUMP_ON_GROWTH` and `MEMPROF_DUMP_NEAR_LIMIT`).
//!
//! The allocation path already adds its live bytes to one shared counter (in per-thread batches,
//! `table::stats::Peak`); each time it does, it compares the new total with the level: one
//! relaxed atomic load and a comparison. Only when the total reaches the level does it do more:
//! it takes the level away (one atomic swap, so that one thread alone answers one crossing) and
//! writes one byte into the dump thread's pipe, a system call that neither allocates nor takes a
//! lock, and which cannot block (the pipe does not block, and a full one already holds a
//! request). The dump thread then decides what to write and sets the next level ([`arm`]).
//!
//! A shared building block below the table: it imports nothing but `native`.

#![forbid(unsafe_code)]

use crate::native;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering::Relaxed};

/// The byte the alarm writes into the dump pipe (the dump signal writes 1).
pub(crate) const WAKE: u8 = 2;

/// No level: the alarm never rings.
const NEVER: i64 = i64::MAX;

/// Live bytes at which the alarm rings; [`NEVER`] while unarmed.
static LEVEL: AtomicI64 = AtomicI64::new(NEVER);

/// The write end of the dump thread's pipe; -1 until it runs.
static PIPE: AtomicI32 = AtomicI32::new(-1);

/// Compares the live bytes the shared counter has just reached with the level. On the allocation
/// path: inlined, one relaxed load and a comparison unless the level is reached.
#[inline(always)]
pub(crate) fn check(live_bytes: i64) {
    if live_bytes >= LEVEL.load(Relaxed) {
        ring();
    }
}

/// Wakes the dump thread, once per arming.
#[cold]
#[inline(never)]
fn ring() {
    if LEVEL.swap(NEVER, Relaxed) != NEVER {
        native::write_byte(PIPE.load(Relaxed), WAKE);
    }
}

/// Rings when the live bytes reach `level` (at the shared counter's next change from then on);
/// `None` unarms.
pub(crate) fn arm(level: Option<u64>) {
    let level = level.map_or(NEVER, |l| i64::try_from(l).unwrap_or(NEVER));
    LEVEL.store(level, Relaxed);
}

/// Where the alarm writes: the dump thread's pipe (a forked child's new one after `fork`).
pub(crate) fn set_pipe(write_end: i32) {
    PIPE.store(write_end, Relaxed);
}
