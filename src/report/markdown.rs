//! MemProf's Markdown allocation table.

use super::{DiffReport, Report};
use std::io::{self, Write};

/// `n` with comma thousands separators: `800000` → `800,000`.
pub(crate) fn thousands(n: u64) -> String {
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

/// `n` with its sign and comma thousands separators: `+1,200`, `-300`, `0`.
pub(crate) fn signed(n: i64) -> String {
    let digits = thousands(n.unsigned_abs());
    match n.signum() {
        1 => format!("+{digits}"),
        -1 => format!("-{digits}"),
        _ => digits,
    }
}

/// `text` as a Markdown code span: fenced with one more backtick than its longest run of them, and
/// padded with a space on each side.
pub(crate) fn code_span(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    format!("{fence} {text} {fence}")
}

/// Writes `report` as a table: `| Allocations | Total size | Context |`, numbers right-aligned to
/// the widest value of their column, frames as code spans joined by `<br>`. Estimates from a
/// sampled profile are followed by a line that says so.
pub(crate) fn write<W: Write + ?Sized>(report: &Report, out: &mut W) -> io::Result<()> {
    let rows = report.groups.iter().map(|g| {
        (
            thousands(g.blocks),
            thousands(g.bytes),
            g.context.as_slice(),
        )
    });
    write_table(rows, report.sample_interval, Some(report.samples), out)
}

/// Writes `diff` in the same table, with signed numbers: growth first, shrinkage last.
pub(crate) fn write_diff<W: Write + ?Sized>(diff: &DiffReport, out: &mut W) -> io::Result<()> {
    let rows = diff
        .changes
        .iter()
        .map(|c| (signed(c.blocks), signed(c.bytes), c.context.as_slice()));
    write_table(rows, diff.sample_interval, None, out)
}

fn write_table<'a, W: Write + ?Sized>(
    rows: impl Iterator<Item = (String, String, &'a [String])>,
    sample_interval: u64,
    samples: Option<u64>,
    out: &mut W,
) -> io::Result<()> {
    let rows: Vec<_> = rows.collect();
    let count_width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let size_width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let mut buffer = String::from(
        "| Allocations | Total size | Context |\n|------------:|-----------:|---------|\n",
    );
    for (count, size, context) in &rows {
        let context: Vec<String> = context.iter().map(|f| code_span(f)).collect();
        buffer.push_str(&format!(
            "| {count:>count_width$} | {size:>size_width$} | {} |\n",
            context.join("<br>")
        ));
    }
    if sample_interval != 0 {
        buffer.push_str(&format!(
            "\nEstimates: one allocation in every {} bytes on average was recorded (`MEMPROF_SAMPLE_INTERVAL`).\n",
            thousands(sample_interval)
        ));
        if let Some(samples) = samples {
            buffer.push_str(&format!(
                "They rest on {} sampled live blocks{}.\n",
                thousands(samples),
                if samples < 100 {
                    ": too few to trust; sample more often, or record every allocation"
                } else {
                    ""
                }
            ));
        }
    }
    out.write_all(buffer.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_reports_say_what_they_rest_on() {
        let report = |samples| Report {
            groups: Vec::new(),
            sample_interval: 524_288,
            samples,
        };
        let text = |samples| {
            let mut out = Vec::new();
            write(&report(samples), &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert!(text(3).contains("They rest on 3 sampled live blocks: too few to trust"));
        assert!(text(2_000).ends_with("They rest on 2,000 sampled live blocks.\n"));
        let exact = Report {
            sample_interval: 0,
            ..report(3)
        };
        let mut out = Vec::new();
        write(&exact, &mut out).unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("rest on"));
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(800000), "800,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn signed_numbers() {
        assert_eq!(signed(1200), "+1,200");
        assert_eq!(signed(-300), "-300");
        assert_eq!(signed(0), "0");
    }

    #[test]
    fn code_spans_outfence_backticks() {
        assert_eq!(code_span("a"), "` a `");
        assert_eq!(code_span("a`b"), "`` a`b ``");
        assert_eq!(code_span("``x`"), "``` ``x` ```");
    }
}
