//! A trace opened for replay: [`Trace::open`] reads the file once, decoding only the chunks
//! that define stacks, threads, labels and symbols and keeping an index of the event chunks
//! (offset, thread, first and last time). `Trace::for_each_event` then decodes the event chunks
//! in order of their first event, merging the chunks that overlap in time: memory is what the
//! replay keeps, the chunks that overlap the event being read and the stack table, never the
//! whole trace. A [`Trace`] is reusable: a server opens it once and replays it as often as it is
//! asked. The merge feeds one loop, [`Trace::visit`], which applies each event to the live heap
//! and tells a visitor what it means.

use crate::addresses::AddressHasher;
use crate::decode::Reader;
use crate::records::{
    ChunkFlags, Error, ErrorKind, Header, MemoryParts, ModuleEntry, Record, SymbolFrame, flags,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::hash::BuildHasherDefault;
use std::io::{BufReader, Cursor, Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

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
        /// glibc's flags of the block; `None`: unknown (not recorded, or an older trace).
        flags: Option<ChunkFlags>,
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
    /// A memory mapping the program made (`mmap`, or the new range of an `mremap`); it replaces
    /// whatever recorded mapping was at its pages.
    Map {
        /// Its first byte.
        address: u64,
        /// Its length.
        length: u64,
        /// Its stack: an index into [`Trace::stacks`].
        stack: u32,
        /// `mmap`'s `prot`.
        prot: u32,
        /// `mmap`'s `flags`.
        flags: u32,
    },
    /// Pages of recorded mappings unmapped (`munmap`, or the old range of an `mremap`).
    Unmap {
        /// The first byte.
        address: u64,
        /// Bytes.
        length: u64,
    },
}

/// Events handed to a replay's loop at once, at most: the live heap loads their blocks' slots
/// together before applying them ([`Trace::for_each_event`]).
pub(crate) const BATCH: usize = 16;

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
pub(crate) struct ChunkInfo {
    pub(crate) offset: u64,
    pub(crate) thread: u32,
    pub(crate) first_time: u64,
    pub(crate) last_time: u64,
    /// Its records' count, from its header.
    pub(crate) events: u32,
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
    ids: HashMap<u32, u32, BuildHasherDefault<AddressHasher>>,
    stacks: Vec<Vec<u64>>,
    labels: HashMap<u32, String>,
    /// Label sets by the trace's id (version 1.2).
    label_sets: HashMap<u32, Vec<(String, String)>>,
    /// The label set of each labelled stack, by the trace's stack id.
    stack_labels: HashMap<u32, u32>,
    threads: HashMap<u32, (u64, String)>,
    symbols: HashMap<u64, Vec<SymbolFrame>>,
    /// The function each return address's direct call went to: its code and frame (1.4).
    callees: HashMap<u64, (u64, u64, SymbolFrame)>,
    modules: Vec<Vec<ModuleEntry>>,
    end: Option<(u64, u64)>,
    /// The `MEMORY` record, when there is one.
    memory: Option<MemoryParts>,
    /// The latest time of the `WRITTEN` records read (1.5): every event up to it was in the
    /// chunks read before; 0 for none.
    written: u64,
    events: u64,
    last_time: u64,
    file_len: u64,
    cut: Option<Error>,
    /// Where the chunks not read yet start: after the last whole chunk ([`Trace::extend`]).
    read_to: u64,
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
            ids: HashMap::default(),
            stacks: Vec::new(),
            labels: HashMap::new(),
            label_sets: HashMap::new(),
            stack_labels: HashMap::new(),
            threads: HashMap::new(),
            symbols: HashMap::new(),
            callees: HashMap::new(),
            modules: Vec::new(),
            end: None,
            memory: None,
            written: 0,
            events: 0,
            last_time: 0,
            file_len,
            cut: None,
            read_to: header_len,
        };
        let mut chunks = Vec::new();
        trace
            .read_chunks(&mut reader, 0, &mut |chunk| chunks.push(chunk), progress)
            .map_err(fail)?;
        trace.chunks = chunks;
        // Merge order: by first event, then by place in the file.
        trace.chunks.sort_by_key(|c| (c.first_time, c.offset));
        Ok(trace)
    }

    /// Reads the chunks from `reader` (whose offsets are `shift` bytes short of the file's) to the
    /// end of the input, up to a chunk cut short ([`Trace::cut`]): their definitions into the
    /// trace, their event chunks to `found`.
    fn read_chunks<R: Read>(
        &mut self,
        reader: &mut Reader<R>,
        shift: u64,
        found: &mut dyn FnMut(ChunkInfo),
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), Error> {
        let located = |mut e: Error| {
            e.offset += shift;
            e
        };
        self.cut = None;
        loop {
            let start = reader.offset() + shift;
            let outcome = (|| {
                let Some((offset, chunk)) = reader.next_chunk_header()? else {
                    return Ok(None);
                };
                let has_events = chunk.flags & flags::EVENTS != 0 || chunk.events > 0;
                let defines = chunk.flags & (flags::DEFINITIONS | flags::SYMBOLS | flags::END) != 0
                    || !has_events;
                let records = if defines {
                    Some(reader.read_payload()?)
                } else {
                    reader.skip_payload()?;
                    None
                };
                Ok(Some((offset, chunk, has_events, records)))
            })();
            let (offset, chunk, has_events, records) = match outcome.map_err(located) {
                Ok(Some(found)) => found,
                Ok(None) => {
                    self.read_to = start;
                    return Ok(());
                }
                Err(error) if matches!(error.kind, ErrorKind::Truncated) => {
                    self.read_to = start;
                    self.cut = Some(error);
                    return Ok(());
                }
                Err(error) => return Err(error),
            };
            if let Some(read) = records {
                for record in read.records() {
                    self.define(record.map_err(located)?);
                }
            }
            if has_events {
                self.events += u64::from(chunk.events);
                self.last_time = self.last_time.max(chunk.last_time);
                found(ChunkInfo {
                    offset: offset + shift,
                    thread: chunk.thread,
                    first_time: chunk.first_time,
                    last_time: chunk.last_time,
                    events: chunk.events,
                });
            }
            progress(reader.offset() + shift, self.file_len);
        }
    }

    /// Reads what was appended to the file since it was opened or last extended: the chunks
    /// after the last whole one read (a chunk cut short at the end of the file is read again
    /// next time, whole). Returns the new event chunks, in the order of the file.
    pub(crate) fn extend_chunks(&mut self) -> Result<Vec<ChunkInfo>, TraceError> {
        let path = self.path.clone();
        let fail = |error: Error| TraceError { path, error };
        let read_to = self.read_to;
        let io = |e| error_at(read_to, ErrorKind::Io(e));
        let mut file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) => return Err(fail(io(e))),
        };
        let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if file_len <= read_to {
            return Ok(Vec::new());
        }
        self.file_len = file_len;
        if let Err(e) = file.seek(SeekFrom::Start(read_to)) {
            return Err(fail(io(e)));
        }
        let shift = read_to - self.header_len;
        let input = Cursor::new(self.header_bytes.clone()).chain(BufReader::new(file));
        let mut reader = match Reader::new(input) {
            Ok(reader) => reader,
            Err(e) => return Err(fail(e)),
        };
        let mut found = Vec::new();
        let result = self.read_chunks(&mut reader, shift, &mut |c| found.push(c), &mut |_, _| {});
        // Merge order, as `open` sorts: by first event, then by place in the file.
        for &chunk in &found {
            let at = self
                .chunks
                .partition_point(|c| (c.first_time, c.offset) <= (chunk.first_time, chunk.offset));
            self.chunks.insert(at, chunk);
        }
        result.map_err(fail)?;
        Ok(found)
    }

    /// The event chunks, in merge order.
    pub(crate) fn chunk_infos(&self) -> &[ChunkInfo] {
        &self.chunks
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
            Record::LabelSet { id, pairs } => {
                self.label_sets.insert(id, pairs);
            }
            Record::StackLabels { stack, labels } => {
                self.stack_labels.insert(stack, labels);
            }
            Record::Thread { thread, tid, name } => {
                self.threads.insert(thread, (tid, name));
            }
            Record::Symbol { address, frames } => {
                self.symbols.insert(address, frames);
            }
            Record::Callee {
                address,
                start,
                end,
                frame,
            } => {
                self.callees.insert(address, (start, end, frame));
            }
            Record::Modules(modules) => self.modules.push(modules),
            Record::End { events, lost } => self.end = Some((events, lost)),
            Record::Memory(parts) => self.memory = Some(parts),
            Record::Written { time } => self.written = self.written.max(time),
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

    /// The label sets of the stacks (`memprof::with_labels`; version 1.2): one per index of
    /// [`Trace::stacks`], the (key, value) pairs sorted by key, empty for a stack without labels.
    pub fn stack_label_sets(&self) -> Vec<&[(String, String)]> {
        let mut sets: Vec<&[(String, String)]> = vec![&[]; self.stacks.len()];
        for (id, labels) in &self.stack_labels {
            if let (Some(&index), Some(pairs)) = (self.ids.get(id), self.label_sets.get(labels))
                && let Some(set) = sets.get_mut(index as usize)
            {
                *set = pairs;
            }
        }
        sets
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

    /// The `MEMORY` record: the process's memory by what holds it when the trace was closed
    /// (version 1.2; absent in older traces and in a trace cut short).
    pub fn memory(&self) -> Option<&MemoryParts> {
        self.memory.as_ref()
    }

    /// The latest `WRITTEN` record's time (version 1.5): every event up to it is in the chunks
    /// read so far; 0 for none.
    pub(crate) fn written(&self) -> u64 {
        self.written
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

    /// The trace's symbols: the source frames of each return address its symbol section names,
    /// innermost first.
    pub fn symbols(&self) -> &HashMap<u64, Vec<SymbolFrame>> {
        &self.symbols
    }

    /// The functions the direct calls before return addresses went to (`CALLEE` records): each
    /// address's callee's code `start..end` and frame.
    pub fn callees(&self) -> &HashMap<u64, (u64, u64, SymbolFrame)> {
        &self.callees
    }

    /// The frame of a function left off a stack by a tail call, to add before the frames of
    /// return address `address`: the function its direct call went to, when the next-younger
    /// return address of the stack (`younger`, `None` for the innermost) lies outside its code.
    /// The rule the recording process's own reports follow (its symbolizer's "frames recovered
    /// from direct calls").
    pub fn recovered_callee(&self, address: u64, younger: Option<u64>) -> Option<&SymbolFrame> {
        let pc = younger?.wrapping_sub(1);
        let (start, end, frame) = self.callees.get(&address)?;
        (!(*start..*end).contains(&pc)).then_some(frame)
    }

    /// Calls `visit` with every event in time order (merged across threads; at equal times in
    /// file order), a few at a time ([`BATCH`] at most), until it breaks; `progress(events_done)`
    /// every few thousand events. A batch ends before each chunk is opened, so that a replay
    /// that breaks reads no chunk past the one it stopped in, as one event at a time would.
    pub(crate) fn for_each_event(
        &self,
        visit: &mut dyn FnMut(&[Timed]) -> ControlFlow<()>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), TraceError> {
        let fail = |error: Error| TraceError {
            path: self.path.clone(),
            error,
        };
        let mut file = File::open(&self.path).map_err(|e| fail(error_at(0, ErrorKind::Io(e))))?;
        // Decoded chunks being merged, and a heap of their next events.
        let mut open: Vec<Option<(Vec<Timed>, usize)>> = Vec::new();
        // The event lists of chunks read to their end, to decode the next ones into.
        let mut spare: Vec<Vec<Timed>> = Vec::new();
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        let mut batch: Vec<Timed> = Vec::with_capacity(BATCH);
        let mut next = 0;
        let mut done = 0u64;
        loop {
            // Open every chunk that starts at or before the earliest pending event, the events
            // taken so far visited first.
            while next < self.chunks.len()
                && heap
                    .peek()
                    .is_none_or(|Reverse((t, _))| self.chunks[next].first_time <= *t)
            {
                if !batch.is_empty() {
                    if visit(&batch).is_break() {
                        return Ok(());
                    }
                    batch.clear();
                }
                let mut events = spare.pop().unwrap_or_default();
                self.decode_into(&mut file, self.chunks[next], &mut events)
                    .map_err(fail)?;
                if let Some(first) = events.first() {
                    heap.push(Reverse((first.time, open.len())));
                    open.push(Some((events, 0)));
                } else {
                    open.push(None);
                }
                next += 1;
            }
            let Some(Reverse((_, slot))) = heap.pop() else {
                return match batch.is_empty() {
                    true => Ok(()),
                    false => {
                        let _ = visit(&batch);
                        Ok(())
                    }
                };
            };
            let (events, at) = open[slot].as_mut().expect("a chunk in the heap is open");
            batch.push(events[*at]);
            *at += 1;
            if let Some(following) = events.get(*at) {
                heap.push(Reverse((following.time, slot)));
            } else if let Some((events, _)) = open[slot].take() {
                spare.push(events);
            }
            done += 1;
            if done.is_multiple_of(65536) {
                progress(done);
            }
            if batch.len() == BATCH {
                if visit(&batch).is_break() {
                    return Ok(());
                }
                batch.clear();
            }
        }
    }

    /// Decodes one event chunk into its events, a reallocation as a free and an allocation.
    pub(crate) fn decode(&self, file: &mut File, info: ChunkInfo) -> Result<Vec<Timed>, Error> {
        let mut events = Vec::new();
        self.decode_into(file, info, &mut events)?;
        Ok(events)
    }

    /// Decodes one event chunk into `events` (cleared first), a reallocation as a free and an
    /// allocation.
    fn decode_into(
        &self,
        file: &mut File,
        info: ChunkInfo,
        events: &mut Vec<Timed>,
    ) -> Result<(), Error> {
        events.clear();
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
        events.reserve((chunk.header.events as usize).min(chunk.payload.len()));
        let thread = info.thread;
        let stack = |id: u32| self.ids.get(&id).copied().unwrap_or(u32::MAX);
        let mut records = chunk.records();
        loop {
            let record = match records.next_event() {
                Some(record) => record?,
                None => match records.next() {
                    Some(record) => record?,
                    None => break,
                },
            };
            match record {
                Record::Alloc {
                    time,
                    address,
                    size,
                    stack: id,
                    flags,
                } => events.push(Timed {
                    time,
                    thread,
                    event: Event::Alloc {
                        address,
                        size,
                        stack: stack(id),
                        realloc_of: None,
                        flags,
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
                    flags,
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
                            flags,
                        },
                    });
                }
                Record::Mark { time, label } => events.push(Timed {
                    time,
                    thread,
                    event: Event::Mark { label },
                }),
                Record::Mmap {
                    time,
                    address,
                    length,
                    stack: id,
                    prot,
                    flags,
                } => events.push(Timed {
                    time,
                    thread,
                    event: Event::Map {
                        address,
                        length,
                        stack: stack(id),
                        prot,
                        flags,
                    },
                }),
                Record::Munmap {
                    time,
                    address,
                    length,
                } => events.push(Timed {
                    time,
                    thread,
                    event: Event::Unmap { address, length },
                }),
                _ => {}
            }
        }
        if events.iter().any(|e| {
            matches!(e.event, Event::Alloc { stack, .. } | Event::Map { stack, .. }
                if stack as usize >= self.stacks.len())
        }) {
            return Err(error_at(
                info.offset,
                ErrorKind::Corrupt(
                    "an allocation or mapping names a stack the trace never defines".into(),
                ),
            ));
        }
        Ok(())
    }
}

/// An error at byte `offset` of the file.
pub(crate) fn error_at(offset: u64, kind: ErrorKind) -> Error {
    Error {
        offset,
        record_offset: None,
        kind,
    }
}
