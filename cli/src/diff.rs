//! `memprof diff`: what grew and shrank between two moments, in the in-process diff format.

use crate::common::{snapshot_at, written};
use crate::{Failure, Style};
use memprof::{DiffReport, ReportOptions};
use memprof_trace::{Moment, Trace};
use std::io::Write;

/// The diff from `from` to `to`, written to `out`.
pub fn diff(
    trace: &Trace,
    from: &Moment,
    to: &Moment,
    format: Style,
    options: &ReportOptions,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let (mut earlier, _) = snapshot_at(trace, from)?;
    let (mut later, _) = snapshot_at(trace, to)?;
    // `--label`: only the blocks allocated with that label, at both moments.
    if let Some((key, value)) = &options.label {
        earlier = crate::moment::keep_label(earlier, key, value);
        later = crate::moment::keep_label(later, key, value);
    }
    let diff = later.diff(&earlier);
    let report_of = DiffReport::new(&diff, &mut crate::moment::resolver(trace), options);
    written(match format {
        Style::Md => report_of.write_markdown(out),
        Style::Tsv => report_of.write_tsv(out),
    })
}
