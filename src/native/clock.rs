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

/// How ticks become nanoseconds since the trace's origin: a continuous line of segments, each
/// `ns = base_ns + (ticks - base_ticks) * mult >> 32`, every slope positive, so times keep the
/// ticks' order.
///
/// Nothing is slept for: the first rate is measured from the origin to the first conversion (the
/// writer's first buffer, or the close), however short; then each time the run has lasted twice
/// as long as when the rate was last measured, [`Calibration::refine`] measures it again from the
/// origin, more precisely, for the ticks from then on. Each measurement is off by about the gap
/// of one reading of both clocks (tens of ns) over the interval it spans, so each segment adds
/// about that much error: a run of hours, some 25 segments, is off by a few µs at most.
#[derive(Clone, Debug)]
pub(crate) struct Calibration {
    /// The origin: ticks and the monotonic time with them.
    origin: (u64, Instant),
    /// The segments, by `base_ticks`: `(base_ticks, base_ns, mult)` (`mult`: nanoseconds per
    /// tick, times 2^32).
    segments: Vec<(u64, u64, u64)>,
    /// The last segment, at hand for the ticks of now.
    last: (u64, u64, u64),
    /// When the rate is measured again: ticks since the origin.
    next: u64,
    /// The largest tick count converted so far: a new segment starts past it.
    seen: u64,
    /// Ticks are nanoseconds already.
    exact: bool,
}

impl Calibration {
    /// Nanoseconds since the origin of a tick count (0 for one before it).
    #[inline(always)]
    pub(crate) fn ns(&self, ticks: u64) -> u64 {
        let (base_ticks, base_ns, mult) = self.last;
        if ticks >= base_ticks {
            base_ns + ((u128::from(ticks - base_ticks) * u128::from(mult)) >> 32) as u64
        } else {
            self.ns_before(ticks)
        }
    }

    /// [`Calibration::ns`] of ticks before the last segment's start.
    #[cold]
    #[inline(never)]
    fn ns_before(&self, ticks: u64) -> u64 {
        let i = self.segments.partition_point(|s| s.0 <= ticks);
        let (base_ticks, base_ns, mult) = self.segments[i.saturating_sub(1)];
        let delta = ticks.saturating_sub(base_ticks);
        base_ns + ((u128::from(delta) * u128::from(mult)) >> 32) as u64
    }

    /// Notes that ticks up to `ticks` were converted: a new segment starts past them.
    pub(crate) fn converted(&mut self, ticks: u64) {
        self.seen = self.seen.max(ticks);
    }

    /// Measures the rate again when the run has doubled in length since it was last measured:
    /// a new segment from now on (two readings of the clocks, a few hundred ns, when due).
    pub(crate) fn refine(&mut self) {
        if self.exact || ticks().saturating_sub(self.origin.0) < self.next {
            return;
        }
        let (now, mult, next) = measure(self.origin);
        // Past every tick converted already, so that none of them would convert otherwise now.
        let base = now.max(self.seen.saturating_add(1));
        let base_ns = self.ns(base);
        self.last = (base, base_ns, mult);
        self.segments.push(self.last);
        self.next = next;
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

/// The ticks now, the rate measured from `origin` to now (nanoseconds per tick, times 2^32), and
/// when to measure it again (ticks since the origin: twice as many as now).
fn measure(origin: (u64, Instant)) -> (u64, u64, u64) {
    let (ticks, at) = best_pair();
    let ns = at.saturating_duration_since(origin.1).as_nanos();
    let elapsed = ticks.saturating_sub(origin.0).max(1);
    let mult = ((ns << 32) / u128::from(elapsed)).clamp(1, u128::from(u64::MAX)) as u64;
    (ticks, mult, elapsed.saturating_mul(2))
}

/// The conversion of ticks into nanoseconds since `origin` (from [`origin`]), measured against
/// the monotonic clock from then to now, without waiting; [`Calibration::refine`] refines it as
/// the run goes on.
pub(crate) fn calibrate(origin: (u64, Instant)) -> Calibration {
    if !TSC.load(Ordering::Relaxed) {
        // Ticks are nanoseconds already.
        return Calibration {
            origin,
            segments: vec![(origin.0, 0, 1 << 32)],
            last: (origin.0, 0, 1 << 32),
            next: u64::MAX,
            seen: 0,
            exact: true,
        };
    }
    let (_, mult, next) = measure(origin);
    Calibration {
        origin,
        segments: vec![(origin.0, 0, mult)],
        last: (origin.0, 0, mult),
        next,
        seen: 0,
        exact: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A conversion of a few segments, the rate measured again at each: times stay in the
    /// ticks' order, continuous at each segment's start, including ticks converted after a
    /// later segment began.
    #[test]
    fn refined_times_keep_the_ticks_order() {
        init_clock();
        let origin = origin();
        let mut calibration = calibrate(origin);
        let mut samples = Vec::new();
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(2));
            let now = ticks();
            samples.push((now, calibration.ns(now)));
            calibration.converted(now);
            calibration.next = 0;
            calibration.refine();
        }
        assert!(calibration.exact || calibration.segments.len() == 5);
        let last = ticks();
        let mut all: Vec<u64> = samples.iter().map(|s| s.0).collect();
        all.push(last);
        all.push(origin.0);
        all.sort_unstable();
        let times: Vec<u64> = all.iter().map(|&t| calibration.ns(t)).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        // A tick converted before a segment began converts the same afterwards.
        for (t, ns) in samples {
            assert_eq!(calibration.ns(t), ns);
        }
        // Each segment starts where the one before it ends.
        for pair in calibration.segments.windows(2) {
            let (start, base_ns, _) = pair[1];
            let (b0, n0, m0) = pair[0];
            assert_eq!(
                n0 + ((u128::from(start - b0) * u128::from(m0)) >> 32) as u64,
                base_ns
            );
        }
        // About right: 8 ms of sleeps are at least 8 ms of trace time.
        assert!(
            calibration.ns(last) >= 8_000_000,
            "{}",
            calibration.ns(last)
        );
    }
}
