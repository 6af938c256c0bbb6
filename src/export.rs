//! Exports that existing tools open: pprof, folded stacks, flamegraph SVG, DHAT JSON, heaptrack.
//!
//! | format | file | opened by | module |
//! |---|---|---|---|
//! | pprof | `.pb.gz` | `pprof -top`, `pprof -http`, Speedscope, Pyroscope | [`pprof`] |
//! | folded stacks | `.folded` | `inferno-flamegraph`, `flamegraph.pl`, Speedscope | [`folded`] |
//! | flamegraph | `.svg` | a browser (cargo feature `flamegraph`) | `flamegraph` |
//! | DHAT | `.dhat.json` | Valgrind's `dh_view.html` | [`dhat`] |
//! | heaptrack | `.heaptrack.gz` | `heaptrack_print`, `heaptrack_gui` | [`heaptrack`] |
//! | HTML report | `.html` | a browser, offline: the sites, the flame graph, the timeline | [`Format::Html`] |
//!
//! Every writer has the same shape, `write(&Snapshot, &mut dyn Resolve, &ExportOptions, &mut W)`,
//! and works on the same [`CallSites`]: each stack of the snapshot is symbolized, inlined calls
//! expanded, and trimmed as a report's contexts are (memprof's own frames, the allocator shim and
//! std's allocation internals go) but, unlike a report, not cut to a depth: every frame that was
//! captured stays. The walk captures at least `MEMPROF_STACK_DEPTH` frames after trimming (and
//! stops soon after), so that setting is also how deep an export's stacks go. Stacks that trim to
//! the same frames are one call site.
//!
//! Each export carries, per call site, what was allocated over the run (blocks and bytes), what is
//! live in the snapshot, and what was live at the heap's peak when the table keeps it
//! (`MEMPROF_PEAK=1`, [`MemProf::track_peak`](crate::MemProf::track_peak); otherwise the live
//! values stand in for it, except in heaptrack's file, which then gives no site a share of the
//! peak).
//!
//! Addresses written to files are return addresses minus one: inside the call instruction, the
//! address the symbolizer looked up.
//!
//! At exit, `MEMPROF_OUTPUT` names the files to write ([`write_outputs`]); [`write_path`] writes
//! one file, its format chosen by its name.

#![forbid(unsafe_code)]

mod call_sites;
mod events;
mod html;
mod options;
mod outputs;

pub mod dhat;
#[cfg(feature = "flamegraph")]
pub mod flamegraph;
pub mod folded;
pub mod heaptrack;
pub mod pprof;

pub use call_sites::{CallSite, CallSites, Location};
pub use events::{Event, Events};
pub use options::{ExportOptions, Value};
pub(crate) use outputs::write_listed;
pub use outputs::{expand_path, write_outputs, write_path};

use crate::guard::untracked;
use crate::report::{self, Report, ReportOptions};
use crate::snapshot::Snapshot;
use crate::symbolize::Resolve;
use std::io::{self, Write};

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
    /// A report in one HTML file that any browser opens offline (`.html`): the call sites in a
    /// sortable table, the flame graph of live bytes (inferno's SVG with the `flamegraph`
    /// feature, else drawn by the page's own script), and, given the run's events (from a
    /// trace), the live bytes over time with the peak and the markers. Scripts, style and data
    /// are in the file; it names no URL.
    Html,
}

impl Format {
    /// Every format with the file-name ending that selects it.
    pub const EXTENSIONS: [(&'static str, Format); 8] = [
        (".pb.gz", Format::Pprof),
        (".folded", Format::Folded),
        (".svg", Format::Flamegraph),
        (".dhat.json", Format::Dhat),
        (".heaptrack.gz", Format::Heaptrack),
        (".md", Format::Markdown),
        (".tsv", Format::Tsv),
        (".html", Format::Html),
    ];

    /// Whether the format shows the heap at its peak, which the table keeps only when told so
    /// before the first block is recorded (see [`MemProf::track_peak`](crate::MemProf::track_peak)).
    pub fn needs_peak(self) -> bool {
        matches!(self, Format::Dhat | Format::Heaptrack)
    }

    /// Whether the format shows what stacks allocated over the run, freed or not (pprof's
    /// `alloc_*`, DHAT's and heaptrack's totals, the HTML report's table, a flame graph of
    /// allocated bytes): it is written from every stack's counters ([`Snapshot::take_all`]), the
    /// others from the live stacks' alone ([`Snapshot::take`]).
    pub(crate) fn shows_allocated(self, options: &ExportOptions) -> bool {
        match self {
            Format::Pprof | Format::Dhat | Format::Heaptrack | Format::Html => true,
            Format::Folded | Format::Flamegraph => matches!(
                options.value,
                Value::AllocatedBytes | Value::AllocatedBlocks
            ),
            Format::Markdown | Format::Tsv => false,
        }
    }

    /// The format a file name asks for by its ending, if any.
    pub fn from_path(path: &str) -> Option<Format> {
        Format::EXTENSIONS
            .iter()
            .find(|(ending, _)| path.ends_with(ending))
            .map(|&(_, format)| format)
    }
}

/// Whether a file of `spec`, a comma-separated list of outputs (the value of `MEMPROF_OUTPUT`),
/// is in a format that needs the heap's peak ([`Format::needs_peak`]).
pub(crate) fn outputs_need_peak(spec: &str) -> bool {
    spec.split(',')
        .filter_map(|path| Format::from_path(path.trim()))
        .any(Format::needs_peak)
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
    write_with_events(format, snapshot, resolver, options, None, out)
}

/// [`write()`], with the run's events up to the snapshot when known (from a trace): DHAT and
/// heaptrack use them (see [`Events`]), the HTML report draws its timeline from them, the other
/// formats need only the snapshot.
pub fn write_with_events<W: Write + ?Sized>(
    format: Format,
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    events: Option<&mut dyn Events>,
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
        Format::Dhat => dhat::write_with_events(snapshot, resolver, options, events, out),
        Format::Heaptrack => heaptrack::write_with_events(snapshot, resolver, options, events, out),
        Format::Html => html::write(snapshot, resolver, options, events, out),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_come_from_endings() {
        assert_eq!(Format::from_path("a.pb.gz"), Some(Format::Pprof));
        assert_eq!(Format::from_path("a.heaptrack.gz"), Some(Format::Heaptrack));
        assert_eq!(Format::from_path("a.dhat.json"), Some(Format::Dhat));
        assert_eq!(Format::from_path("a.json"), None);
        assert_eq!(Format::from_path("a.gz"), None);
    }

    #[test]
    fn outputs_that_show_the_peak_ask_for_it() {
        assert!(outputs_need_peak("a.pb.gz, b.dhat.json"));
        assert!(outputs_need_peak("run-%p.heaptrack.gz"));
        assert!(!outputs_need_peak("a.pb.gz,a.md,a.folded"));
        assert!(!outputs_need_peak(""));
    }
}
