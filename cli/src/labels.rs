//! The label sets of a trace (`memprof::with_labels`, trace version 1.2) in `memprof summary`:
//! live blocks and bytes at the end and allocated over the run, per label set.

use crate::Failure;
use crate::common::{snapshot_at, written};
use memprof::Snapshot;
use memprof_trace::{Moment, Trace};
use std::collections::HashMap;
use std::io::Write;

/// Writes a `label sets` table when the trace's stacks carry labels; nothing otherwise.
pub fn write_label_sets(trace: &Trace, out: &mut impl Write) -> Result<(), Failure> {
    if trace.stack_label_sets().iter().all(|set| set.is_empty()) {
        return Ok(());
    }
    let (snapshot, _) = snapshot_at(trace, &Moment::End)?;
    let rows: Vec<(String, [u64; 4])> = rows(&snapshot)
        .into_iter()
        .map(|(id, row)| (text(snapshot.label_set(id)), row))
        .collect();
    let mut text_out = String::from(
        "\nlabel sets (live at the end, allocated over the run):\n  \
         live blocks  live bytes  allocated blocks  allocated bytes  labels\n",
    );
    for (labels, [live_blocks, live_bytes, blocks, bytes]) in rows {
        text_out.push_str(&format!(
            "  {live_blocks:>11}  {live_bytes:>10}  {blocks:>16}  {bytes:>15}  {labels}\n"
        ));
    }
    written(out.write_all(text_out.as_bytes()))
}

/// (live blocks, live bytes, allocated blocks, allocated bytes) per label set id of `snapshot`'s
/// stacks, the sets with blocks live or allocated only, most live bytes first (then most bytes
/// allocated, then by the sets' pairs).
pub fn rows(snapshot: &Snapshot) -> Vec<(u32, [u64; 4])> {
    let mut sets: HashMap<u32, [u64; 4]> = HashMap::new();
    for stack in &snapshot.stacks {
        let row = sets.entry(stack.labels).or_default();
        for (sum, value) in row.iter_mut().zip([
            stack.live_blocks,
            stack.live_bytes,
            stack.allocated_blocks,
            stack.allocated_bytes,
        ]) {
            *sum = sum.saturating_add(value);
        }
    }
    let mut rows: Vec<(u32, [u64; 4])> = sets
        .into_iter()
        .filter(|(_, row)| row[0] > 0 || row[2] > 0)
        .collect();
    rows.sort_by(|a, b| {
        b.1[1]
            .cmp(&a.1[1])
            .then(b.1[3].cmp(&a.1[3]))
            .then_with(|| snapshot.label_set(a.0).cmp(snapshot.label_set(b.0)))
    });
    rows
}

/// A label set as `key=value,key=value`, `(none)` when empty (as `memprof::log_labels` writes).
fn text(pairs: &[(String, String)]) -> String {
    if pairs.is_empty() {
        return "(none)".to_owned();
    }
    let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(",")
}
