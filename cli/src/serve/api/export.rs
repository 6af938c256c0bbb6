//! `/api/export/FORMAT`: the live heap at a moment through the crate's writers.

use super::view::Query;
use super::{CACHED_SCANS, Reply};
use crate::serve::query::{ApiError, At, Params};
use crate::serve::state::State;
use memprof::export::Format;
use memprof::trace::replay::{Block, Event, Heap, LiveBlocks};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

/// `/api/export/FORMAT`: the live heap at `at` (blocks allocated within the range and passing
/// the filters) through the crate's writers.
pub fn export(state: &State, format: &str, params: &Params) -> Result<Reply, ApiError> {
    let (kind, ending, content_type) = format_of(format)?;
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
    let (heap, time) = live_heap(state, &q, stop_events, stop_time)?;
    let body = write_body(state, kind, format, &heap, time)?;
    if let Ok(mut exports) = state.exports.lock() {
        if exports.len() >= CACHED_SCANS {
            exports.remove(0);
        }
        exports.push((key, Arc::new(body.clone())));
    }
    Ok(reply(body))
}

/// An export's writer, file name ending and `Content-Type`.
fn format_of(format: &str) -> Result<(Format, &'static str, &'static str), ApiError> {
    let found = match format {
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
    Ok(found)
}

/// The blocks live at the moment (up to `stop_events` events, or events up to `stop_time`) that
/// pass the query's filters, as a heap; and the time of the last event replayed before it.
fn live_heap(
    state: &State,
    q: &Query,
    stop_events: u64,
    stop_time: u64,
) -> Result<(Heap, u64), ApiError> {
    let trace = &state.trace;
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
                            if !lifetimes && pass(state, q, stack, timed.thread, size, timed.time) {
                                count(&mut allocated, &block);
                            }
                        }
                        Event::Free { address, .. } => {
                            let temporary = last_alloc.get(&timed.thread) == Some(&address);
                            if let Some((block, thread)) = live.remove(&address)
                                && lifetimes
                                && pass(state, q, block.stack, thread, block.size, block.time)
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
        if pass(state, q, block.stack, thread, block.size, block.time)
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
    Ok((heap, time))
}

/// The export of `heap` in `kind`, at `time` (nanoseconds since the trace started).
fn write_body(
    state: &State,
    kind: Format,
    format: &str,
    heap: &Heap,
    time: u64,
) -> Result<Vec<u8>, ApiError> {
    let trace = &state.trace;
    let snapshot = trace.snapshot(heap, heap.live_bytes);
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
    Ok(body)
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
