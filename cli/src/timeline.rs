//! The trace's events as the exports' [`Events`]: what lets `memprof convert` write DHAT's
//! lifetimes and per-site maxima and heaptrack's own event stream, exact.

use memprof::StackId;
use memprof::export::{Event, Events};
use memprof_trace::{Accumulated, Block, Timed, Trace, Visitor};
use std::io;
use std::ops::ControlFlow;

/// The first `events` events of `trace` (a [`memprof_trace::Position::events`]), with a progress
/// bar.
pub struct TraceEvents<'a> {
    pub trace: &'a Trace,
    pub events: u64,
}

impl Events for TraceEvents<'_> {
    fn for_each(&mut self, f: &mut dyn FnMut(Event)) -> io::Result<()> {
        let progress = crate::common::bar(self.events, "events");
        let mut forward = Forward {
            limit: self.events,
            f,
        };
        let result = self
            .trace
            .visit(&mut forward, &mut |done| progress.set_position(done));
        progress.finish_and_clear();
        result.map(drop).map_err(io::Error::other)
    }
}

/// The replay's visitor that hands each allocation and free on, up to `limit` events.
struct Forward<'a> {
    limit: u64,
    f: &'a mut dyn FnMut(Event),
}

impl Visitor for Forward<'_> {
    fn before(&mut self, _: &Timed, state: &Accumulated) -> ControlFlow<()> {
        if state.events == self.limit {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
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
