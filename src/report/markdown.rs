//! MemProf's Markdown allocation table.

use super::Report;
use std::io::{self, Write};

/// `n` with comma thousands separators: `800000` → `800,000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `text` as a Markdown code span: fenced with one more backtick than its longest run of them, and
/// padded with a space on each side.
pub fn code_span(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    format!("{fence} {text} {fence}")
}

/// Writes `report` as a table: `| Allocations | Total size | Context |`, numbers right-aligned to
/// the widest value of their column, frames as code spans joined by `<br>`. Estimates from a
/// sampled profile are followed by a line that says so.
pub fn write<W: Write + ?Sized>(report: &Report, out: &mut W) -> io::Result<()> {
    let rows: Vec<(String, String)> = report
        .groups
        .iter()
        .map(|g| (thousands(g.blocks), thousands(g.bytes)))
        .collect();
    let count_width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let size_width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let mut buffer = String::from(
        "| Allocations | Total size | Context |\n|------------:|-----------:|---------|\n",
    );
    for (group, (count, size)) in report.groups.iter().zip(&rows) {
        let context: Vec<String> = group.context.iter().map(|f| code_span(f)).collect();
        buffer.push_str(&format!(
            "| {count:>count_width$} | {size:>size_width$} | {} |\n",
            context.join("<br>")
        ));
    }
    if report.sample_interval != 0 {
        buffer.push_str(&format!(
            "\nEstimates: one allocation in every {} bytes on average was recorded (`MEMPROF_SAMPLE_INTERVAL`).\n",
            thousands(report.sample_interval)
        ));
    }
    out.write_all(buffer.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(800000), "800,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn code_spans_outfence_backticks() {
        assert_eq!(code_span("a"), "` a `");
        assert_eq!(code_span("a`b"), "`` a`b ``");
        assert_eq!(code_span("``x`"), "``` ``x` ```");
    }
}
