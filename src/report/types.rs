//! MemProf's per-type logs: object counts, object sizes, tallies over the run, and the contexts
//! of one type.

use std::io::{self, Write};

/// One line of a per-type log: a number and the type it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeRow {
    /// Objects or bytes.
    pub value: u64,
    /// The type's name (`app::Foo`, `[app::Bar]`, `(unknown, 96 B)`).
    pub name: String,
}

/// One allocation context of a traced type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRow {
    /// Objects of the type allocated from this context over the run.
    pub count: u64,
    /// The frames, innermost first, as MemProf prints them.
    pub context: Vec<String>,
}

/// Writes `rows` as MemProf's `log_object_counts` / `log_object_sizes` do: the number of lines
/// that follow, then `value \t TypeName` per row, in the order given.
pub fn write<W: Write + ?Sized>(rows: &[TypeRow], out: &mut W) -> io::Result<()> {
    let mut buffer = format!("{}\n", rows.len());
    for row in rows {
        buffer.push_str(&format!("{}\t{}\n", row.value, row.name));
    }
    out.write_all(buffer.as_bytes())
}

/// Writes the contexts of a traced type like the allocation log: the number of lines that follow,
/// then `count \t frame \t frame ...` per context, in the order given.
pub fn write_trace<W: Write + ?Sized>(rows: &[TraceRow], out: &mut W) -> io::Result<()> {
    let mut buffer = format!("{}\n", rows.len());
    for row in rows {
        buffer.push_str(&row.count.to_string());
        for frame in &row.context {
            buffer.push('\t');
            buffer.push_str(frame);
        }
        buffer.push('\n');
    }
    out.write_all(buffer.as_bytes())
}
