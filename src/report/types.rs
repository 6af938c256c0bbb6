//! MemProf's per-type logs: object counts, object sizes, tallies over the run, and the contexts
//! of one type.

use crate::address::StackId;
use crate::report::ReportOptions;
use crate::report::tsv::escape_into;
use crate::snapshot::Snapshot;
use crate::symbolize::Resolve;
use crate::types::{TraceRow, TypeRow, per_stack_counts};
use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

/// Writes `rows` as MemProf's `log_object_counts` / `log_object_sizes` do: the number of lines
/// that follow, then `value \t TypeName` per row, in the order given.
pub(crate) fn write<W: Write + ?Sized>(rows: &[TypeRow], out: &mut W) -> io::Result<()> {
    let mut buffer = format!("{}\n", rows.len());
    for row in rows {
        buffer.push_str(&row.value.to_string());
        buffer.push('\t');
        escape_into(&mut buffer, &row.name, &[]);
        buffer.push('\n');
    }
    out.write_all(buffer.as_bytes())
}

/// Writes the contexts of a traced type like the allocation log: the number of lines that follow,
/// then `count \t frame \t frame ...` per context, in the order given.
pub(crate) fn write_trace<W: Write + ?Sized>(rows: &[TraceRow], out: &mut W) -> io::Result<()> {
    let mut buffer = format!("{}\n", rows.len());
    for row in rows {
        buffer.push_str(&row.count.to_string());
        for frame in &row.context {
            buffer.push('\t');
            escape_into(&mut buffer, frame, &[]);
        }
        buffer.push('\n');
    }
    out.write_all(buffer.as_bytes())
}

/// The contexts that created objects of type `target` over the whole run, with how many each,
/// most first; contexts with fewer than `min_count` are left out. Contexts are trimmed as in the
/// allocation reports (`options.depth`, `options.skip`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn trace(
    snapshot: &Snapshot,
    stack_types: &[Option<Arc<str>>],
    tag_names: &[&str],
    tag_counts: &[(u32, StackId, u64)],
    target: &str,
    resolver: &mut dyn Resolve,
    options: &ReportOptions,
    min_count: u64,
) -> Vec<TraceRow> {
    let mut contexts = super::Contexts::new(resolver, options);
    let mut groups: HashMap<super::ContextKey, u64> = HashMap::new();
    for (name, stack, n) in per_stack_counts(snapshot, stack_types, tag_names, tag_counts) {
        if name != target {
            continue;
        }
        let key = contexts.key(&snapshot.stack(stack).frames);
        *groups.entry(key).or_default() += n;
    }
    let mut rows: Vec<TraceRow> = groups
        .into_iter()
        .filter(|(_, count)| *count >= min_count.max(1))
        .map(|(key, count)| TraceRow {
            count,
            context: contexts.strings(&key),
        })
        .collect();
    rows.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.context.cmp(&b.context))
    });
    rows
}
