//! The REST API (docs/viewer-api.md): each endpoint reads its parameters, asks the index when
//! the question is one it answers exactly (filters on whole classes, moments on its bucket edges,
//! the peak, a marker, the end), else scans the trace once for the query, and writes JSON. This
//! file routes a request to its endpoint; one file per endpoint family, what they share of the
//! reply in [`common`], and below them the query resolved into the index or a scan
//! ([`super::view`]).

mod allocations;
mod common;
mod diff;
mod export;
mod flame;
mod crates;
mod labels;
mod mappings;
mod sites;
mod summary;
mod timeline;

pub use common::Reply;

use super::query::{ApiError, Params};
use super::state::State;
use super::view::Query;

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
            let q = Query::parse(state, &params)?;
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
        "/api/crates" => crates::crates(state, &params).map(|v| Reply::json(&v)),
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
