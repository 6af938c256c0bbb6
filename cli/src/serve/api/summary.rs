//! `/api/summary`: the trace as a whole.

use super::common::{MARKERS_LISTED, markers, width};
use crate::serve::index::{BinFilter, Cell, Live, Point, Tally, bin_edges};
use crate::serve::state::State;
use crate::serve::view::Rounding;
use crate::shortlived::DEFAULT_NS;
use serde_json::{Value, json};

/// The figures of the whole trace: live at the peak and at the end, and what was allocated,
/// freed and temporary. Without sampling, as recorded; under sampling, the reports' estimates
/// (each stack's rounded, summed).
struct Figures {
    peak: Live,
    end: Live,
    allocations: u64,
    allocated_bytes: u64,
    frees: u64,
    temporary: u64,
}

fn figures(state: &State) -> Figures {
    let index = &state.index;
    let totals = &index.totals;
    if totals.sample_interval == 0 {
        return Figures {
            peak: totals.peak,
            end: totals.end,
            allocations: totals.allocations,
            allocated_bytes: totals.allocated_bytes,
            frees: totals.frees,
            temporary: totals.temporary,
        };
    }
    let rounding = Rounding::of(state);
    let classes = state.classes.list.len();
    let sum = |live: Vec<Live>| {
        live.iter()
            .fold((0u64, 0u64), |s, l| (s.0 + l.0, s.1 + l.1))
    };
    let at_peak = index
        .points
        .get(&Point::Events(totals.peak_events))
        .cloned()
        .unwrap_or_default();
    let mut all = Cell::default();
    for cell in rounding.cells(&index.sum(0, usize::MAX, classes)) {
        all.add(&cell);
    }
    Figures {
        peak: sum(rounding.live(&at_peak)),
        end: sum(rounding.live(&index.end)),
        allocations: all.allocs,
        allocated_bytes: all.alloc_bytes,
        frees: all.frees,
        temporary: all.temporary,
    }
}

/// The allocations of the whole run freed within [`DEFAULT_NS`] of their allocation, summed
/// from the index's lifetime bins (the bound is on their edges).
fn short_lived(state: &State) -> u64 {
    let Some(within) = BinFilter::aligned((0, u64::MAX), Some((0, DEFAULT_NS)), false, false)
    else {
        return 0;
    };
    let per_class: Vec<Tally> = state
        .index
        .bins
        .iter()
        .map(|bins| {
            let mut tally = Tally::default();
            for (_, bin, cell) in bins {
                if within.passes(*bin) {
                    tally.allocs += cell.allocs;
                }
            }
            tally
        })
        .collect();
    Rounding::of(state)
        .cells(&per_class)
        .iter()
        .fold(0u64, |n, c| n.saturating_add(c.allocs))
}

pub fn summary(state: &State) -> Value {
    let trace = &state.trace;
    let totals = &state.index.totals;
    let figures = figures(state);
    let mut threads: Vec<(u32, u64, &str)> = trace
        .threads()
        .iter()
        .map(|(&id, (tid, name))| (id, *tid, name.as_str()))
        .collect();
    threads.sort_unstable();
    let labels = thread_labels(&threads);
    let (listed, total) = markers(state, None, None, MARKERS_LISTED);
    let (sizes, lives) = bin_edges();
    json!({
        "path": trace.path().display().to_string(),
        "events": trace.events(),
        "duration_ns": totals.last_time,
        "sample_interval": trace.header().sample_interval,
        "estimated": totals.sample_interval != 0,
        "threads": threads
            .iter()
            .zip(&labels)
            .map(|((id, tid, name), label)| json!({"id": id, "tid": tid, "name": name, "label": label}))
            .collect::<Vec<_>>(),
        "markers": listed,
        "markers_total": total,
        "peak": {"time_ns": totals.peak_time, "bytes": figures.peak.0, "blocks": figures.peak.1},
        "end": {"bytes": figures.end.0, "blocks": figures.end.1},
        "totals": {
            "allocations": figures.allocations,
            "reallocs": totals.reallocs,
            "frees": figures.frees,
            "allocated_bytes": figures.allocated_bytes,
            "temporary": figures.temporary,
            "short_lived": short_lived(state),
            "short_lived_ns": DEFAULT_NS,
            "mappings": totals.mappings,
        },
        "recorded": {
            "allocations": totals.allocations,
            "reallocs": totals.reallocs,
            "frees": totals.frees,
            "allocated_bytes": totals.allocated_bytes,
            "temporary": totals.temporary,
            "peak": {"bytes": totals.peak.0, "blocks": totals.peak.1},
            "end": {"bytes": totals.end.0, "blocks": totals.end.1},
        },
        "bucket_ns": width(&state.index),
        "index_edges": {"size": sizes, "life_ns": lives},
        "complete": trace.end_record().is_some(),
        "chunk_flags": state.index.totals.chunk_flags,
        "live": state.live.map(|live| json!({
            "pending_events": live.pending,
            "out_of_order_events": live.out_of_order,
            "indexed_through_ns": live.through,
        })),
    })
}

/// `/api/markers`: every marker, the one answer that lists them all.
pub fn all_markers(state: &State) -> Value {
    let (listed, total) = markers(state, None, None, usize::MAX);
    json!({"markers": listed, "markers_total": total})
}

/// `/api/traces`: the traces served, by id.
pub fn traces(traces: &[&State]) -> Value {
    let list: Vec<Value> = traces
        .iter()
        .enumerate()
        .map(|(id, state)| {
            let totals = &state.index.totals;
            json!({"id": id, "path": state.trace.path().display().to_string(),
                   "events": state.trace.events(), "duration_ns": totals.last_time,
                   "sites": state.sites.len(), "complete": state.trace.end_record().is_some()})
        })
        .collect();
    json!({ "traces": list })
}

/// What the viewer shows for each thread of `threads` (`(number in the trace, system id, name)`):
/// its name when no other thread has it; `app (tid 1234)` when several do, so that threads of one
/// pool are told apart by the id the system gave them (the one `ps`, `top` and debuggers show);
/// `tid 1234` for a thread without a name. Should two threads still read the same (a system id
/// reused), the trace's number of the thread is added: `app (tid 1234, thread 7)`.
fn thread_labels(threads: &[(u32, u64, &str)]) -> Vec<String> {
    let count = |f: &dyn Fn(&(u32, u64, &str)) -> bool| threads.iter().filter(|t| f(t)).count();
    threads
        .iter()
        .map(|&(id, tid, name)| {
            let same_tid = count(&|t| t.2 == name && t.1 == tid) > 1;
            match (name, same_tid) {
                ("", false) => format!("tid {tid}"),
                ("", true) => format!("tid {tid} (thread {id})"),
                (name, _) if count(&|t| t.2 == name) == 1 => name.to_owned(),
                (name, false) => format!("{name} (tid {tid})"),
                (name, true) => format!("{name} (tid {tid}, thread {id})"),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::thread_labels;

    #[test]
    fn threads_with_one_name_are_told_apart_by_their_system_id() {
        let threads = [
            (1, 100, "main"),
            (2, 101, "app"),
            (3, 102, "app"),
            (4, 103, ""),
            (5, 104, "io"),
            (6, 104, "io"),
            (7, 105, ""),
            (8, 105, ""),
        ];
        assert_eq!(
            thread_labels(&threads),
            [
                "main",
                "app (tid 101)",
                "app (tid 102)",
                "tid 103",
                "io (tid 104, thread 5)",
                "io (tid 104, thread 6)",
                "tid 105 (thread 7)",
                "tid 105 (thread 8)",
            ]
        );
    }
}
