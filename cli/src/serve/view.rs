//! A query of the API resolved against the trace, as the endpoints share it: its moments and
//! filters ([`Query`], the group filters applied), and the view that answers it ([`View`]: the
//! index, or a scan of the trace made for the query through the state's [`Replays`] and kept for
//! the next ones). Its figures are whole numbers ([`Rounding`]): under sampling, the reports'
//! estimates, rounded per stack as they round them.
//!
//! [`Replays`]: super::state::Replays

use super::index::{Agg, BinFilter, Cell, Classes, Live, Point, Scan, Selection, Tally, Weighed};
use super::query::{ApiError, At, Filters, Groups, Params, marker, moment};
use super::state::State;
use std::sync::Arc;

/// The moments and filters of a query.
#[derive(Debug)]
pub struct Query {
    pub filters: Filters,
    pub classes: Option<Vec<bool>>,
    pub at: At,
    /// The range: events after `lo` (none: from the first) up to and with `hi`.
    pub lo: Option<u64>,
    pub hi: u64,
}

impl Query {
    pub fn parse(state: &State, params: &Params) -> Result<Query, ApiError> {
        let filters = Filters::parse(params)?;
        filters.check_chunk_flags(params, state.index.totals.chunk_flags)?;
        let classes = filters.classes(
            &state.classes,
            state.trace.stacks(),
            &state.frames,
            || state.trace.stack_label_sets(),
            || state.stack_crates(),
        );
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
        let mut filters = filters;
        filters.range = (lo, hi);
        let mut q = Query {
            filters,
            classes,
            at,
            lo,
            hi,
        };
        let groups = Groups::parse(params)?;
        if groups.any() {
            q.classes = Some(q.group_mask(state, &groups)?);
        }
        Ok(q)
    }

    /// The classes of the query's selection (its classes, and its filters on blocks) whose site
    /// passes the group filters, from the figures over the whole run.
    fn group_mask(&mut self, state: &State, groups: &Groups) -> Result<Vec<bool>, ApiError> {
        let classes = state.classes.list.len();
        let whole = Query {
            filters: std::mem::take(&mut self.filters),
            classes: self.classes.clone(),
            at: At::End,
            lo: None,
            hi: u64::MAX,
        };
        let answer = (|| {
            let v = view(state, &whole, &[], None)?;
            let range = v.range(None, u64::MAX, classes);
            let leaked = v.live(&At::End, classes);
            let first_last = &v.agg().first_last;
            let sites = state.sites.len();
            let mut cells = vec![Cell::default(); sites];
            let mut live = vec![0u64; sites];
            let mut span: Vec<Option<(u64, u64)>> = vec![None; sites];
            for class in 0..classes {
                let site = state.site_of_class(class) as usize;
                cells[site].add(&range[class]);
                live[site] += leaked[class].1;
                if range[class].allocs > 0
                    && let Some(&(first, last)) = first_last.get(class)
                    && first <= last
                {
                    span[site] = Some(match span[site] {
                        None => (first, last),
                        Some((f, l)) => (f.min(first), l.max(last)),
                    });
                }
            }
            let passing: Vec<bool> = (0..sites)
                .map(|s| groups.pass(cells[s].allocs, live[s], span[s]))
                .collect();
            Ok((0..classes)
                .map(|class| {
                    passing[state.site_of_class(class) as usize]
                        && self.classes.as_ref().is_none_or(|m| m[class])
                })
                .collect())
        })();
        self.filters = whole.filters;
        answer
    }
}

/// How the per-class sums of the index and scans become the figures answered: exact counts as
/// they are; under sampling, the sums of the weighted blocks rounded per stack, as the reports
/// round their estimates (a stack's classes, one per thread, share its rounded sum, each getting
/// its own sum rounded down or up).
#[derive(Clone, Copy, Debug)]
pub struct Rounding<'a> {
    pub classes: &'a Classes,
    /// The trace's sampling interval (0: every allocation recorded).
    pub sample_interval: u64,
}

impl<'a> Rounding<'a> {
    /// The rounding of `state`'s figures.
    pub fn of(state: &'a State) -> Rounding<'a> {
        Rounding {
            classes: &state.classes,
            sample_interval: state.trace.header().sample_interval,
        }
    }

    /// Per class, `values` as whole numbers.
    pub fn whole(&self, values: &[f64]) -> Vec<u64> {
        let value = |c: usize| values[c].max(0.0);
        if self.sample_interval == 0 {
            // Sums of whole numbers, exact.
            return (0..values.len()).map(|c| value(c).round() as u64).collect();
        }
        let stack = |c: usize| self.classes.list.get(c).map_or(u32::MAX, |p| p.0);
        let mut order: Vec<usize> = (0..values.len()).collect();
        order.sort_unstable_by_key(|&c| (stack(c), c));
        let mut out = vec![0u64; values.len()];
        for run in order.chunk_by(|&a, &b| stack(a) == stack(b)) {
            if let &[c] = run {
                out[c] = value(c).round() as u64;
                continue;
            }
            let target = run.iter().map(|&c| value(c)).sum::<f64>().round() as u64;
            let mut given = 0;
            for &c in run {
                out[c] = value(c).floor() as u64;
                given += out[c];
            }
            let mut by_fraction = run.to_vec();
            by_fraction.sort_by(|&a, &b| value(b).fract().total_cmp(&value(a).fract()));
            for &c in by_fraction
                .iter()
                .take(target.saturating_sub(given) as usize)
            {
                out[c] += 1;
            }
        }
        out
    }

    /// Per class, live bytes and blocks as whole numbers.
    pub fn live(&self, live: &[Weighed]) -> Vec<Live> {
        let bytes = self.whole(&live.iter().map(|l| l.0).collect::<Vec<_>>());
        let blocks = self.whole(&live.iter().map(|l| l.1).collect::<Vec<_>>());
        bytes.into_iter().zip(blocks).collect()
    }

    /// Per class, counters as whole numbers.
    pub fn cells(&self, tallies: &[Tally]) -> Vec<Cell> {
        let field = |f: fn(&Tally) -> f64| self.whole(&tallies.iter().map(f).collect::<Vec<_>>());
        let allocs = field(|t| t.allocs);
        let alloc_bytes = field(|t| t.alloc_bytes);
        let frees = field(|t| t.frees);
        let free_bytes = field(|t| t.free_bytes);
        let temporary = field(|t| t.temporary);
        let temporary_bytes = field(|t| t.temporary_bytes);
        tallies
            .iter()
            .enumerate()
            .map(|(c, t)| Cell {
                allocs: allocs[c],
                alloc_bytes: alloc_bytes[c],
                frees: frees[c],
                free_bytes: free_bytes[c],
                temporary: temporary[c],
                temporary_bytes: temporary_bytes[c],
                life_count: t.life_count,
                life_sum: t.life_sum,
            })
            .collect()
    }
}

/// The aggregates that answer a query: the index (with the classes not selected masked), or a
/// scan made for it.
pub struct View<'a> {
    pub agg: ViewAgg<'a>,
    pub mask: Option<Vec<bool>>,
    pub last_time: u64,
    /// With the index: a scan to the moments it does not hold.
    pub extra: Option<Arc<Agg>>,
    /// How its sums become the figures answered.
    pub rounding: Rounding<'a>,
}

pub enum ViewAgg<'a> {
    Index(&'a Agg),
    /// The index's figures of the blocks a size and lifetime filter on its bins passes.
    Filtered(Arc<Agg>),
    Scan(Arc<Agg>),
}

impl View<'_> {
    pub fn agg(&self) -> &Agg {
        match &self.agg {
            ViewAgg::Index(agg) => agg,
            ViewAgg::Filtered(agg) | ViewAgg::Scan(agg) => agg,
        }
    }

    /// Whether the index answers: its buckets and moments.
    pub fn is_index(&self) -> bool {
        matches!(self.agg, ViewAgg::Index(_) | ViewAgg::Filtered(_))
    }

    /// Whether the index answers with no filter on blocks: its per-bucket peaks hold.
    pub fn is_whole_index(&self) -> bool {
        matches!(self.agg, ViewAgg::Index(_))
    }

    fn masked(&self, class: usize) -> bool {
        self.mask
            .as_ref()
            .is_some_and(|m| !m.get(class).copied().unwrap_or(false))
    }

    /// Live per class at a moment the view answers.
    pub fn live(&self, at: &At, classes: usize) -> Vec<Live> {
        self.rounding.live(&self.live_sums(at, classes))
    }

    /// [`View::live`] as summed, before rounding.
    fn live_sums(&self, at: &At, classes: usize) -> Vec<Weighed> {
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
        live.resize(classes, (0.0, 0.0));
        for (class, entry) in live.iter_mut().enumerate() {
            if self.masked(class) {
                *entry = (0.0, 0.0);
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
    pub fn range(&self, lo: Option<u64>, hi: u64, classes: usize) -> Vec<Cell> {
        if lo.is_some_and(|lo| self.is_index() && lo >= self.last_time) {
            return vec![Cell::default(); classes];
        }
        let (first, last) = self.buckets(lo, hi);
        let mut sums = self.agg().sum(first, last, classes);
        for (class, cell) in sums.iter_mut().enumerate() {
            if self.masked(class) {
                *cell = Tally::default();
            }
        }
        self.rounding.cells(&sums)
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
pub fn view<'a>(
    state: &'a State,
    q: &Query,
    ats: &[&At],
    timeline_edges: Option<&[u64]>,
) -> Result<View<'a>, ApiError> {
    let last_time = state.index.totals.last_time;
    let bins = if q.filters.by_class_only() {
        None
    } else {
        q.filters.bins()
    };
    if (q.filters.by_class_only() || bins.is_some())
        && index_has_range(state, q.lo, q.hi)
        && timeline_edges.is_none()
    {
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
            let selection = q.filters.selection(q.classes.clone());
            let key = format!("points {}|{missing:?}", selection_key(&selection));
            // A block live at a moment counts by how it ends: with a filter on that, the replay
            // runs to the end rather than stopping after the last moment.
            let to_the_end = selection.life.is_some() || selection.never || selection.temporary;
            Some(scan(
                state,
                key,
                to_the_end.then(Vec::new),
                selection,
                missing,
            )?)
        };
        return Ok(View {
            agg: match bins {
                None => ViewAgg::Index(&state.index),
                Some(bins) => ViewAgg::Filtered(filtered(state, &bins)),
            },
            mask: q.classes.clone(),
            last_time,
            extra,
            rounding: Rounding::of(state),
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
        rounding: Rounding::of(state),
    })
}

/// The index's figures of the blocks `bins` passes, or the same made for an earlier query.
pub fn filtered(state: &State, bins: &BinFilter) -> Arc<Agg> {
    state.replays.filtered(bins, || state.index.filtered(bins))
}

fn selection_key(selection: &Selection) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {} {} {:?} {:?}",
        selection.classes,
        selection.size,
        selection.address,
        selection.life,
        selection.never,
        selection.temporary,
        selection.freed_in,
        selection.chunk
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
    let interval = state.trace.header().sample_interval;
    state.replays.scan(key, || {
        let mut scan = match edges {
            Some(edges) => Scan::new(&state.classes, edges, selection, points, interval),
            None => Scan::points_only(&state.classes, selection, points, interval),
        };
        state
            .trace
            .visit(&mut scan, &mut |_| {})
            .map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(scan.finish().0)
    })
}
