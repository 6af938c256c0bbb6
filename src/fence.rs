//! Fences for Dekker's pattern between a frequent side (a thread entering the table to record a
//! block) and a rare one (a reader freezing the table for a snapshot), where the frequent side
//! pays no locked instruction.
//!
//! Each side stores its flag, fences, then loads the other's: with a full fence on both sides,
//! one of them always sees the other's store. Linux's `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`
//! makes every running thread of the process execute a full memory barrier before the call
//! returns (a thread not running passed one when it was switched out), so it can stand in for the
//! frequent side's fence: that side then needs only to keep the compiler from reordering its
//! store and load ([`store_then_fence`]), while the rare side calls [`heavy`]. Where the call is
//! missing (another system, an old kernel, a seccomp filter), both sides use full fences.
//!
//! Which of the two is used is settled once, by the first caller of either side, and never
//! changes: both sides always agree.
//!
//! The rare side also keeps its own thread's signal handlers from running while it holds the
//! frequent side out ([`hold_signals`]): a handler that frees memory would otherwise change the
//! table under the reader that holds it, on the reader's own thread.

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering, compiler_fence, fence};

/// Not settled yet.
const UNKNOWN: u8 = 0;
/// Full fences on both sides.
const FULL: u8 = 1;
/// A compiler fence on the frequent side, `membarrier` on the rare one.
const ASYMMETRIC: u8 = 2;

/// [`UNKNOWN`], [`FULL`] or [`ASYMMETRIC`].
static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The mode, settled by the first call.
#[inline(always)]
fn mode() -> u8 {
    match MODE.load(Ordering::Relaxed) {
        UNKNOWN => settle(),
        mode => mode,
    }
}

#[cold]
#[inline(never)]
fn settle() -> u8 {
    let mode = if membarrier::register() {
        ASYMMETRIC
    } else {
        FULL
    };
    // The first result stored is everyone's.
    match MODE.compare_exchange(UNKNOWN, mode, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => mode,
        Err(settled) => settled,
    }
}

/// Settles the mode now. The profiler's start calls it before it starts any thread: registering
/// for expedited barriers costs a process that has a second thread a wait of the kernel's (an RCU
/// grace period, ten milliseconds), and one that has not nothing.
pub(crate) fn settle_early() {
    let _ = mode();
}

/// The frequent side: stores `value` in `flag`, ordered before the loads that follow as a full
/// fence would order it, provided the rare side calls [`heavy`] between its store and its loads.
#[inline(always)]
pub(crate) fn store_then_fence(flag: &AtomicU32, value: u32) {
    if mode() == ASYMMETRIC {
        flag.store(value, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
    } else {
        flag.swap(value, Ordering::SeqCst);
    }
}

/// The rare side: a full fence for this thread and, in the asymmetric mode, for every thread of
/// the process. A system call: microseconds.
pub(crate) fn heavy() {
    fence(Ordering::SeqCst);
    if mode() == ASYMMETRIC {
        membarrier::expedited();
    }
}

/// Asynchronous signals blocked on this thread while it lives; the previous mask comes back when
/// it is dropped. See [`hold_signals`].
pub(crate) struct SignalsHeld {
    /// The mask to restore.
    previous: libc::sigset_t,
    /// The mask is the thread's that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Blocks every asynchronous signal on this thread until the result is dropped: a signal that
/// arrives meanwhile stays pending and is handled then. The signals a fault raises (`SIGSEGV`,
/// `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGTRAP`, `SIGSYS`) stay open, since blocking them would turn a
/// fault into the end of the process; the C library keeps its own internal signals open too.
pub(crate) fn hold_signals() -> SignalsHeld {
    // SAFETY: both sets are plain values that `sigfillset`/`sigdelset` initialize before
    // `pthread_sigmask` reads `blocked` and writes `previous`; the call only changes this thread's
    // mask.
    unsafe {
        let mut blocked: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut blocked);
        for signal in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGTRAP,
            libc::SIGSYS,
        ] {
            libc::sigdelset(&mut blocked, signal);
        }
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &blocked, &mut previous);
        SignalsHeld {
            previous,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for SignalsHeld {
    fn drop(&mut self) {
        // SAFETY: restores the mask `pthread_sigmask` filled in when this value was made.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

#[cfg(target_os = "linux")]
mod membarrier {
    /// `MEMBARRIER_CMD_QUERY`: the commands the kernel supports, as a bit mask.
    const QUERY: libc::c_long = 0;
    /// `MEMBARRIER_CMD_PRIVATE_EXPEDITED`.
    const PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    /// `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`.
    const REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    fn call(command: libc::c_long) -> libc::c_long {
        // SAFETY: `membarrier` takes a command and two integer arguments, reads and writes no
        // memory of the caller, and fails cleanly (ENOSYS, EINVAL, EPERM) where unsupported.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                command,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        }
    }

    /// Registers the process for expedited barriers; whether they are available.
    pub(crate) fn register() -> bool {
        let supported = call(QUERY);
        supported > 0
            && supported & PRIVATE_EXPEDITED != 0
            && supported & REGISTER_PRIVATE_EXPEDITED != 0
            && call(REGISTER_PRIVATE_EXPEDITED) == 0
    }

    /// A full barrier on every running thread of the process. Registered (the registration
    /// survives `fork`), the command fails only on a kernel bug; it is retried a few times, and
    /// then the reader goes on rather than wait forever: a snapshot may then catch one change
    /// half-done, which the table's atomics keep memory-safe.
    pub(crate) fn expedited() {
        for _ in 0..100 {
            if call(PRIVATE_EXPEDITED) == 0 {
                return;
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod membarrier {
    pub fn register() -> bool {
        false
    }

    pub fn expedited() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn this_machine_has_expedited_barriers() {
        // Not a requirement of memprof, which falls back to full fences; a check that the fast
        // mode is the one the other tests exercise on Linux.
        if cfg!(target_os = "linux") {
            assert_eq!(mode(), ASYMMETRIC);
        }
    }

    /// The store-buffering litmus test: each side stores its flag, fences, and loads the
    /// other's; both loads seeing 0 is what the fences forbid. Without them, x86 shows it within
    /// a few thousand rounds.
    #[test]
    fn a_store_then_fence_and_a_heavy_fence_order_like_two_full_fences() {
        const ROUNDS: u32 = 50_000;
        let round = Arc::new(AtomicU32::new(0));
        let done = Arc::new(AtomicU32::new(0));
        let frequent_flag = Arc::new(AtomicU32::new(0));
        let rare_flag = Arc::new(AtomicU32::new(0));
        let saw = Arc::new(AtomicUsize::new(0));
        let frequent = {
            let (round, done, frequent_flag, rare_flag, saw) = (
                round.clone(),
                done.clone(),
                frequent_flag.clone(),
                rare_flag.clone(),
                saw.clone(),
            );
            std::thread::spawn(move || {
                for r in 1..=ROUNDS {
                    while round.load(Ordering::Acquire) != r {
                        std::hint::spin_loop();
                    }
                    store_then_fence(&frequent_flag, r);
                    saw.store(
                        (rare_flag.load(Ordering::Relaxed) == r) as usize,
                        Ordering::Relaxed,
                    );
                    done.store(r, Ordering::Release);
                }
            })
        };
        let mut both_missed = 0;
        for r in 1..=ROUNDS {
            round.store(r, Ordering::Release);
            rare_flag.store(r, Ordering::Relaxed);
            heavy();
            let rare_saw = frequent_flag.load(Ordering::Relaxed) == r;
            while done.load(Ordering::Acquire) != r {
                std::hint::spin_loop();
            }
            if !rare_saw && saw.load(Ordering::Relaxed) == 0 {
                both_missed += 1;
            }
        }
        frequent.join().unwrap();
        assert_eq!(both_missed, 0, "of {ROUNDS} rounds");
    }
}
