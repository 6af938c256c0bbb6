//! `memprof summary`: what `heaptrack_print` answers first, from one replay of the whole trace
//! and one to its peak: totals, the peak, what was leaked at the end, the call sites with the
//! most allocations, the most temporary ones and the most short-lived ones (freed within a
//! bound of their allocation, `crate::shortlived`), the largest at the peak, and how long blocks
//! lived; and when the trace has any (the preloaded library's), the program's own memory
//! mappings: made over the run, live at the end, their peak, and the largest live at the end;
//! and when the trace was closed by a memprof that measures it (trace format 1.2), where the
//! resident memory went at the end (`docs/dumps.md`).

use crate::Failure;
use indicatif::ProgressBar;
use memprof::ReportOptions;
use memprof_trace::{Accumulated, MemoryParts, Moment, Trace};
use std::collections::HashMap;
use std::io::{self, Write};

mod counting;

pub(crate) use counting::Counting;
use counting::{Counted, Mapped, live_per_stack, totals};

/// Lifetime buckets: upper bounds in nanoseconds, powers of ten from 1 µs to 10 s.
const BUCKETS: [(u64, &str); 8] = [
    (1_000, "< 1 µs"),
    (10_000, "< 10 µs"),
    (100_000, "< 100 µs"),
    (1_000_000, "< 1 ms"),
    (10_000_000, "< 10 ms"),
    (100_000_000, "< 100 ms"),
    (1_000_000_000, "< 1 s"),
    (10_000_000_000, "< 10 s"),
];

/// Counters of one call site (a context as reports print it).
#[derive(Clone, Debug, Default)]
pub struct Site {
    /// The context, innermost first.
    pub context: Vec<String>,
    /// Allocations (a reallocation's new block counts).
    pub allocations: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// Allocations freed by their thread before it allocated or freed anything else.
    pub temporary: u64,
    /// Allocations freed within the summary's short-lived bound of their allocation.
    pub short_lived: u64,
    /// Bytes live at the peak.
    pub peak_bytes: u64,
    /// Blocks live at the peak.
    pub peak_blocks: u64,
    /// Bytes of the program's own mappings made here and live at the end.
    pub mapped_bytes: u64,
    /// Those mappings (pieces of one split by a partial unmap count apart).
    pub mappings: u64,
}

/// The summary of a trace. Under sampling (the header's `sample_interval`), every count of
/// blocks and bytes is the estimate the reports give: each recorded allocation weighted by
/// [`memprof_trace::weight`], summed per stack and rounded per stack, as a snapshot of the trace
/// does.
#[derive(Debug, Default)]
pub struct Summary {
    path: String,
    /// Mean bytes between recorded allocations; 0 when every one was recorded.
    sample_interval: u64,
    /// Allocations recorded (under sampling, fewer than the estimate).
    recorded: u64,
    pid: u32,
    executable: String,
    closed: bool,
    lost: u64,
    duration: u64,
    allocations: u64,
    bytes: u64,
    frees: u64,
    temporary: u64,
    /// The short-lived bound (ns), and the allocations freed within it of their allocation.
    short_lived_bound: u64,
    short_lived: u64,
    /// Per stack, the short-lived allocations: counted by the replay, read by [`Summary::of`].
    short_lived_per_stack: Vec<u64>,
    markers: u64,
    peak_bytes: u64,
    peak_blocks: u64,
    peak_time: u64,
    leaked_bytes: u64,
    leaked_blocks: u64,
    /// Blocks freed per lifetime bucket; the last counts those of 10 s and more.
    lifetimes: [u64; BUCKETS.len() + 1],
    /// The program's own mappings: made (`mmap`, and `mremap`'s new ranges), their bytes.
    maps: u64,
    map_bytes: u64,
    /// Unmap events (`munmap`, `mremap`'s old ranges, pages replaced) that ended mapped pages.
    unmaps: u64,
    /// Most bytes mapped at once, and when.
    mapped_peak: u64,
    mapped_peak_time: u64,
    /// Live at the end: bytes and mappings.
    mapped_end: u64,
    mappings_end: u64,
    /// The resident memory by what holds it, when the trace was closed (its `MEMORY` record).
    memory: Option<MemoryParts>,
    sites: Vec<Site>,
    top: usize,
}

impl Summary {
    /// One replay of `trace` to its end, counted.
    fn count(
        trace: &Trace,
        top: usize,
        short_lived_bound: u64,
        bar: &dyn Fn(u64, &str) -> ProgressBar,
    ) -> Result<(Counted, Accumulated), Failure> {
        let progress = bar(trace.events(), "summary");
        let mut counting = Counting::new(trace, top, short_lived_bound, progress);
        let end = trace.visit(&mut counting, &mut |_| {})?;
        Ok((counting.finish(trace, &end), end))
    }

    /// One line for `trace`: its process, allocations and what was live at its end.
    pub fn line(trace: &Trace, bar: &dyn Fn(u64, &str) -> ProgressBar) -> Result<String, Failure> {
        let (Counted { summary, .. }, _) =
            Summary::count(trace, 0, crate::shortlived::DEFAULT_NS, bar)?;
        let n = |v| summary.number(v);
        Ok(format!(
            "{}: process {} ({}): {} allocations ({} bytes), {} bytes in {} blocks live at the \
             end{}",
            summary.path,
            summary.pid,
            summary.executable,
            n(summary.allocations),
            n(summary.bytes),
            n(summary.leaked_bytes),
            n(summary.leaked_blocks),
            if summary.sample_interval != 0 {
                format!(" (estimated from {} sampled allocations)", summary.recorded)
            } else {
                String::new()
            }
        ))
    }

    /// Replays `trace` to its end, then to its peak when the first replay could not follow the
    /// blocks live there; short-lived allocations are those freed within `short_lived` ns of
    /// their allocation.
    pub fn of(
        trace: &Trace,
        options: &ReportOptions,
        top: usize,
        short_lived: u64,
        bar: &dyn Fn(u64, &str) -> ProgressBar,
    ) -> Result<Summary, Failure> {
        let (counted, end) = Summary::count(trace, top, short_lived, bar)?;
        let mapped = Mapped::at_end(&end, counted.per_stack.len());
        // Before a second replay to the peak.
        drop(end);
        Summary::complete(trace, options, counted, mapped)
    }

    /// The summary of `trace` from `counting`, which every event of the trace went through,
    /// in the order [`Trace::visit`] gives them, and `end`, what their replay accumulated.
    pub(crate) fn of_counted(
        trace: &Trace,
        options: &ReportOptions,
        counting: Counting,
        end: &Accumulated,
    ) -> Result<Summary, Failure> {
        let counted = counting.finish(trace, end);
        let mapped = Mapped::at_end(end, counted.per_stack.len());
        Summary::complete(trace, options, counted, mapped)
    }

    /// [`Summary::of`] past the first replay: the mappings live at the end, the blocks live at
    /// the peak, and the call sites.
    fn complete(
        trace: &Trace,
        options: &ReportOptions,
        counted: Counted,
        mapped: Mapped,
    ) -> Result<Summary, Failure> {
        let Counted {
            mut summary,
            per_stack,
            peak_events,
            at_peak,
        } = counted;
        let stacks = per_stack.len();
        (summary.mapped_end, summary.mappings_end) = (mapped.bytes, mapped.mappings);
        let mapped_per_stack = mapped.per_stack;

        let peak_per_stack = match at_peak {
            Some(mut at_peak) => {
                at_peak.peak.resize(stacks, (0, 0));
                at_peak.peak
            }
            None => {
                let (heap, _) = crate::common::replay(trace, &Moment::Events(peak_events))?;
                live_per_stack(&heap.live, stacks, summary.sample_interval)
            }
        };
        (summary.peak_blocks, summary.peak_bytes) = totals(&peak_per_stack);

        // Stacks grouped by the context a report prints for them.
        let mut resolver = crate::moment::resolver(trace);
        let mut sites: HashMap<Vec<String>, Site> = HashMap::new();
        for (id, frames) in trace.stacks().iter().enumerate() {
            let [allocations, bytes, temporary] = per_stack[id];
            let (peak_blocks, peak_bytes) = peak_per_stack[id];
            let (mappings, mapped_bytes) = mapped_per_stack[id];
            let short_lived = summary.short_lived_per_stack[id];
            if allocations == 0 && peak_blocks == 0 && mappings == 0 {
                continue;
            }
            let addresses: Vec<memprof::ReturnAddress> = frames
                .iter()
                .map(|&a| memprof::ReturnAddress(a as usize))
                .collect();
            let context = memprof::context_of(&addresses, &mut resolver, options);
            let site = sites.entry(context.clone()).or_insert_with(|| Site {
                context,
                ..Site::default()
            });
            site.allocations += allocations;
            site.bytes += bytes;
            site.temporary += temporary;
            site.short_lived += short_lived;
            site.peak_blocks += peak_blocks;
            site.peak_bytes += peak_bytes;
            site.mappings += mappings;
            site.mapped_bytes += mapped_bytes;
        }
        summary.sites = sites.into_values().collect();
        summary.sites.sort_by(|a, b| a.context.cmp(&b.context));
        Ok(summary)
    }

    /// `value` as the summary prints a count: under sampling, marked as the estimate it is.
    fn number(&self, value: u64) -> String {
        if self.sample_interval == 0 {
            value.to_string()
        } else {
            format!("≈{value}")
        }
    }

    /// Writes the summary as text.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let n = |v| self.number(v);
        writeln!(out, "trace: {}", self.path)?;
        writeln!(out, "process: {} ({})", self.pid, self.executable)?;
        writeln!(
            out,
            "recorded: {} ({})",
            seconds(self.duration),
            if self.closed {
                format!("closed normally, {} events lost", self.lost)
            } else {
                "cut short: no END record".to_owned()
            }
        )?;
        if !self.closed {
            writeln!(out, "note: {}", crate::common::NOT_CLOSED)?;
        }
        if self.sample_interval != 0 {
            writeln!(
                out,
                "sampled: one allocation in every {} bytes on average was recorded, {} in all; \
                 the counts marked ≈ are estimated from these samples, as the reports' are",
                self.sample_interval, self.recorded
            )?;
        }
        writeln!(
            out,
            "allocations: {} ({} bytes), frees: {}, markers: {}",
            n(self.allocations),
            n(self.bytes),
            n(self.frees),
            self.markers
        )?;
        writeln!(
            out,
            "temporary allocations: {} ({:.1}% of allocations)",
            n(self.temporary),
            percent(self.temporary, self.allocations)
        )?;
        writeln!(
            out,
            "short-lived allocations: {} ({:.1}% of allocations, freed within {})",
            n(self.short_lived),
            percent(self.short_lived, self.allocations),
            crate::shortlived::show(self.short_lived_bound)
        )?;
        writeln!(
            out,
            "peak: {} bytes in {} blocks at {}",
            n(self.peak_bytes),
            n(self.peak_blocks),
            seconds(self.peak_time)
        )?;
        writeln!(
            out,
            "leaked at end: {} bytes in {} blocks",
            n(self.leaked_bytes),
            n(self.leaked_blocks)
        )?;
        if self.maps > 0 {
            writeln!(
                out,
                "mappings: {} made ({} bytes), {} unmaps; peak: {} bytes mapped at {}",
                self.maps,
                self.map_bytes,
                self.unmaps,
                self.mapped_peak,
                seconds(self.mapped_peak_time)
            )?;
            writeln!(
                out,
                "mapped at end: {} bytes in {} mappings",
                self.mapped_end, self.mappings_end
            )?;
        }

        if let Some(memory) = &self.memory {
            write_memory(out, memory)?;
        }

        // Sites that only made mappings allocated nothing.
        let mut sites: Vec<&Site> = self.sites.iter().filter(|s| s.allocations > 0).collect();
        sites.sort_by(|a, b| {
            b.allocations
                .cmp(&a.allocations)
                .then(b.bytes.cmp(&a.bytes))
        });
        self.table(out, "most allocations", &sites, true, |s| {
            (s.allocations, format!("{} bytes", n(s.bytes)))
        })?;
        let all_sites = sites.clone();
        sites.sort_by_key(|s| std::cmp::Reverse(s.temporary));
        sites.retain(|s| s.temporary > 0);
        self.table(out, "most temporary allocations", &sites, true, |s| {
            (
                s.temporary,
                format!(
                    "{:.1}% of its {}",
                    percent(s.temporary, s.allocations),
                    n(s.allocations)
                ),
            )
        })?;
        sites.clone_from(&all_sites);
        sites.sort_by_key(|s| std::cmp::Reverse(s.short_lived));
        sites.retain(|s| s.short_lived > 0);
        let title = format!(
            "most short-lived allocations (freed within {})",
            crate::shortlived::show(self.short_lived_bound)
        );
        self.table(out, &title, &sites, true, |s| {
            (
                s.short_lived,
                format!(
                    "{:.1}% of its {}",
                    percent(s.short_lived, s.allocations),
                    n(s.allocations)
                ),
            )
        })?;
        let mut sites: Vec<&Site> = self.sites.iter().filter(|s| s.peak_bytes > 0).collect();
        sites.sort_by_key(|s| std::cmp::Reverse(s.peak_bytes));
        self.table(out, "largest at the peak", &sites, true, |s| {
            (
                s.peak_bytes,
                format!("bytes in {} blocks", n(s.peak_blocks)),
            )
        })?;
        if self.maps > 0 {
            let mut sites: Vec<&Site> = self.sites.iter().filter(|s| s.mappings > 0).collect();
            sites.sort_by_key(|s| std::cmp::Reverse(s.mapped_bytes));
            // Mappings are never sampled: their counts are exact.
            self.table(out, "largest mappings at the end", &sites, false, |s| {
                (s.mapped_bytes, format!("bytes in {} mappings", s.mappings))
            })?;
        }

        writeln!(out, "\nlifetimes of freed blocks:")?;
        let freed: u64 = self.lifetimes.iter().sum();
        for (i, &count) in self.lifetimes.iter().enumerate() {
            let label = BUCKETS.get(i).map_or(">= 10 s", |&(_, label)| label);
            writeln!(
                out,
                "{label:>10}  {:>12}  {:5.1}%",
                n(count),
                percent(count, freed)
            )?;
        }
        writeln!(out, "{:>10}  {:>12}", "never", n(self.leaked_blocks))
    }

    fn table(
        &self,
        out: &mut dyn Write,
        title: &str,
        sites: &[&Site],
        estimated: bool,
        value: impl Fn(&Site) -> (u64, String),
    ) -> io::Result<()> {
        writeln!(out, "\n{title}:")?;
        if sites.is_empty() {
            return writeln!(out, "  none");
        }
        for site in sites.iter().take(self.top) {
            let (number, detail) = value(site);
            let number = match estimated {
                true => self.number(number),
                false => number.to_string(),
            };
            writeln!(out, "{number:>12}  {detail}")?;
            for frame in &site.context {
                writeln!(out, "              {frame}")?;
            }
        }
        Ok(())
    }
}

/// The section of the resident memory at the end, one part a line with its share.
fn write_memory(out: &mut dyn Write, m: &MemoryParts) -> io::Result<()> {
    writeln!(out, "\nresident memory at the end: {} bytes", m.resident)?;
    let share = |bytes: i64| {
        if m.resident == 0 {
            0.0
        } else {
            bytes as f64 * 100.0 / m.resident as f64
        }
    };
    let parts: [(&str, Option<i64>); 10] = [
        ("live heap, as requested", Some(m.heap_requested as i64)),
        (
            "allocator's rounding and headers",
            m.heap_rounding.map(|b| b as i64),
        ),
        (
            "free memory the allocator keeps",
            m.allocator_free.map(|b| b as i64),
        ),
        ("memprof's own tables", Some(m.memprof_own as i64)),
        (
            "of these four, not resident (never touched, or given back)",
            m.heap_rounding.map(|_| -(m.heap_not_resident() as i64)),
        ),
        ("thread stacks", Some(m.stacks as i64)),
        (
            "code, libraries, mapped files",
            Some(m.code_and_files as i64),
        ),
        ("other anonymous mappings", Some(m.other_mappings as i64)),
        (
            "unaccounted (resident less the above)",
            Some(m.unaccounted()),
        ),
        (
            "resident in the allocator's mappings (holds the four heap parts)",
            Some(m.allocator_resident as i64),
        ),
    ];
    for (name, bytes) in parts {
        match bytes {
            Some(bytes) => writeln!(out, "{bytes:>12}  {:5.1}%  {name}", share(bytes))?,
            None => writeln!(out, "{:>12}  {:>6}  {name}", "-", "")?,
        }
    }
    for note in memory_notes(m) {
        writeln!(out, "  {note}")?;
    }
    Ok(())
}

/// The lines under the resident memory's parts that say how to read them: always which lines add
/// up to the whole; then, when the figures show it, why a share exceeds 100%, what the negative
/// "not resident" line takes away, and why "unaccounted" is negative.
fn memory_notes(m: &MemoryParts) -> Vec<String> {
    let mut notes = vec![
        "The lines down to \"unaccounted\" add up to the resident memory (the shares are of it); \
         the last line is a part of it, not added: compare it with the four heap parts."
            .to_owned(),
    ];
    let not_resident = m.heap_not_resident();
    let heap = [
        Some(m.heap_requested),
        m.heap_rounding,
        m.allocator_free,
        Some(m.memprof_own),
    ];
    if heap.iter().flatten().any(|&bytes| bytes > m.resident) {
        notes.push(
            "A heap part over 100%: the heap parts count what the allocator holds, touched or \
             not, and memory never touched (or given back) is not resident."
                .to_owned(),
        );
    }
    if not_resident > 0 {
        notes.push(format!(
            "The negative \"not resident\" line takes away the {not_resident} bytes of the four \
             heap parts that the allocator's mappings do not hold resident (blocks or free memory \
             never touched, or given back to the system), so that the lines add up."
        ));
    }
    let unaccounted = m.unaccounted();
    if unaccounted < 0 {
        let why = match m.heap_rounding {
            None => {
                "with another allocator than glibc's, the live heap and memprof's tables count \
                 in full, blocks never touched (not resident) too"
            }
            Some(_) => "some memory is counted in two parts",
        };
        notes.push(format!(
            "\"unaccounted\" is negative: the parts add up to {} bytes more than the resident \
             memory; {why}.",
            unaccounted.unsigned_abs()
        ));
    }
    notes
}

fn seconds(ns: u64) -> String {
    format!("{:.6} s", ns as f64 / 1e9)
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}
