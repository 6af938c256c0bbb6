//! `memprof summary`: what `heaptrack_print` answers first, from one replay of the whole trace
//! and one to its peak: totals, the peak, what was leaked at the end, the call sites with the
//! most allocations and the most temporary ones, the largest at the peak, and how long blocks
//! lived; and when the trace has any (the preloaded library's), the program's own memory
//! mappings: made over the run, live at the end, their peak, and the largest live at the end;
//! and when the trace was closed by a memprof that measures it (trace format 1.2), where the
//! resident memory went at the end (`docs/dumps.md`).

use crate::Failure;
use indicatif::ProgressBar;
use memprof::ReportOptions;
use memprof_trace::{Accumulated, Block, Mapping, MemoryParts, Moment, Timed, Trace, Visitor};
use std::collections::HashMap;
use std::io::{self, Write};
use std::ops::ControlFlow;

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
    /// Bytes live at the peak.
    pub peak_bytes: u64,
    /// Blocks live at the peak.
    pub peak_blocks: u64,
    /// Bytes of the program's own mappings made here and live at the end.
    pub mapped_bytes: u64,
    /// Those mappings (pieces of one split by a partial unmap count apart).
    pub mappings: u64,
}

/// The summary of a trace.
#[derive(Debug, Default)]
pub struct Summary {
    path: String,
    pid: u32,
    executable: String,
    closed: bool,
    lost: u64,
    duration: u64,
    allocations: u64,
    bytes: u64,
    frees: u64,
    temporary: u64,
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

/// What the summary counts during the replay of the whole trace.
struct Counting<'a> {
    summary: &'a mut Summary,
    /// Per stack: allocations, bytes, temporary.
    per_stack: Vec<(u64, u64, u64)>,
    /// Events up to and with the peak.
    peak_events: u64,
    progress: ProgressBar,
}

impl Visitor for Counting<'_> {
    fn alloc(&mut self, _: &Timed, _: u64, block: &Block, _: Option<&Block>) {
        self.summary.allocations += 1;
        self.summary.bytes += block.size;
        let site = &mut self.per_stack[block.stack as usize];
        site.0 += 1;
        site.1 += block.size;
    }

    fn free(&mut self, timed: &Timed, _: u64, freed: Option<&Block>, temporary: bool) {
        self.summary.frees += 1;
        if let Some(block) = freed {
            let lifetime = timed.time.saturating_sub(block.time);
            let bucket = BUCKETS
                .iter()
                .position(|&(bound, _)| lifetime < bound)
                .unwrap_or(BUCKETS.len());
            self.summary.lifetimes[bucket] += 1;
            if temporary {
                self.summary.temporary += 1;
                self.per_stack[block.stack as usize].2 += 1;
            }
        }
    }

    fn mark(&mut self, _: &Timed, _: u32) {
        self.summary.markers += 1;
    }

    fn map(&mut self, _: &Timed, _: u64, length: u64, _: &Mapping, _: &[(u64, u64, Mapping)]) {
        self.summary.maps += 1;
        self.summary.map_bytes += length;
    }

    fn unmap(&mut self, _: &Timed, _: u64, _: u64, removed: &[(u64, u64, Mapping)]) {
        if !removed.is_empty() {
            self.summary.unmaps += 1;
        }
    }

    fn after(&mut self, timed: &Timed, state: &Accumulated) -> ControlFlow<()> {
        let summary = &mut *self.summary;
        summary.duration = timed.time;
        if state.heap.mappings.bytes() > summary.mapped_peak {
            summary.mapped_peak = state.heap.mappings.bytes();
            summary.mapped_peak_time = timed.time;
        }
        if state.heap.live_bytes > summary.peak_bytes {
            summary.peak_bytes = state.heap.live_bytes;
            summary.peak_blocks = state.heap.live.len() as u64;
            summary.peak_time = timed.time;
            self.peak_events = state.events;
        }
        if state.events.is_multiple_of(65536) {
            self.progress.set_position(state.events);
        }
        ControlFlow::Continue(())
    }
}

impl Summary {
    /// Replays `trace` to its end, then to its peak.
    pub fn of(
        trace: &Trace,
        options: &ReportOptions,
        top: usize,
        bar: &dyn Fn(u64, &str) -> ProgressBar,
    ) -> Result<Summary, Failure> {
        let header = trace.header();
        let mut summary = Summary {
            path: trace.path().display().to_string(),
            pid: header.pid,
            executable: header.executable.clone(),
            closed: trace.end_record().is_some(),
            lost: trace.end_record().map_or(0, |(_, lost)| lost),
            memory: trace.memory().copied(),
            top,
            ..Summary::default()
        };
        let stacks = trace.stacks().len();
        let mut counting = Counting {
            summary: &mut summary,
            per_stack: vec![(0u64, 0u64, 0u64); stacks],
            peak_events: 0,
            progress: bar(trace.events(), "summary"),
        };
        let end = trace.visit(&mut counting, &mut |_| {})?;
        counting.progress.finish_and_clear();
        let Counting {
            per_stack,
            peak_events,
            ..
        } = counting;
        summary.leaked_bytes = end.heap.live_bytes;
        summary.leaked_blocks = end.heap.live.len() as u64;
        summary.mapped_end = end.heap.mappings.bytes();
        summary.mappings_end = end.heap.mappings.len() as u64;
        let mut mapped_per_stack = vec![(0u64, 0u64); stacks];
        for (_, length, mapping) in end.heap.mappings.iter() {
            if let Some(entry) = mapped_per_stack.get_mut(mapping.stack as usize) {
                entry.0 += 1;
                entry.1 += length;
            }
        }
        drop(end);

        let (at_peak, _) = crate::common::replay(trace, &Moment::Events(peak_events))?;
        let mut peak_per_stack = vec![(0u64, 0u64); stacks];
        for block in at_peak.live.values() {
            let entry = &mut peak_per_stack[block.stack as usize];
            entry.0 += 1;
            entry.1 += block.size;
        }
        drop(at_peak);

        // Stacks grouped by the context a report prints for them.
        let mut resolver = crate::moment::resolver(trace);
        let mut sites: HashMap<Vec<String>, Site> = HashMap::new();
        for (id, frames) in trace.stacks().iter().enumerate() {
            let (allocations, bytes, temporary) = per_stack[id];
            let (peak_blocks, peak_bytes) = peak_per_stack[id];
            let (mappings, mapped_bytes) = mapped_per_stack[id];
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
            site.peak_blocks += peak_blocks;
            site.peak_bytes += peak_bytes;
            site.mappings += mappings;
            site.mapped_bytes += mapped_bytes;
        }
        summary.sites = sites.into_values().collect();
        summary.sites.sort_by(|a, b| a.context.cmp(&b.context));
        Ok(summary)
    }

    /// Writes the summary as text.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
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
        writeln!(
            out,
            "allocations: {} ({} bytes), frees: {}, markers: {}",
            self.allocations, self.bytes, self.frees, self.markers
        )?;
        writeln!(
            out,
            "temporary allocations: {} ({:.1}% of allocations)",
            self.temporary,
            percent(self.temporary, self.allocations)
        )?;
        writeln!(
            out,
            "peak: {} bytes in {} blocks at {}",
            self.peak_bytes,
            self.peak_blocks,
            seconds(self.peak_time)
        )?;
        writeln!(
            out,
            "leaked at end: {} bytes in {} blocks",
            self.leaked_bytes, self.leaked_blocks
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
        self.table(out, "most allocations", &sites, |s| {
            (s.allocations, format!("{} bytes", s.bytes))
        })?;
        sites.sort_by_key(|s| std::cmp::Reverse(s.temporary));
        sites.retain(|s| s.temporary > 0);
        self.table(out, "most temporary allocations", &sites, |s| {
            (
                s.temporary,
                format!(
                    "{:.1}% of its {}",
                    percent(s.temporary, s.allocations),
                    s.allocations
                ),
            )
        })?;
        let mut sites: Vec<&Site> = self.sites.iter().filter(|s| s.peak_bytes > 0).collect();
        sites.sort_by_key(|s| std::cmp::Reverse(s.peak_bytes));
        self.table(out, "largest at the peak", &sites, |s| {
            (s.peak_bytes, format!("bytes in {} blocks", s.peak_blocks))
        })?;
        if self.maps > 0 {
            let mut sites: Vec<&Site> = self.sites.iter().filter(|s| s.mappings > 0).collect();
            sites.sort_by_key(|s| std::cmp::Reverse(s.mapped_bytes));
            self.table(out, "largest mappings at the end", &sites, |s| {
                (s.mapped_bytes, format!("bytes in {} mappings", s.mappings))
            })?;
        }

        writeln!(out, "\nlifetimes of freed blocks:")?;
        let freed: u64 = self.lifetimes.iter().sum();
        for (i, &count) in self.lifetimes.iter().enumerate() {
            let label = BUCKETS.get(i).map_or(">= 10 s", |&(_, label)| label);
            writeln!(
                out,
                "{label:>10}  {count:>12}  {:5.1}%",
                percent(count, freed)
            )?;
        }
        writeln!(out, "{:>10}  {:>12}", "never", self.leaked_blocks)
    }

    fn table(
        &self,
        out: &mut dyn Write,
        title: &str,
        sites: &[&Site],
        value: impl Fn(&Site) -> (u64, String),
    ) -> io::Result<()> {
        writeln!(out, "\n{title}:")?;
        if sites.is_empty() {
            return writeln!(out, "  none");
        }
        for site in sites.iter().take(self.top) {
            let (number, detail) = value(site);
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
    let parts: [(&str, Option<i64>); 9] = [
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
    Ok(())
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
