//! Sampling: record on average one allocation per `interval` bytes, chosen by a Poisson process.
//!
//! Each thread counts down an exponentially distributed number of bytes (mean `interval`); the
//! allocation that crosses zero is recorded and a new countdown is drawn. Because the process is
//! memoryless, an allocation of `size` bytes is recorded with probability
//! `p = 1 - exp(-size / interval)` whatever came before it, so every recorded block stands for
//! `1/p` blocks and `size/p` bytes: unbiased estimates for small and large blocks alike (the scheme
//! of Go's and jemalloc's heap profilers).

#![forbid(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

thread_local! {
    /// Bytes left before this thread's next sample; 0 until the first countdown is drawn.
    static COUNTDOWN: Cell<u64> = const { Cell::new(0) };
    /// This thread's random state (xorshift64*); 0 until seeded.
    static RANDOM: Cell<u64> = const { Cell::new(0) };
}

/// Seeds threads apart from each other.
static SEEDS: AtomicU64 = AtomicU64::new(0x2545_F491_4F6C_DD1D);

/// A uniform number in (0, 1].
fn uniform() -> f64 {
    let mut x = RANDOM.try_with(Cell::get).unwrap_or(0);
    if x == 0 {
        x = SEEDS
            .fetch_add(0x9E37_79B9_7F4A_7C15, Relaxed)
            .wrapping_mul(0xBF58_476D_1CE4_E5B9)
            | 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    let _ = RANDOM.try_with(|r| r.set(x));
    let bits = x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
    (bits as f64 + 1.0) / (1u64 << 53) as f64
}

/// An exponentially distributed countdown with mean `interval`, at least 1.
fn draw(interval: u64) -> u64 {
    ((-uniform().ln() * interval as f64) as u64).max(1)
}

/// Counts an allocation of `size` bytes off this thread's countdown when it surely is not sampled
/// (the countdown has more than `size` bytes to go); returns whether it did. `false` without
/// sampling, or before this thread's first draw: [`sample`] decides those.
#[inline]
pub(crate) fn count_down_unsampled(size: usize) -> bool {
    let size = size as u64;
    COUNTDOWN
        .try_with(|countdown| {
            let left = countdown.get();
            let skip = size < left;
            if skip {
                countdown.set(left - size);
            }
            skip
        })
        .unwrap_or(false)
}

/// Whether this allocation of `size` bytes is the one to record, under a mean sampling interval
/// of `interval` bytes (not 0). Cheap when it is not: one thread-local subtraction.
#[inline]
pub(crate) fn sample(size: usize, interval: u64) -> bool {
    let size = size as u64;
    COUNTDOWN
        .try_with(|countdown| {
            let mut left = countdown.get();
            if left == 0 {
                left = draw(interval);
            }
            if size < left {
                countdown.set(left - size);
                false
            } else {
                countdown.set(draw(interval));
                true
            }
        })
        .unwrap_or(false)
}

/// What one recorded block of `size` bytes stands for, `(blocks, bytes)`, as expected values:
/// exact `(1.0, size)` when `interval` is 0 (no sampling).
#[inline]
pub(crate) fn weight(size: u64, interval: u64) -> (f64, f64) {
    let p = if interval == 0 {
        1.0
    } else {
        -(-(size as f64) / interval as f64).exp_m1()
    };
    if p <= 0.0 {
        return (1.0, size as f64);
    }
    (1.0 / p, size as f64 / p)
}

/// `x` rounded up or down at random, up with the probability of its fraction: an integer whose
/// expected value is `x`, so sums of many stay unbiased.
fn round_randomly(x: f64) -> u64 {
    let floor = x.floor();
    floor as u64 + u64::from(uniform() <= x - floor)
}

/// What one recorded block of `size` bytes stands for, in whole blocks and bytes: exact
/// `(1, size)` when `interval` is 0, otherwise [`weight`] rounded randomly without bias.
#[inline]
pub(crate) fn estimate(size: u64, interval: u64) -> (u64, u64) {
    if interval == 0 {
        return (1, size);
    }
    let (blocks, bytes) = weight(size, interval);
    (round_randomly(blocks), round_randomly(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_are_exact_without_sampling() {
        assert_eq!(estimate(100, 0), (1, 100));
    }

    #[test]
    fn large_blocks_stand_for_themselves() {
        assert_eq!(estimate(100 << 20, 1024), (1, 100 << 20));
        // A block as large as the interval is recorded with probability 1 - 1/e: it stands for
        // 1.58 blocks, rounded to 1 or 2 so that the mean stays 1.58.
        let (w, _) = weight(1024, 1024);
        assert!((w - 1.582).abs() < 0.001, "{w}");
        let draws: Vec<u64> = (0..20_000).map(|_| estimate(1024, 1024).0).collect();
        assert!(draws.iter().all(|&b| b == 1 || b == 2));
        let mean = draws.iter().sum::<u64>() as f64 / draws.len() as f64;
        assert!((mean - w).abs() < 0.02, "{mean}");
    }

    #[test]
    fn sampled_estimates_are_unbiased() {
        // 200,000 allocations of 64 bytes under a 4 KiB interval: about 3,100 samples, each worth
        // ~64.5 blocks; the estimate of the total lands within 5% (more than 5 standard deviations).
        let interval = 4096;
        let (mut blocks, mut bytes) = (0u64, 0u64);
        for _ in 0..200_000 {
            if sample(64, interval) {
                let (b, s) = estimate(64, interval);
                blocks += b;
                bytes += s;
            }
        }
        let error =
            |estimate: u64, truth: u64| (estimate as f64 - truth as f64).abs() / truth as f64;
        assert!(error(blocks, 200_000) < 0.05, "{blocks}");
        assert!(error(bytes, 200_000 * 64) < 0.05, "{bytes}");
    }
}
