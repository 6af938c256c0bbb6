//! `/api/export/FORMAT`: the live heap at a moment through the crate's writers.

use super::common::Reply;
use crate::serve::index::Selection;
use crate::serve::query::{ApiError, At, Params};
use crate::serve::state::State;
use crate::serve::view::Query;
use memprof::export::Format;
use memprof_trace::{Accumulated, Block, Heap, LiveBlocks, Timed, Visitor};
use std::collections::HashMap;
use std::ops::ControlFlow;
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
        "{format} {:?} {:?} {:?} {:?} {:?} {} {} {:?} {:?} {} {:?}",
        q.classes,
        q.filters.chunk,
        q.filters.size,
        q.filters.address,
        q.filters.life,
        q.filters.never,
        q.filters.temporary,
        q.filters.in_range,
        q.at,
        q.hi,
        q.lo
    );
    // Blocks live at the moment, with their thread: a replay up to it.
    let (stop_events, stop_time) = match q.at {
        At::End => (u64::MAX, u64::MAX),
        At::Time(t) => (u64::MAX, t),
        At::Peak { events, .. } | At::Marker { events, .. } => (events, u64::MAX),
    };
    let body = state.replays.export(key, || {
        let (heap, time) = live_heap(state, &q, stop_events, stop_time)?;
        write_body(state, kind, format, &heap, (stop_events, time))
    })?;
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
        "html" => (Format::Html, "html", "text/html; charset=utf-8"),
        other => {
            return Err(ApiError::not_found(format!(
                "export {other:?}: pprof, folded, dhat, heaptrack, md, tsv or html"
            )));
        }
    };
    Ok(found)
}

/// The blocks live at the moment (up to `stop_events` events, or events up to `stop_time`) that
/// pass the query's filters, as a heap; and the time of the last event replayed before it.
pub(super) fn live_heap(
    state: &State,
    q: &Query,
    stop_events: u64,
    stop_time: u64,
) -> Result<(Heap, u64), ApiError> {
    let trace = &state.trace;
    // A lifetime filter needs each block's end: blocks freed before the moment end during the
    // replay, and the replay goes on past the moment until every block live there has ended (or
    // the trace has), without changing what is live at the moment.
    let lifetimes = q.filters.life.is_some()
        || q.filters.never
        || q.filters.temporary
        || q.filters.in_range.is_some();
    let mut export = Export {
        state,
        q,
        selection: q.filters.selection(None),
        lifetimes,
        stop_events,
        stop_time,
        allocated: vec![(0u64, 0u64); trace.stacks().len()],
        estimated: vec![(0.0, 0.0); trace.stacks().len()],
        at_moment: None,
        moment_time: None,
        open: 0,
        ended: false,
    };
    let end = trace
        .visit(&mut export, &mut |_| {})
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let time = export.moment_time.unwrap_or(end.time);
    let live: Vec<(u64, LiveAt)> = match export.at_moment.take() {
        Some(ends) => ends.into_iter().collect(),
        None => end
            .heap
            .live
            .into_iter()
            .map(|(address, block)| (address, LiveAt::new(block)))
            .collect(),
    };
    let mut blocks = LiveBlocks::default();
    let mut bytes = 0;
    for (address, LiveAt { block, end }) in live {
        let ended_well = || {
            let (life, temporary) = end.map_or((None, false), |(l, t)| (Some(l), t));
            export
                .selection
                .outcome(life, temporary, life.map(|l| block.time + l))
        };
        if export.pass(address, &block) && (!lifetimes || ended_well()) {
            if lifetimes {
                export.count(&block);
            }
            bytes += block.size;
            blocks.insert(address, block);
        }
    }
    let heap = Heap {
        live: blocks,
        allocated: export.allocated,
        live_bytes: bytes,
        // Under sampling, the snapshot estimates from these, as a report of the trace does.
        sample_interval: trace.header().sample_interval,
        estimated: export.estimated,
        mappings: Default::default(),
    };
    Ok((heap, time))
}

/// The export's visitor of the replay: the allocations that count up to the moment, then, for a
/// lifetime filter, how each block live at the moment ends.
struct Export<'a> {
    state: &'a State,
    q: &'a Query,
    selection: Selection,
    lifetimes: bool,
    stop_events: u64,
    stop_time: u64,
    /// Blocks and bytes allocated per stack, of the blocks that pass the filters.
    allocated: Vec<(u64, u64)>,
    /// The same weighted under sampling ([`memprof_trace::weight`]).
    estimated: Vec<(f64, f64)>,
    /// After the moment: the blocks live there, and how each ended (`None` while it lives).
    at_moment: Option<HashMap<u64, LiveAt>>,
    /// The time of the last event before the moment, once passed.
    moment_time: Option<u64>,
    /// Blocks live at the moment that have not ended yet.
    open: usize,
    /// Whether every block live at the moment has ended: the replay stops.
    ended: bool,
}

impl Export<'_> {
    /// Whether a block at `address` passes the export's filters.
    fn pass(&self, address: u64, block: &Block) -> bool {
        let q = self.q;
        let class_ok = match &q.classes {
            None => true,
            Some(mask) => self
                .state
                .classes
                .get(block.stack, block.thread)
                .is_some_and(|c| mask[c as usize]),
        };
        class_ok
            && (q.filters.size.0..=q.filters.size.1).contains(&block.size)
            && q.filters
                .address
                .is_none_or(|(lo, hi)| (lo..=hi).contains(&address))
            && q.filters.chunk.passes(block.flags)
            && q.lo.is_none_or(|lo| block.time > lo)
            && block.time <= q.hi
    }

    fn count(&mut self, block: &Block) {
        if let Some(entry) = self.allocated.get_mut(block.stack as usize) {
            entry.0 += 1;
            entry.1 += block.size;
        }
        let interval = self.state.trace.header().sample_interval;
        if let Some(entry) = self.estimated.get_mut(block.stack as usize) {
            let (blocks, bytes) = memprof_trace::weight(block.size, interval);
            entry.0 += blocks;
            entry.1 += bytes;
        }
    }
}

impl Visitor for Export<'_> {
    fn before(&mut self, timed: &Timed, state: &Accumulated) -> ControlFlow<()> {
        if self.at_moment.is_none()
            && (state.events >= self.stop_events || timed.time > self.stop_time)
        {
            self.moment_time = Some(state.time);
            if !self.lifetimes {
                return ControlFlow::Break(());
            }
            self.open = state.heap.live.len();
            let blocks = state.heap.live.iter();
            self.at_moment = Some(blocks.map(|(&a, b)| (a, LiveAt::new(*b))).collect());
        }
        ControlFlow::Continue(())
    }

    fn alloc(&mut self, _: &Timed, address: u64, block: &Block, _: Option<&Block>) {
        // After the moment, only an address whose free went unseen comes back while live: it
        // does not end the block live there.
        if self.at_moment.is_none() && !self.lifetimes && self.pass(address, block) {
            self.count(block);
        }
    }

    fn free(&mut self, timed: &Timed, address: u64, freed: Option<&Block>, temporary: bool) {
        let Some(ends) = self.at_moment.as_mut() else {
            if let Some(block) = freed
                && self.lifetimes
                && self.pass(address, block)
                && self.selection.outcome(
                    Some(timed.time - block.time),
                    temporary,
                    Some(timed.time),
                )
            {
                self.count(block);
            }
            return;
        };
        if let Some(LiveAt {
            block,
            end: end @ None,
        }) = ends.get_mut(&address)
        {
            *end = Some((timed.time - block.time, temporary));
            self.open -= 1;
            self.ended = self.open == 0;
        }
    }

    fn after(&mut self, _: &Timed, _: &Accumulated) -> ControlFlow<()> {
        if self.ended {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// The export of `heap` in `kind`, at the moment `(events, time)`: after at most `events` events,
/// at `time` (nanoseconds since the trace started).
fn write_body(
    state: &State,
    kind: Format,
    format: &str,
    heap: &Heap,
    (events, time): (u64, u64),
) -> Result<Vec<u8>, ApiError> {
    let trace = &state.trace;
    let snapshot = crate::moment::snapshot(trace, heap, heap.live_bytes);
    let mut resolver = crate::moment::resolver(trace);
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
            // The HTML report's timeline: the whole trace's live bytes up to the moment (the
            // filters choose its sites, not its timeline); none for a sampled trace, whose
            // events are not the program's.
            let mut events = crate::timeline::TraceEvents::new(trace, events).until(time);
            let events = (kind == Format::Html && header.sample_interval == 0)
                .then_some(&mut events as &mut dyn memprof::export::Events);
            memprof::export::write_with_events(
                kind,
                &snapshot,
                &mut resolver,
                &export,
                events,
                &mut body,
            )
        }
    };
    written.map_err(|e| ApiError::internal(format!("export {format}: {e}")))?;
    Ok(body)
}

/// A block live at an export's moment, and how it ended after it.
struct LiveAt {
    block: Block,
    /// Once it ended: its lifetime and whether it was temporary; `None` while the trace shows no
    /// end (never freed).
    end: Option<(u64, bool)>,
}

impl LiveAt {
    fn new(block: Block) -> LiveAt {
        LiveAt { block, end: None }
    }
}
