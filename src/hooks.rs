//! The front doors: the [`MemProf`] global allocator and the C ABI, with the exit and signal
//! triggers and the `fork` handlers.
//!
//! The doors report every event to the allocation path (`crate::record`), which they call down
//! into and which never calls back up, but for one thing: the first event that arrives starts the
//! profiler, and what starting means beside recording is the doors' to say ([`Doors`]). It sets
//! the table's sampling interval and peak tracking from the configuration (read by the path inside
//! the reentrancy guard, so that reading allocates unrecorded), installs the toggle signal,
//! registers the at-exit report and the [`fork`] handlers, and opens the trace.

pub(crate) mod c_abi;
mod dumps;
mod fork;
pub(crate) mod global_alloc;
#[cfg(feature = "preload")]
pub mod preload;
mod triggers;
mod watch;

pub use global_alloc::MemProf;

use crate::capture;
use crate::config::Config;
use crate::header::Settings;
use crate::record;
use crate::table::TABLE;

/// What the doors set up when the profiler starts; the allocation path is generic over it
/// ([`record::Start`]). The C ABI starts through it; the global allocator through its own type,
/// which does the same (see [`MemProf`]'s implementation of [`record::Start`]).
pub(crate) struct Doors;

/// Set by the preloaded library's door before memprof starts: the control channel of `memprof
/// attach` (`MEMPROF_CONTROL_SIGNAL`) is for programs with memprof built in, and its thread and
/// handler stay out of every process the preloaded library runs in.
pub(crate) static PRELOADED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

impl record::Start for Doors {
    fn start(config: &'static Config, settings: Settings) {
        crate::fence::settle_early();
        TABLE.set_sample_interval(config.sample_interval.unwrap_or(settings.sample_interval));
        // The outputs written at exit may show the heap at its peak, which the table keeps only
        // when told before the first block.
        let peak_wanted = config
            .output
            .as_deref()
            .is_some_and(crate::export::outputs_need_peak);
        TABLE.set_track_peak(config.peak.unwrap_or(settings.track_peak) || peak_wanted);
        if config.paused {
            record::pause();
        }
        capture::trim::start();
        triggers::install(config, settings);
        fork::install();
        if let Some(spec) = config.trace.as_deref().or(settings.trace) {
            if settings.system_malloc {
                crate::native::note_malloc(None);
            }
            crate::trace::start(spec, TABLE.sample_interval());
        }
    }
}
