//! The trace's events as the exports' [`Events`]: what lets `memprof convert` write DHAT's
//! lifetimes and per-site maxima and heaptrack's own event stream, exact, and the HTML report's
//! timeline with its markers.

use memprof::StackId;
use memprof::export::{Event, Events};
use memprof_trace::{Accumulated, Block, Timed, Trace, Visitor};
use std::collections::HashMap;
use std::io;
use std::ops::ControlFlow;

/// The first `events` events of `trace` (a [`memprof_trace::Position::events`]) up to `until` ns,
/// with a progress bar; and the markers among them.
pub struct TraceEvents<'a> {
    trace: &'a Trace,
    events: u64,
    until: u64,
    markers: Vec<(u64, String)>,
}

impl<'a> TraceEvents<'a> {
    /// The first `events` events of `trace`.
    pub fn new(trace: &'a Trace, events: u64) -> TraceEvents<'a> {
        TraceEvents {
            trace,
            events,
            until: u64::MAX,
            markers: Vec::new(),
        }
    }

    /// Of those, only the events up to `until` ns.
    pub fn until(mut self, until: u64) -> TraceEvents<'a> {
        self.until = until;
        self
    }
}

impl Events for TraceEvents<'_> {
    fn for_each(&mut self, f: &mut dyn FnMut(Event)) -> io::Result<()> {
        let progress = crate::common::bar(self.events.min(self.trace.events()), "events");
        let mut forward = Forward {
            limit: self.events,
            until: self.until,
            labels: self.trace.labels(),
            markers: Vec::new(),
            f,
        };
        let result = self
            .trace
            .visit(&mut forward, &mut |done| progress.set_position(done));
        progress.finish_and_clear();
        self.markers = forward.markers;
        result.map(drop).map_err(io::Error::other)
    }

    fn markers(&mut self) -> Vec<(u64, String)> {
        std::mem::take(&mut self.markers)
    }
}

/// The replay's visitor that hands each allocation and free on, up to `limit` events and `until`
/// ns, and notes the markers.
struct Forward<'a> {
    limit: u64,
    until: u64,
    labels: &'a HashMap<u32, String>,
    markers: Vec<(u64, String)>,
    f: &'a mut dyn FnMut(Event),
}

impl Visitor for Forward<'_> {
    fn before(&mut self, timed: &Timed, state: &Accumulated) -> ControlFlow<()> {
        if state.events == self.limit || timed.time > self.until {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn mark(&mut self, timed: &Timed, label: u32) {
        let text = self.labels.get(&label).cloned().unwrap_or_default();
        self.markers.push((timed.time, text));
    }

    fn alloc(&mut self, timed: &Timed, address: u64, block: &Block, _: Option<&Block>) {
        (self.f)(Event::Alloc {
            time: timed.time,
            address,
            size: block.size,
            stack: StackId(block.stack),
        });
    }

    fn free(&mut self, timed: &Timed, address: u64, _: Option<&Block>, _: bool) {
        (self.f)(Event::Free {
            time: timed.time,
            address,
        });
    }
}
