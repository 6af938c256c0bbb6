//! Allocation reports: live blocks grouped by the context they were allocated from.
//!
//! A [`Report`] is built from a [`Snapshot`] and a resolver: each stack is symbolized, trimmed to
//! its context ([`frames::context`]), and stacks that print the same are one group. Grouping works
//! on numbered frame strings, each made once per report, and only the groups kept are rendered
//! as strings: a report's memory grows with its distinct frames and 4 bytes per frame of each
//! distinct context, not with the strings of every stack. Groups are
//! sorted by total size, then count (both descending), then context, and those below
//! `min_bytes` are left out. The renderers, one per file, only format what they are given.
//!
//! Every `log_*` function of the crate lives here: each takes a snapshot of the process (and, for
//! the per-type logs, scans or types it), then hands the result to its renderer.

#![forbid(unsafe_code)]

mod contexts;
pub(crate) mod crates;
pub(crate) mod labels;
pub(crate) mod markdown;
pub(crate) mod mermaid;
pub(crate) mod tsv;
pub(crate) mod types;

use crate::address::ReturnAddress;
use crate::config::Config;
use crate::frames;
use crate::guard::untracked;
use crate::object_graph::Heap;
use crate::snapshot::{Snapshot, SnapshotDiff, StackDelta, StackSummary};
use crate::symbolize::{self, Resolve};
use crate::types::Typing;
use contexts::{ContextKey, Contexts};
use std::collections::HashMap;
use std::io::{self, Write};
use std::ops::Range;

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
    /// Only the blocks allocated with this label (key, value) are grouped (default: all,
    /// `MEMPROF_LABEL=key=value`).
    pub label: Option<(String, String)>,
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
            label: config.label.clone(),
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

    /// These options keeping only the blocks allocated with the label `key` = `value`.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.label = Some((key.to_owned(), value.to_owned()));
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
    /// How many recorded live blocks the groups rest on (the snapshot's blocks): under sampling,
    /// how much the estimates can be trusted.
    pub samples: u64,
}

impl Report {
    /// Writes the report as MemProf's Markdown table (what [`pretty_log_allocations`] prints).
    pub fn write_markdown<W: Write + ?Sized>(&self, out: &mut W) -> io::Result<()> {
        markdown::write(self, out)
    }

    /// Writes the report as MemProf's TSV log (what [`log_allocations`] prints).
    pub fn write_tsv<W: Write + ?Sized>(&self, out: &mut W) -> io::Result<()> {
        tsv::write(self, out)
    }

    /// Groups the live blocks of `snapshot` by context.
    pub fn live(
        snapshot: &Snapshot,
        resolver: &mut dyn Resolve,
        options: &ReportOptions,
    ) -> Report {
        // Grouped by numbered contexts; strings only for the groups kept.
        let mut contexts = Contexts::new(resolver, options);
        let mut groups: HashMap<ContextKey, (u64, u64)> = HashMap::new();
        let labelled = |stack: &StackSummary| match &options.label {
            Some((key, value)) => snapshot.has_label(stack, key, value),
            None => true,
        };
        for stack in snapshot
            .stacks
            .iter()
            .filter(|s| s.live_blocks > 0 && labelled(s))
        {
            let group = groups.entry(contexts.key(&stack.frames)).or_default();
            group.0 += stack.live_blocks;
            group.1 += stack.live_bytes;
        }
        let mut report = Report::from_groups(
            groups
                .into_iter()
                .filter(|(_, (_, bytes))| *bytes >= options.min_bytes)
                .map(|(key, (blocks, bytes))| Group {
                    blocks,
                    bytes,
                    context: contexts.strings(&key),
                })
                .collect(),
            options.min_bytes,
        );
        report.sample_interval = snapshot.sample_interval;
        report.samples = snapshot.blocks.len() as u64;
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
            samples: 0,
        }
    }

    /// The crate table of `snapshot` (what [`log_crates`] prints): one row per crate, by the
    /// rule `docs/reports.md` gives (the innermost frame outside the standard library and
    /// memprof; a C or C++ frame's shared object), with `by_caller` per caller crate and crate
    /// (`my_cache ← serde_json`). Each row is the crate and its `[live bytes, live blocks,
    /// allocated bytes, allocated blocks]`, most live bytes first; the rows sum to the
    /// snapshot's stacks.
    pub fn crates(
        snapshot: &Snapshot,
        resolver: &mut dyn Resolve,
        by_caller: bool,
    ) -> Vec<(String, [u64; 4])> {
        crates::rows(snapshot, resolver, by_caller)
            .into_iter()
            .map(|row| {
                let figures = row.figures();
                (row.name, figures)
            })
            .collect()
    }

    /// The crate of one stack (return addresses, innermost first) by the rule of
    /// [`Report::crates`]; with `by_caller`, `caller ← crate`.
    pub fn crate_of(
        stack: &[ReturnAddress],
        resolver: &mut dyn Resolve,
        by_caller: bool,
    ) -> String {
        crates::crate_of_stack(stack, resolver, by_caller)
    }

    /// Writes rows of [`Report::crates`] as the Markdown table [`log_crates`] prints, with the
    /// total row; `sample_interval` (when not 0) says the figures are estimates.
    pub fn write_crates_markdown<W: Write + ?Sized>(
        rows: &[(String, [u64; 4])],
        sample_interval: u64,
        out: &mut W,
    ) -> io::Result<()> {
        crates::write_markdown(&crate_rows(rows), sample_interval, out)
    }

    /// Writes rows of [`Report::crates`] as TSV: the number of lines, then `crate \t live_bytes
    /// \t live_blocks \t allocated_bytes \t allocated_blocks` per crate and for `(total)`.
    pub fn write_crates_tsv<W: Write + ?Sized>(
        rows: &[(String, [u64; 4])],
        out: &mut W,
    ) -> io::Result<()> {
        crates::write_tsv(&crate_rows(rows), out)
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
    let frames = resolver.resolve_stack(frames);
    let expanded: Vec<_> = frames.iter().flat_map(|f| f.iter()).collect();
    frames::context(&expanded, options.skip, options.depth)
        .iter()
        .map(|f| f.to_string())
        .collect()
}

/// Where a stack's context lies among its frames (innermost first, inlined calls expanded, as
/// [`Resolve::resolve_stack`] gives them): one run, which [`context_of`] prints. Above it,
/// memprof's own frames, the allocator's and the standard library's below the collection
/// operation the program called; below it, the runtime that calls the program (`main`'s or a
/// thread's start), and the frames past the options' depth.
pub fn context_range(frames: &[&frames::Frame], options: &ReportOptions) -> Range<usize> {
    frames::context_range(frames, options.skip, options.depth)
}

/// The growth (or shrinkage) of the live heap of one context between two snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffGroup {
    /// Live blocks gained; negative when lost.
    pub blocks: i64,
    /// Live bytes gained; negative when lost.
    pub bytes: i64,
    /// The frames, innermost first.
    pub context: Vec<String>,
}

/// Changes per context between two snapshots, largest growth first: a [`SnapshotDiff`] grouped
/// the way a [`Report`] groups a [`Snapshot`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffReport {
    /// Sorted by bytes, then blocks, descending (growth first, shrinkage last), then context;
    /// none whose size changed by less than `min_bytes` either way.
    pub changes: Vec<DiffGroup>,
    /// When not 0, the counts are estimates from sampled allocations.
    pub sample_interval: u64,
}

impl DiffReport {
    /// Writes the changes as a Markdown table (what [`pretty_log_diff`] prints).
    pub fn write_markdown<W: Write + ?Sized>(&self, out: &mut W) -> io::Result<()> {
        markdown::write_diff(self, out)
    }

    /// Writes the changes as a TSV log (what [`log_diff`] prints).
    pub fn write_tsv<W: Write + ?Sized>(&self, out: &mut W) -> io::Result<()> {
        tsv::write_diff(self, out)
    }

    /// Groups the changes of `diff` by context.
    pub fn new(
        diff: &SnapshotDiff,
        resolver: &mut dyn Resolve,
        options: &ReportOptions,
    ) -> DiffReport {
        let mut contexts = Contexts::new(resolver, options);
        let mut groups: HashMap<ContextKey, (i64, i64)> = HashMap::new();
        let labelled = |stack: &StackDelta| match &options.label {
            Some((key, value)) => stack.labels.iter().any(|(k, v)| k == key && v == value),
            None => true,
        };
        for stack in diff.stacks.iter().filter(|s| labelled(s)) {
            let group = groups.entry(contexts.key(&stack.frames)).or_default();
            group.0 += stack.live_blocks;
            group.1 += stack.live_bytes;
        }
        let mut changes: Vec<DiffGroup> = groups
            .into_iter()
            .filter(|(_, (blocks, bytes))| {
                (*blocks != 0 || *bytes != 0) && bytes.unsigned_abs() >= options.min_bytes
            })
            .map(|(key, (blocks, bytes))| DiffGroup {
                blocks,
                bytes,
                context: contexts.strings(&key),
            })
            .collect();
        changes.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(b.blocks.cmp(&a.blocks))
                .then_with(|| a.context.cmp(&b.context))
        });
        DiffReport {
            changes,
            sample_interval: diff.sample_interval,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The process's reports

/// Writes the live allocations as MemProf's TSV log: the number of groups, then one line per group,
/// `count \t total_bytes \t frame \t frame ...`. Groups below `MEMPROF_MIN_BYTES` are left out.
pub fn log_allocations<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    untracked(|| tsv::write(&Report::current(), out))
}

/// Writes the live allocations as MemProf's Markdown table, largest total first.
pub fn pretty_log_allocations<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    untracked(|| markdown::write(&Report::current(), out))
}

/// Writes what changed between two snapshots (`later.diff(&earlier)`) as a Markdown table
/// (signed numbers, growth first), with the `MEMPROF_*` options in force: the way to find what
/// leaks between two requests.
pub fn pretty_log_diff<W: Write + ?Sized>(diff: &SnapshotDiff, out: &mut W) -> io::Result<()> {
    untracked(|| markdown::write_diff(&current_diff(diff), out))
}

/// Writes what changed between two snapshots (`later.diff(&earlier)`) as a TSV log: the number
/// of lines, then `blocks \t bytes \t frame ...` with signed numbers.
pub fn log_diff<W: Write + ?Sized>(diff: &SnapshotDiff, out: &mut W) -> io::Result<()> {
    untracked(|| tsv::write_diff(&current_diff(diff), out))
}

fn current_diff(diff: &SnapshotDiff) -> DiffReport {
    symbolize::with_symbolizer(|s| DiffReport::new(diff, s, &ReportOptions::from_env()))
}

/// Writes the live and allocated blocks and bytes per label set ([`with_labels`](crate::with_labels)):
/// the number of lines, then `live_blocks \t live_bytes \t allocated_blocks \t allocated_bytes
/// \t labels` per set, most live bytes first, the labels as `key=value,key=value` (`(none)` for
/// the blocks allocated without labels); then, when label sets were dropped because their table
/// was full, `# dropped label sets: N`.
pub fn log_labels<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    untracked(|| {
        // The allocated figures of every label set: every stack's counters.
        let snapshot = Snapshot::take_all();
        labels::write(
            &labels::rows(&snapshot),
            crate::labels::dropped_label_sets(),
            out,
        )
    })
}

/// Writes which crate holds the memory: a Markdown table of the live and allocated bytes and
/// blocks per crate, most live bytes first, and their total. The crate of an allocation is the
/// crate of its innermost frame outside the standard library and memprof (a generic function
/// inlined from a crate is that crate's frame; a C or C++ frame is named by its shared object);
/// `std` for what only the standard library's frames allocated, `(unknown)` where no frame could
/// be named, so the rows sum to the totals. `docs/reports.md` has the rule.
pub fn log_crates<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    untracked(|| {
        // The allocated figures of every crate: every stack's counters.
        let snapshot = Snapshot::take_all();
        let rows =
            symbolize::with_symbolizer(|symbolizer| crates::rows(&snapshot, symbolizer, false));
        crates::write_markdown(&rows, snapshot.sample_interval, out)
    })
}

/// Rows of [`Report::crates`] as the renderer's.
fn crate_rows(rows: &[(String, [u64; 4])]) -> Vec<crates::CrateRow> {
    rows.iter()
        .map(
            |(name, [live_bytes, live_blocks, allocated_bytes, allocated_blocks])| {
                crates::CrateRow {
                    name: name.clone(),
                    live_bytes: *live_bytes,
                    live_blocks: *live_blocks,
                    allocated_bytes: *allocated_bytes,
                    allocated_blocks: *allocated_blocks,
                }
            },
        )
        .collect()
}

/// Writes the live objects of each type: the number of lines, then `count \t TypeName` per type,
/// most first. Blocks of unknown type are counted by size, `(unknown, 96 B)`.
pub fn log_object_counts<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    untracked(|| {
        let snapshot = Snapshot::take();
        let typing = Typing::of_process(&snapshot);
        types::write(&typing.counts(), out)
    })
}

/// Writes the heap bytes reachable from the live objects of each type: the number of lines, then
/// `bytes \t TypeName` per type, most first. A type's bytes are those of its objects' blocks and
/// of every block reachable from them through pointers, each counted once per type.
pub fn log_object_sizes<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    untracked(|| {
        let (heap, typing) = Heap::scan();
        types::write(&heap.sizes(&typing), out)
    })
}

/// Writes how many objects of each type were created over the whole run, freed or not: the number
/// of lines, then `count \t TypeName` per type, most first (`(unknown)` for blocks of unknown
/// type).
pub fn log_object_tallies<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    untracked(|| {
        let snapshot = Snapshot::take_all();
        let stack_types = crate::types::process_stack_types(&snapshot, |s| s.allocated_blocks > 0);
        let rows = crate::types::tallies(
            &snapshot,
            &stack_types,
            &crate::types::tag_names(),
            &crate::types::tag_counts(),
        );
        types::write(&rows, out)
    })
}

/// Writes the allocation contexts of the objects of type `target` created over the whole run:
/// the number of lines, then `count \t frame \t frame ...` per context, most first, leaving out
/// contexts with fewer than `min_count` objects.
pub fn log_type_contexts<W: Write + ?Sized>(
    target: &str,
    min_count: u64,
    out: &mut W,
) -> io::Result<()> {
    untracked(|| {
        let snapshot = Snapshot::take_all();
        let stack_types = crate::types::process_stack_types(&snapshot, |s| s.allocated_blocks > 0);
        let names = crate::types::tag_names();
        let counts = crate::types::tag_counts();
        let options = ReportOptions::from_env();
        let rows = symbolize::with_symbolizer(|symbolizer| {
            types::trace(
                &snapshot,
                &stack_types,
                &names,
                &counts,
                target,
                symbolizer,
                &options,
                min_count,
            )
        });
        types::write_trace(&rows, out)
    })
}

/// [`log_type_contexts`] for the type named by `MEMPROF_TRACE_TARGET` (e.g. `app::Foo`), with
/// `MEMPROF_TRACE_MIN_COUNT` as the minimum; writes `0` when no target is set.
pub fn log_trace_target<W: Write + ?Sized>(out: &mut W) -> io::Result<()> {
    let config = crate::config::get();
    match &config.trace_target {
        Some(target) => log_type_contexts(target, config.trace_min_count, out),
        None => out.write_all(b"0\n"),
    }
}

/// Writes the mermaid graph of up to `MEMPROF_REF_LIMIT` live objects of type `T` and of the
/// blocks that point to them, up to `MEMPROF_REF_LEVEL` levels back.
/// `T` is named as [`std::any::type_name`] does: `app::Foo` for the objects of `Box<app::Foo>`,
/// `[app::Bar]` for `Vec<app::Bar>` buffers. Call it as `pretty_log_object_graph::<Foo>(&mut w)`.
pub fn pretty_log_object_graph<T: ?Sized>(out: &mut (impl Write + ?Sized)) -> io::Result<()> {
    pretty_log_object_graph_of(std::any::type_name::<T>(), out)
}

/// [`pretty_log_object_graph`] for a type given by name, as the per-type logs print it (also
/// `(unknown, 96 B)`).
pub fn pretty_log_object_graph_of<W: Write + ?Sized>(name: &str, out: &mut W) -> io::Result<()> {
    untracked(|| {
        let config = crate::config::get();
        let (heap, typing) = Heap::scan();
        let graph = heap.graph(&typing, name, config.ref_limit, config.ref_level);
        mermaid::write(&graph, out)
    })
}

#[cfg(test)]
mod tests;
