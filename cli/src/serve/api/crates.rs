//! `/api/crates`: the blocks live at a moment and those allocated up to it, per crate (the
//! crate table of `memprof::log_crates`, by its rule), with the same moment, range and filters
//! as the exports; `by=caller-crate` also names the program's own crate that called each.

use super::export::live_heap;
use crate::serve::query::{ApiError, At, Params};
use crate::serve::state::State;
use crate::serve::view::Query;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// The crates at the query's moment, most live bytes first: each with its name (`caller ←
/// crate` by caller crate), its live bytes and blocks and the bytes and blocks allocated
/// (within the range, passing the filters); and their total.
pub fn crates(state: &State, params: &Params) -> Result<Value, ApiError> {
    let by_caller = match params.get("by") {
        None | Some("" | "crate") => false,
        Some("caller-crate") => true,
        Some(other) => {
            return Err(ApiError::bad(format!(
                "by={other:?}: crate or caller-crate"
            )));
        }
    };
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
    // Each stack's crate, worked out once per stack (as `memprof::Report::crates` would each
    // time), and the rows in its order: most live bytes, then most allocated, then by name.
    let names = state.stack_crates_by(by_caller);
    let mut sums: HashMap<Arc<str>, [u64; 4]> = HashMap::new();
    for (stack, name) in snapshot.stacks.iter().zip(&names) {
        if stack.allocated_blocks == 0 && stack.live_blocks == 0 {
            continue;
        }
        let row = sums.entry(name.clone()).or_default();
        for (sum, figure) in row.iter_mut().zip([
            stack.live_bytes,
            stack.live_blocks,
            stack.allocated_bytes,
            stack.allocated_blocks,
        ]) {
            *sum += figure;
        }
    }
    let mut rows: Vec<(Arc<str>, [u64; 4])> = sums.into_iter().collect();
    rows.sort_by(|a, b| {
        b.1[0]
            .cmp(&a.1[0])
            .then(b.1[2].cmp(&a.1[2]))
            .then_with(|| a.0.cmp(&b.0))
    });
    let mut total = [0u64; 4];
    let crates: Vec<Value> = rows
        .into_iter()
        .map(|(name, figures)| {
            for (sum, figure) in total.iter_mut().zip(figures) {
                *sum += figure;
            }
            let [live_bytes, live_blocks, bytes, blocks] = figures;
            json!({
                "crate": &*name,
                "live_bytes": live_bytes,
                "live_blocks": live_blocks,
                "allocated_bytes": bytes,
                "allocated_blocks": blocks,
            })
        })
        .collect();
    let [live_bytes, live_blocks, bytes, blocks] = total;
    let mut answer = json!({
        "time_ns": time,
        "crates": crates,
        "total": {
            "live_bytes": live_bytes,
            "live_blocks": live_blocks,
            "allocated_bytes": bytes,
            "allocated_blocks": blocks,
        },
    });
    super::common::mark_estimates(state, &mut answer);
    Ok(answer)
}
