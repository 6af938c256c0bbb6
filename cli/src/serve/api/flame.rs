//! `/api/flame`: a flame graph of the live, allocated, leaked or temporary bytes.

use super::view::{Query, view};
use crate::serve::query::{ApiError, At, Params};
use crate::serve::state::State;
use serde_json::{Value, json};

/// The flame graph of per-class values: each stack's path (outermost first), merged by common
/// prefix. Frames below 1/10,000 of the whole are left out (their bytes stay in their parent's
/// value), so the tree stays small whatever the number of stacks.
pub fn tree(state: &State, values: impl Iterator<Item = (usize, u64)>) -> Value {
    let mut paths: Vec<(&[u32], u64)> = Vec::new();
    for (class, value) in values {
        if value > 0 {
            let (stack, _) = state.classes.list[class];
            paths.push((&state.stacks[stack as usize].path, value));
        }
    }
    paths.sort_unstable();
    let total: u64 = paths.iter().map(|p| p.1).sum();
    let threshold = (total / 10_000).max(1);
    json!({
        "name": "all",
        "value": total,
        "children": children(state, &paths, 0, threshold),
    })
}

/// The nodes at `depth` of `paths` (sorted, all sharing their first `depth` frames).
fn children(state: &State, paths: &[(&[u32], u64)], depth: usize, threshold: u64) -> Vec<Value> {
    let mut nodes: Vec<(u64, &str, Value)> = Vec::new();
    let mut start = paths.partition_point(|p| p.0.len() <= depth);
    while start < paths.len() {
        let name = paths[start].0[depth];
        let end = start + paths[start..].partition_point(|p| p.0[depth] == name);
        let group = &paths[start..end];
        let value: u64 = group.iter().map(|p| p.1).sum();
        if value >= threshold {
            let label = state.names[name as usize].as_str();
            nodes.push((
                value,
                label,
                json!({
                    "name": label,
                    "value": value,
                    "children": children(state, group, depth + 1, threshold),
                }),
            ));
        }
        start = end;
    }
    nodes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    nodes.into_iter().map(|(_, _, node)| node).collect()
}

pub fn flame(state: &State, params: &Params) -> Result<Value, ApiError> {
    let q = Query::parse(state, params)?;
    let what = params.get("what").unwrap_or("live");
    let classes = state.classes.list.len();
    let values: Vec<u64> = match what {
        "live" => {
            let v = view(state, &q, &[&q.at], None)?;
            v.live(&q.at, classes).iter().map(|l| l.0).collect()
        }
        "leaked" => {
            let v = view(state, &q, &[&At::End], None)?;
            v.live(&At::End, classes).iter().map(|l| l.0).collect()
        }
        "allocated" | "temporary" => {
            let v = view(state, &q, &[], None)?;
            v.range(q.lo, q.hi, classes)
                .iter()
                .map(|c| {
                    if what == "allocated" {
                        c.alloc_bytes
                    } else {
                        c.temporary_bytes
                    }
                })
                .collect()
        }
        other => {
            return Err(ApiError::bad(format!(
                "what={other:?}: live, allocated, leaked or temporary"
            )));
        }
    };
    Ok(tree(state, values.into_iter().enumerate()))
}
