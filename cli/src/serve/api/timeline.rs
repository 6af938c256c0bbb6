//! `/api/timeline`, and a site's timeline.

use super::common::{MARKERS_LISTED, MAX_POINTS, MIN_INDEX_POINTS, markers, width};
use crate::serve::index::Tally;
use crate::serve::query::{ApiError, At, Filters, Params};
use crate::serve::state::State;
use crate::serve::view::{Query, Rounding, View, ViewAgg, filtered, view};
use serde_json::{Value, json};

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
pub fn timeline(
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
    let (agg_view, groups) = drawn_by(state, q, params, points, lo, hi, &mask)?;
    let (out, mut highest) = drawn_points(&agg_view, &mask, &groups, last_time);
    let agg = agg_view.agg();
    // The start of the first bucket drawn; over an empty range, where no bucket is, the range's
    // own start.
    let from_ns = match (groups.first(), lo) {
        (Some(&(start, _)), Some(_)) if start > 0 => agg.edges.end(start - 1),
        (None, Some(lo)) => lo,
        _ => 0,
    };
    let to_ns = groups.last().map_or(hi, |&(_, end)| {
        agg.edges
            .end(end)
            .min(last_time.max(agg.edges.end(end.saturating_sub(1))))
    });
    // The exact peak within the range when the index holds it (no filter); else the highest
    // point drawn. Under sampling, the highest of the blocks recorded (as the reports find the
    // peak), its figures estimated.
    let mut exact = false;
    let sampled = totals.sample_interval != 0;
    if agg_view.is_whole_index() && mask.is_none() {
        let mut recorded: Option<u64> = None;
        for &(start, end) in &groups {
            for peak in index
                .peaks
                .get(start..=end.min(index.peaks.len().saturating_sub(1)))
                .unwrap_or(&[])
            {
                if sampled {
                    if peak.bytes > 0 && recorded.is_none_or(|r| peak.bytes > r) {
                        recorded = Some(peak.bytes);
                        let (bytes, blocks) = peak.weighed;
                        highest = Some((
                            peak.time,
                            bytes.max(0.0).round() as u64,
                            blocks.max(0.0).round() as u64,
                        ));
                    }
                } else if highest.is_none_or(|h| peak.bytes > h.1) {
                    highest = Some((peak.time, peak.bytes, peak.blocks));
                }
            }
        }
        exact = true;
    }
    let (pt, pb, pk) = highest.unwrap_or((0, 0, 0));
    let (listed, total) = markers(state, q.lo, Some(to_ns), MARKERS_LISTED);
    Ok(json!({
        "from_ns": from_ns,
        "to_ns": to_ns,
        "bucket_ns": if agg_view.is_index() { width(index) } else { 0 },
        "points": out,
        "markers": listed,
        "markers_total": total,
        "peak": {"time_ns": pt, "bytes": pb, "blocks": pk, "exact": exact},
        "estimated": sampled,
        "sample_interval": totals.sample_interval,
    }))
}

/// The view that draws a timeline of `points` points over `(lo, hi]`, and the buckets each point
/// sums (first and last): the index's when the range holds enough of its buckets, else a scan's
/// at edges made for the points.
fn drawn_by<'a>(
    state: &'a State,
    q: &Query,
    params: &Params,
    points: usize,
    lo: Option<u64>,
    hi: u64,
    mask: &Option<Vec<bool>>,
) -> Result<(View<'a>, Vec<(usize, usize)>), ApiError> {
    let index = &state.index;
    let last_time = index.totals.last_time;
    // The index draws the timeline when the range holds enough of its buckets.
    let w = width(index);
    let (first, last) = (
        lo.map_or(0, |lo| (lo / w) as usize + 1),
        (hi.div_ceil(w) as usize).min(index.buckets.saturating_sub(1)),
    );
    let bins = if q.filters.by_class_only() {
        None
    } else {
        q.filters.bins()
    };
    let indexed = q.filters.by_class_only() || bins.is_some();
    let from_index = indexed && last >= first && last + 1 - first >= MIN_INDEX_POINTS.min(points)
        || (indexed && last_time < w);
    let (agg_view, groups): (View, Vec<(usize, usize)>) = if from_index {
        let count = last + 1 - first.min(last + 1);
        let per = count.div_ceil(points).max(1);
        let groups = (first..=last)
            .step_by(per)
            .map(|start| (start, (start + per - 1).min(last)))
            .collect();
        (
            View {
                agg: match &bins {
                    None => ViewAgg::Index(index),
                    Some(bins) => ViewAgg::Filtered(filtered(state, bins)),
                },
                mask: None,
                last_time,
                extra: None,
                rounding: Rounding::of(state),
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
        let mut filters = Filters::parse(params)?;
        filters.range = q.filters.range;
        let plain = Query {
            filters,
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
                rounding: Rounding::of(state),
            },
            groups,
        )
    };
    Ok((agg_view, groups))
}

/// The points of a timeline: per group of buckets, the live heap at its end and its counters
/// (under sampling, estimates rounded per point); and the highest point (time, bytes, blocks).
fn drawn_points(
    agg_view: &View,
    mask: &Option<Vec<bool>>,
    groups: &[(usize, usize)],
    last_time: u64,
) -> (Vec<Value>, Option<(u64, u64, u64)>) {
    let agg = agg_view.agg();
    let last_bucket = groups.last().map_or(0, |g| g.1);
    // Per bucket up to the last: the selected classes' counters.
    let mut per = vec![Tally::default(); last_bucket + 1];
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
    let (mut bytes, mut blocks) = (0.0f64, 0.0f64);
    let mut out = Vec::with_capacity(groups.len());
    let mut cursor = 0;
    let mut highest: Option<(u64, u64, u64)> = None;
    for &(start, end) in groups {
        while cursor < start {
            bytes += per[cursor].alloc_bytes - per[cursor].free_bytes;
            blocks += per[cursor].allocs - per[cursor].frees;
            cursor += 1;
        }
        let mut sum = Tally::default();
        for cell in &per[start..=end] {
            sum.add(cell);
            bytes += cell.alloc_bytes - cell.free_bytes;
            blocks += cell.allocs - cell.frees;
        }
        cursor = end + 1;
        let t = agg.edges.end(end).min(last_time.max(agg.edges.end(start)));
        let whole = |x: f64| x.max(0.0).round() as u64;
        let (b, k) = (whole(bytes), whole(blocks));
        if highest.is_none_or(|h| b > h.1) {
            highest = Some((t, b, k));
        }
        out.push(json!({
            "t_ns": t, "live_bytes": b, "live_blocks": k,
            "allocs": whole(sum.allocs), "frees": whole(sum.frees),
            "alloc_bytes": whole(sum.alloc_bytes), "free_bytes": whole(sum.free_bytes),
        }));
    }
    (out, highest)
}
