//! The REST API (docs/viewer-api.md): each endpoint reads its parameters, asks the index when
//! the question is one it answers exactly (filters on whole classes, moments on its bucket edges,
//! the peak, a marker, the end), else scans the trace once for the query, and writes JSON.

use super::index::{Agg, Builder, Cell, Live, Point, Selection};
use super::query::{ApiError, At, Filters, Params};
use super::state::State;
use memprof::trace::replay::{Block, Event, Heap, LiveBlocks};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

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

    /// An error as JSON.
    pub fn error(error: &ApiError) -> Reply {
        Reply {
            status: error.status,
            ..Reply::json(&json!({ "error": error.message }))
        }
    }
}

const MAX_POINTS: u64 = 10_000;
const MAX_LIMIT: u64 = 100_000;
/// Index buckets a timeline needs in its range before the index draws it.
const MIN_INDEX_POINTS: usize = 100;
/// Scans kept for the queries that follow (a page asks for a view, then the same view again).
const CACHED_SCANS: usize = 4;

/// Answers one API request.
pub fn answer(state: &State, path: &str, query: &str) -> Result<Reply, ApiError> {
    let params = Params::parse(query)?;
    let endpoint = path.trim_end_matches('/');
    match endpoint {
        "/api/summary" => Ok(Reply::json(&summary(state))),
        "/api/timeline" => {
            let q = Query::parse(state, &params)?;
            Ok(Reply::json(&timeline(state, &q, &params, None)?))
        }
        "/api/sites" => sites(state, &params).map(|v| Reply::json(&v)),
        "/api/flame" => flame(state, &params).map(|v| Reply::json(&v)),
        "/api/diff" => diff(state, &params).map(|v| Reply::json(&v)),
        _ => {
            if let Some(id) = endpoint.strip_prefix("/api/site/") {
                return site(state, id, &params).map(|v| Reply::json(&v));
            }
            if let Some(format) = endpoint.strip_prefix("/api/export/") {
                return export(state, format, &params);
            }
            Err(ApiError::not_found(format!("no endpoint {path}")))
        }
    }
}

fn summary(state: &State) -> Value {
    let trace = &state.trace;
    let totals = &state.index.totals;
    let mut threads: Vec<(u32, &str)> = trace
        .threads()
        .iter()
        .map(|(&id, (_, name))| (id, name.as_str()))
        .collect();
    threads.sort_unstable();
    json!({
        "path": trace.path().display().to_string(),
        "events": trace.events(),
        "duration_ns": totals.last_time,
        "sample_interval": trace.header().sample_interval,
        "threads": threads.iter().map(|(id, name)| json!({"id": id, "name": name})).collect::<Vec<_>>(),
        "markers": markers(state, None, None),
        "peak": {"time_ns": totals.peak_time, "bytes": totals.peak.0, "blocks": totals.peak.1},
        "end": {"bytes": totals.end.0, "blocks": totals.end.1},
        "totals": {
            "allocations": totals.allocations,
            "reallocs": totals.reallocs,
            "frees": totals.frees,
            "allocated_bytes": totals.allocated_bytes,
            "temporary": totals.temporary,
        },
        "bucket_ns": width(&state.index),
        "complete": trace.end_record().is_some(),
    })
}

fn width(agg: &Agg) -> u64 {
    match agg.edges {
        super::index::Edges::Uniform(w) => w,
        super::index::Edges::Explicit(_) => 0,
    }
}

/// The markers with a time in `(lo, hi]` (all when unbounded).
fn markers(state: &State, lo: Option<u64>, hi: Option<u64>) -> Vec<Value> {
    state
        .index
        .totals
        .markers
        .iter()
        .filter(|(t, _, _)| lo.is_none_or(|lo| *t > lo) && hi.is_none_or(|hi| *t <= hi))
        .map(|&(time, _, label)| {
            json!({"time_ns": time, "label": state.labels.get(&label).cloned().unwrap_or_default()})
        })
        .collect()
}

/// The moments and filters of a query.
#[derive(Debug)]
struct Query {
    filters: Filters,
    classes: Option<Vec<bool>>,
    at: At,
    /// The range: events after `lo` (none: from the first) up to and with `hi`.
    lo: Option<u64>,
    hi: u64,
}

impl Query {
    fn parse(state: &State, params: &Params) -> Result<Query, ApiError> {
        let filters = Filters::parse(params)?;
        let classes = filters.classes(&state.classes, state.trace.stacks(), &state.frames);
        let totals = &state.index.totals;
        let at = match params.get("at") {
            Some(text) => moment(state, "at", text)?,
            None => At::End,
        };
        let from = match (params.get("from"), params.get("marker_from")) {
            (_, Some(label)) => Some(marker(state, "marker_from", label)?),
            (Some("start") | None, None) => None,
            (Some(text), None) => Some(moment(state, "from", text)?),
        };
        let to = match (params.get("to"), params.get("marker_to")) {
            (_, Some(label)) => marker(state, "marker_to", label)?,
            (Some(text), None) => moment(state, "to", text)?,
            (None, None) => At::End,
        };
        let lo = from.map(|f| f.time(totals));
        let hi = match to {
            At::End => u64::MAX,
            ref to => to.time(totals),
        };
        if let Some(lo) = lo
            && lo > hi
        {
            return Err(ApiError::bad(format!(
                "from ({lo} ns) is after to ({hi} ns)"
            )));
        }
        Ok(Query {
            filters,
            classes,
            at,
            lo,
            hi,
        })
    }
}

fn moment(state: &State, name: &str, text: &str) -> Result<At, ApiError> {
    super::query::moment(
        name,
        text,
        &state.index.totals,
        &|l| state.label(l),
        &|| state.marker_names(),
    )
}

fn marker(state: &State, name: &str, label: &str) -> Result<At, ApiError> {
    super::query::marker(
        name,
        label,
        &state.index.totals,
        &|l| state.label(l),
        &|| state.marker_names(),
    )
}

/// The aggregates that answer a query: the index (with the classes not selected masked), or a
/// scan made for it.
struct View<'a> {
    agg: ViewAgg<'a>,
    mask: Option<Vec<bool>>,
    last_time: u64,
    /// With the index: a scan to the moments it does not hold.
    extra: Option<Arc<Agg>>,
}

enum ViewAgg<'a> {
    Index(&'a Agg),
    Scan(Arc<Agg>),
}

impl View<'_> {
    fn agg(&self) -> &Agg {
        match &self.agg {
            ViewAgg::Index(agg) => agg,
            ViewAgg::Scan(agg) => agg,
        }
    }

    fn is_index(&self) -> bool {
        matches!(self.agg, ViewAgg::Index(_))
    }

    fn masked(&self, class: usize) -> bool {
        self.mask
            .as_ref()
            .is_some_and(|m| !m.get(class).copied().unwrap_or(false))
    }

    /// Live per class at a moment the view answers.
    fn live(&self, at: &At, classes: usize) -> Vec<Live> {
        let agg = self.agg();
        let point = match at {
            At::Time(t) => Point::Time(*t),
            At::Peak { events, .. } | At::Marker { events, .. } => Point::Events(*events),
            At::End => Point::Events(u64::MAX),
        };
        let from_extra = self.extra.as_ref().and_then(|e| e.points.get(&point));
        let mut live = match (at, self.is_index()) {
            _ if from_extra.is_some() => from_extra.cloned().unwrap_or_default(),
            (At::End, _) => agg.end.clone(),
            (At::Time(t), _) if self.is_index() && *t >= self.last_time => agg.end.clone(),
            (At::Time(t), true) => agg.live_through(agg.edges.ending_at(*t).unwrap_or(0), classes),
            (At::Time(t), false) => agg
                .points
                .get(&Point::Time(*t))
                .cloned()
                .unwrap_or_default(),
            (At::Peak { events, .. }, _) => agg
                .points
                .get(&Point::Events(*events))
                .cloned()
                .unwrap_or_default(),
            (At::Marker { label, .. }, true) => {
                agg.marker_live.get(label).cloned().unwrap_or_default()
            }
            (At::Marker { events, .. }, false) => agg
                .points
                .get(&Point::Events(*events))
                .cloned()
                .unwrap_or_default(),
        };
        live.resize(classes, (0, 0));
        for (class, entry) in live.iter_mut().enumerate() {
            if self.masked(class) {
                *entry = (0, 0);
            }
        }
        live
    }

    /// The buckets of the range `(lo, hi]`.
    fn buckets(&self, lo: Option<u64>, hi: u64) -> (usize, usize) {
        let edges = &self.agg().edges;
        let first = match lo {
            None => 0,
            Some(lo) => edges.ending_at(lo).map_or(usize::MAX, |b| b + 1),
        };
        let last = if hi == u64::MAX || (self.is_index() && hi >= self.last_time) {
            usize::MAX
        } else {
            edges.ending_at(hi).unwrap_or(0)
        };
        (first, last)
    }

    /// Per class, the counters of the range.
    fn range(&self, lo: Option<u64>, hi: u64, classes: usize) -> Vec<Cell> {
        if lo.is_some_and(|lo| self.is_index() && lo >= self.last_time) {
            return vec![Cell::default(); classes];
        }
        let (first, last) = self.buckets(lo, hi);
        let mut sums = self.agg().sum(first, last, classes);
        for (class, cell) in sums.iter_mut().enumerate() {
            if self.masked(class) {
                *cell = Cell::default();
            }
        }
        sums
    }
}

/// Whether the index answers a moment exactly.
fn index_has(state: &State, at: &At) -> bool {
    let index = &state.index;
    match at {
        At::End | At::Peak { .. } => true,
        At::Marker { label, .. } => index.marker_live.contains_key(label),
        At::Time(t) => *t >= index.totals.last_time || index.edges.ending_at(*t).is_some(),
    }
}

fn index_has_range(state: &State, lo: Option<u64>, hi: u64) -> bool {
    let index = &state.index;
    let last = index.totals.last_time;
    lo.is_none_or(|lo| lo >= last || index.edges.ending_at(lo).is_some())
        && (hi >= last || index.edges.ending_at(hi).is_some())
}

/// The view of `q` at `ats`, with the timeline's bucket edges when a scan must draw it.
fn view<'a>(
    state: &'a State,
    q: &Query,
    ats: &[&At],
    timeline_edges: Option<&[u64]>,
) -> Result<View<'a>, ApiError> {
    let last_time = state.index.totals.last_time;
    if q.filters.by_class_only() && index_has_range(state, q.lo, q.hi) && timeline_edges.is_none() {
        // The index, and a scan up to the moments it does not hold (if any).
        let mut missing: Vec<Point> = Vec::new();
        for at in ats.iter().filter(|at| !index_has(state, at)) {
            missing.push(match at {
                At::Time(t) => Point::Time(*t),
                At::Peak { events, .. } | At::Marker { events, .. } => Point::Events(*events),
                At::End => continue,
            });
        }
        let extra = if missing.is_empty() {
            None
        } else {
            missing.sort_unstable_by_key(|p| format!("{p:?}"));
            missing.dedup();
            let key = format!("points {:?}|{missing:?}", q.classes);
            let selection = q.filters.selection(q.classes.clone());
            Some(scan(state, key, None, selection, missing)?)
        };
        return Ok(View {
            agg: ViewAgg::Index(&state.index),
            mask: q.classes.clone(),
            last_time,
            extra,
        });
    }
    let mut edges: Vec<u64> = timeline_edges.map(<[u64]>::to_vec).unwrap_or_default();
    edges.extend(q.lo);
    if q.hi != u64::MAX {
        edges.push(q.hi);
    }
    edges.sort_unstable();
    edges.dedup();
    let totals = &state.index.totals;
    let mut points = vec![Point::Events(totals.peak_events)];
    for at in ats {
        points.push(match at {
            At::Time(t) => Point::Time(*t),
            At::Peak { events, .. } | At::Marker { events, .. } => Point::Events(*events),
            At::End => continue,
        });
    }
    points.sort_unstable_by_key(|p| format!("{p:?}"));
    points.dedup();
    let selection = q.filters.selection(q.classes.clone());
    let key = format!("{:?}|{edges:?}|{points:?}", selection_key(&selection));
    let agg = scan(state, key, Some(edges), selection, points)?;
    Ok(View {
        agg: ViewAgg::Scan(agg),
        mask: None,
        last_time,
        extra: None,
    })
}

fn selection_key(selection: &Selection) -> String {
    format!(
        "{:?} {:?} {:?} {} {}",
        selection.classes, selection.size, selection.life, selection.never, selection.temporary
    )
}

/// A scan of the trace for a query, or the same scan made for an earlier query; without edges,
/// a scan for the live heap at `points` only, which stops after the last of them.
fn scan(
    state: &State,
    key: String,
    edges: Option<Vec<u64>>,
    selection: Selection,
    points: Vec<Point>,
) -> Result<Arc<Agg>, ApiError> {
    let cached = |state: &State| {
        state
            .scans
            .lock()
            .ok()
            .and_then(|s| s.iter().find(|(k, _)| *k == key).map(|(_, a)| a.clone()))
    };
    if let Some(agg) = cached(state) {
        return Ok(agg);
    }
    let _one_at_a_time = state
        .scanning
        .lock()
        // A scan that failed (a 500) leaves nothing half-made behind the lock.
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(agg) = cached(state) {
        return Ok(agg);
    }
    let mut builder = match edges {
        Some(edges) => Builder::scan(&state.classes, edges, selection, points),
        None => Builder::points_only(&state.classes, selection, points),
    };
    state
        .trace
        .for_each_event(
            &mut |timed| {
                if builder.past(timed) {
                    return ControlFlow::Break(());
                }
                builder.event(timed);
                ControlFlow::Continue(())
            },
            &mut |_| {},
        )
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let agg = Arc::new(builder.finish().0);
    if let Ok(mut scans) = state.scans.lock() {
        if scans.len() >= CACHED_SCANS {
            scans.remove(0);
        }
        scans.push((key, agg.clone()));
    }
    Ok(agg)
}

fn points_param(params: &Params) -> Result<u64, ApiError> {
    let points = params.number("points")?.unwrap_or(800);
    if points == 0 || points > MAX_POINTS {
        return Err(ApiError::bad(format!(
            "points={points}: between 1 and {MAX_POINTS}"
        )));
    }
    Ok(points)
}

/// `/api/timeline`, also a site's timeline (`only`: its classes).
fn timeline(
    state: &State,
    q: &Query,
    params: &Params,
    only: Option<&[bool]>,
) -> Result<Value, ApiError> {
    let points = points_param(params)? as usize;
    let index = &state.index;
    let totals = &index.totals;
    let classes = state.classes.list.len();
    let last_time = totals.last_time;
    let hi = q.hi.min(last_time);
    let lo = q.lo.map(|lo| lo.min(hi));
    let mask: Option<Vec<bool>> = match (&q.classes, only) {
        (None, None) => None,
        (a, b) => Some(
            (0..classes)
                .map(|c| {
                    a.as_ref().is_none_or(|a| a[c]) && b.is_none_or(|b| b.get(c) == Some(&true))
                })
                .collect(),
        ),
    };
    // The index draws the timeline when the range holds enough of its buckets.
    let w = width(index);
    let (first, last) = (
        lo.map_or(0, |lo| (lo / w) as usize + 1),
        (hi.div_ceil(w) as usize).min(index.buckets.saturating_sub(1)),
    );
    let from_index = q.filters.by_class_only()
        && last >= first
        && last + 1 - first >= MIN_INDEX_POINTS.min(points)
        || (q.filters.by_class_only() && last_time < w);
    let (agg_view, groups): (View, Vec<(usize, usize)>) = if from_index {
        let count = last + 1 - first.min(last + 1);
        let per = count.div_ceil(points).max(1);
        let groups = (first..=last)
            .step_by(per)
            .map(|start| (start, (start + per - 1).min(last)))
            .collect();
        (
            View {
                agg: ViewAgg::Index(index),
                mask: None,
                last_time,
                extra: None,
            },
            groups,
        )
    } else {
        let start = lo.unwrap_or(0);
        let span = hi.saturating_sub(start);
        let step = (span / points as u64).max(1);
        let mut edges: Vec<u64> = Vec::with_capacity(points + 1);
        if let Some(lo) = lo {
            edges.push(lo);
        }
        let mut t = start;
        while edges.len() < points + usize::from(lo.is_some()) && t < hi {
            t = (t + step).min(hi);
            edges.push(t);
        }
        if edges.last() != Some(&hi) {
            edges.push(hi);
        }
        edges.dedup();
        let plain = Query {
            filters: Filters::parse(params)?,
            classes: mask.clone(),
            at: At::End,
            lo: None,
            hi: u64::MAX,
        };
        let agg = view(state, &plain, &[], Some(&edges))?.agg;
        let offset = usize::from(lo.is_some());
        let groups = (offset..edges.len()).map(|i| (i, i)).collect();
        (
            View {
                agg,
                mask: None,
                last_time,
                extra: None,
            },
            groups,
        )
    };
    let agg = agg_view.agg();
    let last_bucket = groups.last().map_or(0, |g| g.1);
    // Per bucket up to the last: the selected classes' counters.
    let mut per = vec![Cell::default(); last_bucket + 1];
    for (class, cells) in agg.cells.iter().enumerate() {
        if agg_view.is_index() && mask.as_ref().is_some_and(|m| !m[class]) {
            continue;
        }
        for (bucket, cell) in cells {
            if *bucket as usize > last_bucket {
                break;
            }
            per[*bucket as usize].add(cell);
        }
    }
    let (mut bytes, mut blocks) = (0i128, 0i128);
    let mut out = Vec::with_capacity(groups.len());
    let mut cursor = 0;
    let mut highest: Option<(u64, u64, u64)> = None;
    for &(start, end) in &groups {
        while cursor < start {
            bytes += i128::from(per[cursor].alloc_bytes) - i128::from(per[cursor].free_bytes);
            blocks += i128::from(per[cursor].allocs) - i128::from(per[cursor].frees);
            cursor += 1;
        }
        let mut sum = Cell::default();
        for cell in &per[start..=end] {
            sum.add(cell);
            bytes += i128::from(cell.alloc_bytes) - i128::from(cell.free_bytes);
            blocks += i128::from(cell.allocs) - i128::from(cell.frees);
        }
        cursor = end + 1;
        let t = agg.edges.end(end).min(last_time.max(agg.edges.end(start)));
        let (b, k) = (bytes.max(0) as u64, blocks.max(0) as u64);
        if highest.is_none_or(|h| b > h.1) {
            highest = Some((t, b, k));
        }
        out.push(json!({
            "t_ns": t, "live_bytes": b, "live_blocks": k,
            "allocs": sum.allocs, "frees": sum.frees,
            "alloc_bytes": sum.alloc_bytes, "free_bytes": sum.free_bytes,
        }));
    }
    let from_ns = match (groups.first(), lo) {
        (Some(&(start, _)), Some(_)) if start > 0 => agg.edges.end(start - 1),
        _ => 0,
    };
    let to_ns = groups.last().map_or(hi, |&(_, end)| {
        agg.edges
            .end(end)
            .min(last_time.max(agg.edges.end(end.saturating_sub(1))))
    });
    // The exact peak within the range when the index holds it (no filter); else the highest
    // point drawn.
    let mut exact = false;
    if agg_view.is_index() && mask.is_none() {
        for &(start, end) in &groups {
            for peak in index
                .peaks
                .get(start..=end.min(index.peaks.len().saturating_sub(1)))
                .unwrap_or(&[])
            {
                if highest.is_none_or(|h| peak.bytes > h.1) {
                    highest = Some((peak.time, peak.bytes, peak.blocks));
                }
            }
        }
        exact = true;
    }
    let (pt, pb, pk) = highest.unwrap_or((0, 0, 0));
    Ok(json!({
        "from_ns": from_ns,
        "to_ns": to_ns,
        "bucket_ns": if agg_view.is_index() { w } else { 0 },
        "points": out,
        "markers": markers(state, q.lo, Some(to_ns)),
        "peak": {"time_ns": pt, "bytes": pb, "blocks": pk, "exact": exact},
    }))
}

/// One site's row.
#[derive(Clone, Debug, Default)]
struct Row {
    cell: Cell,
    live: Live,
    leaked: Live,
    peak: Live,
}

fn rows(state: &State, v: &View, q: &Query) -> Vec<Row> {
    let classes = state.classes.list.len();
    let range = v.range(q.lo, q.hi, classes);
    let live = v.live(&q.at, classes);
    let leaked = v.live(&At::End, classes);
    let totals = &state.index.totals;
    let peak = v.live(
        &At::Peak {
            events: totals.peak_events,
            time: totals.peak_time,
        },
        classes,
    );
    let mut rows = vec![Row::default(); state.sites.len()];
    for class in 0..classes {
        let row = &mut rows[state.site_of_class(class) as usize];
        row.cell.add(&range[class]);
        for (into, from) in [
            (&mut row.live, live[class]),
            (&mut row.leaked, leaked[class]),
            (&mut row.peak, peak[class]),
        ] {
            into.0 += from.0;
            into.1 += from.1;
        }
    }
    rows
}

const SITE_KEYS: [&str; 15] = [
    "id",
    "line",
    "allocations",
    "allocated_bytes",
    "frees",
    "freed_bytes",
    "live_bytes",
    "live_blocks",
    "leaked_bytes",
    "leaked_blocks",
    "peak_bytes",
    "peak_blocks",
    "temporary",
    "temporary_bytes",
    "mean_lifetime_ns",
];

fn site_json(state: &State, id: usize, row: &Row) -> Value {
    let frame = &state.sites[id].frame;
    let mean = row
        .cell
        .life_sum
        .checked_div(row.cell.life_count)
        .unwrap_or(0);
    json!({
        "id": id,
        "function": frame.function,
        "file": frame.file,
        "line": frame.line,
        "allocations": row.cell.allocs,
        "allocated_bytes": row.cell.alloc_bytes,
        "frees": row.cell.frees,
        "freed_bytes": row.cell.free_bytes,
        "live_bytes": row.live.0,
        "live_blocks": row.live.1,
        "leaked_bytes": row.leaked.0,
        "leaked_blocks": row.leaked.1,
        "peak_bytes": row.peak.0,
        "peak_blocks": row.peak.1,
        "temporary": row.cell.temporary,
        "temporary_bytes": row.cell.temporary_bytes,
        "mean_lifetime_ns": mean,
    })
}

/// A site's figure named `key` (one of [`SITE_KEYS`]).
fn sort_key(state: &State, id: usize, row: &Row, key: &str) -> u64 {
    let c = &row.cell;
    match key {
        "id" => id as u64,
        "line" => u64::from(state.sites[id].frame.line),
        "allocations" => c.allocs,
        "allocated_bytes" => c.alloc_bytes,
        "frees" => c.frees,
        "freed_bytes" => c.free_bytes,
        "live_bytes" => row.live.0,
        "live_blocks" => row.live.1,
        "leaked_bytes" => row.leaked.0,
        "leaked_blocks" => row.leaked.1,
        "peak_bytes" => row.peak.0,
        "peak_blocks" => row.peak.1,
        "temporary" => c.temporary,
        "temporary_bytes" => c.temporary_bytes,
        "mean_lifetime_ns" => c.life_sum.checked_div(c.life_count).unwrap_or(0),
        _ => 0,
    }
}

fn sites(state: &State, params: &Params) -> Result<Value, ApiError> {
    let q = Query::parse(state, params)?;
    let sort = params.get("sort").unwrap_or("allocated_bytes");
    if !SITE_KEYS.contains(&sort) {
        return Err(ApiError::bad(format!(
            "sort={sort:?}: one of {}",
            SITE_KEYS.join(", ")
        )));
    }
    let desc = match params.get("desc") {
        None | Some("1") | Some("true") => true,
        Some("0") | Some("false") => false,
        Some(other) => return Err(ApiError::bad(format!("desc={other:?}: 1 or 0"))),
    };
    let limit = params.number("limit")?.unwrap_or(100);
    if limit > MAX_LIMIT {
        return Err(ApiError::bad(format!("limit={limit}: at most {MAX_LIMIT}")));
    }
    let offset = params.number("offset")?.unwrap_or(0);
    let v = view(state, &q, &[&q.at], None)?;
    let rows = rows(state, &v, &q);
    let mut listed: Vec<(u64, usize)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.cell != Cell::default() || r.live != (0, 0) || r.leaked != (0, 0) || r.peak != (0, 0)
        })
        .map(|(id, row)| (sort_key(state, id, row, sort), id))
        .collect();
    let total = listed.len();
    listed.sort_by(|a, b| {
        let order = a.0.cmp(&b.0);
        let order = if desc { order.reverse() } else { order };
        order.then(a.1.cmp(&b.1))
    });
    let page: Vec<Value> = listed
        .into_iter()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .take(limit as usize)
        .map(|(_, id)| site_json(state, id, &rows[id]))
        .collect();
    Ok(
        json!({ "total_sites": total, "exact_from": match (v.is_index(), v.extra.is_some()) {
        (true, false) => "index",
        (true, true) => "index+scan",
        _ => "scan",
    }, "sites": page }),
    )
}

fn site(state: &State, id: &str, params: &Params) -> Result<Value, ApiError> {
    let id: usize = id
        .parse()
        .map_err(|_| ApiError::not_found(format!("site {id:?}: not a site id")))?;
    let Some(info) = state.sites.get(id) else {
        return Err(ApiError::not_found(format!(
            "site {id}: the trace has {} sites",
            state.sites.len()
        )));
    };
    let q = Query::parse(state, params)?;
    let classes = state.classes.list.len();
    let only: Vec<bool> = (0..classes)
        .map(|c| state.site_of_class(c) as usize == id)
        .collect();
    let v = view(state, &q, &[&q.at], None)?;
    let range = v.range(q.lo, q.hi, classes);
    let live = v.live(&q.at, classes);
    let mut per_stack: BTreeMap<u32, (Cell, Live)> = BTreeMap::new();
    for stack in &info.stacks {
        per_stack.insert(*stack, Default::default());
    }
    for (class, &(stack, _)) in state.classes.list.iter().enumerate() {
        if !only[class] {
            continue;
        }
        let entry = per_stack.entry(stack).or_default();
        entry.0.add(&range[class]);
        entry.1.0 += live[class].0;
        entry.1.1 += live[class].1;
    }
    let stacks: Vec<Value> = per_stack
        .iter()
        .map(|(&stack, (cell, live))| {
            let frames: Vec<Value> = state
                .stack_frames(stack)
                .map(|f| {
                    json!({"function": f.function, "file": f.file, "line": f.line,
                           "address": format!("{:#x}", f.address)})
                })
                .collect();
            json!({"id": stack, "bytes": live.0, "blocks": live.1,
                   "allocations": cell.allocs, "allocated_bytes": cell.alloc_bytes,
                   "frames": frames})
        })
        .collect();
    let timeline = timeline(state, &q, params, Some(&only))?;
    Ok(json!({
        "id": id,
        "function": info.frame.function,
        "file": info.frame.file,
        "line": info.frame.line,
        "stacks": stacks,
        "timeline": timeline,
    }))
}

/// The flame graph of per-class values: each stack's path (outermost first), merged by common
/// prefix. Frames below 1/10,000 of the whole are left out (their bytes stay in their parent's
/// value), so the tree stays small whatever the number of stacks.
fn tree(state: &State, values: impl Iterator<Item = (usize, u64)>) -> Value {
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

fn flame(state: &State, params: &Params) -> Result<Value, ApiError> {
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

fn diff(state: &State, params: &Params) -> Result<Value, ApiError> {
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
    let sites: Vec<Value> = changed
        .into_iter()
        .map(|(delta, id, a, b)| {
            let frame = &state.sites[id as usize].frame;
            json!({
                "id": id, "function": frame.function, "file": frame.file, "line": frame.line,
                "from_bytes": a.0, "to_bytes": b.0, "delta_bytes": delta as i64,
                "from_blocks": a.1, "to_blocks": b.1,
                "delta_blocks": (i128::from(b.1) - i128::from(a.1)) as i64,
            })
        })
        .collect();
    let growth = (0..classes).map(|c| (c, b[c].0.saturating_sub(a[c].0)));
    let totals = &state.index.totals;
    Ok(json!({
        "from_ns": from.time(totals),
        "to_ns": to.time(totals),
        "total_sites": total_sites,
        "sites": sites,
        "flame": tree(state, growth),
    }))
}

/// `/api/export/FORMAT`: the live heap at `at` (blocks allocated within the range and passing
/// the filters) through the crate's writers.
fn export(state: &State, format: &str, params: &Params) -> Result<Reply, ApiError> {
    use memprof::export::Format;
    let (kind, ending, content_type) = match format {
        "pprof" => (Format::Pprof, "pb.gz", "application/octet-stream"),
        "folded" => (Format::Folded, "folded", "text/plain; charset=utf-8"),
        "dhat" => (Format::Dhat, "dhat.json", "application/json"),
        "heaptrack" => (Format::Heaptrack, "heaptrack.gz", "application/gzip"),
        "md" => (Format::Markdown, "md", "text/markdown; charset=utf-8"),
        "tsv" => (
            Format::Tsv,
            "tsv",
            "text/tab-separated-values; charset=utf-8",
        ),
        other => {
            return Err(ApiError::not_found(format!(
                "export {other:?}: pprof, folded, dhat, heaptrack, md or tsv"
            )));
        }
    };
    let q = Query::parse(state, params)?;
    let trace = &state.trace;
    let stem = trace
        .path()
        .file_stem()
        .map_or("trace".into(), |s| s.to_string_lossy().into_owned());
    let reply = |body: Vec<u8>| Reply {
        status: 200,
        content_type,
        body,
        file_name: Some(format!("{stem}.{ending}")),
    };
    let key = format!(
        "{format} {:?} {:?} {:?} {} {} {:?} {} {:?}",
        q.classes,
        q.filters.size,
        q.filters.life,
        q.filters.never,
        q.filters.temporary,
        q.at,
        q.hi,
        q.lo
    );
    let cached = |state: &State| {
        state.exports.lock().ok().and_then(|e| {
            e.iter()
                .find(|(k, _)| *k == key)
                .map(|(_, body)| body.as_ref().clone())
        })
    };
    if let Some(body) = cached(state) {
        return Ok(reply(body));
    }
    // Blocks live at the moment, with their thread: a replay up to it.
    let (stop_events, stop_time) = match q.at {
        At::End => (u64::MAX, u64::MAX),
        At::Time(t) => (u64::MAX, t),
        At::Peak { events, .. } | At::Marker { events, .. } => (events, u64::MAX),
    };
    let _one_at_a_time = state
        .scanning
        .lock()
        // A scan that failed (a 500) leaves nothing half-made behind the lock.
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(body) = cached(state) {
        return Ok(reply(body));
    }
    // A lifetime filter needs each block's end: blocks freed before the moment end during the
    // replay, and the replay goes on past the moment until every block live there has ended (or
    // the trace has), without changing what is live at the moment.
    let lifetimes = q.filters.life.is_some() || q.filters.never || q.filters.temporary;
    let selection = q.filters.selection(None);
    let mut live: HashMap<u64, (Block, u32)> = HashMap::new();
    let mut allocated = vec![(0u64, 0u64); trace.stacks().len()];
    // Each thread's last allocation, for the temporary ones (as the index counts them).
    let mut last_alloc: HashMap<u32, u64> = HashMap::new();
    // After the moment: the blocks live there, and how each ended (`None` while it lives).
    let mut at_moment: Option<HashMap<u64, LiveAt>> = None;
    let mut open = 0usize;
    let mut events = 0u64;
    let mut time = 0u64;
    let count = |allocated: &mut Vec<(u64, u64)>, block: &Block| {
        if let Some(entry) = allocated.get_mut(block.stack as usize) {
            entry.0 += 1;
            entry.1 += block.size;
        }
    };
    trace
        .for_each_event(
            &mut |timed| {
                if at_moment.is_none() && (events >= stop_events || timed.time > stop_time) {
                    if !lifetimes {
                        return ControlFlow::Break(());
                    }
                    open = live.len();
                    let blocks = std::mem::take(&mut live).into_iter();
                    at_moment = Some(blocks.map(|(a, (b, t))| (a, LiveAt::new(b, t))).collect());
                }
                let Some(ends) = at_moment.as_mut() else {
                    events += 1;
                    time = timed.time;
                    match timed.event {
                        Event::Alloc {
                            address,
                            size,
                            stack,
                            ..
                        } => {
                            let block = Block {
                                size,
                                stack,
                                time: timed.time,
                            };
                            last_alloc.insert(timed.thread, address);
                            live.insert(address, (block, timed.thread));
                            if !lifetimes && pass(state, &q, stack, timed.thread, size, timed.time)
                            {
                                count(&mut allocated, &block);
                            }
                        }
                        Event::Free { address, .. } => {
                            let temporary = last_alloc.get(&timed.thread) == Some(&address);
                            if let Some((block, thread)) = live.remove(&address)
                                && lifetimes
                                && pass(state, &q, block.stack, thread, block.size, block.time)
                                && selection.outcome(Some(timed.time - block.time), temporary)
                            {
                                count(&mut allocated, &block);
                            }
                        }
                        Event::Mark { .. } => {}
                    }
                    return ControlFlow::Continue(());
                };
                let (address, temporary) = match timed.event {
                    Event::Alloc { address, .. } => {
                        last_alloc.insert(timed.thread, address);
                        // Only an address whose free went unseen comes back while live.
                        (address, false)
                    }
                    Event::Free { address, .. } => {
                        (address, last_alloc.get(&timed.thread) == Some(&address))
                    }
                    Event::Mark { .. } => return ControlFlow::Continue(()),
                };
                if let Some(LiveAt {
                    block,
                    end: end @ None,
                    ..
                }) = ends.get_mut(&address)
                {
                    *end = Some((timed.time - block.time, temporary));
                    open -= 1;
                    if open == 0 {
                        return ControlFlow::Break(());
                    }
                }
                ControlFlow::Continue(())
            },
            &mut |_| {},
        )
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let live: Vec<(u64, LiveAt)> = match at_moment {
        Some(ends) => ends.into_iter().collect(),
        None => live
            .into_iter()
            .map(|(address, (block, thread))| (address, LiveAt::new(block, thread)))
            .collect(),
    };
    let mut blocks = LiveBlocks::default();
    let mut bytes = 0;
    for (address, LiveAt { block, thread, end }) in live {
        let ended_well = || {
            let (life, temporary) = end.map_or((None, false), |(l, t)| (Some(l), t));
            selection.outcome(life, temporary)
        };
        if pass(state, &q, block.stack, thread, block.size, block.time)
            && (!lifetimes || ended_well())
        {
            if lifetimes {
                count(&mut allocated, &block);
            }
            bytes += block.size;
            blocks.insert(address, block);
        }
    }
    let heap = Heap {
        live: blocks,
        allocated,
        live_bytes: bytes,
        sample_interval: 0,
        estimated: Vec::new(),
    };
    let snapshot = trace.snapshot(&heap, bytes);
    let mut resolver = trace.resolver();
    let header = trace.header();
    let mut options = memprof::ReportOptions::from_env();
    if header.stack_depth > 0 {
        options = options.depth(header.stack_depth as usize);
    }
    options.skip = header.stack_skip as usize;
    let mut body = Vec::new();
    let written = match kind {
        Format::Markdown => {
            memprof::Report::live(&snapshot, &mut resolver, &options).write_markdown(&mut body)
        }
        Format::Tsv => {
            memprof::Report::live(&snapshot, &mut resolver, &options).write_tsv(&mut body)
        }
        _ => {
            let export = memprof::ExportOptions::default()
                .pid(header.pid)
                .command(header.executable.clone())
                .elapsed(Duration::from_nanos(time))
                .time(Duration::from_nanos(
                    header.start_unix_ns.saturating_add(time),
                ));
            memprof::export::write(kind, &snapshot, &mut resolver, &export, &mut body)
        }
    };
    written.map_err(|e| ApiError::internal(format!("export {format}: {e}")))?;
    if let Ok(mut exports) = state.exports.lock() {
        if exports.len() >= CACHED_SCANS {
            exports.remove(0);
        }
        exports.push((key, Arc::new(body.clone())));
    }
    Ok(reply(body))
}

/// A block live at an export's moment, and how it ended after it.
struct LiveAt {
    block: Block,
    thread: u32,
    /// Once it ended: its lifetime and whether it was temporary; `None` while the trace shows no
    /// end (never freed).
    end: Option<(u64, bool)>,
}

impl LiveAt {
    fn new(block: Block, thread: u32) -> LiveAt {
        LiveAt {
            block,
            thread,
            end: None,
        }
    }
}

/// Whether a block passes an export's filters.
fn pass(state: &State, q: &Query, stack: u32, thread: u32, size: u64, time: u64) -> bool {
    let class_ok = match &q.classes {
        None => true,
        Some(mask) => state
            .classes
            .get(stack, thread)
            .is_some_and(|c| mask[c as usize]),
    };
    class_ok
        && (q.filters.size.0..=q.filters.size.1).contains(&size)
        && q.lo.is_none_or(|lo| time > lo)
        && time <= q.hi
}
