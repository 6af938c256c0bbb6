//! Allocation reports: live blocks grouped by the context they were allocated from.
//!
//! A [`Report`] is built from a [`Snapshot`] and a resolver: each stack is symbolized, trimmed to
//! its context ([`symbolize::context`]), and stacks that print the same are one group. Groups are
//! sorted by total size, then count (both descending), then context, and those below
//! `min_bytes` are left out. The renderers, one per file, only format a `Report`.

#![forbid(unsafe_code)]

pub mod markdown;
pub mod tsv;
pub mod types;

use crate::capture::ReturnAddress;
use crate::config::Config;
use crate::snapshot::{Snapshot, SnapshotDiff};
use crate::symbolize::{self, Resolve};
use std::collections::HashMap;
use std::io::{self, Write};

/// How a report groups and filters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReportOptions {
    /// Frames shown per context (default 5, `MEMPROF_STACK_DEPTH`).
    pub depth: usize,
    /// Frames dropped after trimming (default 0, `MEMPROF_STACK_SKIP`).
    pub skip: usize,
    /// Groups below this many bytes are left out (default 1024, `MEMPROF_MIN_BYTES`).
    pub min_bytes: u64,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions::from(&Config::default())
    }
}

impl From<&Config> for ReportOptions {
    fn from(config: &Config) -> Self {
        ReportOptions {
            depth: config.stack_depth,
            skip: config.stack_skip,
            min_bytes: config.min_bytes,
        }
    }
}

impl ReportOptions {
    /// The options in force: from the `MEMPROF_*` variables.
    pub fn from_env() -> ReportOptions {
        ReportOptions::from(crate::config::get())
    }

    /// These options with another `min_bytes`.
    pub fn min_bytes(mut self, min_bytes: u64) -> Self {
        self.min_bytes = min_bytes;
        self
    }

    /// These options with another `depth`.
    pub fn depth(mut self, depth: usize) -> Self {
        self.depth = depth;
        self
    }
}

/// Live blocks that share one context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// How many blocks.
    pub blocks: u64,
    /// Their total size in bytes.
    pub bytes: u64,
    /// The frames, innermost first, as MemProf prints them.
    pub context: Vec<String>,
}

/// Groups, in report order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Sorted by bytes and blocks descending, then context; none below `min_bytes`.
    pub groups: Vec<Group>,
    /// When not 0, the counts are estimates from allocations sampled one per this many bytes on
    /// average.
    pub sample_interval: u64,
}

impl Report {
    /// Groups the live blocks of `snapshot` by context.
    pub fn live(
        snapshot: &Snapshot,
        resolver: &mut dyn Resolve,
        options: &ReportOptions,
    ) -> Report {
        let mut groups: HashMap<Vec<String>, (u64, u64)> = HashMap::new();
        for stack in snapshot.stacks.iter().filter(|s| s.live_blocks > 0) {
            let context = context_of(&stack.frames, resolver, options);
            let group = groups.entry(context).or_default();
            group.0 += stack.live_blocks;
            group.1 += stack.live_bytes;
        }
        let mut report = Report::from_groups(
            groups
                .into_iter()
                .map(|(context, (blocks, bytes))| Group {
                    blocks,
                    bytes,
                    context,
                })
                .collect(),
            options.min_bytes,
        );
        report.sample_interval = snapshot.sample_interval;
        report
    }

    /// Sorts `groups` into report order and leaves out those below `min_bytes`.
    pub fn from_groups(mut groups: Vec<Group>, min_bytes: u64) -> Report {
        groups.retain(|g| g.bytes >= min_bytes);
        groups.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(b.blocks.cmp(&a.blocks))
                .then_with(|| a.context.cmp(&b.context))
        });
        Report {
            groups,
            sample_interval: 0,
        }
    }

    /// The report of the process's live heap now, with the options in force.
    pub fn current() -> Report {
        let snapshot = Snapshot::take();
        symbolize::with_symbolizer(|symbolizer| {
            Report::live(&snapshot, symbolizer, &ReportOptions::from_env())
        })
    }
}

/// The context a stack prints as: symbolized, trimmed, skipped and cut to the options' depth.
pub fn context_of(
    frames: &[ReturnAddress],
    resolver: &mut dyn Resolve,
    options: &ReportOptions,
) -> Vec<String> {
    let frames: Vec<_> = frames.iter().map(|&a| resolver.resolve(a)).collect();
    let expanded: Vec<_> = frames.iter().flat_map(|f| f.iter()).collect();
    symbolize::context(&expanded, options.skip, options.depth)
        .iter()
        .map(|f| f.to_string())
        .collect()
}

/// The growth (or shrinkage) of the live heap of one context between two snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Live blocks gained; negative when lost.
    pub blocks: i64,
    /// Live bytes gained; negative when lost.
    pub bytes: i64,
    /// The frames, innermost first.
    pub context: Vec<String>,
}

/// Changes per context between two snapshots, largest growth first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Sorted by bytes, then blocks, descending (growth first, shrinkage last), then context;
    /// none whose size changed by less than `min_bytes` either way.
    pub changes: Vec<Change>,
    /// When not 0, the counts are estimates from sampled allocations.
    pub sample_interval: u64,
}

impl Diff {
    /// Groups the changes of `diff` by context.
    pub fn new(diff: &SnapshotDiff, resolver: &mut dyn Resolve, options: &ReportOptions) -> Diff {
        let mut groups: HashMap<Vec<String>, (i64, i64)> = HashMap::new();
        for stack in &diff.stacks {
            let group = groups
                .entry(context_of(&stack.frames, resolver, options))
                .or_default();
            group.0 += stack.live_blocks;
            group.1 += stack.live_bytes;
        }
        let mut changes: Vec<Change> = groups
            .into_iter()
            .filter(|(_, (blocks, bytes))| {
                (*blocks != 0 || *bytes != 0) && bytes.unsigned_abs() >= options.min_bytes
            })
            .map(|(context, (blocks, bytes))| Change {
                blocks,
                bytes,
                context,
            })
            .collect();
        changes.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(b.blocks.cmp(&a.blocks))
                .then_with(|| a.context.cmp(&b.context))
        });
        Diff {
            changes,
            sample_interval: diff.sample_interval,
        }
    }
}

/// Writes what changed between `earlier` and `later` as a Markdown table (signed numbers, growth
/// first), with the `MEMPROF_*` options in force: the way to find what leaks between two requests.
pub fn pretty_log_diff<W: Write + ?Sized>(
    later: &Snapshot,
    earlier: &Snapshot,
    out: &mut W,
) -> io::Result<()> {
    crate::capture::untracked(|| markdown::write_diff(&current_diff(later, earlier), out))
}

/// Writes what changed between `earlier` and `later` as a TSV log: the number of lines, then
/// `blocks \t bytes \t frame ...` with signed numbers.
pub fn log_diff<W: Write + ?Sized>(
    later: &Snapshot,
    earlier: &Snapshot,
    out: &mut W,
) -> io::Result<()> {
    crate::capture::untracked(|| tsv::write_diff(&current_diff(later, earlier), out))
}

fn current_diff(later: &Snapshot, earlier: &Snapshot) -> Diff {
    let diff = later.diff(earlier);
    symbolize::with_symbolizer(|s| Diff::new(&diff, s, &ReportOptions::from_env()))
}

/// Writes the live allocations as MemProf's TSV log: the number of groups, then one line per group,
/// `count \t total_bytes \t frame \t frame ...`. Groups below `MEMPROF_MIN_BYTES` are left out.
pub fn log_allocations<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    crate::capture::untracked(|| tsv::write(&Report::current(), out))
}

/// Writes the live allocations as MemProf's Markdown table, largest total first.
pub fn pretty_log_allocations<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    crate::capture::untracked(|| markdown::write(&Report::current(), out))
}
