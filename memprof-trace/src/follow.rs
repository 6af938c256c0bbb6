//! The replay of a trace that is still being written: [`Follow`] keeps the merge of the event
//! chunks, the live heap and the visitor's state from one update to the next, so that each update
//! reads, decodes and applies what was appended since the last one, never the trace again.
//!
//! The trace's writer sends each thread's buffer when it is full, and every thread's partly
//! filled buffer about once a second: a chunk of one thread may arrive after later events of
//! another. Events are merged in time order (a thread's own events stay in their order) and
//! applied up to a watermark, the newest time that arrived less a slack of a few seconds, or the
//! time the writer says every thread's events are written up to (`WRITTEN`, if later); a chunk
//! that arrives behind it anyway has its events applied as they come, counted in their own time's
//! buckets, and counted as applied out of order ([`Followed::out_of_order`]).

use crate::records::ErrorKind;
use crate::replay::{BATCH, ChunkInfo, Timed, Trace, TraceError, error_at};
use crate::visit::{Accumulated, Visitor};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;

/// How far behind the newest event that arrived the events are applied by default: a few times
/// the writer's period for partly filled buffers (about a second).
pub const FOLLOW_SLACK_NS: u64 = 3_000_000_000;

/// A trace replayed as it grows; see the module's documentation.
#[derive(Debug)]
pub struct Follow {
    state: Accumulated,
    /// Event chunks read from the file but not decoded yet, by first time (then place in the
    /// file): a chunk is decoded once the watermark reaches its first event.
    backlog: Vec<ChunkInfo>,
    /// Decoded chunks with events left to apply: their events and the next one's index.
    open: Vec<Option<(Vec<Timed>, usize)>>,
    /// Free slots of `open`.
    free: Vec<usize>,
    /// The next event of each open chunk: its time, then its chunk's first time and offset (the
    /// order of [`Trace::visit`]'s merge at equal times), and its slot.
    heap: BinaryHeap<Reverse<(u64, u64, u64, usize)>>,
    /// The newest event time that arrived.
    newest: u64,
    /// Events at or before this time are applied.
    watermark: u64,
    slack: u64,
    pending: u64,
    out_of_order: u64,
}

/// Where a [`Follow`] stands after an update.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Followed {
    /// Events applied in all (a reallocation counts as a free and an allocation).
    pub applied: u64,
    /// Events applied by this update.
    pub applied_now: u64,
    /// Events that arrived but wait for the watermark (for the chunks not decoded yet, their
    /// records: a reallocation is one).
    pub pending: u64,
    /// Events applied after a later event had been (their chunk arrived behind the watermark).
    pub out_of_order: u64,
    /// Events at or before this time are applied.
    pub watermark: u64,
    /// Event chunks decoded by this update.
    pub chunks_now: usize,
}

impl Follow {
    /// A replay of `trace` that has applied nothing yet; its first update applies the event
    /// chunks the trace has read so far, and those appended since.
    pub fn new(trace: &Trace) -> Follow {
        Follow::with_slack(trace, FOLLOW_SLACK_NS)
    }

    /// [`Follow::new`], applying events `slack` ns behind the newest that arrived.
    pub fn with_slack(trace: &Trace, slack: u64) -> Follow {
        let backlog = trace.chunk_infos().to_vec();
        let newest = backlog.iter().map(|c| c.last_time).max().unwrap_or(0);
        let pending = backlog.iter().map(|c| u64::from(c.events)).sum();
        Follow {
            state: Accumulated::start(trace),
            backlog,
            open: Vec::new(),
            free: Vec::new(),
            heap: BinaryHeap::new(),
            newest,
            watermark: 0,
            slack,
            pending,
            out_of_order: 0,
        }
    }

    /// What the replay has accumulated: the live heap after the events applied.
    pub fn accumulated(&self) -> &Accumulated {
        &self.state
    }

    /// Reads what was appended to `trace`'s file since the last update ([`Trace`]'s
    /// definitions and chunk index grow with it), decodes its event chunks, and applies to
    /// `visitor`, merged in time order, the events up to the watermark: every event that arrived
    /// when `everything` is set (the trace's writer is gone, or has been quiet longer than it
    /// waits to send partly filled buffers) or the trace has its end record. Costs what arrived
    /// and what is applied.
    pub fn update(
        &mut self,
        trace: &mut Trace,
        visitor: &mut dyn Visitor,
        everything: bool,
    ) -> Result<Followed, TraceError> {
        self.update_some(trace, visitor, everything, u64::MAX)
    }

    /// [`Follow::update`], applying at most about `most` events (a batch may go a few past it):
    /// the caller looks at what the replay costs between two calls. Events left ready wait for
    /// the next call, as [`Followed::pending`].
    pub fn update_some(
        &mut self,
        trace: &mut Trace,
        visitor: &mut dyn Visitor,
        everything: bool,
        most: u64,
    ) -> Result<Followed, TraceError> {
        let arrived = trace.extend_chunks()?;
        for chunk in arrived {
            self.newest = self.newest.max(chunk.last_time);
            self.pending += u64::from(chunk.events);
            let at = self
                .backlog
                .partition_point(|c| (c.first_time, c.offset) <= (chunk.first_time, chunk.offset));
            self.backlog.insert(at, chunk);
        }
        // Everything that arrived is at or before the newest time; a trace that has its end
        // record has every event before it, and one whose writer says every thread's events up
        // to a time are written (`WRITTEN`) has those.
        let limit = if everything || trace.end_record().is_some() {
            self.newest
        } else {
            self.newest.saturating_sub(self.slack).max(trace.written())
        };
        self.watermark = self.watermark.max(limit);
        // A chunk is decoded when the merge reaches its first event, so that the events decoded
        // and not applied yet are those of the chunks that overlap in time (about one a thread),
        // however many arrived since the last update; the others wait as their place in the file.
        let mut file = None;
        let mut decoded = 0;
        let before = self.state.events;
        // Applied a few at a time, their slots in the live table read together first, as
        // `Trace::visit` does: their cache misses overlap.
        let mut batch: Vec<Timed> = Vec::with_capacity(BATCH);
        while self.state.events - before < most {
            batch.clear();
            while batch.len() < BATCH {
                let next = self.heap.peek().map(|&Reverse(key)| key);
                if let Some(info) = self.backlog.get(decoded)
                    && info.first_time <= self.watermark
                    && next.is_none_or(|(time, ..)| info.first_time <= time)
                {
                    let info = *info;
                    decoded += 1;
                    self.open_chunk(trace, &mut file, info)?;
                    continue;
                }
                let Some((time, first_time, offset, slot)) = next else {
                    break;
                };
                if time > self.watermark {
                    break;
                }
                self.heap.pop();
                let (events, at) = self.open[slot]
                    .as_mut()
                    .expect("a chunk in the heap is open");
                batch.push(events[*at]);
                *at += 1;
                if let Some(following) = events.get(*at) {
                    self.heap
                        .push(Reverse((following.time, first_time, offset, slot)));
                } else {
                    self.open[slot] = None;
                    self.free.push(slot);
                }
            }
            if batch.is_empty() {
                break;
            }
            self.state.heap.touch(&batch);
            for event in &batch {
                if self.state.events > 0 && event.time < self.state.time {
                    self.out_of_order += 1;
                }
                self.pending -= 1;
                // A live replay has no end to stop at: a visitor's `Break` is not asked for.
                let _ = self.state.apply(event, visitor);
            }
        }
        self.backlog.drain(..decoded);
        let chunks_now = decoded;
        Ok(Followed {
            applied: self.state.events,
            applied_now: self.state.events - before,
            pending: self.pending,
            out_of_order: self.out_of_order,
            watermark: self.watermark,
            chunks_now,
        })
    }

    /// Decodes the chunk `info` of `trace` (through `file`, opened on first use) and puts its
    /// first event in the merge.
    fn open_chunk(
        &mut self,
        trace: &Trace,
        file: &mut Option<File>,
        info: ChunkInfo,
    ) -> Result<(), TraceError> {
        let fail = |error| TraceError {
            path: trace.path().to_path_buf(),
            error,
        };
        let file = match file {
            Some(file) => file,
            None => file
                .insert(File::open(trace.path()).map_err(|e| fail(error_at(0, ErrorKind::Io(e))))?),
        };
        let events = trace.decode(file, info).map_err(fail)?;
        // The header's count becomes the events decoded (a reallocation is two).
        self.pending = self.pending - u64::from(info.events) + events.len() as u64;
        let Some(first) = events.first() else {
            return Ok(());
        };
        let key = (first.time, info.first_time, info.offset);
        let slot = match self.free.pop() {
            Some(slot) => {
                self.open[slot] = Some((events, 0));
                slot
            }
            None => {
                self.open.push(Some((events, 0)));
                self.open.len() - 1
            }
        };
        self.heap.push(Reverse((key.0, key.1, key.2, slot)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::ChunkEncoder;
    use crate::records::Header;
    use std::io::Write;

    const S: u64 = 1_000_000_000;

    /// The times and threads of the allocations applied, in the order applied.
    #[derive(Default)]
    struct Order(Vec<(u64, u32)>);

    impl Visitor for Order {
        fn alloc(
            &mut self,
            timed: &Timed,
            _: u64,
            _: &crate::heap::Block,
            _: Option<&crate::heap::Block>,
        ) {
            self.0.push((timed.time / S, timed.thread));
        }
    }

    fn chunk(thread: u32, seconds: &[u64]) -> Vec<u8> {
        let mut chunk = ChunkEncoder::new(thread);
        for &s in seconds {
            chunk.alloc(s * S, 0x1000 * (s + 1) + u64::from(thread), 16, 7);
        }
        stored(chunk)
    }

    /// `chunk` encoded, its payload stored as it is.
    fn stored(mut chunk: ChunkEncoder) -> Vec<u8> {
        let mut bytes = Vec::new();
        chunk.finish(None, &mut bytes).unwrap();
        bytes
    }

    /// A new trace file in a scratch directory of its own (`name`), with its header and a chunk
    /// defining stack 7: the directory, the file's path and the file, open to append to.
    fn begun(name: &str) -> (std::path::PathBuf, std::path::PathBuf, File) {
        let dir = std::env::temp_dir().join(format!("memprof-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("live.mptrace");
        let mut file = File::create(&path).unwrap();
        Header::new(1, 0, "/bin/app".into())
            .write_to(&mut file)
            .unwrap();
        let mut defs = ChunkEncoder::new(0);
        defs.stack(7, [0x10u64, 0x20].into_iter());
        defs.thread(1, 11, "main");
        defs.thread(2, 12, "worker");
        file.write_all(&stored(defs)).unwrap();
        (dir, path, file)
    }

    #[test]
    fn chunks_of_two_threads_out_of_order_are_merged() {
        let (dir, path, mut file) = begun("follow");
        let mut trace = Trace::open(&path).unwrap();
        let mut follow = Follow::with_slack(&trace, 3 * S);
        let mut order = Order::default();
        let mut update = |trace: &mut Trace, order: &mut Order, everything| {
            follow.update(trace, order, everything).unwrap()
        };

        // Thread 1 up to 10 s: applied up to 7 s.
        file.write_all(&chunk(1, &[1, 4, 10])).unwrap();
        let followed = update(&mut trace, &mut order, false);
        assert_eq!(order.0, [(1, 1), (4, 1)]);
        assert_eq!((followed.pending, followed.watermark), (1, 7 * S));
        // Thread 2's chunk of 8 and 9 s arrives after thread 1's 10 s: it waits, and half of a
        // chunk at the end of the file is no error.
        file.write_all(&chunk(2, &[8, 9])).unwrap();
        let next = chunk(1, &[20]);
        file.write_all(&next[..next.len() / 2]).unwrap();
        let followed = update(&mut trace, &mut order, false);
        assert_eq!((followed.applied, followed.pending), (2, 3));
        assert!(trace.cut().is_some());
        // The rest of thread 1's chunk: merged in time order up to 17 s.
        file.write_all(&next[next.len() / 2..]).unwrap();
        let followed = update(&mut trace, &mut order, false);
        assert!(trace.cut().is_none());
        // Thread 2's chunk and thread 1's first: decoded once the watermark reached them.
        assert_eq!(followed.chunks_now, 1);
        assert_eq!(order.0[2..], [(8, 2), (9, 2), (10, 1)]);
        assert_eq!((followed.pending, followed.out_of_order), (1, 0));
        // A chunk far behind: applied as it comes, counted out of order. An update decodes
        // what arrived, not what came before.
        file.write_all(&chunk(2, &[5])).unwrap();
        let followed = update(&mut trace, &mut order, false);
        assert_eq!(followed.chunks_now, 1);
        assert_eq!(order.0[5..], [(5, 2)]);
        assert_eq!((followed.pending, followed.out_of_order), (1, 1));
        // Everything, at the end.
        let followed = update(&mut trace, &mut order, true);
        assert_eq!(order.0[6..], [(20, 1)]);
        assert_eq!((followed.applied, followed.pending), (7, 0));
        assert_eq!(follow.accumulated().heap.live_bytes, 7 * 16);

        // The trace as extended is the trace as opened; a replay of it has every event in order.
        let opened = Trace::open(&path).unwrap();
        assert_eq!(
            (trace.events(), trace.last_time(), trace.stacks().len()),
            (opened.events(), opened.last_time(), opened.stacks().len())
        );
        assert_eq!(trace.threads(), opened.threads());
        let mut replayed = Order::default();
        opened.visit(&mut replayed, &mut |_| {}).unwrap();
        let mut sorted = order.0.clone();
        sorted.sort();
        assert_eq!(replayed.0, sorted);
        let mut again = Order::default();
        trace.visit(&mut again, &mut |_| {}).unwrap();
        assert_eq!(again.0, sorted);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A `WRITTEN` record moves the watermark past the slack: what it says is written is applied
    /// at once, what comes after waits as before.
    #[test]
    fn a_written_record_lets_the_events_before_it_be_applied() {
        let (dir, path, mut file) = begun("written");
        let written = |time: u64| {
            let mut defs = ChunkEncoder::new(0);
            defs.written(time);
            stored(defs)
        };
        let mut trace = Trace::open(&path).unwrap();
        let mut follow = Follow::with_slack(&trace, 3 * S);
        let mut order = Order::default();

        file.write_all(&chunk(1, &[1, 2, 3])).unwrap();
        let followed = follow.update(&mut trace, &mut order, false).unwrap();
        assert_eq!((followed.applied, followed.pending), (0, 3));
        // Written up to 2 s: the events to 2 s applied, the slack notwithstanding.
        file.write_all(&written(2 * S)).unwrap();
        let followed = follow.update(&mut trace, &mut order, false).unwrap();
        assert_eq!(order.0, [(1, 1), (2, 1)]);
        assert_eq!((followed.pending, followed.watermark), (1, 2 * S));
        // An older record moves nothing back.
        file.write_all(&written(S)).unwrap();
        file.write_all(&chunk(2, &[4])).unwrap();
        let followed = follow.update(&mut trace, &mut order, false).unwrap();
        assert_eq!((followed.applied, followed.watermark), (2, 2 * S));
        file.write_all(&written(4 * S)).unwrap();
        let followed = follow.update(&mut trace, &mut order, false).unwrap();
        assert_eq!(order.0[2..], [(3, 1), (4, 2)]);
        assert_eq!((followed.pending, followed.out_of_order), (0, 0));
        // A reader of the whole file takes the record as one it skips.
        let opened = Trace::open(&path).unwrap();
        assert_eq!(opened.events(), 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
