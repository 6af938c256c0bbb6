//! Replaying a trace: its events merged across threads in time order, up to a moment of the run
//! (a time, the heap's peak, a marker, the end), into the crate's [`Snapshot`] with the trace's
//! own symbols as resolver, so that every report and export works on it unchanged.
//!
//! [`Trace::open`] reads the file once, decoding only the chunks that define stacks, threads,
//! labels and symbols and keeping an index of the event chunks (offset, thread, first and last
//! time). A replay then decodes the event chunks in order of their first event, merging the
//! chunks that overlap in time: memory is what is live at the moment replayed, the chunks that
//! overlap it and the stack table, never the whole trace. A [`Trace`] is reusable: a server
//! opens it once and replays it to as many moments as it is asked about.

#![forbid(unsafe_code)]

use super::format::{Error, ErrorKind, Header, ModuleEntry, Reader, Record, flags};
use crate::address::ReturnAddress;
use crate::address::StackId;
use crate::frames::Frame;
use crate::snapshot::{LiveBlock, Snapshot, StackSummary};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{BufReader, Cursor, Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

/// A moment of the run to replay a trace to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Moment {
    /// After every event at or before this many nanoseconds since the trace started.
    Time(u64),
    /// Just after the event that took the live bytes to their maximum (the first such event).
    Peak,
    /// After the last event.
    End,
    /// At the first marker with this label (`memprof::mark`).
    Marker(String),
    /// After this many events of the replay (a [`Position::events`]).
    Events(u64),
}

impl std::str::FromStr for Moment {
    type Err = String;

    /// `peak`, `end`, `marker:LABEL`, or seconds since the trace started (`1.5`).
    fn from_str(text: &str) -> Result<Moment, String> {
        match text {
            "peak" => Ok(Moment::Peak),
            "end" => Ok(Moment::End),
            _ => {
                if let Some(label) = text.strip_prefix("marker:") {
                    return Ok(Moment::Marker(label.to_owned()));
                }
                match text.parse::<f64>() {
                    Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => {
                        Ok(Moment::Time((seconds * 1e9).round() as u64))
                    }
                    _ => Err(format!(
                        "{text:?} is not a moment: SECONDS, peak, end or marker:LABEL"
                    )),
                }
            }
        }
    }
}

/// One event of the replay, in time order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A block allocated (a reallocation's new block too).
    Alloc {
        /// Its address.
        address: u64,
        /// Its size.
        size: u64,
        /// Its stack: an index into [`Trace::stacks`].
        stack: u32,
        /// For a reallocation's new block, the old block's address (freed by the same thread's
        /// previous [`Event::Free`] with `realloc` set).
        realloc_of: Option<u64>,
    },
    /// A recorded block freed (a reallocation's old block too).
    Free {
        /// Its address.
        address: u64,
        /// Whether it is a reallocation's old block.
        realloc: bool,
    },
    /// A marker: an index into [`Trace::labels`].
    Mark {
        /// The label's id.
        label: u32,
    },
}

/// An event with when and where it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timed {
    /// Nanoseconds since the trace started.
    pub time: u64,
    /// The trace's number of the thread (0: events after their thread's end).
    pub thread: u32,
    /// What happened.
    pub event: Event,
}

/// An event chunk of the file, by its header.
#[derive(Clone, Copy, Debug)]
struct ChunkInfo {
    offset: u64,
    thread: u32,
    first_time: u64,
}

/// A trace opened for replay: its header, definitions and the index of its event chunks.
#[derive(Debug)]
pub struct Trace {
    path: PathBuf,
    /// The file header's bytes, put in front of a chunk's bytes to decode it alone.
    header_bytes: Vec<u8>,
    header_len: u64,
    header: Header,
    chunks: Vec<ChunkInfo>,
    /// The trace's stack ids, densely renumbered in order of definition.
    ids: HashMap<u32, u32>,
    stacks: Vec<Vec<u64>>,
    labels: HashMap<u32, String>,
    threads: HashMap<u32, (u64, String)>,
    symbols: HashMap<u64, Vec<Frame>>,
    modules: Vec<Vec<ModuleEntry>>,
    end: Option<(u64, u64)>,
    events: u64,
    last_time: u64,
    file_len: u64,
    cut: Option<Error>,
}

/// A problem with a trace file: which file, and the codec's error with its byte offset.
#[derive(Debug)]
pub struct TraceError {
    /// The file.
    pub path: PathBuf,
    /// What went wrong, and where.
    pub error: Error,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Where a replay stopped, and the heap there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Position {
    /// Nanoseconds since the trace started, of the last event replayed.
    pub time: u64,
    /// Events replayed (a reallocation counts as a free and an allocation).
    pub events: u64,
    /// Live bytes there (recorded bytes, not weighted by sampling).
    pub live_bytes: u64,
    /// Whether the moment asked for was found (a marker, or a time within the trace).
    pub found: bool,
}

/// A live block during a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Its size.
    pub size: u64,
    /// Its stack (an index into [`Trace::stacks`]).
    pub stack: u32,
    /// When it was allocated.
    pub time: u64,
}

/// Hashes block addresses: one multiplication (Fibonacci hashing), enough for addresses, which
/// the table's own order makes neither adversarial nor clustered in the high bits once mixed.
#[derive(Clone, Copy, Debug, Default)]
pub struct AddressHasher(u64);

impl std::hash::Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0 ^ value)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(26);
    }
}

/// Live blocks by address.
pub type LiveBlocks = HashMap<u64, Block, std::hash::BuildHasherDefault<AddressHasher>>;

/// The state of a replay: live blocks and per-stack totals allocated so far.
#[derive(Clone, Debug, Default)]
pub struct Heap {
    /// Live blocks by address.
    pub live: LiveBlocks,
    /// Blocks and bytes allocated per stack so far.
    pub allocated: Vec<(u64, u64)>,
    /// Sum of the live blocks' sizes.
    pub live_bytes: u64,
    /// The trace's sampling interval (0: every allocation recorded); when not 0, `estimated`
    /// is kept.
    pub sample_interval: u64,
    /// Under sampling, the blocks and bytes each stack stands for so far (the recorded ones
    /// weighted as the live table weights them).
    pub estimated: Vec<(f64, f64)>,
}

impl Heap {
    /// Applies one event. Returns the freed block for a free of a live block.
    pub fn apply(&mut self, timed: &Timed) -> Option<Block> {
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
                if let Some(old) = self.live.insert(address, block) {
                    self.live_bytes -= old.size;
                }
                self.live_bytes += size;
                let index = stack as usize;
                if self.allocated.len() <= index {
                    self.allocated.resize(index + 1, (0, 0));
                }
                self.allocated[index].0 += 1;
                self.allocated[index].1 += size;
                if self.sample_interval != 0 {
                    if self.estimated.len() <= index {
                        self.estimated.resize(index + 1, (0.0, 0.0));
                    }
                    let (blocks, bytes) = crate::sampling::weight(size, self.sample_interval);
                    self.estimated[index].0 += blocks;
                    self.estimated[index].1 += bytes;
                }
                None
            }
            Event::Free { address, .. } => {
                let block = self.live.remove(&address)?;
                self.live_bytes -= block.size;
                Some(block)
            }
            Event::Mark { .. } => None,
        }
    }
}

impl Trace {
    /// Opens a trace: reads its header, its definitions and symbols, and indexes its event chunks.
    /// A trace cut short opens up to its last complete chunk ([`Trace::cut`] says where).
    pub fn open(path: impl AsRef<Path>) -> Result<Trace, TraceError> {
        Trace::open_with_progress(path, &mut |_, _| {})
    }

    /// [`Trace::open`], calling `progress(bytes_read, file_len)` after each chunk.
    pub fn open_with_progress(
        path: impl AsRef<Path>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Trace, TraceError> {
        let path = path.as_ref().to_path_buf();
        let fail = |error: Error| TraceError {
            path: path.clone(),
            error,
        };
        let file = File::open(&path).map_err(|e| fail(error_at(0, ErrorKind::Io(e))))?;
        let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut reader = Reader::new(BufReader::new(file)).map_err(fail)?;
        let header_len = reader.offset();
        let mut header_bytes = vec![0u8; header_len as usize];
        File::open(&path)
            .and_then(|mut f| f.read_exact(&mut header_bytes))
            .map_err(|e| fail(error_at(0, ErrorKind::Io(e))))?;
        let mut trace = Trace {
            path: path.clone(),
            header_bytes,
            header_len,
            header: reader.header().clone(),
            chunks: Vec::new(),
            ids: HashMap::new(),
            stacks: Vec::new(),
            labels: HashMap::new(),
            threads: HashMap::new(),
            symbols: HashMap::new(),
            modules: Vec::new(),
            end: None,
            events: 0,
            last_time: 0,
            file_len,
            cut: None,
        };
        loop {
            let (offset, chunk) = match reader.next_chunk_header() {
                Ok(Some(found)) => found,
                Ok(None) => break,
                Err(error) if matches!(error.kind, ErrorKind::Truncated) => {
                    trace.cut = Some(error);
                    break;
                }
                Err(error) => return Err(fail(error)),
            };
            let has_events = chunk.flags & flags::EVENTS != 0 || chunk.events > 0;
            let defines = chunk.flags & (flags::DEFINITIONS | flags::SYMBOLS | flags::END) != 0
                || !has_events;
            if defines {
                let read = match reader.read_payload() {
                    Ok(read) => read,
                    Err(error) if matches!(error.kind, ErrorKind::Truncated) => {
                        trace.cut = Some(error);
                        break;
                    }
                    Err(error) => return Err(fail(error)),
                };
                for record in read.records() {
                    trace.define(record.map_err(fail)?);
                }
            } else {
                match reader.skip_payload() {
                    Ok(()) => {}
                    Err(error) if matches!(error.kind, ErrorKind::Truncated) => {
                        trace.cut = Some(error);
                        break;
                    }
                    Err(error) => return Err(fail(error)),
                }
            }
            if has_events {
                trace.events += u64::from(chunk.events);
                trace.last_time = trace.last_time.max(chunk.last_time);
                trace.chunks.push(ChunkInfo {
                    offset,
                    thread: chunk.thread,
                    first_time: chunk.first_time,
                });
            }
            progress(reader.offset(), file_len);
        }
        // Merge order: by first event, then by place in the file.
        trace.chunks.sort_by_key(|c| (c.first_time, c.offset));
        Ok(trace)
    }

    fn define(&mut self, record: Record) {
        match record {
            Record::Stack { id, frames } => {
                let next = self.stacks.len() as u32;
                let index = *self.ids.entry(id).or_insert(next);
                if index == next {
                    self.stacks.push(frames);
                } else {
                    self.stacks[index as usize] = frames;
                }
            }
            Record::Label { id, text } => {
                self.labels.insert(id, text);
            }
            Record::Thread { thread, tid, name } => {
                self.threads.insert(thread, (tid, name));
            }
            Record::Symbol { address, frames } => {
                let frames = frames
                    .into_iter()
                    .map(|f| Frame {
                        function: f.function,
                        file: f.file,
                        line: f.line,
                        column: f.column,
                    })
                    .collect();
                self.symbols.insert(address, frames);
            }
            Record::Modules(modules) => self.modules.push(modules),
            Record::End { events, lost } => self.end = Some((events, lost)),
            _ => {}
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Every stack's return addresses, innermost first, by dense index (what events name).
    pub fn stacks(&self) -> &[Vec<u64>] {
        &self.stacks
    }

    /// Marker labels by id.
    pub fn labels(&self) -> &HashMap<u32, String> {
        &self.labels
    }

    /// Threads: the trace's number → (operating system id, name).
    pub fn threads(&self) -> &HashMap<u32, (u64, String)> {
        &self.threads
    }

    /// Module lists, in the order they were recorded.
    pub fn modules(&self) -> &[Vec<ModuleEntry>] {
        &self.modules
    }

    /// Events in the chunks indexed (a reallocation is one).
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Time of the last event, in ns since the trace started.
    pub fn last_time(&self) -> u64 {
        self.last_time
    }

    /// The `END` record (events written, events lost), absent in a trace cut short.
    pub fn end_record(&self) -> Option<(u64, u64)> {
        self.end
    }

    /// Where the trace was cut short, when it was.
    pub fn cut(&self) -> Option<&Error> {
        self.cut.as_ref()
    }

    /// Bytes of the file.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Whether the trace has a symbol section.
    pub fn has_symbols(&self) -> bool {
        !self.symbols.is_empty()
    }

    /// The trace's symbols as a resolver for reports and exports (addresses without a symbol
    /// resolve to an unknown frame).
    pub fn resolver(&self) -> HashMap<ReturnAddress, Vec<Frame>> {
        self.symbols
            .iter()
            .map(|(&a, f)| (ReturnAddress(a as usize), f.clone()))
            .collect()
    }

    /// Calls `visit` with every event in time order (merged across threads; at equal times in
    /// file order) until it breaks; `progress(events_done)` every few thousand events.
    pub fn for_each_event(
        &self,
        visit: &mut dyn FnMut(&Timed) -> ControlFlow<()>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), TraceError> {
        let fail = |error: Error| TraceError {
            path: self.path.clone(),
            error,
        };
        let mut file = File::open(&self.path).map_err(|e| fail(error_at(0, ErrorKind::Io(e))))?;
        // Decoded chunks being merged, and a heap of their next events.
        let mut open: Vec<Option<(Vec<Timed>, usize)>> = Vec::new();
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        let mut next = 0;
        let mut done = 0u64;
        loop {
            // Open every chunk that starts at or before the earliest pending event.
            while next < self.chunks.len()
                && heap
                    .peek()
                    .is_none_or(|Reverse((t, _))| self.chunks[next].first_time <= *t)
            {
                let events = self.decode(&mut file, self.chunks[next]).map_err(fail)?;
                if let Some(first) = events.first() {
                    heap.push(Reverse((first.time, open.len())));
                    open.push(Some((events, 0)));
                } else {
                    open.push(None);
                }
                next += 1;
            }
            let Some(Reverse((_, slot))) = heap.pop() else {
                return Ok(());
            };
            let (events, at) = open[slot].as_mut().expect("a chunk in the heap is open");
            let event = events[*at];
            *at += 1;
            if let Some(following) = events.get(*at) {
                heap.push(Reverse((following.time, slot)));
            } else {
                open[slot] = None;
            }
            done += 1;
            if done.is_multiple_of(65536) {
                progress(done);
            }
            if visit(&event).is_break() {
                return Ok(());
            }
        }
    }

    /// Decodes one event chunk into its events, a reallocation as a free and an allocation.
    fn decode(&self, file: &mut File, info: ChunkInfo) -> Result<Vec<Timed>, Error> {
        file.seek(SeekFrom::Start(info.offset))
            .map_err(|e| error_at(info.offset, ErrorKind::Io(e)))?;
        let shift = info.offset - self.header_len;
        let input = Cursor::new(&self.header_bytes).chain(BufReader::new(&mut *file));
        let located = |mut e: Error| {
            e.offset += shift;
            e
        };
        let mut reader = Reader::new(input).map_err(located)?;
        let Some(mut chunk) = reader.next_chunk().map_err(located)? else {
            return Err(error_at(info.offset, ErrorKind::Truncated));
        };
        chunk.offset = info.offset;
        // Each event takes at least a byte of payload: a damaged count asks for no more.
        let mut events =
            Vec::with_capacity((chunk.header.events as usize).min(chunk.payload.len()));
        let thread = info.thread;
        let stack = |id: u32| self.ids.get(&id).copied().unwrap_or(u32::MAX);
        for record in chunk.records() {
            match record? {
                Record::Alloc {
                    time,
                    address,
                    size,
                    stack: id,
                } => events.push(Timed {
                    time,
                    thread,
                    event: Event::Alloc {
                        address,
                        size,
                        stack: stack(id),
                        realloc_of: None,
                    },
                }),
                Record::Free { time, address } => events.push(Timed {
                    time,
                    thread,
                    event: Event::Free {
                        address,
                        realloc: false,
                    },
                }),
                Record::Realloc {
                    time,
                    new_time,
                    old_address,
                    address,
                    size,
                    stack: id,
                } => {
                    events.push(Timed {
                        time,
                        thread,
                        event: Event::Free {
                            address: old_address,
                            realloc: true,
                        },
                    });
                    events.push(Timed {
                        time: new_time,
                        thread,
                        event: Event::Alloc {
                            address,
                            size,
                            stack: stack(id),
                            realloc_of: Some(old_address),
                        },
                    });
                }
                Record::Mark { time, label } => events.push(Timed {
                    time,
                    thread,
                    event: Event::Mark { label },
                }),
                _ => {}
            }
        }
        if events.iter().any(|e| {
            matches!(e.event, Event::Alloc { stack, .. } if stack as usize >= self.stacks.len())
        }) {
            return Err(error_at(
                info.offset,
                ErrorKind::Corrupt("an allocation names a stack the trace never defines".into()),
            ));
        }
        Ok(events)
    }

    /// Finds the heap's peak: the position just after the event that first took the live bytes
    /// to their maximum.
    pub fn find_peak(&self, progress: &mut dyn FnMut(u64)) -> Result<Position, TraceError> {
        self.find_peak_within(u64::MAX, progress)
    }

    /// [`Trace::find_peak`] among the first `events` events of the replay.
    pub fn find_peak_within(
        &self,
        limit: u64,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Position, TraceError> {
        let mut heap = Heap::default();
        let mut peak = Position {
            found: true,
            ..Position::default()
        };
        let mut events = 0;
        self.for_each_event(
            &mut |timed| {
                if events == limit {
                    return ControlFlow::Break(());
                }
                heap.apply(timed);
                events += 1;
                if heap.live_bytes > peak.live_bytes {
                    peak.live_bytes = heap.live_bytes;
                    peak.time = timed.time;
                    peak.events = events;
                }
                ControlFlow::Continue(())
            },
            progress,
        )?;
        Ok(peak)
    }

    /// Replays the trace to `moment`: the live heap there, and where that is.
    pub fn replay(
        &self,
        moment: &Moment,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(Heap, Position), TraceError> {
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
                    .labels
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
        let mut heap = Heap {
            sample_interval: self.header.sample_interval,
            ..Heap::default()
        };
        let mut position = Position::default();
        if matches!(moment, Moment::End | Moment::Peak | Moment::Events(_))
            || matches!(moment, Moment::Time(t) if *t >= self.last_time)
        {
            position.found = true;
        }
        if stop_after == Some(0) {
            return Ok((heap, position));
        }
        self.for_each_event(
            &mut |timed| {
                if let Moment::Time(limit) = moment
                    && timed.time > *limit
                {
                    position.found = true;
                    return ControlFlow::Break(());
                }
                heap.apply(timed);
                position.time = timed.time;
                position.events += 1;
                if stop_after == Some(position.events) {
                    return ControlFlow::Break(());
                }
                if let Event::Mark { label: l } = timed.event
                    && Some(l) == label
                {
                    position.found = true;
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            },
            progress,
        )?;
        position.live_bytes = heap.live_bytes;
        Ok((heap, position))
    }

    /// The crate's snapshot of `heap`: live blocks, and every stack of the trace with its
    /// allocated totals (so snapshots of one trace at two moments diff stack by stack).
    /// `peak_bytes` is the heap's peak to state, when known.
    pub fn snapshot(&self, heap: &Heap, peak_bytes: u64) -> Snapshot {
        let interval = self.header.sample_interval;
        let mut stacks: Vec<StackSummary> = self
            .stacks
            .iter()
            .map(|frames| StackSummary {
                frames: frames.iter().map(|&a| ReturnAddress(a as usize)).collect(),
                ..StackSummary::default()
            })
            .collect();
        if interval == 0 {
            for (stack, &(blocks, bytes)) in stacks.iter_mut().zip(&heap.allocated) {
                (stack.allocated_blocks, stack.allocated_bytes) = (blocks, bytes);
            }
        } else {
            for (stack, &(blocks, bytes)) in stacks.iter_mut().zip(&heap.estimated) {
                stack.allocated_blocks = blocks.round() as u64;
                stack.allocated_bytes = bytes.round() as u64;
            }
        }
        let blocks: Vec<LiveBlock> = heap
            .live
            .iter()
            .map(|(&address, block)| LiveBlock {
                address: address as usize,
                size: block.size,
                stack: StackId(block.stack),
                tag: 0,
            })
            .collect();
        Snapshot::sampled(blocks, stacks, peak_bytes, interval)
    }

    /// [`Trace::snapshot`] of `heap` with each stack's blocks and bytes live at the heap's
    /// peak, `peak` (a replay to [`Trace::find_peak_within`] the events of `heap`): the exports'
    /// per-site peak figures, exact from a trace.
    pub fn snapshot_with_peak(&self, heap: &Heap, peak: &Heap) -> Snapshot {
        let at_peak = self.snapshot(peak, peak.live_bytes);
        let mut snapshot = self.snapshot(heap, at_peak.stats.live_bytes);
        for (stack, at_peak) in snapshot.stacks.iter_mut().zip(&at_peak.stacks) {
            stack.peak_blocks = at_peak.live_blocks;
            stack.peak_bytes = at_peak.live_bytes;
        }
        snapshot.peak_known = true;
        snapshot
    }
}

/// An error at byte `offset` of the file.
fn error_at(offset: u64, kind: ErrorKind) -> Error {
    Error {
        offset,
        record_offset: None,
        kind,
    }
}
