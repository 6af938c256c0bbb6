//! `memprof report`: the live heap at a moment, as the in-process Markdown or TSV report.

use crate::common::{snapshot_at, written};
use crate::{Failure, Style};
use memprof::{Report, ReportOptions};
use memprof_trace::{Moment, Trace};
use std::io::Write;

/// The report of the live heap at `at`, written to `out`.
pub fn report(
    trace: &Trace,
    at: &Moment,
    format: Style,
    options: &ReportOptions,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let (snapshot, _) = snapshot_at(trace, at)?;
    let report_of = Report::live(&snapshot, &mut crate::moment::resolver(trace), options);
    written(match format {
        Style::Md => report_of.write_markdown(out),
        Style::Tsv => report_of.write_tsv(out),
    })
}
