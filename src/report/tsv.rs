//! MemProf's TSV allocation log, and the escaping of every TSV log's text fields.

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
            escape_into(&mut buffer, frame, &[]);
        }
        buffer.push('\n');
    }
    out.write_all(buffer.as_bytes())
}

/// Appends `text` to `out` as a field of a TSV log: a backslash, tab, line feed and carriage
/// return as `\\`, `\t`, `\n` and `\r`, and each character of `also` (the separators inside a
/// field, as the `,` and `=` of a label set) after a backslash. A field so written holds no tab
/// and no line break: a reader splits rows at line feeds, fields at tabs, then undoes the escapes.
pub(crate) fn escape_into(out: &mut String, text: &str, also: &[char]) {
    let special = |c: char| matches!(c, '\\' | '\t' | '\n' | '\r') || also.contains(&c);
    if !text.contains(special) {
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if special(c) => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::escape_into;

    #[test]
    fn fields_hold_no_tab_nor_line_break() {
        let escaped = |text: &str, also: &[char]| {
            let mut out = String::new();
            escape_into(&mut out, text, also);
            out
        };
        assert_eq!(
            escaped("plain::frame (src/a.rs:3)", &[]),
            "plain::frame (src/a.rs:3)"
        );
        assert_eq!(escaped("a\tb\nc\rd\\e", &[]), "a\\tb\\nc\\rd\\\\e");
        assert_eq!(escaped("a,b=c", &[]), "a,b=c");
        assert_eq!(escaped("a,b=c\t", &[',', '=']), "a\\,b\\=c\\t");
    }
}
