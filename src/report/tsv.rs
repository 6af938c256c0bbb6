//! MemProf's TSV allocation log.

use super::{DiffReport, Report};
use std::io::{self, Write};

/// Writes `report`: the number of lines that follow, then `count \t bytes \t frame \t ...` per group.
pub(crate) fn write<W: Write + ?Sized>(report: &Report, out: &mut W) -> io::Result<()> {
    let rows = report.groups.iter().map(|g| {
        (
            g.blocks.to_string(),
            g.bytes.to_string(),
            g.context.as_slice(),
        )
    });
    write_lines(rows, out)
}

/// Writes `diff` the same way, with signed numbers (`-3` for three blocks fewer).
pub(crate) fn write_diff<W: Write + ?Sized>(diff: &DiffReport, out: &mut W) -> io::Result<()> {
    let rows = diff.changes.iter().map(|c| {
        (
            c.blocks.to_string(),
            c.bytes.to_string(),
            c.context.as_slice(),
        )
    });
    write_lines(rows, out)
}

fn write_lines<'a, W: Write + ?Sized>(
    rows: impl ExactSizeIterator<Item = (String, String, &'a [String])>,
    out: &mut W,
) -> io::Result<()> {
    let mut buffer = format!("{}\n", rows.len());
    for (count, bytes, context) in rows {
        buffer.push_str(&count);
        buffer.push('\t');
        buffer.push_str(&bytes);
        for frame in context {
            buffer.push('\t');
            buffer.push_str(frame);
        }
        buffer.push('\n');
    }
    out.write_all(buffer.as_bytes())
}
