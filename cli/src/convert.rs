//! `memprof convert`: the heap at a moment in the format the output's name asks for.

use crate::common::{bar, output_endings, replay};
use crate::{Failure, alys, timeline};
use memprof::{Report, ReportOptions};
use memprof_files::Replacement;
use memprof_trace::{Moment, Trace};
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

/// `memprof convert`: the format by the output's name.
pub fn convert(
    trace: &Trace,
    output: &Path,
    moment: &Moment,
    options: &ReportOptions,
) -> Result<(), Failure> {
    let name = output.to_string_lossy();
    if name.ends_with(".json") && !name.ends_with(".dhat.json") {
        let until = match moment {
            Moment::End => None,
            _ => Some(replay(trace, moment)?.1.events),
        };
        return replace(output, |out| {
            alys::write(trace, until, out)
                .map_err(|Failure(m, s)| Failure(format!("{}: {m}", output.display()), s))
        });
    }
    let format = memprof::export::Format::from_path(&name).ok_or_else(|| {
        Failure(
            format!(
                "{}: unknown output format (the name ends in one of {}, .json)",
                output.display(),
                output_endings()
            ),
            2,
        )
    })?;
    #[cfg(not(feature = "flamegraph"))]
    if format == memprof::export::Format::Flamegraph {
        return Err(Failure(
            format!(
                "{}: flamegraph SVG needs memprof built with the `flamegraph` feature; no file \
                 written",
                output.display()
            ),
            2,
        ));
    }
    let (heap, position) = replay(trace, moment)?;
    let snapshot = match format {
        memprof::export::Format::Markdown | memprof::export::Format::Tsv => {
            crate::moment::snapshot(trace, &heap, heap.live_bytes)
        }
        _ => {
            // The peak up to the moment, for the exports' per-site peak figures.
            let progress = bar(trace.events() * 2, "peak");
            let peak =
                trace.find_peak_within(position.events, &mut |done| progress.set_position(done))?;
            let (at_peak, _) = trace.replay(&Moment::Events(peak.events), &mut |done| {
                progress.set_position(trace.events() + done)
            })?;
            progress.finish_and_clear();
            crate::moment::snapshot_with_peak(trace, &heap, &at_peak)
        }
    };
    // `--label`: every format shows only that label's blocks.
    let snapshot = match &options.label {
        Some((key, value)) => crate::moment::keep_label(snapshot, key, value),
        None => snapshot,
    };
    replace(output, |out| {
        write(trace, format, &snapshot, &position, options, out)
            .map_err(|e| Failure(format!("{}: cannot write: {e}", output.display()), 1))
    })
}

/// Writes `output` under a new temporary name beside it, renamed over it once `write` succeeded:
/// what was at `output` stays as it was when the trace turns out damaged, or the write fails.
/// Only a regular file or a symbolic link (replaced, not followed) is written over.
fn replace(
    output: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let fail = |e: io::Error| Failure(format!("{}: cannot write: {e}", output.display()), 1);
    let mut replacement = Replacement::create(output).map_err(fail)?;
    let mut out = io::BufWriter::new(replacement.file());
    write(&mut out)?;
    out.flush().map_err(fail)?;
    drop(out);
    replacement.commit().map(drop).map_err(fail)
}

/// The export or report in `format` of `snapshot`, the heap at `position`.
fn write(
    trace: &Trace,
    format: memprof::export::Format,
    snapshot: &memprof::Snapshot,
    position: &memprof_trace::Position,
    options: &ReportOptions,
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut resolver = crate::moment::resolver(trace);
    let header = trace.header();
    match format {
        memprof::export::Format::Markdown => {
            Report::live(snapshot, &mut resolver, options).write_markdown(out)
        }
        memprof::export::Format::Tsv => {
            Report::live(snapshot, &mut resolver, options).write_tsv(out)
        }
        _ => {
            let export = memprof::ExportOptions::default()
                .pid(header.pid)
                .command(header.executable.clone())
                .elapsed(Duration::from_nanos(position.time))
                .time(Duration::from_nanos(
                    header.start_unix_ns.saturating_add(position.time),
                ));
            // The events up to the moment (a sampled trace's are not the program's: its
            // exports keep the snapshot's estimates).
            let mut events = timeline::TraceEvents::new(trace, position.events);
            let events = (header.sample_interval == 0)
                .then_some(&mut events as &mut dyn memprof::export::Events);
            memprof::export::write_with_events(
                format,
                snapshot,
                &mut resolver,
                &export,
                events,
                out,
            )
        }
    }
}
