//! The program's summary counted while it runs: `memprof run` follows the program's trace as its
//! writer appends to it ([`memprof_trace::Follow`]: each update reads, decodes and counts what
//! arrived since the last), so that when the program ends what is left is the events of its last
//! moment, not a replay of the whole run.
//!
//! The follower lets go of what it counted when it holds more than half the memory left (its
//! replay holds the program's live blocks), so that it never makes the program run short.
//!
//! The summary is the one a replay of the finished trace gives, or it is not used: the events are
//! applied in the replay's order, up to the time the trace's `WRITTEN` records say every thread's
//! events are written (or 1.5 s behind the newest that arrived, for a trace without them); a
//! trace whose chunk came later than that anyway, that is not the file the run ends up with
//! (another process of the same id wrote it, or it was replaced), or that could not be read as
//! it grew is summarised after the run by a replay of its file, as `memprof summary` does. A
//! program that `exec`s is followed into its new image's trace.

use super::traces::Pattern;
use crate::summary::{Counting, Summary};
use crate::{Failure, ReportArgs};
use indicatif::ProgressBar;
use memprof_trace::{Follow, Followed, Trace};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the follower sleeps between two looks at the trace, at most.
const PERIOD: Duration = Duration::from_millis(250);
/// How far behind the newest event that arrived the follower applies events where the trace's
/// `WRITTEN` records do not say more: past the trace writer's period for partly filled buffers
/// (a second), so that another thread's events seldom arrive behind it. One that does makes the
/// summary a replay after the run.
const SLACK_NS: u64 = 1_500_000_000;
/// Events applied between two looks at the memory left ([`crowding`]).
const STEP: u64 = 1 << 20;
/// Its first sleeps, while the trace may not exist yet, each twice the last up to [`PERIOD`].
const FIRST: Duration = Duration::from_millis(10);

/// The follower of one program's trace, on a thread of its own.
pub(crate) struct Following {
    done: Arc<AtomicBool>,
    /// `None` when no thread could be started: then nothing is followed.
    thread: Option<JoinHandle<Option<FollowedTrace>>>,
}

/// A trace followed to its end: every event its file holds counted.
pub(crate) struct FollowedTrace {
    path: PathBuf,
    /// The file's device, inode and length when it was last read.
    identity: (u64, u64, u64),
    trace: Trace,
    follow: Follow,
    /// Where the last update left the replay.
    last: Followed,
    counting: Counting,
}

/// Follows the trace that process `pid` writes to a file `pattern` names, with a header that
/// says it started at `started` (ns since the Unix epoch) or later; `short_lived`: the summary's
/// bound, ns.
pub(crate) fn start(pattern: Pattern, started: u64, pid: u32, short_lived: u64) -> Following {
    let done = Arc::new(AtomicBool::new(false));
    let ended = Arc::clone(&done);
    let thread = std::thread::Builder::new()
        .name("memprof-follow".into())
        .spawn(move || follow(&pattern, started, pid, short_lived, &ended))
        .ok();
    Following { done, thread }
}

impl Following {
    /// Once the program has ended (its trace closed): the events that arrived since the last
    /// look counted too, and the trace as followed; `None` when nothing was followed or the
    /// following failed.
    pub(crate) fn finish(self) -> Option<FollowedTrace> {
        self.done.store(true, Ordering::SeqCst);
        let thread = self.thread?;
        thread.thread().unpark();
        thread.join().ok().flatten()
    }
}

/// The follower's thread: finds the trace, then counts what arrives until `done`.
fn follow(
    pattern: &Pattern,
    started: u64,
    pid: u32,
    short_lived: u64,
    done: &AtomicBool,
) -> Option<FollowedTrace> {
    let mut sleep = FIRST;
    // Each nap twice the last, up to `PERIOD`; one with events waiting for the writer's next
    // `WRITTEN` record, `FIRST`.
    let mut nap = |waiting: bool| {
        let now = if waiting { FIRST } else { sleep };
        std::thread::park_timeout(now);
        sleep = (sleep * 2).min(PERIOD);
    };
    // The program's newest trace: a program that `exec`s has one per image, each begun when the
    // last ended.
    let newest = |after: u64| {
        pattern
            .traces_since(after)
            .into_iter()
            .rfind(|f| f.header.pid == pid)
    };
    let mut after = started;
    'trace: loop {
        let (path, mut trace) = loop {
            let finished = done.load(Ordering::SeqCst);
            // The header may be there before the rest of what opening reads.
            if let Some(found) = newest(after)
                && let Ok(trace) = Trace::open(&found.path)
            {
                after = found.header.start_unix_ns;
                break (found.path, trace);
            }
            if finished {
                return None;
            }
            nap(false);
        };
        let mut counting = Counting::new(&trace, 10, short_lived, ProgressBar::hidden());
        let mut follow = Follow::with_slack(&trace, SLACK_NS);
        // What is left to count once the program has ended, shown as it goes.
        let mut progress: Option<ProgressBar> = None;
        let last = loop {
            let finished = done.load(Ordering::SeqCst);
            let last = follow
                .update_some(&mut trace, &mut counting, finished, STEP)
                .ok()?;
            if finished {
                let bar = progress.get_or_insert_with(|| crate::common::bar(0, "summary"));
                bar.set_length(bar.position() + last.applied_now + last.pending);
                bar.inc(last.applied_now);
            }
            // Never the reason the program runs out of memory: what was followed is let go, and
            // the trace replayed after the program ends.
            if !finished && crowding() {
                return None;
            }
            if last.applied_now >= STEP {
                continue;
            }
            if finished {
                break last;
            }
            // Ended by an `exec`: the program goes on in the trace of its new image.
            if trace.end_record().is_some() && last.pending == 0 && newest(after + 1).is_some() {
                continue 'trace;
            }
            nap(last.pending > 0);
        };
        if let Some(progress) = progress {
            progress.finish_and_clear();
        }
        let identity = identity(&path)?;
        return Some(FollowedTrace {
            path,
            identity,
            trace,
            follow,
            last,
            counting,
        });
    }
}

/// Whether this process holds more than half the memory left to give: `VmRSS` above half of
/// `MemAvailable`, or of what its memory control group (cgroup v2 or v1) has left below its
/// limit, the page cache it counts taken as free (the kernel takes it back first). The program
/// being traced would soon run short because of the replay.
fn crowding() -> bool {
    let read = |file: &str| std::fs::read_to_string(file).unwrap_or_default();
    let Some(resident) = field(&read("/proc/self/status"), "VmRSS:") else {
        return false;
    };
    let mut left = field(&read("/proc/meminfo"), "MemAvailable:").map_or(u64::MAX, |k| k * 1024);
    for line in read("/proc/self/cgroup").lines() {
        let (dir, [limit, usage, cache]) = match line.split(':').collect::<Vec<_>>()[..] {
            ["0", "", path] => (
                format!("/sys/fs/cgroup{path}"),
                ["memory.max", "memory.current", "file "],
            ),
            [_, "memory", path] => (
                format!("/sys/fs/cgroup/memory{path}"),
                [
                    "memory.limit_in_bytes",
                    "memory.usage_in_bytes",
                    "total_cache ",
                ],
            ),
            _ => continue,
        };
        // No number ("max") when the group has no limit.
        let (Some(limit), Some(usage)) = (
            field(&read(&format!("{dir}/{limit}")), ""),
            field(&read(&format!("{dir}/{usage}")), ""),
        ) else {
            continue;
        };
        let cache = field(&read(&format!("{dir}/memory.stat")), cache).unwrap_or(0);
        left = left.min(limit.saturating_sub(usage.saturating_sub(cache)));
    }
    resident * 1024 > left / 2
}

/// The number after `name` at the start of a line of `text`.
fn field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// The device, inode and length of the file at `path`.
fn identity(path: &Path) -> Option<(u64, u64, u64)> {
    let metadata = std::fs::symlink_metadata(path).ok()?;
    Some((metadata.dev(), metadata.ino(), metadata.len()))
}

impl FollowedTrace {
    /// Writes the summary of the trace at `path` to stderr, as [`super::print_summary`] does,
    /// from what was counted, when that is the file followed as it is now and every event of it
    /// was counted in the replay's order; `None`, with nothing written, otherwise.
    pub(crate) fn print(self, path: &Path) -> Option<Result<(), Failure>> {
        let whole = self.path == path
            && identity(path) == Some(self.identity)
            && self.trace.file_len() == self.identity.2
            && self.last.pending == 0
            && self.last.out_of_order == 0;
        if !whole {
            return None;
        }
        crate::common::warn_incomplete(path, &self.trace);
        let options = crate::common::report_options(&self.trace, &ReportArgs::default());
        let state = self.follow.accumulated();
        Some(
            Summary::of_counted(&self.trace, &options, self.counting, state)
                .and_then(|summary| super::write_summary(&summary)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::field;

    /// The numbers `crowding` reads: a `/proc` line's, a control group file's, none for `max`.
    #[test]
    fn fields_read_as_the_kernel_writes_them() {
        let meminfo = "MemTotal:       24589712 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(field(meminfo, "MemAvailable:"), Some(20_000_000));
        assert_eq!(field("anon 10\nfile 4096\n", "file "), Some(4096));
        assert_eq!(field("943718400\n", ""), Some(943_718_400));
        assert_eq!(field("max\n", ""), None);
        assert_eq!(field(meminfo, "SwapFree:"), None);
    }
}
