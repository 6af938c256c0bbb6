//! `/api/labels`: the blocks live at a moment and those allocated up to it, per label set
//! (`memprof::with_labels`, trace version 1.2), with the same moment, range and filters as the
//! exports.

use super::export::live_heap;
use crate::serve::query::{ApiError, At, Params};
use crate::serve::state::State;
use crate::serve::view::Query;
use serde_json::{Map, Value, json};

/// The label sets at the query's moment, most live bytes first: each with its labels (an
/// object, key to value; empty for blocks allocated without labels), its live blocks and bytes
/// and the blocks and bytes allocated (within the range, passing the filters).
pub fn labels(state: &State, params: &Params) -> Result<Value, ApiError> {
    let q = Query::parse(state, params)?;
    let (stop_events, stop_time) = match q.at {
        At::End => (u64::MAX, u64::MAX),
        At::Time(t) => (u64::MAX, t),
        At::Peak { events, .. } | At::Marker { events, .. } => (events, u64::MAX),
    };
    let (heap, time) = state
        .replays
        .run(|| live_heap(state, &q, stop_events, stop_time))?;
    let snapshot = crate::moment::snapshot(&state.trace, &heap, heap.live_bytes);
    let rows = crate::labels::rows(&snapshot);
    let label_sets: Vec<Value> = rows
        .into_iter()
        .map(|(id, [live_blocks, live_bytes, blocks, bytes])| {
            let labels: Map<String, Value> = snapshot
                .label_set(id)
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect();
            json!({
                "labels": labels,
                "live_blocks": live_blocks,
                "live_bytes": live_bytes,
                "allocated_blocks": blocks,
                "allocated_bytes": bytes,
            })
        })
        .collect();
    let mut answer = json!({"time_ns": time, "label_sets": label_sets});
    super::common::mark_estimates(state, &mut answer);
    Ok(answer)
}
