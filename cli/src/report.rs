//! `memprof report`: the live heap at a moment, as the in-process Markdown or TSV report; or the
//! short-lived allocations up to it, in the same tables.

use crate::common::{snapshot_at, written};
use crate::{Failure, Sort, Style};
use memprof::{Report, ReportOptions};
use memprof_trace::{Moment, Trace};
use std::io::Write;

/// The report of the live heap at `at`, or (`sort.0` short-lived) of the short-lived
/// allocations (freed within `sort.1` ns) up to `at`, written to `out`.
pub fn report(
    trace: &Trace,
    at: &Moment,
    sort: (Sort, u64),
    format: Style,
    options: &ReportOptions,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let report_of = match sort.0 {
        Sort::ShortLived => crate::shortlived::report(trace, at, sort.1, options)?,
        Sort::Bytes => {
            let (snapshot, _) = snapshot_at(trace, at)?;
            Report::live(&snapshot, &mut crate::moment::resolver(trace), options)
        }
    };
    written(match format {
        Style::Md => report_of.write_markdown(out),
        Style::Tsv => report_of.write_tsv(out),
    })
}
