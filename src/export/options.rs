//! The options every export takes: which counter folded stacks and the flamegraph measure, how
//! stacks are cut, and what is written besides the call sites (process id, command line, times,
//! title), with [`process_elapsed`], the default run time. One struct for every format, so that
//! each reads the same fields with the same defaults.

#![forbid(unsafe_code)]

use super::CallSite;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One counter of a call site: what folded stacks and the flamegraph measure, and the sample type
/// pprof shows first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Value {
    /// Bytes live in the snapshot (the default).
    #[default]
    LiveBytes,
    /// Bytes allocated over the whole run, freed or not.
    AllocatedBytes,
    /// Blocks live in the snapshot.
    LiveBlocks,
    /// Blocks allocated over the whole run, freed or not.
    AllocatedBlocks,
}

impl Value {
    /// This counter of `site`.
    pub fn of(self, site: &CallSite) -> u64 {
        match self {
            Value::LiveBytes => site.live_bytes,
            Value::AllocatedBytes => site.allocated_bytes,
            Value::LiveBlocks => site.live_blocks,
            Value::AllocatedBlocks => site.allocated_blocks,
        }
    }

    /// What is counted: `"bytes"` or `"blocks"`.
    pub fn unit(self) -> &'static str {
        match self {
            Value::LiveBytes | Value::AllocatedBytes => "bytes",
            Value::LiveBlocks | Value::AllocatedBlocks => "blocks",
        }
    }

    /// A short description: `"live bytes"`, `"allocated blocks"`.
    pub fn label(self) -> &'static str {
        match self {
            Value::LiveBytes => "live bytes",
            Value::AllocatedBytes => "allocated bytes",
            Value::LiveBlocks => "live blocks",
            Value::AllocatedBlocks => "allocated blocks",
        }
    }
}

/// What every export writes besides the call sites, and how stacks are cut.
///
/// [`ExportOptions::default`] describes this process now; the builder methods replace single
/// fields (tests fix `pid`, `command`, `elapsed` and `time` to get the same file every run).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportOptions {
    /// The counter folded stacks and the flamegraph use, and pprof's default sample type (default
    /// [`Value::LiveBytes`]: `inuse_space`).
    pub value: Value,
    /// Frames dropped from the top of every stack after trimming (default 0).
    pub skip: usize,
    /// Most frames kept per stack (default `usize::MAX`: every captured frame).
    pub depth: usize,
    /// Process id written in DHAT files (default this process's).
    pub pid: u32,
    /// Command line written in DHAT and heaptrack files (default this process's arguments joined
    /// by spaces).
    pub command: String,
    /// Time since the program started (default: from `/proc/self/stat`, zero when unknown): DHAT's
    /// `te`, heaptrack's last timestamp, pprof's duration.
    pub elapsed: Duration,
    /// Wall-clock time of the snapshot since the Unix epoch (default now): pprof's `time_nanos`.
    pub time: Duration,
    /// Flamegraph title (default `None`: "memprof: " and the value's label, e.g.
    /// "memprof: live bytes").
    pub title: Option<String>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            value: Value::default(),
            skip: 0,
            depth: usize::MAX,
            pid: std::process::id(),
            command: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            elapsed: process_elapsed().unwrap_or_default(),
            time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
            title: None,
        }
    }
}

impl ExportOptions {
    /// These options with another counter for folded stacks and the flamegraph, and another
    /// default sample type for pprof.
    pub fn value(mut self, value: Value) -> Self {
        self.value = value;
        self
    }

    /// These options with another number of frames dropped after trimming.
    pub fn skip(mut self, skip: usize) -> Self {
        self.skip = skip;
        self
    }

    /// These options with at most `depth` frames per stack.
    pub fn depth(mut self, depth: usize) -> Self {
        self.depth = depth;
        self
    }

    /// These options with another process id.
    pub fn pid(mut self, pid: u32) -> Self {
        self.pid = pid;
        self
    }

    /// These options with another command line.
    pub fn command(mut self, command: impl Into<String>) -> Self {
        self.command = command.into();
        self
    }

    /// These options with another time since the program started.
    pub fn elapsed(mut self, elapsed: Duration) -> Self {
        self.elapsed = elapsed;
        self
    }

    /// These options with another wall-clock time since the Unix epoch.
    pub fn time(mut self, time: Duration) -> Self {
        self.time = time;
        self
    }

    /// These options with a flamegraph title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }
}

/// How long this process has run, from its start time in `/proc/self/stat` and `/proc/uptime`.
pub(crate) fn process_elapsed() -> Option<Duration> {
    // Clock ticks per second of `/proc` times: USER_HZ, 100 on Linux.
    const TICKS_PER_SECOND: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start with field 3, the state;
    // field 22 is the start time in ticks since boot.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let start_ticks: f64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let uptime: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    let elapsed = uptime - start_ticks / TICKS_PER_SECOND;
    (elapsed >= 0.0).then(|| Duration::from_secs_f64(elapsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_is_known_and_plausible() {
        let elapsed = process_elapsed().expect("/proc is mounted");
        assert!(elapsed < Duration::from_secs(24 * 3600), "{elapsed:?}");
    }
}
