//! The REST API (docs/viewer-api.md): each endpoint reads its parameters, asks the index when
//! the question is one it answers exactly (filters on whole classes, moments on its bucket edges,
//! the peak, a marker, the end), else scans the trace once for the query, and writes JSON. One
//! file per endpoint family; [`view`] holds what they share: a query's moments and filters, and
//! the index or the scan that answers it.

mod allocations;
mod diff;
mod export;
mod flame;
mod groups;
mod labels;
mod mappings;
mod sites;
mod summary;
mod timeline;
mod view;

use super::index::Agg;
use super::query::{ApiError, Params};
use super::state::State;
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

const MAX_POINTS: u64 = 10_000;
/// Markers listed in a summary or a timeline; `/api/markers` lists them all.
const MARKERS_LISTED: usize = 1_000;
const MAX_LIMIT: u64 = 100_000;
/// Index buckets a timeline needs in its range before the index draws it.
const MIN_INDEX_POINTS: usize = 100;
/// Scans kept for the queries that follow (a page asks for a view, then the same view again).
const CACHED_SCANS: usize = 4;

/// Answers one API request over the traces served: `/api/traces` lists them,
/// `/api/traces/ID/...` asks trace `ID`, every other path the first.
pub fn route(traces: &[&State], path: &str, query: &str) -> Result<Reply, ApiError> {
    let endpoint = path.trim_end_matches('/');
    if endpoint == "/api/traces" {
        return Ok(Reply::json(&summary::traces(traces)));
    }
    if let Some(rest) = endpoint.strip_prefix("/api/traces/") {
        let (id, rest) = rest.split_once('/').unwrap_or((rest, ""));
        let trace = id
            .parse::<usize>()
            .ok()
            .filter(|&i| i < traces.len())
            .ok_or_else(|| {
                ApiError::not_found(format!(
                    "trace {id:?}: the server has traces 0 to {}",
                    traces.len() - 1
                ))
            })?;
        return answer(traces, trace, &format!("/api/{rest}"), query);
    }
    answer(traces, 0, path, query)
}

/// Answers one API request about trace `trace` of `traces`.
fn answer(traces: &[&State], trace: usize, path: &str, query: &str) -> Result<Reply, ApiError> {
    let state = traces[trace];
    let params = Params::parse(query)?;
    let endpoint = path.trim_end_matches('/');
    match endpoint {
        "/api/summary" => Ok(Reply::json(&summary::summary(state))),
        "/api/markers" => Ok(Reply::json(&summary::all_markers(state))),
        "/api/timeline" => {
            let q = view::Query::parse(state, &params)?;
            Ok(Reply::json(&timeline::timeline(state, &q, &params, None)?))
        }
        "/api/sites" => sites::sites(state, &params).map(|v| Reply::json(&v)),
        "/api/flame" => flame::flame(state, &params).map(|body| match params.get("format") {
            Some("text") => Reply {
                content_type: "text/plain; charset=utf-8",
                ..Reply::json_text(body.into())
            },
            _ => Reply::json_text(body.into()),
        }),
        "/api/diff" => diff::diff(traces, trace, &params).map(Reply::json_text),
        "/api/mappings" => mappings::mappings(state, &params).map(|v| Reply::json(&v)),
        "/api/labels" => labels::labels(state, &params).map(|v| Reply::json(&v)),
        "/api/allocations" => allocations::allocations(state, &params).map(|v| Reply::json(&v)),
        _ => {
            if let Some(id) = endpoint.strip_prefix("/api/site/") {
                return sites::site(state, id, &params).map(|v| Reply::json(&v));
            }
            if let Some(format) = endpoint.strip_prefix("/api/export/") {
                return export::export(state, format, &params);
            }
            Err(ApiError::not_found(format!("no endpoint {path}")))
        }
    }
}

/// `object` (a JSON object) written with one more member, `key`, whose value is the JSON text
/// `raw` (a flame graph, written without recursion).
fn with_raw(object: &Value, key: &str, raw: &str) -> Vec<u8> {
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

fn width(agg: &Agg) -> u64 {
    match agg.edges {
        super::index::Edges::Uniform(w) => w,
        super::index::Edges::Explicit(_) => 0,
    }
}

/// The markers with a time in `(lo, hi]` (all when unbounded), at most `limit` of them (the
/// first), and how many there are in all.
fn markers(state: &State, lo: Option<u64>, hi: Option<u64>, limit: usize) -> (Vec<Value>, usize) {
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
