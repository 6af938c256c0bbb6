//! The label log: live and allocated blocks and bytes per label set ([`super::log_labels`]).

use super::tsv::escape_into;
use crate::snapshot::Snapshot;
use std::collections::HashMap;
use std::io::{self, Write};

/// What the blocks of one label set add up to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LabelRow {
    /// The set's (key, value) pairs, sorted by key; empty for blocks allocated without labels.
    pub labels: Vec<(String, String)>,
    /// Blocks live in the snapshot.
    pub live_blocks: u64,
    /// Bytes live in the snapshot.
    pub live_bytes: u64,
    /// Blocks allocated over the run.
    pub allocated_blocks: u64,
    /// Bytes allocated over the run.
    pub allocated_bytes: u64,
}

/// One row per label set that allocated anything in `snapshot` (the blocks allocated without
/// labels as one more, when there are any), most live bytes first, then most allocated bytes,
/// then by labels.
pub(crate) fn rows(snapshot: &Snapshot) -> Vec<LabelRow> {
    let mut by_set: HashMap<u32, LabelRow> = HashMap::new();
    for stack in &snapshot.stacks {
        if stack.allocated_blocks == 0 && stack.live_blocks == 0 {
            continue;
        }
        let row = by_set.entry(stack.labels).or_default();
        row.live_blocks = row.live_blocks.saturating_add(stack.live_blocks);
        row.live_bytes = row.live_bytes.saturating_add(stack.live_bytes);
        row.allocated_blocks = row.allocated_blocks.saturating_add(stack.allocated_blocks);
        row.allocated_bytes = row.allocated_bytes.saturating_add(stack.allocated_bytes);
    }
    let mut rows: Vec<LabelRow> = by_set
        .into_iter()
        .map(|(id, row)| LabelRow {
            labels: snapshot.label_set(id).to_vec(),
            ..row
        })
        .collect();
    rows.sort_by(|a, b| {
        b.live_bytes
            .cmp(&a.live_bytes)
            .then(b.allocated_bytes.cmp(&a.allocated_bytes))
            .then_with(|| a.labels.cmp(&b.labels))
    });
    rows
}

/// A label set as the log prints it: `key=value,key=value`, each key and value escaped as every
/// TSV field is, with `,` and `=` escaped too (`\,`, `\=`), or `(none)` for no labels.
pub(crate) fn text(labels: &[(String, String)]) -> String {
    if labels.is_empty() {
        return "(none)".to_owned();
    }
    let mut text = String::new();
    for (i, (key, value)) in labels.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        escape_into(&mut text, key, &[',', '=']);
        text.push('=');
        escape_into(&mut text, value, &[',', '=']);
    }
    text
}

/// Writes `rows`: the number of lines that follow, then `live_blocks \t live_bytes \t
/// allocated_blocks \t allocated_bytes \t labels` per set (the labels as [`text`] writes them);
/// then, when label sets were dropped because their table was full, `# dropped label sets: N`.
pub(crate) fn write<W: Write + ?Sized>(
    rows: &[LabelRow],
    dropped: u64,
    out: &mut W,
) -> io::Result<()> {
    let mut buffer = format!("{}\n", rows.len());
    for row in rows {
        buffer.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\n",
            row.live_blocks,
            row.live_bytes,
            row.allocated_blocks,
            row.allocated_bytes,
            text(&row.labels)
        ));
    }
    if dropped > 0 {
        buffer.push_str(&format!("# dropped label sets: {dropped}\n"));
    }
    out.write_all(buffer.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::StackId;
    use crate::snapshot::{LiveBlock, StackSummary};

    #[test]
    fn rows_add_up_the_stacks_of_each_set() {
        let stack = |labels, allocated_blocks, allocated_bytes| StackSummary {
            labels,
            allocated_blocks,
            allocated_bytes,
            ..StackSummary::default()
        };
        let block = |address, size, stack| LiveBlock {
            address,
            size,
            stack: StackId(stack),
            tag: 0,
        };
        let mut snapshot = Snapshot::from_parts(
            vec![block(0x10, 100, 0), block(0x20, 300, 1), block(0x30, 50, 2)],
            vec![
                stack(1, 2, 200),
                stack(2, 1, 300),
                stack(0, 4, 80),
                stack(1, 1, 7),
            ],
            0,
        );
        snapshot.label_sets = vec![
            vec![],
            vec![("tenant".into(), "acme".into())],
            vec![
                ("kind".into(), "a b".into()),
                ("tenant".into(), "zeta".into()),
            ],
        ];
        let rows = rows(&snapshot);
        let mut out = Vec::new();
        write(&rows, 3, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "3\n\
             1\t300\t1\t300\tkind=a b,tenant=zeta\n\
             1\t100\t3\t207\ttenant=acme\n\
             1\t50\t4\t80\t(none)\n\
             # dropped label sets: 3\n"
        );
    }
}
