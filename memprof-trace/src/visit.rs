//! The one replay: every event of a trace in time order applied to the live heap, with what each
//! event means for a block (its end, its lifetime, whether it was temporary) handed to a
//! [`Visitor`]. The summary, the viewer's index and scans, the exports at a moment and the
//! replays to a moment are visitors of this loop; none walks the events on its own.

use crate::addresses::AddressHasher;
use crate::heap::{Block, Heap, Mapping};
use crate::moment::{Moment, Position};
use crate::replay::{Event, Timed, Trace, TraceError};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ops::ControlFlow;

/// What a replay has accumulated so far, as each [`Visitor`] call sees it.
#[derive(Clone, Debug, Default)]
pub struct Accumulated {
    /// The live heap, after the events applied so far.
    pub heap: Heap,
    /// Events applied (a reallocation counts as a free and an allocation).
    pub events: u64,
    /// Time of the last event applied, in ns since the trace started.
    pub time: u64,
    /// Each thread's last allocation, until that thread frees anything or allocates again.
    last_alloc: LastAlloc,
}

/// Each thread's last allocation: in a vector by thread number for the numbers below
/// [`LastAlloc::DENSE`] (the format numbers threads from 1 up), in a map for any others.
#[derive(Clone, Debug, Default)]
struct LastAlloc {
    dense: Vec<Option<u64>>,
    sparse: HashMap<u32, u64, BuildHasherDefault<AddressHasher>>,
}

impl LastAlloc {
    const DENSE: u32 = 1 << 16;

    #[inline]
    fn insert(&mut self, thread: u32, address: u64) {
        if thread < Self::DENSE {
            let at = thread as usize;
            if self.dense.len() <= at {
                self.dense.resize(at + 1, None);
            }
            self.dense[at] = Some(address);
        } else {
            self.sparse.insert(thread, address);
        }
    }

    #[inline]
    fn remove(&mut self, thread: u32) -> Option<u64> {
        if thread < Self::DENSE {
            self.dense.get_mut(thread as usize)?.take()
        } else {
            self.sparse.remove(&thread)
        }
    }
}

/// What a replay tells about each event. Every method has a default that does nothing, so a
/// visitor implements only what it counts.
///
/// For each event, in time order: [`before`](Visitor::before) (which may stop the replay there,
/// the event not applied), then the event applied to [`Accumulated::heap`] and one of
/// [`alloc`](Visitor::alloc), [`free`](Visitor::free), [`mark`](Visitor::mark),
/// [`map`](Visitor::map) or [`unmap`](Visitor::unmap), then
/// [`after`](Visitor::after) (which may stop the replay after it).
pub trait Visitor {
    /// Before `timed` is applied; `Break` ends the replay without it.
    fn before(&mut self, timed: &Timed, state: &Accumulated) -> ControlFlow<()> {
        let _ = (timed, state);
        ControlFlow::Continue(())
    }

    /// A block allocated at `address` (a reallocation's new block too). `replaced` is the block
    /// that was live at that address, whose free the trace did not show.
    fn alloc(&mut self, timed: &Timed, address: u64, block: &Block, replaced: Option<&Block>) {
        let _ = (timed, address, block, replaced);
    }

    /// A free of `address` (a reallocation's old block too). `freed` is the block it ended, when
    /// one was live there; `temporary` says whether it was the freeing thread's last allocation
    /// and the thread's first free since (no allocation and no other free of that thread between
    /// the two: heaptrack's rule, per thread).
    fn free(&mut self, timed: &Timed, address: u64, freed: Option<&Block>, temporary: bool) {
        let _ = (timed, address, freed, temporary);
    }

    /// A marker with this label id.
    fn mark(&mut self, timed: &Timed, label: u32) {
        let _ = (timed, label);
    }

    /// A memory mapping made ([`Event::Map`]) at `address`, of `length` bytes. `replaced` are the
    /// pieces of live mappings it replaced (start, length, mapping), as `MAP_FIXED` does.
    fn map(
        &mut self,
        timed: &Timed,
        address: u64,
        length: u64,
        mapping: &Mapping,
        replaced: &[(u64, u64, Mapping)],
    ) {
        let _ = (timed, address, length, mapping, replaced);
    }

    /// Pages unmapped ([`Event::Unmap`]): `removed` are the pieces of live mappings that ended
    /// (start, length, mapping).
    fn unmap(&mut self, timed: &Timed, address: u64, length: u64, removed: &[(u64, u64, Mapping)]) {
        let _ = (timed, address, length, removed);
    }

    /// After `timed` was applied; `Break` ends the replay here.
    fn after(&mut self, timed: &Timed, state: &Accumulated) -> ControlFlow<()> {
        let _ = (timed, state);
        ControlFlow::Continue(())
    }
}

impl Accumulated {
    /// A replay's start: nothing applied, the heap empty.
    pub(crate) fn start(trace: &Trace) -> Accumulated {
        Accumulated {
            heap: Heap {
                sample_interval: trace.header().sample_interval,
                ..Heap::default()
            },
            ..Accumulated::default()
        }
    }

    /// Applies one event, telling `visitor` what it means.
    pub(crate) fn apply(&mut self, timed: &Timed, visitor: &mut dyn Visitor) -> ControlFlow<()> {
        visitor.before(timed, self)?;
        let removed = self.heap.apply_mapping(timed);
        let ended = self.heap.apply(timed);
        self.events += 1;
        // The latest time: an event applied out of order (a live trace's) leaves it.
        self.time = self.time.max(timed.time);
        match timed.event {
            Event::Alloc {
                address,
                size,
                stack,
                flags,
                ..
            } => {
                self.last_alloc.insert(timed.thread, address);
                let block = Block {
                    size,
                    stack,
                    thread: timed.thread,
                    time: timed.time,
                    flags,
                };
                visitor.alloc(timed, address, &block, ended.as_ref());
            }
            Event::Free { address, .. } => {
                // Any free of the thread ends its candidate, as in heaptrack.
                let temporary = self.last_alloc.remove(timed.thread) == Some(address);
                visitor.free(timed, address, ended.as_ref(), temporary);
            }
            Event::Mark { label } => visitor.mark(timed, label),
            Event::Map {
                address,
                length,
                stack,
                prot,
                flags,
            } => {
                let mapping = Mapping {
                    stack,
                    prot,
                    flags,
                    thread: timed.thread,
                    time: timed.time,
                };
                visitor.map(timed, address, length, &mapping, &removed);
            }
            Event::Unmap { address, length } => visitor.unmap(timed, address, length, &removed),
        }
        visitor.after(timed, self)
    }
}

impl Trace {
    /// Replays the trace from its start through `visitor` until it breaks or the events end;
    /// `progress(events_done)` every few thousand events. Returns what was accumulated.
    pub fn visit(
        &self,
        visitor: &mut dyn Visitor,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Accumulated, TraceError> {
        let mut state = Accumulated::start(self);
        self.for_each_event(
            &mut |batch| {
                state.heap.touch(batch);
                batch
                    .iter()
                    .try_for_each(|timed| state.apply(timed, visitor))
            },
            progress,
        )?;
        Ok(state)
    }

    /// Finds the heap's peak: the position just after the event that first took the live bytes
    /// to their maximum.
    pub fn find_peak(&self, progress: &mut dyn FnMut(u64)) -> Result<Position, TraceError> {
        self.find_peak_within(u64::MAX, progress)
    }

    /// [`Trace::find_peak`] among the first `limit` events of the replay.
    pub fn find_peak_within(
        &self,
        limit: u64,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Position, TraceError> {
        struct Peak {
            limit: u64,
            peak: Position,
        }
        impl Visitor for Peak {
            fn before(&mut self, _: &Timed, state: &Accumulated) -> ControlFlow<()> {
                if state.events == self.limit {
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            }

            fn after(&mut self, timed: &Timed, state: &Accumulated) -> ControlFlow<()> {
                if state.heap.live_bytes > self.peak.live_bytes {
                    self.peak.live_bytes = state.heap.live_bytes;
                    self.peak.time = timed.time;
                    self.peak.events = state.events;
                }
                ControlFlow::Continue(())
            }
        }
        let mut peak = Peak {
            limit,
            peak: Position {
                found: true,
                ..Position::default()
            },
        };
        self.visit(&mut peak, progress)?;
        Ok(peak.peak)
    }

    /// Replays the trace to `moment`: the live heap there, and where that is.
    pub fn replay(
        &self,
        moment: &Moment,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(Heap, Position), TraceError> {
        struct To<'a> {
            moment: &'a Moment,
            stop_after: Option<u64>,
            label: Option<u32>,
            found: bool,
        }
        impl Visitor for To<'_> {
            fn before(&mut self, timed: &Timed, _: &Accumulated) -> ControlFlow<()> {
                if let Moment::Time(limit) = self.moment
                    && timed.time > *limit
                {
                    self.found = true;
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            }

            fn after(&mut self, timed: &Timed, state: &Accumulated) -> ControlFlow<()> {
                if self.stop_after == Some(state.events) {
                    return ControlFlow::Break(());
                }
                if let Event::Mark { label } = timed.event
                    && Some(label) == self.label
                {
                    self.found = true;
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            }
        }
        let stop_after = match moment {
            Moment::Peak => {
                let peak = self.find_peak(progress)?;
                Some(peak.events)
            }
            Moment::Events(n) => Some(*n),
            _ => None,
        };
        let label = match moment {
            Moment::Marker(text) => {
                let id = self
                    .labels()
                    .iter()
                    .find(|(_, t)| *t == text)
                    .map(|(&id, _)| id);
                if id.is_none() {
                    return Ok((Heap::default(), Position::default()));
                }
                id
            }
            _ => None,
        };
        let found = matches!(moment, Moment::End | Moment::Peak | Moment::Events(_))
            || matches!(moment, Moment::Time(t) if *t >= self.last_time());
        if stop_after == Some(0) {
            let heap = Heap {
                sample_interval: self.header().sample_interval,
                ..Heap::default()
            };
            let position = Position {
                found,
                ..Position::default()
            };
            return Ok((heap, position));
        }
        let mut to = To {
            moment,
            stop_after,
            label,
            found,
        };
        let state = self.visit(&mut to, progress)?;
        let position = Position {
            time: state.time,
            events: state.events,
            live_bytes: state.heap.live_bytes,
            found: to.found,
        };
        Ok((state.heap, position))
    }
}
