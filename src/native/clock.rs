//! Trace mode's clock, read on the allocation path.
//!
//! The clock is the processor's time-stamp counter where it runs at a constant rate whatever the
//! core's frequency and sleep state (an "invariant" TSC, which every x86-64 processor of the last
//! decade has): one instruction, no system call, and synchronized across cores by the kernel.
//! Elsewhere it is `CLOCK_MONOTONIC` in nanoseconds. The trace writer turns ticks into
//! nanoseconds ([`calibrate`]).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Whether [`ticks`] reads the time-stamp counter.
static TSC: AtomicBool = AtomicBool::new(false);

/// The fallback clock's origin.
static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// Chooses the clock; call once before [`ticks`] (when the trace starts).
pub(crate) fn init_clock() {
    let _ = ORIGIN.get_or_init(Instant::now);
    TSC.store(invariant_tsc(), Ordering::Relaxed);
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use std::arch::x86_64::__cpuid;
    // Leaf 0x8000_0000 gives the highest extended leaf; 0x8000_0007 is read only when it exists.
    __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

/// The clock now, in ticks: time-stamp counter cycles, or nanoseconds of `CLOCK_MONOTONIC`.
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if TSC.load(Ordering::Relaxed) {
        // SAFETY: `rdtsc` exists on every x86-64 processor and only reads the counter.
        return unsafe { std::arch::x86_64::_rdtsc() };
    }
    monotonic_ns()
}

#[cold]
fn monotonic_ns() -> u64 {
    ORIGIN
        .get()
        .map_or(0, |origin| origin.elapsed().as_nanos() as u64)
}

/// How ticks become nanoseconds: `ns = (ticks - origin) * mult >> 32`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Calibration {
    /// Ticks at time 0.
    pub origin: u64,
    /// Nanoseconds per tick, times 2^32.
    pub mult: u64,
}

impl Calibration {
    /// Nanoseconds since the origin of a tick count (0 for one before it).
    #[inline]
    pub(crate) fn ns(&self, ticks: u64) -> u64 {
        ((u128::from(ticks.saturating_sub(self.origin)) * u128::from(self.mult)) >> 32) as u64
    }
}

/// One reading of both clocks, taken close together: the ticks in the middle of the two
/// `Instant` reads, and how far apart those were.
fn pair() -> (u64, Instant, Duration) {
    let before = Instant::now();
    let ticks = ticks();
    let after = Instant::now();
    (ticks, before + (after - before) / 2, after - before)
}

/// The closest of a few [`pair`]s.
fn best_pair() -> (u64, Instant) {
    let (mut ticks, mut at, mut gap) = pair();
    for _ in 0..8 {
        let (t, a, g) = pair();
        if g < gap {
            (ticks, at, gap) = (t, a, g);
        }
    }
    (ticks, at)
}

/// The clock's reading at the origin of a trace: ticks and the monotonic time with them.
pub(crate) fn origin() -> (u64, Instant) {
    best_pair()
}

/// The conversion of ticks into nanoseconds since `origin` (from [`origin`]), measured against
/// the monotonic clock over at least `over` since it (sleeping for what is left). The same
/// conversion serves the whole trace, so times keep the order of the ticks.
pub(crate) fn calibrate(origin: (u64, Instant), over: Duration) -> Calibration {
    if !TSC.load(Ordering::Relaxed) {
        // Ticks are nanoseconds already.
        return Calibration {
            origin: origin.0,
            mult: 1 << 32,
        };
    }
    let waited = origin.1.elapsed();
    if waited < over {
        std::thread::sleep(over - waited);
    }
    let (ticks, at) = best_pair();
    let ns = (at - origin.1).as_nanos();
    let elapsed = u128::from(ticks.saturating_sub(origin.0)).max(1);
    Calibration {
        origin: origin.0,
        mult: ((ns << 32) / elapsed).min(u128::from(u64::MAX)) as u64,
    }
}
