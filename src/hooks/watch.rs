//! Dumps memprof decides on by itself: on growth (`MEMPROF_DUMP_ON_GROWTH`,
//! [`MemProf::dump_on_growth`](crate::MemProf::dump_on_growth)) and near the memory limit
//! (`MEMPROF_DUMP_NEAR_LIMIT`). Everything here runs on the dump thread (`triggers`), never on
//! the allocation path: that only compares its live bytes with the level of the heap alarm
//! ([`crate::alarm`]) and, when they reach it, wakes the dump thread, which calls [`check`].
//!
//! Growth: a dump each time the live heap passes the high-water mark of the previous dump
//! (the live bytes it showed; 0 before the first) by the step. The alarm's level is that mark
//! plus the step.
//!
//! Near the limit: memory use is read on every wake and every [`TICK`] (the dump thread's
//! timeout): the cgroup's use against its limit, or the resident size against a byte count. A
//! dump when it crosses the threshold upwards; the next one only after it has come back below the
//! threshold by [`REARM_MARGIN`] of it. Between readings the alarm also wakes the thread when the
//! live heap has grown by half the room left below the threshold (at least [`MIN_STEP`]): a
//! heap-driven climb is read again and again as it nears the threshold, however fast it climbs,
//! while the tick catches memory the heap does not count (mappings, stacks, the allocator's own).

use super::dumps;
use crate::alarm;
use crate::config::{Config, NearLimit, warn};
use crate::header::Settings;
use crate::memory::{self, Cgroup};
use crate::table::TABLE;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// How often memory use is read when a near-limit dump is asked for.
pub(super) const TICK: Duration = Duration::from_millis(100);

/// The least heap growth between two readings the alarm asks for near the threshold.
const MIN_STEP: u64 = 1 << 20;

/// A near-limit dump is written again only after use has come down below the threshold by this
/// share of it (1/50, 2%).
const REARM_MARGIN: u64 = 50;

/// The growth step; 0 for no dumps on growth.
static STEP: AtomicU64 = AtomicU64::new(0);

/// The live bytes of the last dump written here (0 before the first).
static HIGH_WATER: AtomicU64 = AtomicU64::new(0);

/// Memory use is at or above the near-limit threshold, and its dump is written.
static ABOVE: AtomicBool = AtomicBool::new(false);

/// What near-limit dumps compare, when asked for.
static NEAR: OnceLock<Probe> = OnceLock::new();

/// Where memory use near the limit is read.
#[derive(Debug)]
enum Probe {
    /// A share (percent) of the limit of this cgroup.
    Cgroup(Cgroup, u8),
    /// The resident size against this many bytes.
    Resident(u64),
}

impl Probe {
    /// Memory use and the threshold now, in bytes.
    fn read(&self) -> Option<(u64, u64)> {
        match self {
            Probe::Cgroup(cgroup, percent) => {
                let usage = cgroup.read()?;
                Some((usage.used, usage.limit / 100 * u64::from(*percent)))
            }
            Probe::Resident(bytes) => Some((memory::resident_bytes()?, *bytes)),
        }
    }
}

/// Reads what the configuration asks for; returns whether the dump thread must run for it. Runs
/// once, when the profiler starts.
pub(super) fn install(config: &Config, settings: Settings) -> bool {
    if config.output.is_none() {
        // The configuration has warned already about its variables.
        if config.dump_on_growth.is_none() && settings.dump_on_growth > 0 {
            warn(format_args!(
                "MemProf::dump_on_growth writes the MEMPROF_OUTPUT files, and MEMPROF_OUTPUT is \
                 not set: no dumps on growth"
            ));
        }
        return false;
    }
    let step = config.dump_on_growth.unwrap_or(settings.dump_on_growth);
    STEP.store(step, Relaxed);
    let near = config.dump_near_limit.and_then(|limit| match limit {
        NearLimit::Bytes(bytes) => Some(Probe::Resident(bytes)),
        NearLimit::Share(percent) => match Cgroup::find() {
            Some(cgroup) => Some(Probe::Cgroup(cgroup, percent)),
            None => {
                warn(format_args!(
                    "MEMPROF_DUMP_NEAR_LIMIT={percent}%: no cgroup over this process has a memory \
                     limit (memory.max); no dumps near the limit (a size, such as 1536MiB, \
                     compares the resident memory with it instead)"
                ));
                None
            }
        },
    });
    let near_wanted = near.is_some();
    if let Some(near) = near {
        let _ = NEAR.set(near);
    }
    step > 0 || near_wanted
}

/// How long the dump thread may wait for a request before it must call [`check`]; `None`:
/// forever.
pub(super) fn timeout() -> Option<Duration> {
    NEAR.get().map(|_| TICK)
}

/// The dump thread's first work: when near-limit dumps are asked for, loads the symbol tables of
/// the program (the first dump's largest cost in time and memory, a second and a hundred MiB for
/// a large debug build) now, while memory is plentiful, rather than near the limit; then
/// [`check`].
pub(super) fn start() {
    if NEAR.get().is_some() {
        crate::symbolize::with_symbolizer(|symbolizer| {
            use crate::symbolize::Resolve;
            let _ = symbolizer.resolve(crate::address::ReturnAddress(start as fn() as usize + 1));
        });
    }
    check();
}

/// Why a dump is written.
enum Reason {
    Growth,
    NearLimit { used: u64, threshold: u64 },
}

/// Writes the dump that growth or memory use calls for, if any, and sets the alarm's next level.
/// On the dump thread, after each wake and tick.
pub(super) fn check() {
    let step = STEP.load(Relaxed);
    let near = NEAR.get();
    if step == 0 && near.is_none() {
        return;
    }
    let live = TABLE.counted_live_bytes();
    let mut reason = None;
    if step > 0 && live >= HIGH_WATER.load(Relaxed).saturating_add(step) {
        reason = Some(Reason::Growth);
    }
    let mut room_level = None;
    if let Some((used, threshold)) = near.and_then(Probe::read) {
        if used >= threshold {
            if !ABOVE.swap(true, Relaxed) {
                reason = Some(Reason::NearLimit { used, threshold });
            }
        } else {
            if used < threshold - threshold / REARM_MARGIN {
                ABOVE.store(false, Relaxed);
            }
            room_level = Some(live + ((threshold - used) / 2).max(MIN_STEP));
        }
    }
    if let Some(reason) = reason {
        match reason {
            Reason::Growth => warn(format_args!(
                "the live heap reached {} bytes: writing a dump (MEMPROF_DUMP_ON_GROWTH)",
                live
            )),
            Reason::NearLimit { used, threshold } => warn(format_args!(
                "memory use reached {used} bytes, the threshold is {threshold}: writing a dump \
                 (MEMPROF_DUMP_NEAR_LIMIT)"
            )),
        }
        dumps::dump();
        HIGH_WATER.fetch_max(live, Relaxed);
    }
    let growth_level = (step > 0).then(|| HIGH_WATER.load(Relaxed).saturating_add(step));
    let level = match (growth_level, room_level) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    alarm::arm(level);
    // The heap may have passed the level while the dump was written: then the alarm rings now.
    alarm::check(TABLE.counted_live_bytes() as i64);
}
