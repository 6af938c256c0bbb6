//! The crate table (`memprof::log_crates`) of a trace: `memprof report --by crate` and
//! `--by caller-crate` at a moment, and `memprof summary`'s crates at the end of the run.

use crate::common::{snapshot_at, written};
use crate::{Failure, Style};
use memprof::Report;
use memprof_trace::{Moment, Trace};
use std::io::Write;

/// The crate table of the live heap at `at` (and the allocations up to it), per crate or, with
/// `by_caller`, per caller crate and crate, written to `out` as Markdown or TSV; with `label`,
/// of the blocks allocated with that label only.
pub fn report(
    trace: &Trace,
    at: &Moment,
    by_caller: bool,
    label: Option<&(String, String)>,
    format: Style,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let (mut snapshot, _) = snapshot_at(trace, at)?;
    if let Some((key, value)) = label {
        let others: Vec<usize> = (0..snapshot.stacks.len())
            .filter(|&i| !snapshot.has_label(&snapshot.stacks[i], key, value))
            .collect();
        for i in others {
            snapshot.stacks[i] = memprof::StackSummary::default();
        }
    }
    let rows = Report::crates(&snapshot, &mut crate::moment::resolver(trace), by_caller);
    written(match format {
        Style::Md => Report::write_crates_markdown(&rows, snapshot.sample_interval, out),
        Style::Tsv => Report::write_crates_tsv(&rows, out),
    })
}

/// `memprof summary`'s crates: the `top` crates with the most bytes live at the end (then most
/// allocated), with their live and allocated figures, and a line for the rest when there are
/// more; nothing when the trace allocated nothing.
pub fn write_section(trace: &Trace, top: usize, out: &mut impl Write) -> Result<(), Failure> {
    let (snapshot, _) = snapshot_at(trace, &Moment::End)?;
    let rows = Report::crates(&snapshot, &mut crate::moment::resolver(trace), false);
    if rows.is_empty() {
        return Ok(());
    }
    let mut text = String::from(
        "\ncrates (live at the end, allocated over the run; memprof report --by crate):\n  \
         live bytes  live blocks  allocated bytes  allocated blocks  crate\n",
    );
    for (name, [live_bytes, live_blocks, bytes, blocks]) in rows.iter().take(top) {
        text.push_str(&format!(
            "  {live_bytes:>10}  {live_blocks:>11}  {bytes:>15}  {blocks:>16}  {name}\n"
        ));
    }
    if rows.len() > top {
        let rest = &rows[top..];
        let sum = |i: usize| rest.iter().map(|(_, f)| f[i]).sum::<u64>();
        text.push_str(&format!(
            "  {:>10}  {:>11}  {:>15}  {:>16}  ({} more crates)\n",
            sum(0),
            sum(1),
            sum(2),
            sum(3),
            rest.len()
        ));
    }
    written(out.write_all(text.as_bytes()))
}
