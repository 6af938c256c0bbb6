//! `/api/diff`: what grew and shrank per site between two moments, and the growth's flame
//! graph.

use super::flame::tree;
use super::view::{Query, marker, moment, view};
use super::{MAX_LIMIT, with_raw};
use crate::serve::index::Live;
use crate::serve::query::{ApiError, At, Params};
use crate::serve::state::State;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// `/api/diff`: the answer's JSON.
pub fn diff(state: &State, params: &Params) -> Result<Vec<u8>, ApiError> {
    // `from` and `to` are the two moments (either may come first), not a range.
    let moments = ["from", "to", "marker_from", "marker_to"];
    let rest = Params(
        params
            .0
            .iter()
            .filter(|(name, _)| !moments.contains(&name.as_str()))
            .cloned()
            .collect(),
    );
    let mut q = Query::parse(state, &rest)?;
    let from = match (params.get("from"), params.get("marker_from")) {
        (_, Some(label)) => marker(state, "marker_from", label)?,
        (Some(text), None) => moment(state, "from", text)?,
        (None, None) => At::Time(0),
    };
    let to = match (params.get("to"), params.get("marker_to")) {
        (_, Some(label)) => marker(state, "marker_to", label)?,
        (Some(text), None) => moment(state, "to", text)?,
        (None, None) => At::End,
    };
    let limit = params.number("limit")?.unwrap_or(1000);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::bad(format!("limit={limit}: 1 to {MAX_LIMIT}")));
    }
    let limit = limit as usize;
    // The two moments are the question; no range.
    (q.lo, q.hi) = (None, u64::MAX);
    let classes = state.classes.list.len();
    let v = view(state, &q, &[&from, &to], None)?;
    let (a, b) = (v.live(&from, classes), v.live(&to, classes));
    let mut per_site: BTreeMap<u32, (Live, Live)> = BTreeMap::new();
    for class in 0..classes {
        let entry = per_site.entry(state.site_of_class(class)).or_default();
        entry.0.0 += a[class].0;
        entry.0.1 += a[class].1;
        entry.1.0 += b[class].0;
        entry.1.1 += b[class].1;
    }
    let mut changed: Vec<(i128, u32, Live, Live)> = per_site
        .into_iter()
        .filter(|(_, (a, b))| a != b)
        .map(|(id, (a, b))| (i128::from(b.0) - i128::from(a.0), id, a, b))
        .collect();
    changed.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
    let total_sites = changed.len();
    // The largest growth first, then the largest shrinkage: a long list keeps both ends.
    if changed.len() > limit {
        let tail = changed.split_off(changed.len() - limit / 2);
        changed.truncate(limit - limit / 2);
        changed.extend(tail);
    }
    // Shrinkage last, but the largest first.
    let shrank = changed.partition_point(|c| c.0 >= 0);
    changed[shrank..].sort_by(|x, y| x.0.cmp(&y.0).then(x.1.cmp(&y.1)));
    let sites: Vec<Value> = changed
        .into_iter()
        .map(|(delta, id, a, b)| {
            let mut site = json!({
                "id": id,
                "from_bytes": a.0, "to_bytes": b.0, "delta_bytes": delta as i64,
                "from_blocks": a.1, "to_blocks": b.1,
                "delta_blocks": (i128::from(b.1) - i128::from(a.1)) as i64,
            });
            if let Value::Object(members) = &mut site {
                state.sites[id as usize].names(members);
            }
            site
        })
        .collect();
    let growth = (0..classes).map(|c| (c, b[c].0.saturating_sub(a[c].0)));
    let totals = &state.index.totals;
    let flame = tree(state, growth).to_json();
    let answer = json!({
        "from_ns": from.time(totals),
        "to_ns": to.time(totals),
        "total_sites": total_sites,
        "sites": sites,
    });
    Ok(with_raw(&answer, "flame", &flame))
}
