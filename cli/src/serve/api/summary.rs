//! `/api/summary`: the trace as a whole.

use super::common::{MARKERS_LISTED, markers, width};
use crate::serve::index::bin_edges;
use crate::serve::state::State;
use serde_json::{Value, json};

pub fn summary(state: &State) -> Value {
    let trace = &state.trace;
    let totals = &state.index.totals;
    let mut threads: Vec<(u32, &str)> = trace
        .threads()
        .iter()
        .map(|(&id, (_, name))| (id, name.as_str()))
        .collect();
    threads.sort_unstable();
    let (listed, total) = markers(state, None, None, MARKERS_LISTED);
    let (sizes, lives) = bin_edges();
    json!({
        "path": trace.path().display().to_string(),
        "events": trace.events(),
        "duration_ns": totals.last_time,
        "sample_interval": trace.header().sample_interval,
        "threads": threads.iter().map(|(id, name)| json!({"id": id, "name": name})).collect::<Vec<_>>(),
        "markers": listed,
        "markers_total": total,
        "peak": {"time_ns": totals.peak_time, "bytes": totals.peak.0, "blocks": totals.peak.1},
        "end": {"bytes": totals.end.0, "blocks": totals.end.1},
        "totals": {
            "allocations": totals.allocations,
            "reallocs": totals.reallocs,
            "frees": totals.frees,
            "allocated_bytes": totals.allocated_bytes,
            "temporary": totals.temporary,
            "mappings": totals.mappings,
        },
        "bucket_ns": width(&state.index),
        "index_edges": {"size": sizes, "life_ns": lives},
        "complete": trace.end_record().is_some(),
        "chunk_flags": state.index.totals.chunk_flags,
        "live": state.live.map(|live| json!({
            "pending_events": live.pending,
            "out_of_order_events": live.out_of_order,
            "indexed_through_ns": live.through,
        })),
    })
}

/// `/api/markers`: every marker, the one answer that lists them all.
pub fn all_markers(state: &State) -> Value {
    let (listed, total) = markers(state, None, None, usize::MAX);
    json!({"markers": listed, "markers_total": total})
}

/// `/api/traces`: the traces served, by id.
pub fn traces(traces: &[&State]) -> Value {
    let list: Vec<Value> = traces
        .iter()
        .enumerate()
        .map(|(id, state)| {
            let totals = &state.index.totals;
            json!({"id": id, "path": state.trace.path().display().to_string(),
                   "events": state.trace.events(), "duration_ns": totals.last_time,
                   "sites": state.sites.len(), "complete": state.trace.end_record().is_some()})
        })
        .collect();
    json!({ "traces": list })
}
