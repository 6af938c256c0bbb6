//! MemProf's TSV allocation log.

use super::Report;
use std::io::{self, Write};

/// Writes `report`: the number of lines that follow, then `count \t bytes \t frame \t ...` per group.
pub fn write<W: Write + ?Sized>(report: &Report, out: &mut W) -> io::Result<()> {
    let mut buffer = String::new();
    buffer.push_str(&format!("{}\n", report.groups.len()));
    for group in &report.groups {
        buffer.push_str(&format!("{}\t{}", group.blocks, group.bytes));
        for frame in &group.context {
            buffer.push('\t');
            buffer.push_str(frame);
        }
        buffer.push('\n');
    }
    out.write_all(buffer.as_bytes())
}
