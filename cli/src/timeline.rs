//! The trace's events as the exports' [`Events`]: what lets `memprof convert` write DHAT's
//! lifetimes and per-site maxima and heaptrack's own event stream, exact.

use memprof::StackId;
use memprof::export::{Event, Events};
use memprof_trace::{self as replay, Trace};
use std::io;
use std::ops::ControlFlow;

/// The first `events` events of `trace` (a [`replay::Position::events`]), with a progress bar.
pub struct TraceEvents<'a> {
    pub trace: &'a Trace,
    pub events: u64,
}

impl Events for TraceEvents<'_> {
    fn for_each(&mut self, f: &mut dyn FnMut(Event)) -> io::Result<()> {
        let progress = crate::bar(self.events, "events");
        let mut seen = 0u64;
        let limit = self.events;
        let result = self.trace.for_each_event(
            &mut |timed| {
                if seen == limit {
                    return ControlFlow::Break(());
                }
                seen += 1;
                match timed.event {
                    replay::Event::Alloc {
                        address,
                        size,
                        stack,
                        ..
                    } => f(Event::Alloc {
                        time: timed.time,
                        address,
                        size,
                        stack: StackId(stack),
                    }),
                    replay::Event::Free { address, .. } => f(Event::Free {
                        time: timed.time,
                        address,
                    }),
                    replay::Event::Mark { .. } => {}
                }
                ControlFlow::Continue(())
            },
            &mut |done| progress.set_position(done),
        );
        progress.finish_and_clear();
        result.map_err(io::Error::other)
    }
}
