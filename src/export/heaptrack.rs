//! heaptrack data (interpreted text format, file version 3), gzip-compressed, as
//! `heaptrack_print` and `heaptrack_gui` read it.
//!
//! Lines, all numbers in hex: `v 10400 3` (heaptrack 1.4, sized strings), `X` the command line,
//! `s <length> <text>` strings (1-based), `i <ip> <module> <function> <file> <line> ...` one per
//! location with its inlined frames (innermost first), `t <ip> <parent>` the trace tree (leaf =
//! allocation site, parent = caller, 0 = root), `a <size> <trace>` allocation kinds (0-based),
//! `+ <kind>` / `- <kind>` events, and a final `c <ms>` timestamp.
//!
//! # What heaptrack derives, and why it is true
//!
//! A snapshot has totals per call site, not the order of events, and heaptrack derives its figures
//! from the order of the events it reads: the peak is the most bytes live at once, a site's
//! *peak consumption* is what the site had live at that moment, and an allocation is *temporary*
//! when the next event is its free. So the events are laid out for those figures to be true:
//!
//! 1. Blocks that were live neither at the peak nor now: each a `+` and its `-`. Their sizes are
//!    the site's remaining bytes spread evenly over them (sizes differ by one byte at most). When
//!    they were freed is not known; first is where they change no figure heaptrack derives.
//! 2. The peak: every site's blocks live at the peak
//!    ([`MemProf::track_peak`](crate::MemProf::track_peak), `MEMPROF_PEAK=1`), then, if the
//!    heap's peak ([`HeapStats::peak_bytes`](crate::HeapStats::peak_bytes)) is larger than
//!    their sum, one block of the difference under `[memprof: ...]`: heaptrack's peak is
//!    `HeapStats`' peak. Without the peak table, no site is known to have had anything live at
//!    the peak, and that one block holds the whole peak.
//! 3. The frees of the blocks of step 2 that are not live now.
//! 4. The blocks live now that were not live at the peak, each with its own size: heaptrack lists
//!    every block live now as leaked.
//!
//! A free never follows its own allocation in the file: each kind of block has a second
//! allocation kind, with the same size and trace, that only frees use, so heaptrack counts no
//! temporary allocation. Which allocations were temporary is not known without a trace; neither
//! is when anything happened (every event is at time 0, the file ends at the run's length).
//! Heaptrack's count of calls has one call more than the program made when step 2 writes its
//! block.
//!
//! A sampled snapshot's counts are estimates ([`Snapshot::sample_interval`] not 0): one recorded
//! byte at an interval of 2^30 bytes stands for about 2^30 blocks. Each of the four groups of a
//! site (also of a site whose live counts are not those of its listed blocks) is then one allocation holding the group's estimated bytes, not one per estimated block,
//! so heaptrack's bytes (allocated, at the peak, leaked) are the estimates and its counts of calls
//! are the entries written. Sums saturate at `u64::MAX`: no size or interval makes the writer
//! panic or allocate beyond the file it writes.
//!
//! # With events
//!
//! Given the run's events ([`export::write_with_events`](super::write_with_events), from a trace), the file is heaptrack's own
//! stream instead: each allocation a `+` of its size and call site, each free a `-` of the kind
//! its block was allocated with, in the order they happened, and a `c <ms>` line before the first
//! event of each new millisecond, and at [`ExportOptions::elapsed`] if that is later: so the live
//! bytes at each `c` line are what was live at the start of that millisecond. Heaptrack then
//! derives every figure itself: the peak and when, what each site had live then, the temporary
//! allocations (a free right after its own allocation, by heaptrack's definition), the leaks, and
//! the memory consumed over time (`heaptrack_print -M`'s snapshots are the live bytes at each
//! `c` line). Kind 0 is a placeholder no event uses: heaptrack takes a free
//! of kind 0 right after another free as temporary.

#![forbid(unsafe_code)]

use super::events::{self, Event as Recorded, Events};
use super::{CallSite, CallSites, ExportOptions};
use crate::snapshot::Snapshot;
use crate::symbolize::Resolve;
use flate2::Compression;
use flate2::write::GzEncoder;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

/// The heaptrack version written in the header (1.4.0).
const HEAPTRACK_VERSION: u32 = 0x10400;
/// The file format version: 3 has sized strings.
const FILE_VERSION: u32 = 3;

/// The site of the bytes live at the peak whose call sites the snapshot does not know.
const UNATTRIBUTED_PEAK: &str = "[memprof: live at the peak, call site not recorded]";
/// The same, when the table kept no peak at all.
const UNRECORDED_PEAK: &str =
    "[memprof: live at the peak, call sites not recorded (MEMPROF_PEAK=1 records them)]";

/// The string table: 1-based indices, 0 = none.
struct Strings {
    text: String,
    index: HashMap<String, usize>,
}

impl Strings {
    fn get(&mut self, s: &str) -> usize {
        if s.is_empty() {
            return 0;
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        // Lines end at a line break: a string must not hold one.
        let clean = s.replace(['\n', '\r'], " ");
        let _ = writeln!(self.text, "s {:x} {clean}", clean.len());
        let i = self.index.len() + 1;
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// The allocation kinds (`a` lines, 0-based): per size and trace, one kind for allocations and,
/// when blocks of it are freed, another for their frees.
#[derive(Default)]
struct Kinds {
    text: String,
    count: usize,
    allocations: HashMap<(u64, usize), usize>,
    frees: HashMap<(u64, usize), usize>,
}

impl Kinds {
    fn add(text: &mut String, count: &mut usize, size: u64, trace: usize) -> usize {
        let _ = writeln!(text, "a {size:x} {trace:x}");
        *count += 1;
        *count - 1
    }

    /// The kind allocations of `size` bytes at `trace` are written with.
    fn allocation(&mut self, size: u64, trace: usize) -> usize {
        let (text, count) = (&mut self.text, &mut self.count);
        *self
            .allocations
            .entry((size, trace))
            .or_insert_with(|| Kinds::add(text, count, size, trace))
    }

    /// The kind frees of those blocks are written with: never an allocation's kind, so that no
    /// free directly after its allocation makes heaptrack count a temporary allocation; never
    /// kind 0 either (heaptrack takes a free of kind 0 after a free as temporary), since an
    /// allocation kind always comes first.
    fn free(&mut self, size: u64, trace: usize) -> usize {
        self.allocation(size, trace);
        let (text, count) = (&mut self.text, &mut self.count);
        *self
            .frees
            .entry((size, trace))
            .or_insert_with(|| Kinds::add(text, count, size, trace))
    }
}

/// Sizes of `blocks` blocks that hold `bytes` together, as `(size, count)` runs: the bytes spread
/// evenly, the first runs one byte larger.
fn spread(bytes: u64, blocks: u64) -> Vec<(u64, u64)> {
    let Some(size) = bytes.checked_div(blocks) else {
        return Vec::new();
    };
    let larger = bytes % blocks;
    [(size + 1, larger), (size, blocks - larger)]
        .into_iter()
        .filter(|&(_, count)| count > 0)
        .collect()
}

/// Runs of equal sizes, in order: `[8, 8, 16]` gives `[(8, 2), (16, 1)]`.
fn runs(sizes: &[u64]) -> Vec<(u64, u64)> {
    sizes
        .chunk_by(|a, b| a == b)
        .map(|run| (run[0], run.len() as u64))
        .collect()
}

/// Which of a site's blocks the file shows when, as `(size, count)` runs.
struct Plan {
    /// Allocated and freed, not live at the peak nor now.
    freed: Vec<(u64, u64)>,
    /// Live at the peak and now.
    kept: Vec<(u64, u64)>,
    /// Live at the peak, freed since.
    peak_only: Vec<(u64, u64)>,
    /// Live now, allocated after the peak.
    new: Vec<(u64, u64)>,
}

impl Plan {
    /// Splits a site's blocks into the four groups, with the fewest blocks live both at the peak
    /// and now that its counts allow; those are its smallest live blocks.
    ///
    /// When `estimated` (a sampled snapshot), the counts are estimates that may stand for far
    /// more blocks than were recorded: each group is then one entry holding the group's bytes,
    /// never one per estimated block.
    fn of(site: &CallSite, peak_known: bool, estimated: bool) -> Plan {
        let recorded = site.live_sizes.len() as u64 == site.live_blocks
            && site
                .live_sizes
                .iter()
                .try_fold(0u64, |sum, &size| sum.checked_add(size))
                == Some(site.live_bytes);
        if estimated || !recorded {
            return Plan::aggregated(site, peak_known);
        }
        let mut live = site.live_sizes.clone();
        live.sort_unstable();
        let (peak_blocks, peak_bytes) = match peak_known {
            true => (site.peak_blocks, site.peak_bytes),
            false => (0, 0),
        };
        let live_blocks = live.len() as u64;
        let both = peak_blocks
            .saturating_add(live_blocks)
            .saturating_sub(site.allocated_blocks)
            .min(peak_blocks)
            .min(live_blocks) as usize;
        let (kept, new) = live.split_at(both);
        let kept_bytes = kept
            .iter()
            .fold(0u64, |sum, &size| sum.saturating_add(size));
        let new_bytes = new.iter().fold(0u64, |sum, &size| sum.saturating_add(size));
        let peak_only_bytes = peak_bytes.saturating_sub(kept_bytes);
        let peak_only_blocks = peak_blocks - both as u64;
        let shown = kept_bytes
            .saturating_add(peak_only_bytes)
            .saturating_add(new_bytes);
        let freed_blocks = site.allocated_blocks.saturating_sub(
            peak_blocks
                .saturating_add(live_blocks)
                .saturating_sub(both as u64),
        );
        Plan {
            freed: spread(site.allocated_bytes.saturating_sub(shown), freed_blocks),
            kept: runs(kept),
            peak_only: spread(peak_only_bytes, peak_only_blocks),
            new: runs(new),
        }
    }

    /// The four groups of a site whose counts are estimates, each at most one entry of the
    /// group's bytes.
    fn aggregated(site: &CallSite, peak_known: bool) -> Plan {
        let (peak_blocks, peak_bytes) = match peak_known {
            true => (site.peak_blocks, site.peak_bytes),
            false => (0, 0),
        };
        let live_blocks = site.live_blocks;
        let both = peak_blocks
            .saturating_add(live_blocks)
            .saturating_sub(site.allocated_blocks)
            .min(peak_blocks)
            .min(live_blocks);
        // The live bytes shared in proportion to the blocks.
        let kept_bytes = match live_blocks {
            0 => 0,
            _ => (u128::from(site.live_bytes) * u128::from(both) / u128::from(live_blocks)) as u64,
        };
        let new_bytes = site.live_bytes - kept_bytes;
        let peak_only_bytes = peak_bytes.saturating_sub(kept_bytes);
        let shown = kept_bytes
            .saturating_add(peak_only_bytes)
            .saturating_add(new_bytes);
        let freed_blocks = site
            .allocated_blocks
            .saturating_sub(peak_blocks.saturating_add(live_blocks).saturating_sub(both));
        let one = |bytes: u64, blocks: u64| match blocks {
            0 => Vec::new(),
            _ => vec![(bytes, 1)],
        };
        Plan {
            freed: one(site.allocated_bytes.saturating_sub(shown), freed_blocks),
            kept: one(kept_bytes, both),
            peak_only: one(peak_only_bytes, peak_blocks - both),
            new: one(new_bytes, live_blocks - both),
        }
    }
}

/// Events to write, each `count` times.
enum Event {
    /// An allocation and its free.
    Pair(usize, usize, u64),
    /// Allocations.
    Allocate(usize, u64),
    /// Frees.
    Free(usize, u64),
}

/// Writes the uncompressed heaptrack text of `snapshot`: what [`write()`] compresses.
pub fn write_text<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    out: &mut W,
) -> io::Result<()> {
    write_text_with_events(snapshot, resolver, options, None, out)
}

/// [`write_text`], with the events of the run when given: what [`write_with_events`]
/// compresses.
pub(crate) fn write_text_with_events<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    events: Option<&mut dyn Events>,
    out: &mut W,
) -> io::Result<()> {
    crate::guard::untracked(|| {
        let sites = CallSites::build(snapshot, resolver, options);
        let mut strings = Strings {
            text: String::new(),
            index: HashMap::new(),
        };
        // One `i` line per location, with the module its address falls in.
        let mut ips = String::new();
        for location in &sites.locations {
            let address = location.address.lookup_address();
            let module = location.module.as_deref().unwrap_or("");
            let _ = write!(ips, "i {address:x} {:x}", strings.get(module));
            for frame in &location.frames {
                let function = strings.get(frame.function.as_deref().unwrap_or(""));
                let file = match &frame.file {
                    Some(file) if frame.line != 0 => strings.get(file),
                    _ => 0,
                };
                let _ = write!(ips, " {function:x} {file:x} {:x}", frame.line);
            }
            ips.push('\n');
        }
        // Locations known by a name only, after those of the sites.
        let mut named_ips: HashMap<&str, usize> = HashMap::new();
        let mut named_ip = |name: &'static str, ips: &mut String, strings: &mut Strings| {
            let next = sites.locations.len() + named_ips.len() + 1;
            *named_ips.entry(name).or_insert_with(|| {
                let _ = writeln!(ips, "i 0 0 {:x} 0 0", strings.get(name));
                next
            })
        };
        // The trace tree, shared between sites from the outermost frame in.
        let mut traces = String::new();
        let mut trace_ids: HashMap<(usize, usize), usize> = HashMap::new();
        let mut trace = |path: &[usize], traces: &mut String| {
            let mut parent = 0;
            for &ip in path {
                let next = trace_ids.len() + 1;
                parent = *trace_ids.entry((ip, parent)).or_insert_with(|| {
                    let _ = writeln!(traces, "t {ip:x} {parent:x}");
                    next
                });
            }
            parent
        };
        let mut kinds = Kinds::default();
        let mut freed = Vec::new();
        let mut rise = Vec::new();
        let mut fall = Vec::new();
        let mut end = Vec::new();
        let mut at_peak = 0u64;
        let mut leaves = Vec::with_capacity(sites.sites.len());
        for site in &sites.sites {
            let mut path: Vec<usize> = site.locations.iter().rev().map(|l| l + 1).collect();
            if path.is_empty() {
                path.push(named_ip("[unknown]", &mut ips, &mut strings));
            }
            let leaf = trace(&path, &mut traces);
            leaves.push(leaf);
            if events.is_some() {
                continue;
            }
            let plan = Plan::of(site, snapshot.peak_known, snapshot.sample_interval != 0);
            for &(size, count) in &plan.freed {
                let allocation = kinds.allocation(size, leaf);
                freed.push(Event::Pair(allocation, kinds.free(size, leaf), count));
            }
            for &(size, count) in &plan.kept {
                rise.push(Event::Allocate(kinds.allocation(size, leaf), count));
                at_peak = at_peak.saturating_add(size.saturating_mul(count));
            }
            for &(size, count) in &plan.peak_only {
                rise.push(Event::Allocate(kinds.allocation(size, leaf), count));
                fall.push(Event::Free(kinds.free(size, leaf), count));
                at_peak = at_peak.saturating_add(size.saturating_mul(count));
            }
            for &(size, count) in &plan.new {
                end.push(Event::Allocate(kinds.allocation(size, leaf), count));
            }
        }
        if let Some(events) = events {
            let unknown = trace(
                &[named_ip("[unknown]", &mut ips, &mut strings)],
                &mut traces,
            );
            let head = format!(
                "v {HEAPTRACK_VERSION:x} {FILE_VERSION:x}\n# memprof trace: every event in \
                 order\nX {}\n{}{ips}{traces}a 0 {unknown:x}\n",
                options.command.replace(['\n', '\r'], " "),
                strings.text
            );
            out.write_all(head.as_bytes())?;
            kinds.count = 1;
            let site_of = events::site_of_stacks(&sites, snapshot.stacks.len());
            return write_events(&mut kinds, &leaves, &site_of, unknown, events, options, out);
        }
        let missing = snapshot.stats.peak_bytes.saturating_sub(at_peak);
        if missing > 0 {
            let name = match snapshot.peak_known {
                true => UNATTRIBUTED_PEAK,
                false => UNRECORDED_PEAK,
            };
            let leaf = trace(&[named_ip(name, &mut ips, &mut strings)], &mut traces);
            rise.push(Event::Allocate(kinds.allocation(missing, leaf), 1));
            fall.insert(0, Event::Free(kinds.free(missing, leaf), 1));
        }
        let mut head = format!(
            "v {HEAPTRACK_VERSION:x} {FILE_VERSION:x}\n# memprof snapshot, no trace: blocks \
             freed before the peak, the blocks live at the peak, their frees, the blocks live \
             now; all at time 0\nX {}\n",
            options.command.replace(['\n', '\r'], " ")
        );
        head.push_str(&strings.text);
        head.push_str(&ips);
        head.push_str(&traces);
        head.push_str(&kinds.text);
        out.write_all(head.as_bytes())?;
        let mut events = String::with_capacity(1 << 16);
        for event in [freed, rise, fall, end].iter().flatten() {
            let (line, count) = match *event {
                Event::Pair(allocation, free, count) => {
                    (format!("+ {allocation:x}\n- {free:x}\n"), count)
                }
                Event::Allocate(kind, count) => (format!("+ {kind:x}\n"), count),
                Event::Free(kind, count) => (format!("- {kind:x}\n"), count),
            };
            for _ in 0..count {
                events.push_str(&line);
                if events.len() >= 1 << 16 {
                    out.write_all(events.as_bytes())?;
                    events.clear();
                }
            }
        }
        let _ = writeln!(events, "c {:x}", options.elapsed.as_millis());
        out.write_all(events.as_bytes())
    })
}

/// The event lines: `a` lines as kinds first appear, `+`/`-` lines, `c` lines as time goes by.
fn write_events<W: Write + ?Sized>(
    kinds: &mut Kinds,
    leaves: &[usize],
    site_of: &[Option<usize>],
    unknown: usize,
    events: &mut dyn Events,
    options: &ExportOptions,
    out: &mut W,
) -> io::Result<()> {
    // The kind each live block was allocated with, by address.
    let mut live: HashMap<u64, usize> = HashMap::new();
    let mut lines = String::with_capacity(1 << 16);
    let mut last_ms = 0;
    let mut failed = None;
    let mut time_line = |lines: &mut String, time: u64| {
        let ms = time / 1_000_000;
        if ms > last_ms {
            let _ = writeln!(lines, "c {ms:x}");
            last_ms = ms;
        }
    };
    events.for_each(&mut |event| {
        match event {
            Recorded::Alloc {
                time,
                address,
                size,
                stack,
            } => {
                time_line(&mut lines, time);
                let leaf = match site_of.get(stack.0 as usize).copied().flatten() {
                    Some(site) => leaves[site],
                    None => unknown,
                };
                let kind = kinds.allocation(size, leaf);
                lines.push_str(&kinds.text);
                kinds.text.clear();
                let _ = writeln!(lines, "+ {kind:x}");
                live.insert(address, kind);
            }
            Recorded::Free { time, address } => {
                if let Some(kind) = live.remove(&address) {
                    time_line(&mut lines, time);
                    let _ = writeln!(lines, "- {kind:x}");
                }
            }
        }
        if lines.len() >= 1 << 16 && failed.is_none() {
            failed = out.write_all(lines.as_bytes()).err();
            lines.clear();
        }
    })?;
    if let Some(error) = failed {
        return Err(error);
    }
    time_line(&mut lines, options.elapsed.as_nanos() as u64);
    out.write_all(lines.as_bytes())
}

/// Writes `snapshot` as a gzip-compressed heaptrack file.
pub fn write<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    out: &mut W,
) -> io::Result<()> {
    write_with_events(snapshot, resolver, options, None, out)
}

/// Writes `snapshot` as a gzip-compressed heaptrack file: with `events`, the run's own stream of
/// events (see the module's documentation).
pub(crate) fn write_with_events<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    events: Option<&mut dyn Events>,
    out: &mut W,
) -> io::Result<()> {
    let mut gzip = GzEncoder::new(out, Compression::fast());
    write_text_with_events(snapshot, resolver, options, events, &mut gzip)?;
    gzip.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(allocated: (u64, u64), live: &[u64], peak: (u64, u64)) -> CallSite {
        CallSite {
            allocated_blocks: allocated.0,
            allocated_bytes: allocated.1,
            live_blocks: live.len() as u64,
            live_bytes: live.iter().sum(),
            live_sizes: live.to_vec(),
            peak_blocks: peak.0,
            peak_bytes: peak.1,
            ..CallSite::default()
        }
    }

    fn total(runs: &[(u64, u64)]) -> (u64, u64) {
        runs.iter().fold((0, 0), |(blocks, bytes), &(size, count)| {
            (blocks + count, bytes + size * count)
        })
    }

    #[test]
    fn plans_keep_every_count_of_the_site() {
        // 10 blocks allocated, 3 live now (30, 10, 20 bytes), 5 live at the peak (100 bytes).
        let s = site((10, 1_000), &[30, 10, 20], (5, 100));
        let plan = Plan::of(&s, true, false);
        let (kept, peak_only, new, freed) = (
            total(&plan.kept),
            total(&plan.peak_only),
            total(&plan.new),
            total(&plan.freed),
        );
        // No block need be live at both moments: 5 + 3 <= 10.
        assert_eq!(kept, (0, 0));
        assert_eq!(peak_only, (5, 100));
        assert_eq!(new, (3, 60));
        assert_eq!(freed.0 + peak_only.0 + new.0, 10);
        assert_eq!(freed.1 + peak_only.1 + new.1, 1_000);
        assert_eq!(plan.new, [(10, 1), (20, 1), (30, 1)]);

        // Every block allocated is live now and was at the peak: they are the same blocks.
        let s = site((3, 60), &[30, 10, 20], (3, 60));
        let plan = Plan::of(&s, true, false);
        assert_eq!(plan.kept, [(10, 1), (20, 1), (30, 1)]);
        assert!(plan.peak_only.is_empty() && plan.new.is_empty() && plan.freed.is_empty());

        // Without the peak table nothing is live at the peak.
        let plan = Plan::of(&s, false, false);
        assert!(plan.kept.is_empty() && plan.peak_only.is_empty());
        assert_eq!(total(&plan.new), (3, 60));
    }

    #[test]
    fn sizes_spread_evenly() {
        assert_eq!(spread(10, 3), [(4, 1), (3, 2)]);
        assert_eq!(spread(9, 3), [(3, 3)]);
        assert_eq!(spread(5, 0), []);
        assert_eq!(runs(&[8, 8, 16]), [(8, 2), (16, 1)]);
    }
}
