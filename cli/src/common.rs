//! What the commands share: opening and replaying a trace with a progress bar, the report
//! options, and the failure of a write to stdout.

use crate::{Failure, ReportArgs};
use indicatif::{ProgressBar, ProgressStyle};
use memprof::{ReportOptions, Snapshot};
use memprof_trace::{ErrorKind, Heap, Moment, Position, Trace};
use std::io;
use std::path::Path;

/// The file endings memprof writes, by which an output's format is chosen: `.pb.gz, .folded, ...`.
pub fn output_endings() -> String {
    let endings: Vec<&str> = memprof::export::Format::EXTENSIONS
        .iter()
        .map(|(ending, _)| *ending)
        .collect();
    endings.join(", ")
}

/// A write's error as the failure it is.
pub fn written(r: io::Result<()>) -> Result<(), Failure> {
    r.map_err(|e| Failure(format!("cannot write: {e}"), 1))
}

/// The report options: the recording's depth and skip, the environment's minimum, then the
/// command line's.
pub fn report_options(trace: &Trace, args: &ReportArgs) -> ReportOptions {
    let header = trace.header();
    let mut options = ReportOptions::from_env();
    if header.stack_depth > 0 {
        options = options.depth(header.stack_depth as usize);
    }
    options.skip = header.stack_skip as usize;
    if let Some(depth) = args.depth {
        options = options.depth(depth);
    }
    if let Some(min_bytes) = args.min_bytes {
        options = options.min_bytes(min_bytes);
    }
    if let Some((key, value)) = &args.label {
        options = options.label(key, value);
    }
    options
}

/// A progress bar on stderr (drawn only when stderr is a terminal).
pub fn bar(length: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(length);
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:>10} [{bar:40}] {percent:>3}% {human_pos}/{human_len} {elapsed}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}

/// Opens a trace with a progress bar over its bytes; warns when it was cut short.
pub fn open(path: &Path) -> Result<Trace, Failure> {
    let progress = bar(0, "indexing");
    let trace = Trace::open_with_progress(path, &mut |done, total| {
        progress.set_length(total);
        progress.set_position(done);
    })
    .map_err(|error| match &error.error.kind {
        ErrorKind::Io(e) if e.kind() == io::ErrorKind::NotFound => {
            Failure(format!("{}: no such file", path.display()), 1)
        }
        ErrorKind::Io(e) if error.error.offset == 0 && !path.is_file() => {
            Failure(format!("{}: cannot open: {e}", path.display()), 1)
        }
        _ => Failure::from(error),
    })?;
    progress.finish_and_clear();
    warn_incomplete(path, &trace);
    Ok(trace)
}

/// Warns when the trace read from `path` was cut short or not closed.
pub fn warn_incomplete(path: &Path, trace: &Trace) {
    if let Some(cut) = trace.cut() {
        say!(
            "memprof: warning: {}: {cut}; read up to there",
            path.display()
        );
    }
    if trace.end_record().is_none() && trace.cut().is_none() {
        say!("memprof: warning: {}: {NOT_CLOSED}", path.display());
    }
}

/// What a trace without its `END` record means.
pub const NOT_CLOSED: &str = "the process ended without closing its trace (no END record: \
     killed, ended by `_exit`, or still running); it holds the events its writer had written";

/// Says on stderr, when frames of `trace` have no symbols (its process did not close it, so
/// they were never written), that `memprof symbolize` names them.
pub fn hint_symbolize(trace: &Trace, path: &Path) {
    let missing = crate::moment::unsymbolized(trace);
    if missing > 0 {
        say!(
            "memprof: hint: {missing} return addresses of this trace have no symbols (shown as \
             their module, or ???): `memprof symbolize {}` names them from the binaries it lists",
            path.display()
        );
    }
}

/// Replays `trace` to `moment` with a progress bar.
pub fn replay(trace: &Trace, moment: &Moment) -> Result<(Heap, Position), Failure> {
    let passes = if *moment == Moment::Peak { 2 } else { 1 };
    let progress = bar(trace.events() * passes, "replaying");
    let mut base = 0;
    let mut last = 0;
    let result = trace.replay(moment, &mut |done| {
        if done < last {
            base += last;
        }
        last = done;
        progress.set_position(base + done);
    });
    progress.finish_and_clear();
    let (heap, position) = result?;
    if !position.found {
        return Err(Failure(
            match moment {
                Moment::Marker(label) => format!(
                    "{}: no marker labelled {label:?} (markers: {})",
                    trace.path().display(),
                    marker_list(trace)
                ),
                _ => format!("{}: {moment:?} not found", trace.path().display()),
            },
            1,
        ));
    }
    Ok((heap, position))
}

fn marker_list(trace: &Trace) -> String {
    let mut labels: Vec<&str> = trace.labels().values().map(String::as_str).collect();
    labels.sort_unstable();
    if labels.is_empty() {
        "none".into()
    } else {
        labels.join(", ")
    }
}

/// The snapshot at `moment`, with the trace's peak when the moment is the peak.
pub fn snapshot_at(trace: &Trace, moment: &Moment) -> Result<(Snapshot, Position), Failure> {
    let (heap, position) = replay(trace, moment)?;
    let snapshot = crate::moment::snapshot(trace, &heap, heap.live_bytes);
    Ok((snapshot, position))
}
