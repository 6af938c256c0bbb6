//! Allocation reports: live blocks grouped by the context they were allocated from.
//!
//! A [`Report`] is built from a [`Snapshot`] and a resolver: each stack is symbolized, trimmed to
//! its context ([`symbolize::context`]), and stacks that print the same are one group. Groups are
//! sorted by total size, then count (both descending), then context, and those below
//! `min_bytes` are left out. The renderers, one per file, only format a `Report`.

#![forbid(unsafe_code)]

pub mod markdown;
pub mod tsv;

use crate::config::Config;
use crate::snapshot::Snapshot;
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
            let frames: Vec<_> = stack
                .frames
                .iter()
                .map(|&address| resolver.resolve(address))
                .collect();
            let expanded: Vec<_> = frames.iter().flat_map(|f| f.iter()).collect();
            let context = symbolize::context(&expanded, options.skip, options.depth)
                .iter()
                .map(|f| f.to_string())
                .collect();
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

/// Writes the live allocations as MemProf's TSV log: the number of groups, then one line per group,
/// `count \t total_bytes \t frame \t frame ...`. Groups below `MEMPROF_MIN_BYTES` are left out.
pub fn log_allocations<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    crate::capture::untracked(|| tsv::write(&Report::current(), out))
}

/// Writes the live allocations as MemProf's Markdown table, largest total first.
pub fn pretty_log_allocations<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    crate::capture::untracked(|| markdown::write(&Report::current(), out))
}
