//! What the endpoints share: the reply, the limits on what a request may ask, and pieces of
//! JSON (a member written raw, the markers of a range, the index's bucket width).

use crate::serve::index::{Agg, Edges};
use crate::serve::query::ApiError;
use crate::serve::state::State;
use serde_json::{Value, json};

/// A reply's body and how to send it.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// A file name for `Content-Disposition`.
    pub file_name: Option<String>,
}

impl Reply {
    /// A JSON reply.
    pub fn json(value: &Value) -> Reply {
        Reply {
            status: 200,
            content_type: "application/json",
            body: serde_json::to_vec(value).unwrap_or_default(),
            file_name: None,
        }
    }

    /// A JSON reply already written.
    pub fn json_text(body: Vec<u8>) -> Reply {
        Reply {
            status: 200,
            content_type: "application/json",
            body,
            file_name: None,
        }
    }

    /// An error as JSON.
    pub fn error(error: &ApiError) -> Reply {
        Reply {
            status: error.status,
            ..Reply::json(&json!({ "error": error.message }))
        }
    }
}

pub const MAX_POINTS: u64 = 10_000;
/// Markers listed in a summary or a timeline; `/api/markers` lists them all.
pub const MARKERS_LISTED: usize = 1_000;
pub const MAX_LIMIT: u64 = 100_000;
/// Index buckets a timeline needs in its range before the index draws it.
pub const MIN_INDEX_POINTS: usize = 100;

/// `object` (a JSON object) written with one more member, `key`, whose value is the JSON text
/// `raw` (a flame graph, written without recursion).
pub fn with_raw(object: &Value, key: &str, raw: &str) -> Vec<u8> {
    let mut out = serde_json::to_vec(object).unwrap_or_default();
    if out.pop() != Some(b'}') {
        out = b"{".to_vec();
    }
    if out.len() > 1 {
        out.push(b',');
    }
    out.extend_from_slice(&serde_json::to_vec(key).unwrap_or_default());
    out.push(b':');
    out.extend_from_slice(raw.as_bytes());
    out.push(b'}');
    out
}

pub fn width(agg: &Agg) -> u64 {
    match agg.edges {
        Edges::Uniform(w) => w,
        Edges::Explicit(_) => 0,
    }
}

/// The markers with a time in `(lo, hi]` (all when unbounded), at most `limit` of them (the
/// first), and how many there are in all.
pub fn markers(
    state: &State,
    lo: Option<u64>,
    hi: Option<u64>,
    limit: usize,
) -> (Vec<Value>, usize) {
    let within =
        |m: &&(u64, u64, u32)| lo.is_none_or(|lo| m.0 > lo) && hi.is_none_or(|hi| m.0 <= hi);
    let all = &state.index.totals.markers;
    let listed = all
        .iter()
        .filter(within)
        .take(limit)
        .map(|&(time, _, label)| {
            let label = state.labels.get(&label).map_or("", String::as_str);
            json!({"time_ns": time, "label": label})
        })
        .collect();
    (listed, all.iter().filter(within).count())
}

/// Marks `answer` (a JSON object) as estimated or not: `estimated` (whether its blocks and bytes
/// are estimates, the trace being sampled) and `sample_interval` (bytes per sample on average; 0:
/// every allocation recorded).
pub fn mark_estimates(state: &State, answer: &mut Value) {
    let interval = state.index.totals.sample_interval;
    if let Value::Object(members) = answer {
        members.insert("estimated".into(), (interval != 0).into());
        members.insert("sample_interval".into(), interval.into());
    }
}
