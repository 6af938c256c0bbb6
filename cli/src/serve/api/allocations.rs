//! `/api/allocations`: individual allocations, not groups (bytehound's `/allocations`): those
//! made within the range that pass the filters, sorted, a page of them. One replay of the trace
//! per request, one at a time; the server keeps the blocks allocated within the range and not
//! freed yet, and the page being collected, not every allocation of the run.

use super::common::MAX_LIMIT;
use crate::serve::query::{ApiError, Params};
use crate::serve::state::State;
use crate::serve::view::Query;
use memprof_trace::{Block, ChunkFlags, Timed, Visitor};
use serde_json::{Value, json};
use std::collections::{BinaryHeap, HashMap, HashSet};

/// What a listed allocation can be sorted by.
const SORT_KEYS: [&str; 4] = ["time", "size", "address", "lifetime"];

/// One allocation, once its end is known.
#[derive(Clone, Copy, Debug)]
struct Allocation {
    /// Its place among the allocations replayed (ties are broken by it).
    seq: u64,
    address: u64,
    size: u64,
    stack: u32,
    thread: u32,
    time: u64,
    /// When freed; `None`: never (or its address was reused without a free in the trace).
    freed: Option<u64>,
    temporary: bool,
    /// glibc's chunk flags, when the trace has them.
    flags: Option<ChunkFlags>,
}

impl Allocation {
    fn lifetime(&self) -> Option<u64> {
        self.freed.map(|f| f.saturating_sub(self.time))
    }
}

/// The replay's visitor: candidates by address until their end, then kept when they pass the
/// lifetime filters, in a bounded heap of the page's best.
struct Collect<'a> {
    q: &'a Query,
    selected: Option<HashSet<(u32, u32)>>,
    address: (u64, u64),
    sort: &'a str,
    desc: bool,
    /// How many of the best are kept: offset + limit.
    keep: usize,
    seq: u64,
    pending: HashMap<u64, Allocation>,
    /// The best `keep` by (key, seq), the worst on top.
    best: BinaryHeap<(u64, u64, Kept)>,
    total: u64,
    /// The trace's sampling interval, and the blocks the allocations counted stand for.
    sample_interval: u64,
    weighed: f64,
}

/// An allocation in the heap (ordered by the key and seq before it only).
#[derive(Clone, Copy, Debug)]
struct Kept(Allocation);

impl PartialEq for Kept {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for Kept {}
impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Kept {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl Collect<'_> {
    /// The sort key, smallest first whatever the order asked (a descending order is the
    /// complement); a block never freed has the longest lifetime.
    fn key(&self, a: &Allocation) -> u64 {
        let key = match self.sort {
            "size" => a.size,
            "address" => a.address,
            "lifetime" => a.lifetime().unwrap_or(u64::MAX),
            _ => a.time,
        };
        if self.desc { u64::MAX - key } else { key }
    }

    fn end(&mut self, mut allocation: Allocation, freed: Option<u64>, temporary: bool) {
        allocation.freed = freed;
        allocation.temporary = temporary;
        let f = &self.q.filters;
        let selection = f.selection(None);
        if !selection.outcome(allocation.lifetime(), temporary, allocation.freed) {
            return;
        }
        self.total += 1;
        self.weighed += memprof_trace::weight(allocation.size, self.sample_interval).0;
        if self.keep == 0 {
            return;
        }
        let entry = (self.key(&allocation), allocation.seq, Kept(allocation));
        if self.best.len() < self.keep {
            self.best.push(entry);
        } else if let Some(top) = self.best.peek()
            && (entry.0, entry.1) < (top.0, top.1)
        {
            self.best.pop();
            self.best.push(entry);
        }
    }
}

impl Visitor for Collect<'_> {
    fn alloc(&mut self, timed: &Timed, address: u64, block: &Block, replaced: Option<&Block>) {
        if replaced.is_some()
            && let Some(old) = self.pending.remove(&address)
        {
            self.end(old, None, false);
        }
        self.seq += 1;
        let q = self.q;
        let in_range = q.lo.is_none_or(|lo| timed.time > lo) && timed.time <= q.hi;
        let (lo, hi) = q.filters.size;
        if !in_range
            || !(lo..=hi).contains(&block.size)
            || !q.filters.chunk.passes(block.flags)
            || !(self.address.0..=self.address.1).contains(&address)
            || self
                .selected
                .as_ref()
                .is_some_and(|s| !s.contains(&(block.stack, block.thread)))
        {
            return;
        }
        self.pending.insert(
            address,
            Allocation {
                seq: self.seq,
                address,
                size: block.size,
                stack: block.stack,
                thread: block.thread,
                time: block.time,
                freed: None,
                temporary: false,
                flags: block.flags,
            },
        );
    }

    fn free(&mut self, timed: &Timed, address: u64, _: Option<&Block>, temporary: bool) {
        if let Some(allocation) = self.pending.remove(&address) {
            self.end(allocation, Some(timed.time), temporary);
        }
    }
}

/// `/api/allocations`: the answer's JSON.
pub fn allocations(state: &State, params: &Params) -> Result<Value, ApiError> {
    let q = Query::parse(state, params)?;
    let sort = params.get("sort").unwrap_or("time");
    if !SORT_KEYS.contains(&sort) {
        return Err(ApiError::bad(format!(
            "sort={sort:?}: one of {}",
            SORT_KEYS.join(", ")
        )));
    }
    let desc = match params.get("desc") {
        None | Some("0") | Some("false") => false,
        Some("1") | Some("true") => true,
        Some(other) => return Err(ApiError::bad(format!("desc={other:?}: 1 or 0"))),
    };
    let limit = params.number("limit")?.unwrap_or(100);
    if limit > MAX_LIMIT {
        return Err(ApiError::bad(format!("limit={limit}: at most {MAX_LIMIT}")));
    }
    let offset = params.number("offset")?.unwrap_or(0);
    if offset > MAX_LIMIT * 10 {
        return Err(ApiError::bad(format!(
            "offset={offset}: at most {}",
            MAX_LIMIT * 10
        )));
    }
    let address = q.filters.address.unwrap_or((0, u64::MAX));
    let selected = q.classes.as_ref().map(|mask| {
        state
            .classes
            .list
            .iter()
            .zip(mask)
            .filter(|(_, on)| **on)
            .map(|(class, _)| *class)
            .collect()
    });
    let mut collect = Collect {
        q: &q,
        selected,
        address,
        sort,
        desc,
        keep: (offset + limit) as usize,
        seq: 0,
        pending: HashMap::new(),
        best: BinaryHeap::new(),
        total: 0,
        sample_interval: state.trace.header().sample_interval,
        weighed: 0.0,
    };
    state
        .replays
        .run(|| state.trace.visit(&mut collect, &mut |_| {}))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    // Those never freed end with the trace.
    let open: Vec<Allocation> = collect.pending.drain().map(|(_, a)| a).collect();
    for allocation in open {
        collect.end(allocation, None, false);
    }
    let mut best: Vec<(u64, u64, Kept)> = collect.best.into_vec();
    best.sort_unstable_by_key(|&(key, seq, _)| (key, seq));
    let listed: Vec<Value> = best
        .into_iter()
        .skip(offset as usize)
        .map(|(_, _, Kept(a))| {
            let site = state.stacks.get(a.stack as usize).map(|s| s.site);
            let function = site.map(|s| state.sites[s as usize].frame().function.as_str());
            json!({
                "address": format!("{:#x}", a.address),
                "size": a.size,
                "time_ns": a.time,
                "thread": a.thread,
                "stack": a.stack,
                "site": site,
                "function": function,
                "freed_ns": a.freed,
                "lifetime_ns": a.lifetime(),
                "temporary": a.temporary,
                "mmapped": a.flags.map(|f| f.mmapped),
                "arena": a.flags.map(|f| if f.main_arena { "main" } else { "other" }),
            })
        })
        .collect();
    // Under sampling, the allocations are those recorded: each stands for more, as the other
    // answers estimate.
    let estimated_count = match collect.sample_interval {
        0 => collect.total,
        _ => collect.weighed.round() as u64,
    };
    Ok(json!({ "total_count": collect.total, "allocations": listed,
               "sample_interval": collect.sample_interval,
               "estimated_count": estimated_count }))
}
