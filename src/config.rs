//! Configuration: the one place the `MEMPROF_*` environment variables are read.
//!
//! They are read once, when the profiler starts (at the first allocation that goes through
//! [`MemProf`](crate::MemProf)), never again on the allocation path. A value that does not parse,
//! an empty one, or one that contradicts another, prints one warning on stderr that names the
//! variable and what is used instead. Writing a warning never panics: when stderr cannot be
//! written (closed, full, a pipe nobody reads) the warning is lost and the program runs on.
//! The variables are listed on [`Config`].

#![forbid(unsafe_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Largest accepted `MEMPROF_STACK_DEPTH`.
pub(crate) const MAX_STACK_DEPTH: usize = 64;

/// Most raw frames captured beyond the depth shown, for those trimmed before it: memprof's own,
/// the allocator shim's and std's allocation internals. An unoptimized build needs more, since
/// every function there is a frame of its own, iterator adapters included. Where the symbol table
/// tells which frames a report shows, a walk stops at them, well before this margin; the margin
/// bounds the walks that cannot tell.
pub(crate) const TRIMMED_FRAMES: usize = if cfg!(debug_assertions) { 24 } else { 16 };

/// Most return addresses captured for one allocation.
pub(crate) const MAX_FRAMES: usize = 128;

/// How stacks are captured on the allocation path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unwinder {
    /// Follow the chain of saved frame pointers: a few nanoseconds a frame, exact only when every
    /// function on the stack keeps a frame pointer.
    FramePointer,
    /// Unwind with the `.eh_frame` call-frame information of each module: correct for any build.
    Dwarf,
}

/// The profiler's settings, read once from the environment ([`Config::current`]).
///
/// | variable | default | meaning |
/// |---|---|---|
/// | `MEMPROF_ENABLED` | `1` | `0` turns recording off: the allocator only forwards to the wrapped one; an empty or other value warns and keeps it on |
/// | `MEMPROF_STACK_DEPTH` | `5` | frames shown and grouped in reports, counted after memprof's own, the allocator shim's and std's allocation frames are trimmed (1 to 64); the walk captures that many, so it is also how deep the exports' stacks go |
/// | `MEMPROF_STACK_SKIP` | `0` | further frames dropped from the top of every context after that trimming |
/// | `MEMPROF_MIN_BYTES` | `1024` | groups whose total size is below this are left out of both allocation logs |
/// | `MEMPROF_PRINT_AT_EXIT` | unset | `1` writes the TSV log (`log_allocations`) to stderr when the program ends, also through `std::process::exit` |
/// | `MEMPROF_REF_LIMIT` | `10` | live objects of the type shown in `pretty_log_object_graph`; `0` for all |
/// | `MEMPROF_REF_LEVEL` | `5` | levels of referrers followed back in `pretty_log_object_graph`; `0` for no limit |
/// | `MEMPROF_TRACE_TARGET` | unset | a type name (`app::Foo`): `log_trace_target` tallies the contexts that created its objects |
/// | `MEMPROF_TRACE_MIN_COUNT` | `1` | contexts that created fewer objects of the target are left out of `log_trace_target` |
/// | `MEMPROF_OUTPUT` | unset | files written at exit, separated by commas, the format chosen by the ending: `.pb.gz` pprof, `.folded` folded stacks, `.svg` flamegraph (feature `flamegraph`), `.dhat.json` DHAT, `.heaptrack.gz` heaptrack, `.md` / `.tsv` the reports, `.html` the HTML report; `%p` is the pid, `%t` seconds since the epoch, `%e` the name the program was started by (the last part of the path given to `exec`: a link's own, a script's) |
/// | `MEMPROF_DUMP_SIGNAL` | unset | a signal (`USR1`, ...) that writes the `MEMPROF_OUTPUT` files (or, without them, the Markdown report to stderr) while the program runs on; a forked child dumps its own heap |
/// | `MEMPROF_PEAK` | unset | `1` keeps, per stack, what was live at the heap's peak (exports' "at t-gmax"); `0` does not; unset: what `MemProf::track_peak` chose, on when `MEMPROF_OUTPUT` has a `.dhat.json` or `.heaptrack.gz` |
/// | `MEMPROF_SAMPLE_INTERVAL` | unset | `bytes:N` records on average one allocation per `N` bytes allocated (a Poisson process), and every report and export shows unbiased estimates; `0` or `off` records every allocation; unset: what `MemProf::sample_interval` chose (every allocation by default). Read (with `MEMPROF_ENABLED`) also at the first allocation, without allocating, through the same rules as this configuration: only when every allocation is recorded do blocks carry a header |
/// | `MEMPROF_TOGGLE_SIGNAL` | unset | a signal (`USR1`, `SIGUSR2`, `12`) that pauses recording when it arrives, and resumes it the next time; the same signal as `MEMPROF_DUMP_SIGNAL` warns, and the signal writes dumps only |
/// | `MEMPROF_CONTROL_SIGNAL` | `59` (`SIGRTMAX-5`) | the signal by which `memprof attach PID` asks this process for a report, the exports, a trace from now on, a pause or a resume (`docs/attach.md`): its handler only wakes memprof's thread, which opens the control socket for one connection of the same user; `off` (or `0`): no handler, and `memprof attach` finds the channel closed; the same signal as `MEMPROF_DUMP_SIGNAL` or `MEMPROF_TOGGLE_SIGNAL` warns, and that one keeps it |
/// | `MEMPROF_PAUSED` | `0` | `1` starts with recording paused (frees are still applied) until `MEMPROF_TOGGLE_SIGNAL` arrives or the program calls `memprof::resume`: a long-running process profiled from a moment on |
/// | `MEMPROF_HTTP` | unset | an address to serve the heap profile on over HTTP (`127.0.0.1:6060`, `[::1]:6060`, `localhost:6060`; port 0 picks a free one), for continuous-profiling scrapers (feature `http`; see `serve_http`); nothing listens when unset; without the feature, a warning |
/// | `MEMPROF_TRACE` | unset | records every allocation, reallocation and free with its time, thread and stack into this file (cargo feature `trace`): a path with `%p`, `%t`, `%e` as for `MEMPROF_OUTPUT`, a FIFO, or `tcp://HOST:PORT`; unset: what `MemProf::trace` chose (no trace by default). The format is `docs/trace-format.md`; a forked child does not trace |
/// | `MEMPROF_TRACE_SYMBOLS` | `1` | `0` writes no symbols into the trace: no debug information is read in the process (the memory and time that costs, docs/overhead.md), and the trace names its frames by module until `memprof symbolize` resolves them from the binaries |
/// | `MEMPROF_LABEL` | unset | `key=value`: the reports (`log_allocations`, `pretty_log_allocations`, `log_diff`, `pretty_log_diff`, the at-exit and dump reports) keep only the blocks allocated with that label (`with_labels`, `docs/labels.md`); an empty key or value warns and keeps every block |
/// | `MEMPROF_DUMP_ON_GROWTH` | unset | a size (`256MiB`; `KiB`, `MiB`, `GiB` or plain bytes): the `MEMPROF_OUTPUT` files are written each time the live heap passes the previous dump's high-water mark by this much, by memprof's dump thread; `%n` in their names is the dump's number, from 1; `0` or `off`: none; unset: what `MemProf::dump_on_growth` chose (none by default). `docs/dumps.md` |
/// | `MEMPROF_DUMP_KEEP` | unset | the most dumps whose files (named with `%n`) stay on disk; the oldest are removed; unset or `0`: all |
/// | `MEMPROF_DUMP_NEAR_LIMIT` | unset | a share of the process's memory limit (`90%`, the cgroup v2 `memory.max`) or a size (`1536MiB`, compared with the process's resident memory): the `MEMPROF_OUTPUT` files are written once each time memory use crosses it upwards; with a share and no cgroup limit, a warning and no such dumps |
/// | `MEMPROF_RUN_PID` | unset | set by `memprof run` to its own process id: only a process it started itself (its program, and what that program `exec`s) says that its executable has no debug information; the processes those start stay quiet about it |
/// | `MEMPROF_BLESS` | unset | `1`: `Scope::assert_baseline` writes (or rewrites) the baseline file of the figures it measured instead of checking them; `0` or unset: it checks them, and a missing file fails the test |
/// | `MEMPROF_UNWINDER` | `auto` | `fp` walks frame pointers, `dwarf` unwinds with the DWARF call-frame information, `auto` takes `fp` when the build forces frame pointers (`-C force-frame-pointers=yes`) and `dwarf` otherwise; `fp` in a build without them warns and takes `dwarf` |
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Whether allocations are recorded at all (`MEMPROF_ENABLED`).
    pub enabled: bool,
    /// Frames shown and grouped in reports (`MEMPROF_STACK_DEPTH`).
    pub stack_depth: usize,
    /// Frames dropped from the top of a context after trimming (`MEMPROF_STACK_SKIP`).
    pub stack_skip: usize,
    /// Groups below this many bytes are hidden in the allocation logs (`MEMPROF_MIN_BYTES`).
    pub min_bytes: u64,
    /// Write the TSV log to stderr at exit (`MEMPROF_PRINT_AT_EXIT=1`).
    pub print_at_exit: bool,
    /// The stack walker used on the allocation path (`MEMPROF_UNWINDER`).
    pub unwinder: Unwinder,
    /// The working directory when the profiler started; report file names are shown relative to it.
    pub working_dir: Option<PathBuf>,
    /// Mean bytes between recorded allocations, `Some(0)` for all, `None` to let the allocator's
    /// builder decide (`MEMPROF_SAMPLE_INTERVAL`).
    pub sample_interval: Option<u64>,
    /// The signal that toggles recording (`MEMPROF_TOGGLE_SIGNAL`).
    pub toggle_signal: Option<i32>,
    /// Start with recording paused, until the toggle signal (`MEMPROF_PAUSED=1`).
    pub paused: bool,
    /// Files written at exit and on the dump signal (`MEMPROF_OUTPUT`).
    pub output: Option<String>,
    /// The signal that writes a dump while the program runs (`MEMPROF_DUMP_SIGNAL`).
    pub dump_signal: Option<i32>,
    /// Where the trace of every event goes (`MEMPROF_TRACE`); `None` lets the builder decide.
    pub trace: Option<String>,
    /// Whether the trace carries its symbols (`MEMPROF_TRACE_SYMBOLS`).
    pub trace_symbols: bool,
    /// Keep the per-stack live heap at the peak (`MEMPROF_PEAK`); `None` lets the builder decide.
    pub peak: Option<bool>,
    /// Objects of the type shown in the object graph; 0 for all (`MEMPROF_REF_LIMIT`).
    pub ref_limit: usize,
    /// Levels of referrers followed back in the object graph; 0 for no limit (`MEMPROF_REF_LEVEL`).
    pub ref_level: usize,
    /// The type whose allocation contexts are tallied (`MEMPROF_TRACE_TARGET`).
    pub trace_target: Option<String>,
    /// Fewest objects for a context of the trace target to be shown (`MEMPROF_TRACE_MIN_COUNT`).
    pub trace_min_count: u64,
    /// Where the HTTP endpoint listens (`MEMPROF_HTTP`); `None`: nowhere.
    pub http: Option<SocketAddr>,
    /// The label (key, value) the allocation reports keep (`MEMPROF_LABEL`); `None`: all blocks.
    pub label: Option<(String, String)>,
    /// Live-heap growth between dumps (`MEMPROF_DUMP_ON_GROWTH`); `Some(0)` for none, `None` to
    /// let the allocator's builder decide.
    pub dump_on_growth: Option<u64>,
    /// The most dumps kept on disk; 0 for all (`MEMPROF_DUMP_KEEP`).
    pub dump_keep: u64,
    /// The memory use that writes a dump (`MEMPROF_DUMP_NEAR_LIMIT`).
    pub dump_near_limit: Option<NearLimit>,
    /// The `memprof run` that started this process or an ancestor (`MEMPROF_RUN_PID`).
    pub(crate) run_pid: Option<u32>,
    /// Whether `Scope::assert_baseline` writes the baseline files (`MEMPROF_BLESS=1`).
    pub(crate) bless: bool,
    /// The package directory of the test being run (Cargo's `CARGO_MANIFEST_DIR` in the test's
    /// environment), under which the baseline files are; `None` outside Cargo.
    pub(crate) manifest_dir: Option<PathBuf>,
    /// The signal that opens the control channel (`MEMPROF_CONTROL_SIGNAL`); `None`: closed.
    pub(crate) control_signal: Option<i32>,
}

/// The control channel's signal when `MEMPROF_CONTROL_SIGNAL` is unset: a real-time signal near
/// the top of the range, which programs seldom use (`SIGRTMAX-5` with glibc and musl). The
/// `memprof` command assumes the same.
pub(crate) const CONTROL_SIGNAL: i32 = 59;

/// Where `MEMPROF_DUMP_NEAR_LIMIT` writes a dump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NearLimit {
    /// This percentage (1 to 100) of the cgroup's memory limit, compared with the cgroup's memory
    /// use less its inactive file cache.
    Share(u8),
    /// This many bytes, compared with the process's resident memory.
    Bytes(u64),
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: true,
            stack_depth: 5,
            stack_skip: 0,
            min_bytes: 1024,
            print_at_exit: false,
            unwinder: if cfg!(memprof_frame_pointers) {
                Unwinder::FramePointer
            } else {
                Unwinder::Dwarf
            },
            working_dir: None,
            sample_interval: None,
            toggle_signal: None,
            paused: false,
            output: None,
            dump_signal: None,
            trace: None,
            trace_symbols: true,
            peak: None,
            ref_limit: 10,
            ref_level: 5,
            trace_target: None,
            trace_min_count: 1,
            http: None,
            label: None,
            dump_on_growth: None,
            dump_keep: 0,
            dump_near_limit: None,
            run_pid: None,
            bless: false,
            manifest_dir: None,
            control_signal: Some(CONTROL_SIGNAL),
        }
    }
}

impl Config {
    /// Most raw return addresses captured per allocation: enough for the frames shown, the frames
    /// skipped, and the allocator and std frames that are trimmed before them. A walk that can
    /// tell those apart stops at [`Config::shown_depth`] frames after them.
    #[inline]
    pub fn capture_depth(&self) -> usize {
        (self.shown_depth() + TRIMMED_FRAMES).min(MAX_FRAMES)
    }

    /// The frames of a stack a report uses after trimming: those skipped and those shown.
    #[inline]
    pub fn shown_depth(&self) -> usize {
        self.stack_depth + self.stack_skip
    }

    /// The configuration in force: read from the environment the first time it is asked for
    /// (when the profiler starts), the same ever after.
    pub fn current() -> &'static Config {
        get()
    }

    /// Whether this process says that its executable has no debug information: always, except
    /// under `memprof run` in a process it did not start itself (`MEMPROF_RUN_PID`).
    pub(crate) fn warns_of_missing_debug_info(&self) -> bool {
        self.run_pid
            .is_none_or(|run| run == std::os::unix::process::parent_id())
    }

    /// Reads the configuration from the process environment; warnings go to stderr, and are lost
    /// when it cannot be written. A `MEMPROF_` name that is none of memprof's warns too.
    pub fn from_env() -> Config {
        let mut config = Config::from_lookup(
            |name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()),
            |warning| warn(format_args!("{warning}")),
        );
        config.working_dir = std::env::current_dir().ok();
        config.manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from);
        let names = std::env::vars_os().map(|(name, _)| name.to_string_lossy().into_owned());
        if let Some(warning) = unknown_names_warning(names) {
            warn(format_args!("{warning}"));
        }
        config
    }

    /// Builds a configuration from any variable lookup, reporting each bad value through `warn`.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        mut warn: impl FnMut(String),
    ) -> Config {
        let defaults = Config::default();
        let mut number = |name: &str, default: u64, range: std::ops::RangeInclusive<u64>| -> u64 {
            let Some(raw) = lookup(name) else {
                return default;
            };
            match raw.trim().parse::<u64>() {
                Ok(v) if range.contains(&v) => v,
                _ => {
                    warn(format!(
                        "{name}={raw:?} is not a whole number from {} to {}; using the default {default}",
                        range.start(),
                        range.end()
                    ));
                    default
                }
            }
        };
        let stack_depth = number(
            "MEMPROF_STACK_DEPTH",
            defaults.stack_depth as u64,
            1..=MAX_STACK_DEPTH as u64,
        ) as usize;
        let stack_skip = number(
            "MEMPROF_STACK_SKIP",
            defaults.stack_skip as u64,
            0..=MAX_STACK_DEPTH as u64,
        ) as usize;
        let min_bytes = number("MEMPROF_MIN_BYTES", defaults.min_bytes, 0..=u64::MAX);
        let ref_limit = number(
            "MEMPROF_REF_LIMIT",
            defaults.ref_limit as u64,
            0..=u32::MAX as u64,
        ) as usize;
        let ref_level = number(
            "MEMPROF_REF_LEVEL",
            defaults.ref_level as u64,
            0..=u32::MAX as u64,
        ) as usize;
        let trace_min_count = number(
            "MEMPROF_TRACE_MIN_COUNT",
            defaults.trace_min_count,
            0..=u64::MAX,
        );
        let dump_keep = number("MEMPROF_DUMP_KEEP", defaults.dump_keep, 0..=u32::MAX as u64);
        let label = lookup("MEMPROF_LABEL").and_then(|raw| match raw.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() && !value.trim().is_empty() => {
                Some((key.trim().to_owned(), value.trim().to_owned()))
            }
            _ => {
                // No label has an empty key or value (`Labels::new` refuses them).
                warn(format!(
                    "MEMPROF_LABEL={raw:?} is not key=value with a key and a value; the reports \
                     keep every block"
                ));
                None
            }
        });
        let sample_interval = lookup("MEMPROF_SAMPLE_INTERVAL").and_then(|raw| {
            let parsed = parse_sample_interval(&raw);
            if parsed.is_none() {
                warn(format!(
                    "MEMPROF_SAMPLE_INTERVAL={raw:?} is not bytes:N (or 0); using the default: every allocation"
                ));
            }
            parsed
        });
        let mut signal = |name: &str| {
            lookup(name).and_then(|raw| {
                let signal = parse_signal(&raw);
                if signal.is_none() {
                    warn(format!(
                        "{name}={raw:?} is not a signal name (USR1, USR2, ...) or number; using the default: none"
                    ));
                }
                signal
            })
        };
        let mut toggle_signal = signal("MEMPROF_TOGGLE_SIGNAL");
        let dump_signal = signal("MEMPROF_DUMP_SIGNAL");
        if let Some(both) = dump_signal
            && toggle_signal == Some(both)
        {
            // One handler per signal: the dump is the one asked for by name for this signal's
            // job, and a toggle that fires with every dump would be a surprise of its own.
            warn(format!(
                "MEMPROF_TOGGLE_SIGNAL and MEMPROF_DUMP_SIGNAL are the same signal ({both}); \
                 it writes dumps, and no signal toggles recording"
            ));
            toggle_signal = None;
        }
        let control_signal = match lookup("MEMPROF_CONTROL_SIGNAL") {
            None => Some(CONTROL_SIGNAL),
            Some(raw) if matches!(raw.trim(), "off" | "0") => None,
            Some(raw) => parse_signal(&raw).or_else(|| {
                warn(format!(
                    "MEMPROF_CONTROL_SIGNAL={raw:?} is not a signal name (USR1, USR2, ...) or \
                     number, or off; using the default: {CONTROL_SIGNAL}"
                ));
                Some(CONTROL_SIGNAL)
            }),
        };
        let control_signal = control_signal.filter(|&control| {
            let taken = [
                ("MEMPROF_DUMP_SIGNAL", dump_signal),
                ("MEMPROF_TOGGLE_SIGNAL", toggle_signal),
            ]
            .into_iter()
            .find(|(_, other)| *other == Some(control));
            if let Some((name, _)) = taken {
                warn(format!(
                    "MEMPROF_CONTROL_SIGNAL and {name} are the same signal ({control}); it keeps \
                     the job of {name}, and the control channel is closed"
                ));
            }
            taken.is_none()
        });
        // A value that must name something: empty, it warns and is ignored.
        let mut named = |name: &str, ignored: &str| {
            lookup(name).map(|v| v.trim().to_owned()).filter(|v| {
                if v.is_empty() {
                    warn(format!("{name}=\"\" is empty; {ignored}"));
                }
                !v.is_empty()
            })
        };
        let output = named("MEMPROF_OUTPUT", "no files are written at exit");
        let trace_target = named(
            "MEMPROF_TRACE_TARGET",
            "log_trace_target has no type to look for",
        );
        let run_pid = lookup("MEMPROF_RUN_PID").and_then(|raw| {
            let pid = raw.trim().parse::<u32>().ok();
            if pid.is_none() {
                warn(format!(
                    "MEMPROF_RUN_PID={raw:?} is not a process id; ignored"
                ));
            }
            pid
        });
        let bless = match lookup("MEMPROF_BLESS").as_deref().map(str::trim) {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => {
                warn(format!(
                    "MEMPROF_BLESS={other:?} is neither 1 nor 0; using the default 0: baselines \
                     are checked, not written"
                ));
                false
            }
        };
        let trace = lookup("MEMPROF_TRACE").and_then(|raw| {
            let value = raw.trim();
            if value.is_empty() {
                warn("MEMPROF_TRACE=\"\" names no file; using the default: no trace".to_owned());
                return None;
            }
            Some(value.to_owned())
        });
        // A flag is `1` or `0`; anything else, the empty value included, warns and keeps the
        // default (`default_text` says what that is).
        let mut flag = |name: &str, default_text: &str| -> Option<bool> {
            match lookup(name).as_deref().map(str::trim) {
                None => None,
                Some("1") => Some(true),
                Some("0") => Some(false),
                Some(other) => {
                    warn(format!(
                        "{name}={other:?} is neither 1 nor 0; using the default {default_text}"
                    ));
                    None
                }
            }
        };
        let enabled = flag("MEMPROF_ENABLED", "1 (on)").unwrap_or(defaults.enabled);
        let peak = flag("MEMPROF_PEAK", "(what MemProf::track_peak chose)");
        let print_at_exit = flag("MEMPROF_PRINT_AT_EXIT", "0").unwrap_or(defaults.print_at_exit);
        let paused = flag("MEMPROF_PAUSED", "0").unwrap_or(defaults.paused);
        let trace_symbols =
            flag("MEMPROF_TRACE_SYMBOLS", "1 (symbols)").unwrap_or(defaults.trace_symbols);
        if paused && toggle_signal.is_none() {
            warn(
                "MEMPROF_PAUSED=1 without MEMPROF_TOGGLE_SIGNAL: no signal starts recording \
                 (memprof::resume() still does)"
                    .to_owned(),
            );
        }
        let unwinder = match lookup("MEMPROF_UNWINDER").as_deref().map(str::trim) {
            None | Some("auto") => defaults.unwinder,
            Some("") => {
                warn("MEMPROF_UNWINDER=\"\" is empty; using the default auto".to_owned());
                defaults.unwinder
            }
            Some("fp") if !cfg!(memprof_frame_pointers) => {
                // Without frame pointers the chain ends at the first frame that keeps none: every
                // block would share one empty stack.
                warn(
                    "MEMPROF_UNWINDER=\"fp\" needs a build that keeps frame pointers \
                     (RUSTFLAGS=\"-C force-frame-pointers=yes\"); using dwarf"
                        .to_owned(),
                );
                Unwinder::Dwarf
            }
            Some("fp") => Unwinder::FramePointer,
            Some("dwarf") => Unwinder::Dwarf,
            Some(other) => {
                warn(format!(
                    "MEMPROF_UNWINDER={other:?} is not one of auto, fp, dwarf; using the default auto"
                ));
                defaults.unwinder
            }
        };
        let http = lookup("MEMPROF_HTTP").and_then(|raw| {
            let address = parse_address(&raw);
            if address.is_none() {
                warn(format!(
                    "MEMPROF_HTTP={raw:?} is not an address with a port (127.0.0.1:6060, \
                     [::1]:6060, localhost:6060); using the default: no endpoint"
                ));
            }
            address
        });
        let dump_on_growth = lookup("MEMPROF_DUMP_ON_GROWTH").and_then(|raw| {
            let parsed = match raw.trim() {
                "off" => Some(0),
                value => parse_size(value),
            };
            if parsed.is_none() {
                warn(format!(
                    "MEMPROF_DUMP_ON_GROWTH={raw:?} is not a size (256MiB, 1GiB, 65536); \
                     using the default: what MemProf::dump_on_growth chose"
                ));
            }
            parsed
        });
        let dump_near_limit = lookup("MEMPROF_DUMP_NEAR_LIMIT").and_then(|raw| {
            let parsed = parse_near_limit(&raw);
            if parsed.is_none() {
                warn(format!(
                    "MEMPROF_DUMP_NEAR_LIMIT={raw:?} is neither a percentage from 1% to 100% nor \
                     a size (1536MiB); using the default: no dump near the limit"
                ));
            }
            parsed
        });
        let wants_dumps = dump_on_growth.is_some_and(|step| step > 0) || dump_near_limit.is_some();
        if wants_dumps && output.is_none() {
            warn(
                "MEMPROF_DUMP_ON_GROWTH and MEMPROF_DUMP_NEAR_LIMIT write the MEMPROF_OUTPUT \
                 files, and MEMPROF_OUTPUT is not set: no such dumps"
                    .to_owned(),
            );
        }
        Config {
            enabled,
            stack_depth,
            stack_skip,
            min_bytes,
            print_at_exit,
            unwinder,
            working_dir: None,
            sample_interval,
            toggle_signal,
            paused,
            output,
            dump_signal,
            trace,
            trace_symbols,
            peak,
            ref_limit,
            ref_level,
            trace_target,
            trace_min_count,
            http,
            label,
            dump_on_growth,
            dump_keep,
            dump_near_limit,
            run_pid,
            bless,
            manifest_dir: None,
            control_signal,
        }
    }
}

/// The `MEMPROF_` names that are not memprof's own variables: memprof's test suite and tools read
/// these (docs/layout.md); `MEMPROF_TEST_` names are its tests' own.
const OTHER_NAMES: &[&str] = &[
    "MEMPROF_FOLLOW_EXEC",
    "MEMPROF_REQUIRE_TOOLS",
    "MEMPROF_EXPECT_FP",
    "MEMPROF_STRESS_SECONDS",
    "MEMPROF_SERVE_STRESS_TRACE",
    "MEMPROF_SERVE_STRESS_SECS",
    "MEMPROF_SERVE_LIVE_TIMES",
    "MEMPROF_BINS_TRACE",
    "MEMPROF_INDEX_SCHEMA",
    "MEMPROF_TABLE_SEED",
    "MEMPROF_TABLE_CASES",
    "MEMPROF_FUZZ_ROUNDS",
    "MEMPROF_FUZZ_CASES",
    "MEMPROF_BIN",
];

/// Every variable memprof reads (the table on [`Config`]).
const NAMES: &[&str] = &[
    "MEMPROF_ENABLED",
    "MEMPROF_STACK_DEPTH",
    "MEMPROF_STACK_SKIP",
    "MEMPROF_MIN_BYTES",
    "MEMPROF_PRINT_AT_EXIT",
    "MEMPROF_REF_LIMIT",
    "MEMPROF_REF_LEVEL",
    "MEMPROF_TRACE_TARGET",
    "MEMPROF_TRACE_MIN_COUNT",
    "MEMPROF_OUTPUT",
    "MEMPROF_DUMP_SIGNAL",
    "MEMPROF_PEAK",
    "MEMPROF_SAMPLE_INTERVAL",
    "MEMPROF_TOGGLE_SIGNAL",
    "MEMPROF_PAUSED",
    "MEMPROF_HTTP",
    "MEMPROF_TRACE",
    "MEMPROF_TRACE_SYMBOLS",
    "MEMPROF_LABEL",
    "MEMPROF_DUMP_ON_GROWTH",
    "MEMPROF_DUMP_KEEP",
    "MEMPROF_DUMP_NEAR_LIMIT",
    "MEMPROF_RUN_PID",
    "MEMPROF_UNWINDER",
    "MEMPROF_BLESS",
    "MEMPROF_CONTROL_SIGNAL",
];

/// One warning naming every `MEMPROF_` variable among `names` that memprof does not know (a
/// misspelt one would otherwise be ignored in silence); `None` when there is none.
fn unknown_names_warning(names: impl Iterator<Item = String>) -> Option<String> {
    let mut unknown: Vec<String> = names
        .filter(|name| name.starts_with("MEMPROF_") && !name.starts_with("MEMPROF_TEST_"))
        .filter(|name| !NAMES.contains(&name.as_str()) && !OTHER_NAMES.contains(&name.as_str()))
        .collect();
    if unknown.is_empty() {
        return None;
    }
    unknown.sort_unstable();
    Some(format!(
        "{} {} not one of memprof's variables (docs/configuration.md lists them); ignored",
        unknown.join(", "),
        if unknown.len() == 1 { "is" } else { "are" }
    ))
}

/// A size: whole bytes, or a whole number with `KiB`, `MiB` or `GiB` after it (a space between
/// them is allowed).
pub(crate) fn parse_size(raw: &str) -> Option<u64> {
    let raw = raw.trim();
    let digits = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (number, unit) = raw.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let shift = match unit.trim_start() {
        "" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return None,
    };
    number.checked_mul(1 << shift)
}

/// A value of `MEMPROF_DUMP_NEAR_LIMIT`: `90%` or a size.
fn parse_near_limit(raw: &str) -> Option<NearLimit> {
    let raw = raw.trim();
    if let Some(percent) = raw.strip_suffix('%') {
        let percent: u8 = percent.trim().parse().ok()?;
        return (1..=100)
            .contains(&percent)
            .then_some(NearLimit::Share(percent));
    }
    parse_size(raw)
        .filter(|&bytes| bytes > 0)
        .map(NearLimit::Bytes)
}

/// A value of `MEMPROF_SAMPLE_INTERVAL`: `bytes:N`, or `0`/`off` for every allocation.
fn parse_sample_interval(raw: &str) -> Option<u64> {
    match raw.trim() {
        "0" | "off" => Some(0),
        value => value
            .strip_prefix("bytes:")
            .and_then(|n| n.parse::<u64>().ok()),
    }
}

/// Whether the profiler will record every allocation, given the raw values of
/// `MEMPROF_SAMPLE_INTERVAL` and `MEMPROF_ENABLED` and the interval the program's `MemProf` chose:
/// the global allocator asks at its first allocation, before the configuration is read (which
/// allocates), to know whether its blocks carry a header. It decides as [`Config::from_env`] and
/// the start of recording do, without allocating and without warnings (those come later).
pub(crate) fn records_every_block(
    sample_interval: Option<&str>,
    enabled: Option<&str>,
    builder_interval: u64,
) -> bool {
    if enabled.map(str::trim) == Some("0") {
        return false;
    }
    sample_interval
        .and_then(parse_sample_interval)
        .unwrap_or(builder_interval)
        == 0
}

/// An IP address and port (`127.0.0.1:6060`, `[::1]:6060`), or `localhost:PORT` for the IPv4
/// loopback; no other host name, since resolving one may block or reach the network.
fn parse_address(raw: &str) -> Option<SocketAddr> {
    let raw = raw.trim();
    if let Some(port) = raw.strip_prefix("localhost:") {
        return Some(SocketAddr::from((Ipv4Addr::LOCALHOST, port.parse().ok()?)));
    }
    raw.parse().ok()
}

/// A signal by name (`USR1`, `SIGUSR1`) or number; only signals a program may catch and that
/// nothing else needs: `HUP`, `INT`, `QUIT`, `USR1`, `USR2`, `TERM`, `WINCH`, or real-time ones.
fn parse_signal(raw: &str) -> Option<i32> {
    let raw = raw.trim();
    let name = raw.strip_prefix("SIG").unwrap_or(raw);
    let signal = match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "WINCH" => libc::SIGWINCH,
        number => {
            let n: i32 = number.parse().ok()?;
            let allowed = [
                libc::SIGHUP,
                libc::SIGINT,
                libc::SIGQUIT,
                libc::SIGUSR1,
                libc::SIGUSR2,
                libc::SIGTERM,
                libc::SIGWINCH,
            ];
            return (allowed.contains(&n) || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&n))
                .then_some(n);
        }
    };
    Some(signal)
}

/// Writes `memprof: ` and `message` on stderr, for the warnings of memprof's start, exit and
/// signal paths: a failed write (stderr closed, full, a pipe nobody reads) is ignored, where
/// `eprintln!` would panic, and a panic there aborts the program.
pub(crate) fn warn(message: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if quiet() {
        return;
    }
    crate::native::without_sigpipe(|| writeln!(std::io::stderr(), "memprof: {message}")).ok();
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The `MEMPROF_*` pairs given in place of the environment ([`give`]).
static GIVEN: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// Whether memprof keeps off the process's stderr: when the settings were given ([`give`]), the
/// program's output stays its own; the command that gave them says what there is to say.
pub(crate) fn quiet() -> bool {
    GIVEN.get().is_some()
}

/// The configuration in force: read the first time it is asked for, from the pairs [`give`]
/// gave when it did, else from the environment.
pub(crate) fn get() -> &'static Config {
    CONFIG.get_or_init(|| match GIVEN.get() {
        Some(pairs) => Config::from_pairs(pairs),
        None => Config::from_env(),
    })
}

/// Gives the `MEMPROF_*` variables as `(name, value)` pairs, read in place of the process's
/// environment, which is then never read: the preloaded library attached to a running process
/// (`memprof attach`) takes its settings from the command, not from the program's environment.
/// memprof then writes nothing on the process's stderr ([`quiet`]).
/// Returns false, and changes nothing, when the configuration was read or given already.
#[cfg(feature = "preload")]
pub(crate) fn give(pairs: Vec<(String, String)>) -> bool {
    CONFIG.get().is_none() && GIVEN.set(pairs).is_ok()
}

impl Config {
    /// The configuration from the given `pairs`, as [`Config::from_env`] reads the environment.
    fn from_pairs(pairs: &[(String, String)]) -> Config {
        let mut config = Config::from_lookup(
            |name| {
                pairs
                    .iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
            },
            |warning| warn(format_args!("{warning}")),
        );
        config.working_dir = std::env::current_dir().ok();
        if let Some(warning) = unknown_names_warning(pairs.iter().map(|(n, _)| n.clone())) {
            warn(format_args!("{warning}"));
        }
        config
    }
}

#[cfg(test)]
mod tests;
