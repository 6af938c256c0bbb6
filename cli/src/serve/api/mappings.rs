//! `/api/mappings`: the program's own memory mappings (its `mmap` calls, trace format 1.1's
//! `MMAP` and `MUNMAP` records): those live at a moment by call site, and the mapped bytes over
//! time. Each request replays the trace (one scan at a time, as other scans), keeping the live
//! mappings that pass the filters as the kernel keeps them (`memprof_trace::RangeMap`: an unmap
//! of part of a mapping trims or splits it, a mapping over mapped pages replaces them).

use super::common::{MAX_LIMIT, MAX_POINTS};
use crate::serve::index::Classes;
use crate::serve::query::{ApiError, At, Params};
use crate::serve::state::State;
use crate::serve::view::Query;
use memprof_trace::{Accumulated, Block, Mapping, RangeMap, Timed, Visitor};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::ops::ControlFlow;

/// Filters that select blocks by what they are, which mappings are not.
const NOT_FOR_MAPPINGS: [&str; 13] = [
    "size_min",
    "size_max",
    "life",
    "life_min",
    "life_max",
    "group_allocations_min",
    "group_allocations_max",
    "group_leaked_min",
    "group_leaked_max",
    "group_interval_min",
    "group_interval_max",
    "address_min",
    "address_max",
];

/// Per site: live bytes and mappings.
type PerSite = BTreeMap<u32, (u64, u64)>;

struct Scan<'a> {
    state: &'a State,
    /// Per stack, whether its mappings pass the frame filters; `None`: all do.
    stacks: Option<Vec<bool>>,
    threads: &'a [u32],
    live: RangeMap<Mapping>,
    /// Events counted as the index counts them (allocations, frees, markers).
    events: u64,
    at: At,
    at_live: Option<PerSite>,
    edges: Vec<u64>,
    /// Mapped bytes and mappings after each edge.
    points: Vec<(u64, u64)>,
    peak: (u64, u64),
    made: (u64, u64),
    unmaps: u64,
}

impl Scan<'_> {
    fn selected(&self, mapping: &Mapping) -> bool {
        (self.threads.is_empty() || self.threads.contains(&mapping.thread))
            && self
                .stacks
                .as_ref()
                .is_none_or(|s| s.get(mapping.stack as usize).copied().unwrap_or(false))
    }

    fn per_site(&self) -> PerSite {
        let mut sites = PerSite::new();
        for (_, length, mapping) in self.live.iter() {
            let site = self.state.stacks[mapping.stack as usize].site;
            let entry = sites.entry(site).or_default();
            entry.0 += length;
            entry.1 += 1;
        }
        sites
    }

    /// Before an event at `time`: the moments and edges it passes.
    fn passing(&mut self, time: u64) {
        while self.points.len() < self.edges.len() && self.edges[self.points.len()] < time {
            self.points
                .push((self.live.bytes(), self.live.len() as u64));
        }
        if self.at_live.is_none()
            && let At::Time(t) = self.at
            && time > t
        {
            self.at_live = Some(self.per_site());
        }
    }

    /// After an event the index counts.
    fn counted(&mut self) {
        self.events += 1;
        if self.at_live.is_none()
            && let At::Peak { events, .. } | At::Marker { events, .. } = self.at
            && self.events == events
        {
            self.at_live = Some(self.per_site());
        }
    }
}

impl Visitor for Scan<'_> {
    fn before(&mut self, timed: &Timed, _: &Accumulated) -> ControlFlow<()> {
        self.passing(timed.time);
        ControlFlow::Continue(())
    }

    fn alloc(&mut self, _: &Timed, _: u64, _: &Block, _: Option<&Block>) {
        self.counted();
    }

    fn free(&mut self, _: &Timed, _: u64, _: Option<&Block>, _: bool) {
        self.counted();
    }

    fn mark(&mut self, _: &Timed, _: u32) {
        self.counted();
    }

    fn map(
        &mut self,
        _: &Timed,
        address: u64,
        length: u64,
        mapping: &Mapping,
        _: &[(u64, u64, Mapping)],
    ) {
        if self.selected(mapping) {
            self.live.insert(address, length, *mapping);
            self.made.0 += 1;
            self.made.1 += length;
        } else {
            // What it replaced ends, selected or not.
            self.live.remove(address, length);
        }
        if self.live.bytes() > self.peak.1 {
            self.peak = (mapping.time, self.live.bytes());
        }
    }

    fn unmap(&mut self, _: &Timed, address: u64, length: u64, _: &[(u64, u64, Mapping)]) {
        if !self.live.remove(address, length).is_empty() {
            self.unmaps += 1;
        }
    }
}

/// `/api/mappings`: the answer's JSON.
pub fn mappings(state: &State, params: &Params) -> Result<Value, ApiError> {
    if let Some(name) = NOT_FOR_MAPPINGS.iter().find(|n| params.get(n).is_some()) {
        return Err(ApiError::bad(format!(
            "{name}: not a filter of /api/mappings (thread, func, nofunc, file, nofile, \
             depth_min, depth_max and label are)"
        )));
    }
    let mut q = Query::parse(state, params)?;
    let points = params.number("points")?.unwrap_or(800);
    if points == 0 || points > MAX_POINTS {
        return Err(ApiError::bad(format!("points={points}: 1 to {MAX_POINTS}")));
    }
    let limit = params.number("limit")?.unwrap_or(100);
    if limit > MAX_LIMIT {
        return Err(ApiError::bad(format!("limit={limit}: at most {MAX_LIMIT}")));
    }
    // The frame filters, per stack (every thread: the threads are checked per mapping).
    let threads = std::mem::take(&mut q.filters.threads);
    let pairs = (0..state.trace.stacks().len() as u32)
        .map(|s| (s, 0))
        .collect();
    let stacks = q.filters.classes(
        &Classes::from_pairs(pairs),
        state.trace.stacks(),
        &state.frames,
        || state.trace.stack_label_sets(),
        || state.stack_crates(),
    );
    let totals = &state.index.totals;
    let start = q.lo.unwrap_or(0);
    let end = q.hi.min(totals.last_time).max(start);
    let step = (end - start).div_ceil(points).max(1);
    let mut edges: Vec<u64> = Vec::new();
    let mut t = start;
    while t < end {
        t = (t + step).min(end);
        edges.push(t);
    }
    if edges.is_empty() {
        edges.push(end);
    }
    let mut scan = Scan {
        state,
        stacks,
        threads: &threads,
        live: RangeMap::new(),
        events: 0,
        at: q.at.clone(),
        at_live: None,
        edges,
        points: Vec::new(),
        peak: (0, 0),
        made: (0, 0),
        unmaps: 0,
    };
    state
        .replays
        .run(|| state.trace.visit(&mut scan, &mut |_| {}))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    scan.passing(u64::MAX);
    let at_live = scan.at_live.take().unwrap_or_else(|| scan.per_site());
    let (bytes, count) = at_live
        .values()
        .fold((0, 0), |(b, c), &(x, y)| (b + x, c + y));
    let mut sites: Vec<(u32, (u64, u64))> = at_live.into_iter().collect();
    sites.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(&b.0)));
    let total_sites = sites.len();
    let sites: Vec<Value> = sites
        .into_iter()
        .take(limit as usize)
        .map(|(id, (bytes, count))| {
            let mut site = json!({"id": id, "bytes": bytes, "mappings": count});
            if let Value::Object(members) = &mut site {
                state.sites[id as usize].names(members);
            }
            site
        })
        .collect();
    let drawn: Vec<Value> = scan
        .edges
        .iter()
        .zip(&scan.points)
        .map(|(t, (bytes, count))| json!({"t_ns": t, "bytes": bytes, "mappings": count}))
        .collect();
    Ok(json!({
        "time_ns": q.at.time(totals),
        "bytes": bytes,
        "mappings": count,
        "total_sites": total_sites,
        "sites": sites,
        "timeline": {"from_ns": start, "to_ns": end, "points": drawn},
        "peak": {"time_ns": scan.peak.0, "bytes": scan.peak.1},
        "totals": {"made": scan.made.0, "made_bytes": scan.made.1, "unmaps": scan.unmaps},
    }))
}
