//! `/api/diff`: what grew and shrank per site between two moments, and the growth's flame
//! graph.

use super::common::{MAX_LIMIT, mark_estimates, with_raw};
use super::flame::tree;
use crate::serve::index::Live;
use crate::serve::query::{ApiError, At, Params, marker, moment};
use crate::serve::state::State;
use crate::serve::view::{Query, view};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// `/api/diff`: the answer's JSON; between two traces (`from_trace`, `to_trace`: ids of
/// `traces`, each defaulting to `trace`) when they differ.
pub fn diff(traces: &[&State], trace: usize, params: &Params) -> Result<Vec<u8>, ApiError> {
    let side = |name: &str| -> Result<usize, ApiError> {
        match params.get(name) {
            None | Some("") => Ok(trace),
            Some(text) => text
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&i| i < traces.len())
                .ok_or_else(|| {
                    ApiError::bad(format!(
                        "{name}={text:?}: a trace id, 0 to {}",
                        traces.len() - 1
                    ))
                }),
        }
    };
    let (from_trace, to_trace) = (side("from_trace")?, side("to_trace")?);
    if from_trace != to_trace {
        return between(
            traces[from_trace],
            traces[to_trace],
            params,
            from_trace,
            to_trace,
        );
    }
    // Both sides in one trace: that trace's diff.
    let state = traces[from_trace];
    let rest = filters(params);
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
    let changed: Vec<(i128, u32, Live, Live)> = per_site
        .into_iter()
        .filter(|(_, (a, b))| a != b)
        .map(|(id, (a, b))| (i128::from(b.0) - i128::from(a.0), id, a, b))
        .collect();
    let total_sites = changed.len();
    let changed = ordered(changed, limit);
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
    let mut answer = json!({
        "from_ns": from.time(totals),
        "to_ns": to.time(totals),
        "total_sites": total_sites,
        "sites": sites,
    });
    mark_estimates(state, &mut answer);
    Ok(with_raw(&answer, "flame", &flame))
}

/// The sites that changed as the answer lists them: the growth first, the largest first, then
/// those whose bytes did not change, then the shrinkage, the largest first; beyond `limit`, the
/// largest growths and the largest shrinkages. Ties by `.1`.
fn ordered<K: Ord, T>(mut changed: Vec<(i128, K, T, T)>, limit: usize) -> Vec<(i128, K, T, T)> {
    changed.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
    // The largest growth first, then the largest shrinkage: a long list keeps both ends.
    if changed.len() > limit {
        let tail = changed.split_off(changed.len() - limit / 2);
        changed.truncate(limit - limit / 2);
        changed.extend(tail);
    }
    // Shrinkage last, but the largest first.
    let shrank = changed.partition_point(|c| c.0 >= 0);
    changed[shrank..].sort_by(|x, y| x.0.cmp(&y.0).then(x.1.cmp(&y.1)));
    changed
}

/// Per call site context: the site's id in its trace, and its live bytes and blocks.
type ByContext = BTreeMap<String, (u32, Live)>;

/// One side of a diff between traces: per call site context (its frames' function, file and
/// line), the site's id and its live bytes and blocks at the moment.
fn side(
    state: &State,
    params: &Params,
    rest: &Params,
    name: &str,
    default: At,
) -> Result<(At, ByContext), ApiError> {
    let mut q = Query::parse(state, rest)?;
    let marker_name = format!("marker_{name}");
    let at = match (params.get(name), params.get(&marker_name)) {
        (_, Some(label)) => marker(state, &marker_name, label)?,
        (Some(text), None) => moment(state, name, text)?,
        (None, None) => default,
    };
    (q.lo, q.hi) = (None, u64::MAX);
    let classes = state.classes.list.len();
    let v = view(state, &q, &[&at], None)?;
    let live = v.live(&at, classes);
    let mut per_site: BTreeMap<u32, Live> = BTreeMap::new();
    for (class, l) in live.iter().enumerate() {
        let entry = per_site.entry(state.site_of_class(class)).or_default();
        entry.0 += l.0;
        entry.1 += l.1;
    }
    let mut by_context = BTreeMap::new();
    for (id, l) in per_site {
        let key: Vec<String> = state.sites[id as usize]
            .context
            .iter()
            .map(|f| format!("{}\u{1}{}\u{1}{}", f.function, f.short_file(), f.line))
            .collect();
        let entry = by_context.entry(key.join("\u{2}")).or_insert((id, (0, 0)));
        entry.1.0 += l.0;
        entry.1.1 += l.1;
    }
    Ok((at, by_context))
}

/// The parameters but the two moments and their traces: `from` and `to` are the diff's two
/// moments (either may come first), not a range, and every other parameter is a filter.
fn filters(params: &Params) -> Params {
    const MOMENTS: [&str; 6] = [
        "from",
        "to",
        "marker_from",
        "marker_to",
        "from_trace",
        "to_trace",
    ];
    Params(
        params
            .0
            .iter()
            .filter(|(name, _)| !MOMENTS.contains(&name.as_str()))
            .cloned()
            .collect(),
    )
}

/// `/api/diff` between two traces: trace `a` at `from`, trace `b` at `to`, by call site context.
fn between(
    a: &State,
    b: &State,
    params: &Params,
    a_id: usize,
    b_id: usize,
) -> Result<Vec<u8>, ApiError> {
    let rest = filters(params);
    let limit = params.number("limit")?.unwrap_or(1000);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::bad(format!("limit={limit}: 1 to {MAX_LIMIT}")));
    }
    let (from, mut from_sites) = side(a, params, &rest, "from", At::End)?;
    let (to, to_sites) = side(b, params, &rest, "to", At::End)?;
    type Side = Option<(u32, Live)>;
    let mut both: BTreeMap<String, (Side, Side)> = BTreeMap::new();
    for (key, found) in to_sites {
        both.insert(key.clone(), (from_sites.remove(&key), Some(found)));
    }
    for (key, found) in from_sites {
        both.insert(key, (Some(found), None));
    }
    let changed: Vec<(i128, String, Side, Side)> = both
        .into_iter()
        .map(|(key, (x, y))| {
            let bytes = |s: &Side| s.map_or(0, |s| s.1.0);
            (i128::from(bytes(&y)) - i128::from(bytes(&x)), key, x, y)
        })
        .filter(|(_, _, x, y)| x.map_or((0, 0), |s| s.1) != y.map_or((0, 0), |s| s.1))
        .collect();
    let total_sites = changed.len();
    let sites: Vec<Value> = ordered(changed, limit as usize)
        .into_iter()
        .map(|(delta, _, x, y)| {
            let live = |s: &Side| s.map_or((0, 0), |s| s.1);
            let (xl, yl) = (live(&x), live(&y));
            let mut site = json!({
                "from_id": x.map(|s| s.0), "to_id": y.map(|s| s.0),
                "from_bytes": xl.0, "to_bytes": yl.0, "delta_bytes": delta as i64,
                "from_blocks": xl.1, "to_blocks": yl.1,
                "delta_blocks": (i128::from(yl.1) - i128::from(xl.1)) as i64,
            });
            if let Value::Object(members) = &mut site {
                match (x, y) {
                    (_, Some((id, _))) => b.sites[id as usize].names(members),
                    (Some((id, _)), None) => a.sites[id as usize].names(members),
                    (None, None) => {}
                }
            }
            site
        })
        .collect();
    let answer = json!({
        "from_trace": a_id,
        "to_trace": b_id,
        "from_ns": from.time(&a.index.totals),
        "to_ns": to.time(&b.index.totals),
        "total_sites": total_sites,
        "sites": sites,
        "estimated": a.index.totals.sample_interval != 0 || b.index.totals.sample_interval != 0,
        "from_sample_interval": a.index.totals.sample_interval,
        "to_sample_interval": b.index.totals.sample_interval,
    });
    Ok(serde_json::to_vec(&answer).unwrap_or_default())
}
