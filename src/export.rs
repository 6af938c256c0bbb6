//! Exports that existing tools open: pprof, folded stacks, flamegraph SVG, DHAT JSON, heaptrack.
//!
//! | format | file | opened by | module |
//! |---|---|---|---|
//! | pprof | `.pb.gz` | `pprof -top`, `pprof -http`, Speedscope, Pyroscope | [`pprof`] |
//! | folded stacks | `.folded` | `inferno-flamegraph`, `flamegraph.pl`, Speedscope | [`folded`] |
//! | flamegraph | `.svg` | a browser (cargo feature `flamegraph`) | `flamegraph` |
//! | DHAT | `.dhat.json` | Valgrind's `dh_view.html` | [`dhat`] |
//! | heaptrack | `.heaptrack.gz` | `heaptrack_print`, `heaptrack_gui` | [`heaptrack`] |
//!
//! Every writer has the same shape, `write(&Snapshot, &mut dyn Resolve, &ExportOptions, &mut W)`,
//! and works on the same [`CallSites`]: each stack of the snapshot is symbolized, inlined calls
//! expanded, and trimmed by [`frames::context`] (memprof's own frames, the allocator shim and
//! std's allocation internals go) but, unlike a report, not cut to a depth: every frame that was
//! captured stays. The walk captures at least `MEMPROF_STACK_DEPTH` frames after trimming (and
//! stops soon after), so that setting is also how deep an export's stacks go. Stacks that trim to
//! the same frames are one call site.
//!
//! Each export carries, per call site, what was allocated over the run (blocks and bytes), what is
//! live in the snapshot, and what was live at the heap's peak when the table keeps it
//! (`MEMPROF_PEAK=1`, [`MemProf::track_peak`](crate::MemProf::track_peak); otherwise the live
//! values stand in for it).
//!
//! Addresses written to files are return addresses minus one: inside the call instruction, the
//! address the symbolizer looked up.
//!
//! At exit, `MEMPROF_OUTPUT` names the files to write ([`write_outputs`]); [`write_path`] writes
//! one file, its format chosen by its name.

#![forbid(unsafe_code)]

pub mod dhat;
#[cfg(feature = "flamegraph")]
pub mod flamegraph;
pub mod folded;
pub mod heaptrack;
pub mod pprof;

use crate::address::ReturnAddress;
use crate::frames::{self, Frame};
use crate::guard::untracked;
use crate::report::{self, Report, ReportOptions};
use crate::snapshot::Snapshot;
use crate::symbolize::{self, Resolve};
use std::collections::HashMap;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One counter of a call site: what folded stacks and the flamegraph measure.
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
    /// The counter folded stacks and the flamegraph use (default [`Value::LiveBytes`]).
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
    /// These options with another counter for folded stacks and the flamegraph.
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

/// The frames one return address contributes to a call site, after trimming.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The return address.
    pub address: ReturnAddress,
    /// Its frames that were kept, innermost (most inlined) first; never empty.
    pub frames: Vec<Frame>,
    /// The path of the loaded module (executable or shared library) the address falls in; `None`
    /// when it falls in none of this process's modules (synthetic snapshots).
    pub module: Option<String>,
}

/// Stacks that trim to the same frames, with their counters summed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallSite {
    /// Indices into [`CallSites::locations`], innermost first; empty when no frame is known.
    pub locations: Vec<usize>,
    /// Blocks allocated over the run.
    pub allocated_blocks: u64,
    /// Bytes allocated over the run.
    pub allocated_bytes: u64,
    /// Blocks live in the snapshot.
    pub live_blocks: u64,
    /// Bytes live in the snapshot.
    pub live_bytes: u64,
    /// The size of each live block, in address order.
    pub live_sizes: Vec<u64>,
    /// Blocks live at the heap's peak; the live values when the snapshot does not know the peak.
    pub peak_blocks: u64,
    /// Bytes live at the heap's peak; the live values when the snapshot does not know the peak.
    pub peak_bytes: u64,
}

impl CallSite {
    /// Blocks allocated and freed since (allocated minus live; 0 if the counters disagree).
    pub fn freed_blocks(&self) -> u64 {
        self.allocated_blocks.saturating_sub(self.live_blocks)
    }

    /// Bytes allocated and freed since (allocated minus live; 0 if the counters disagree).
    pub fn freed_bytes(&self) -> u64 {
        self.allocated_bytes.saturating_sub(self.live_bytes)
    }
}

/// The call sites of a snapshot, symbolized and trimmed: what every export writes.
///
/// Sites are ordered by live bytes, then allocated bytes (both descending), then by the first
/// stack id they hold, so a snapshot always gives the same order. Locations are in the order the
/// sites first use them.
///
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallSites {
    /// Every location any site uses.
    pub locations: Vec<Location>,
    /// The call sites.
    pub sites: Vec<CallSite>,
}

impl CallSites {
    /// Symbolizes and trims every stack of `snapshot` that allocated anything.
    pub fn build(
        snapshot: &Snapshot,
        resolver: &mut dyn Resolve,
        options: &ExportOptions,
    ) -> CallSites {
        let modules = crate::modules::loaded();
        let mut locations: Vec<Location> = Vec::new();
        let mut location_ids: HashMap<(ReturnAddress, usize, usize), usize> = HashMap::new();
        let mut site_ids: HashMap<Vec<usize>, usize> = HashMap::new();
        let mut sites: Vec<(CallSite, usize)> = Vec::new();
        let mut site_of_stack: Vec<Option<usize>> = vec![None; snapshot.stacks.len()];
        for (stack_index, stack) in snapshot.stacks.iter().enumerate() {
            if stack.allocated_blocks == 0 && stack.live_blocks == 0 {
                continue;
            }
            let resolved: Vec<Arc<[Frame]>> =
                stack.frames.iter().map(|&a| resolver.resolve(a)).collect();
            // Every frame with the return address it belongs to and its index among its frames.
            let mut owners = Vec::new();
            let mut expanded: Vec<&Frame> = Vec::new();
            for (index, frames) in resolved.iter().enumerate() {
                for (inner, frame) in frames.iter().enumerate() {
                    owners.push((index, inner));
                    expanded.push(frame);
                }
            }
            // `context` keeps a contiguous run that ends at the outermost frame when neither skip
            // nor depth applies; skip and depth then cut that run.
            let trimmed = frames::context(&expanded, 0, usize::MAX).len();
            let start = (expanded.len() - trimmed).saturating_add(options.skip);
            let end = start.saturating_add(options.depth).min(expanded.len());
            let mut key = Vec::new();
            let mut position = start;
            while position < end {
                let (index, first) = owners[position];
                let mut last = first;
                while position + 1 < end && owners[position + 1].0 == index {
                    position += 1;
                    last = owners[position].1;
                }
                position += 1;
                let address = stack.frames[index];
                let id = *location_ids
                    .entry((address, first, last))
                    .or_insert_with(|| {
                        let pc = address.lookup_address();
                        locations.push(Location {
                            address,
                            frames: resolved[index][first..=last].to_vec(),
                            module: modules
                                .iter()
                                .find(|m| m.contains(pc))
                                .map(|m| m.path.to_string_lossy().into_owned()),
                        });
                        locations.len() - 1
                    });
                key.push(id);
            }
            let site = *site_ids.entry(key).or_insert_with_key(|key| {
                sites.push((
                    CallSite {
                        locations: key.clone(),
                        ..CallSite::default()
                    },
                    stack_index,
                ));
                sites.len() - 1
            });
            let entry = &mut sites[site].0;
            entry.allocated_blocks += stack.allocated_blocks;
            entry.allocated_bytes += stack.allocated_bytes;
            entry.live_blocks += stack.live_blocks;
            entry.live_bytes += stack.live_bytes;
            let (peak_blocks, peak_bytes) = if snapshot.peak_known {
                (stack.peak_blocks, stack.peak_bytes)
            } else {
                (stack.live_blocks, stack.live_bytes)
            };
            entry.peak_blocks += peak_blocks;
            entry.peak_bytes += peak_bytes;
            site_of_stack[stack_index] = Some(site);
        }
        for block in &snapshot.blocks {
            if let Some(Some(site)) = site_of_stack.get(block.stack.0 as usize) {
                sites[*site].0.live_sizes.push(block.size);
            }
        }
        sites.sort_by(|(a, a_first), (b, b_first)| {
            b.live_bytes
                .cmp(&a.live_bytes)
                .then(b.allocated_bytes.cmp(&a.allocated_bytes))
                .then(a_first.cmp(b_first))
        });
        CallSites {
            locations,
            sites: sites.into_iter().map(|(site, _)| site).collect(),
        }
    }

    /// The frames of `site`, innermost first, each with the location it belongs to.
    pub fn frames<'a>(
        &'a self,
        site: &'a CallSite,
    ) -> impl DoubleEndedIterator<Item = (&'a Location, &'a Frame)> + 'a {
        site.locations.iter().flat_map(move |&id| {
            let location = &self.locations[id];
            location.frames.iter().map(move |f| (location, f))
        })
    }
}

/// A file format memprof writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// pprof protobuf, gzip-compressed (`.pb.gz`).
    Pprof,
    /// Folded stacks (`.folded`).
    Folded,
    /// Flamegraph SVG (`.svg`; needs the `flamegraph` feature).
    Flamegraph,
    /// DHAT viewer JSON (`.dhat.json`).
    Dhat,
    /// heaptrack data, gzip-compressed (`.heaptrack.gz`).
    Heaptrack,
    /// MemProf's Markdown report of live allocations (`.md`).
    Markdown,
    /// MemProf's TSV log of live allocations (`.tsv`).
    Tsv,
}

impl Format {
    /// Every format with the file-name ending that selects it.
    pub const EXTENSIONS: [(&'static str, Format); 7] = [
        (".pb.gz", Format::Pprof),
        (".folded", Format::Folded),
        (".svg", Format::Flamegraph),
        (".dhat.json", Format::Dhat),
        (".heaptrack.gz", Format::Heaptrack),
        (".md", Format::Markdown),
        (".tsv", Format::Tsv),
    ];

    /// The format a file name asks for by its ending, if any.
    pub fn from_path(path: &str) -> Option<Format> {
        Format::EXTENSIONS
            .iter()
            .find(|(ending, _)| path.ends_with(ending))
            .map(|&(_, format)| format)
    }
}

/// Writes `snapshot` in `format`. Markdown and TSV are the live-allocation reports with the
/// options in force (`MEMPROF_STACK_DEPTH`, `MEMPROF_MIN_BYTES`).
pub fn write<W: Write + ?Sized>(
    format: Format,
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    out: &mut W,
) -> io::Result<()> {
    untracked(|| match format {
        Format::Pprof => pprof::write(snapshot, resolver, options, out),
        Format::Folded => folded::write(snapshot, resolver, options, out),
        #[cfg(feature = "flamegraph")]
        Format::Flamegraph => flamegraph::write(snapshot, resolver, options, out),
        #[cfg(not(feature = "flamegraph"))]
        Format::Flamegraph => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "flamegraph SVG needs memprof built with the `flamegraph` feature",
        )),
        Format::Dhat => dhat::write(snapshot, resolver, options, out),
        Format::Heaptrack => heaptrack::write(snapshot, resolver, options, out),
        Format::Markdown | Format::Tsv => {
            let report = Report::live(snapshot, resolver, &ReportOptions::from_env());
            if format == Format::Markdown {
                report::markdown::write(&report, out)
            } else {
                report::tsv::write(&report, out)
            }
        }
    })
}

/// Expands a file-name pattern: `%p` the process id, `%t` seconds since the Unix epoch, `%e` the
/// executable's file name, `%%` a percent sign; anything else stays as written.
pub fn expand_path(pattern: &str, pid: u32, time: Duration, executable: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('t') => out.push_str(&time.as_secs().to_string()),
            Some('e') => out.push_str(executable),
            Some('%') => out.push('%'),
            _ => {
                out.push('%');
                continue;
            }
        }
        chars.next();
    }
    out
}

/// The file name of this process's executable, or `"unknown"`.
fn executable_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Writes `snapshot` to the file `path` names, after expanding `%p`, `%t` and `%e`
/// ([`expand_path`]); the format comes from the file's ending ([`Format::EXTENSIONS`]). Returns
/// the path written.
pub fn write_path(
    path: &str,
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
) -> io::Result<PathBuf> {
    untracked(|| {
        let Some(format) = Format::from_path(path) else {
            let known: Vec<&str> = Format::EXTENSIONS.iter().map(|(e, _)| *e).collect();
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown file ending; use one of {}", known.join(", ")),
            ));
        };
        let expanded = PathBuf::from(expand_path(
            path,
            options.pid,
            options.time,
            &executable_name(),
        ));
        let mut file = BufWriter::new(std::fs::File::create(&expanded)?);
        write(format, snapshot, resolver, options, &mut file)?;
        file.flush()?;
        Ok(expanded)
    })
}

/// Writes the process's heap now to every file of a comma-separated list (the value of
/// `MEMPROF_OUTPUT`), each in the format its name asks for ([`write_path`]). Each file written is
/// named on stderr; an unknown ending or a failed write is reported there too, and the other files
/// are still written. Never panics.
pub fn write_outputs(spec: &str) {
    untracked(|| {
        let paths: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        if paths.is_empty() {
            return;
        }
        let snapshot = Snapshot::take();
        let options = ExportOptions::default();
        symbolize::with_symbolizer(|symbolizer| {
            for path in paths {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    write_path(path, &snapshot, symbolizer, &options)
                }));
                let mut stderr = io::stderr().lock();
                let _ = match result {
                    Ok(Ok(written)) => writeln!(stderr, "memprof: wrote {}", written.display()),
                    Ok(Err(error)) => writeln!(stderr, "memprof: cannot write {path}: {error}"),
                    Err(_) => writeln!(stderr, "memprof: writing {path} failed"),
                };
            }
        });
    })
}

/// How long this process has run, from its start time in `/proc/self/stat` and `/proc/uptime`.
pub fn process_elapsed() -> Option<Duration> {
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
    use crate::snapshot::{LiveBlock, StackSummary};
    use crate::table::StackId;

    fn frame(function: &str) -> Frame {
        Frame {
            function: Some(function.into()),
            file: Some("src/lib.rs".into()),
            line: 1,
            column: 0,
        }
    }

    #[test]
    fn paths_expand_placeholders() {
        let time = Duration::from_secs(1_700_000_000);
        assert_eq!(
            expand_path("/tmp/%e-%p-%t.pb.gz", 42, time, "app"),
            "/tmp/app-42-1700000000.pb.gz"
        );
        assert_eq!(expand_path("100%%-%x-%", 1, time, "a"), "100%-%x-%");
    }

    #[test]
    fn formats_come_from_endings() {
        assert_eq!(Format::from_path("a.pb.gz"), Some(Format::Pprof));
        assert_eq!(Format::from_path("a.heaptrack.gz"), Some(Format::Heaptrack));
        assert_eq!(Format::from_path("a.dhat.json"), Some(Format::Dhat));
        assert_eq!(Format::from_path("a.json"), None);
        assert_eq!(Format::from_path("a.gz"), None);
    }

    #[test]
    fn elapsed_is_known_and_plausible() {
        let elapsed = process_elapsed().expect("/proc is mounted");
        assert!(elapsed < Duration::from_secs(24 * 3600), "{elapsed:?}");
    }

    #[test]
    fn sites_merge_stacks_that_trim_alike_and_keep_every_frame() {
        let mut symbols: HashMap<ReturnAddress, Vec<Frame>> = HashMap::new();
        symbols.insert(
            ReturnAddress(1),
            vec![frame("memprof::hooks::record_alloc")],
        );
        symbols.insert(ReturnAddress(2), vec![frame("__rustc::__rust_alloc")]);
        symbols.insert(
            ReturnAddress(3),
            vec![frame("alloc::alloc::alloc"), frame("app::inlined_into_f")],
        );
        symbols.insert(ReturnAddress(4), vec![frame("app::f")]);
        for (i, a) in (10..20).enumerate() {
            symbols.insert(ReturnAddress(a), vec![frame(&format!("app::caller{i}"))]);
        }
        let deep: Vec<ReturnAddress> = [1, 3, 4]
            .into_iter()
            .chain(10..20)
            .map(ReturnAddress)
            .collect();
        let mut other = deep.clone();
        other.insert(1, ReturnAddress(2));
        let stacks = vec![
            StackSummary {
                frames: deep,
                allocated_blocks: 3,
                allocated_bytes: 30,
                ..Default::default()
            },
            StackSummary {
                frames: other,
                allocated_blocks: 1,
                allocated_bytes: 100,
                ..Default::default()
            },
            StackSummary::default(),
        ];
        let blocks = vec![LiveBlock {
            address: 0x100,
            size: 10,
            stack: StackId(0),
            tag: 0,
        }];
        let snapshot = Snapshot::from_parts(blocks, stacks, 0);
        let sites = CallSites::build(&snapshot, &mut symbols, &ExportOptions::default());
        assert_eq!(sites.sites.len(), 1);
        let site = &sites.sites[0];
        assert_eq!(
            (
                site.allocated_blocks,
                site.allocated_bytes,
                site.live_blocks,
                site.live_bytes
            ),
            (4, 130, 1, 10)
        );
        assert_eq!(site.live_sizes, [10]);
        let names: Vec<&str> = sites
            .frames(site)
            .map(|(_, f)| f.function.as_deref().unwrap())
            .collect();
        assert_eq!(names.len(), 12, "{names:?}");
        assert_eq!(
            &names[..3],
            ["app::inlined_into_f", "app::f", "app::caller0"]
        );
        // The partly trimmed address keeps only its kept frame.
        assert_eq!(sites.locations[site.locations[0]].frames.len(), 1);
        let cut = CallSites::build(
            &snapshot,
            &mut symbols,
            &ExportOptions::default().skip(1).depth(2),
        );
        let names: Vec<&str> = cut
            .frames(&cut.sites[0])
            .map(|(_, f)| f.function.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["app::f", "app::caller0"]);
    }
}
