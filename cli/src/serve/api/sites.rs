//! `/api/sites`, the table of call sites, and `/api/site/ID`, one of them.

use super::common::{MAX_LIMIT, mark_estimates};
use super::timeline::timeline;
use crate::serve::index::{Cell, Live};
use crate::serve::query::{ApiError, At, Params};
use crate::serve::state::{FrameInfo, State};
use crate::serve::view::{Query, View, view};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

/// One site's row.
#[derive(Clone, Debug, Default)]
struct Row {
    cell: Cell,
    live: Live,
    leaked: Live,
    peak: Live,
    /// Bytes and allocations of the range freed within the short-lived bound.
    short_lived: Live,
}

fn rows(state: &State, v: &View, q: &Query, short_lived: &[Cell]) -> Vec<Row> {
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
        if let Some(short) = short_lived.get(class) {
            row.short_lived.0 += short.alloc_bytes;
            row.short_lived.1 += short.allocs;
        }
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

/// The short-lived bound when the query gives none (`short_lived_ns`): 1 ms.
const SHORT_LIVED_NS: u64 = crate::shortlived::DEFAULT_NS;

/// Per class, the allocations of `q`'s range and selection freed within `bound` ns of their
/// allocation: the query with its lifetime range cut at `bound`, answered as any lifetime
/// filter is (from the index's bins when `bound` is on their edges, as 1 ms is; else a scan).
fn short_lived(
    state: &State,
    params: &Params,
    q: &Query,
    bound: u64,
) -> Result<Vec<Cell>, ApiError> {
    let classes = state.classes.list.len();
    let (lo, hi) = q.filters.life.unwrap_or((0, u64::MAX));
    if lo > bound {
        return Ok(vec![Cell::default(); classes]);
    }
    let mut within = Query::parse(state, params)?;
    within.filters.life = Some((lo, hi.min(bound)));
    let v = view(state, &within, &[], None)?;
    Ok(v.range(within.lo, within.hi, classes))
}

const SITE_KEYS: [&str; 17] = [
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
    "short_lived",
    "short_lived_bytes",
    "mean_lifetime_ns",
];

fn site_json(state: &State, id: usize, row: &Row) -> Value {
    let mean = row
        .cell
        .life_sum
        .checked_div(row.cell.life_count)
        .unwrap_or(0);
    let mut site = json!({
        "id": id,
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
        "short_lived": row.short_lived.1,
        "short_lived_bytes": row.short_lived.0,
        "mean_lifetime_ns": mean,
    });
    if let Value::Object(members) = &mut site {
        state.sites[id].names(members);
    }
    site
}

/// A site's figure named `key` (one of [`SITE_KEYS`]).
fn sort_key(state: &State, id: usize, row: &Row, key: &str) -> u64 {
    let c = &row.cell;
    match key {
        "id" => id as u64,
        "line" => u64::from(state.sites[id].frame().line),
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
        "short_lived" => row.short_lived.1,
        "short_lived_bytes" => row.short_lived.0,
        "mean_lifetime_ns" => c.life_sum.checked_div(c.life_count).unwrap_or(0),
        _ => 0,
    }
}

pub fn sites(state: &State, params: &Params) -> Result<Value, ApiError> {
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
    let bound = params.number("short_lived_ns")?.unwrap_or(SHORT_LIVED_NS);
    let v = view(state, &q, &[&q.at], None)?;
    let short = short_lived(state, params, &q, bound)?;
    let rows = rows(state, &v, &q, &short);
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
    let mut answer = json!({ "total_sites": total, "short_lived_ns": bound, "exact_from": match (v.is_index(), v.extra.is_some()) {
        (true, false) => "index",
        (true, true) => "index+scan",
        _ => "scan",
    }, "sites": page });
    mark_estimates(state, &mut answer);
    Ok(answer)
}

pub fn site(state: &State, id: &str, params: &Params) -> Result<Value, ApiError> {
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
    let unfold = match params.get("hidden") {
        None | Some("0") | Some("false") => false,
        Some("1") | Some("true") => true,
        Some(other) => return Err(ApiError::bad(format!("hidden={other:?}: 1 or 0"))),
    };
    let frame_json = |f: &FrameInfo| {
        let mut frame = f.json();
        frame["address"] = format!("{:#x}", f.address).into();
        frame
    };
    // The stacks grouped by the frames the page shows of them (function, file, line, whether
    // std's): stacks that differ only in frames left out above or below make one group.
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of: HashMap<Vec<(&str, &str, u32, bool)>, usize> = HashMap::new();
    let mut stacks: Vec<Value> = Vec::with_capacity(per_stack.len());
    for (&stack, (cell, live)) in &per_stack {
        let shown: Vec<&FrameInfo> = state.stack_frames(stack).collect();
        let key = shown
            .iter()
            .map(|f| (f.function.as_str(), f.short_file(), f.line, f.std))
            .collect();
        let next = groups.len();
        let group = *group_of.entry(key).or_insert(next);
        if group == next {
            groups.push(Group {
                frames: shown.iter().map(|f| frame_json(f)).collect(),
                ..Group::default()
            });
        }
        let info = &state.stacks[stack as usize];
        let (above, below) = (info.shown.start, info.frames - info.shown.end);
        groups[group].add(stack, cell, live, above, below);
        let mut entry = json!({"id": stack, "bytes": live.0, "blocks": live.1,
               "allocations": cell.allocs, "allocated_bytes": cell.alloc_bytes,
               "frames": shown.iter().map(|f| frame_json(f)).collect::<Vec<_>>(),
               "hidden_above": above, "hidden_below": below, "group": group});
        if unfold {
            // Every frame of the stack, the ones left out marked by where they lie.
            let all: Vec<Value> = all_frames(state, stack)
                .enumerate()
                .map(|(i, f)| {
                    let mut frame = frame_json(f);
                    let i = i as u32;
                    if i < info.shown.start {
                        frame["hidden"] = "above".into();
                    } else if i >= info.shown.end {
                        frame["hidden"] = "below".into();
                    }
                    frame
                })
                .collect();
            entry["all_frames"] = all.into();
        }
        stacks.push(entry);
    }
    let groups: Vec<Value> = groups.iter().map(Group::json).collect();
    let timeline = timeline(state, &q, params, Some(&only))?;
    let mut answer = json!({
        "id": id,
        "stacks": stacks,
        "groups": groups,
        "timeline": timeline,
    });
    if let Value::Object(members) = &mut answer {
        info.names(members);
    }
    mark_estimates(state, &mut answer);
    Ok(answer)
}

/// The stacks of a site that show the same frames, their figures summed.
#[derive(Default)]
struct Group {
    frames: Vec<Value>,
    stacks: Vec<u32>,
    cell: Cell,
    live: Live,
    /// The least and most frames left out above and below the shown ones, over its stacks.
    above: Option<(u32, u32)>,
    below: Option<(u32, u32)>,
}

impl Group {
    fn add(&mut self, stack: u32, cell: &Cell, live: &Live, above: u32, below: u32) {
        self.stacks.push(stack);
        self.cell.add(cell);
        self.live.0 += live.0;
        self.live.1 += live.1;
        let widen = |range: Option<(u32, u32)>, n: u32| {
            Some(range.map_or((n, n), |(least, most)| (least.min(n), most.max(n))))
        };
        self.above = widen(self.above, above);
        self.below = widen(self.below, below);
    }

    fn json(&self) -> Value {
        let (above, below) = (
            self.above.unwrap_or_default(),
            self.below.unwrap_or_default(),
        );
        json!({"bytes": self.live.0, "blocks": self.live.1,
               "allocations": self.cell.allocs, "allocated_bytes": self.cell.alloc_bytes,
               "frames": self.frames, "stacks": self.stacks,
               "hidden_above": [above.0, above.1], "hidden_below": [below.0, below.1]})
    }
}

/// Every frame of a stack, innermost first, inlined calls expanded: the ones
/// [`State::stack_frames`] shows and those it leaves out above and below them.
fn all_frames(state: &State, stack: u32) -> impl Iterator<Item = &FrameInfo> {
    state
        .trace
        .stacks()
        .get(stack as usize)
        .into_iter()
        .flatten()
        .flat_map(|a| state.frames.get(a).into_iter().flat_map(|f| f.iter()))
}
