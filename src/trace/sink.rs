//! The sink: what the writer thread keeps between rounds, and what it writes each round. For
//! each buffer handed over, in each thread's order, first the definitions its events need (the
//! loaded modules when they changed, new stacks, threads and labels), then its events as one
//! compressed chunk; in the background, the symbols of the stacks defined; at close, what is
//! left, the symbols and the end record. Also the marker labels, given ids by the threads that
//! mark ([`label_id`]) and defined by the sink.
//!
//! Times: the allocation path stores clock ticks; the sink turns them into nanoseconds since the
//! trace started, measured against the monotonic clock without waiting when the first buffer is
//! written (or at close), then measured again each time the run has doubled in length
//! (`clock::Calibration`): a conversion that keeps the ticks' order.
//!
//! Only the writer thread (`writer`) uses a sink; it writes into the [`Destination`] it opened.

use super::destination::Destination;
use crate::address::ReturnAddress;
use crate::address::StackId;
use crate::modules::{self, Generation};
use crate::native::{clock, clock::Calibration};
use crate::record::buffer::{self, Buffer};
use crate::table::TABLE;
use memprof_trace::{ChunkEncoder, Compressor, Header, ModuleEntry, SymbolFrame};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Every how many rounds the writer looks for the buffers of threads that ended without an
/// end-of-thread flush (one system call per such buffer; see `record::buffer`): 100 ms.
const ENDED_THREADS_EVERY: u64 = 20;

/// Every how many rounds the writer writes out what the threads' buffers hold so far, though not
/// full (about a second): a program gone idle has its last events, and its markers, written.
const PARTLY_EVERY: u64 = 200;

/// How far before the time a round of the writer began its `WRITTEN` record says the events
/// are written up to: a thread stores an event in its buffer just after it reads the clock for
/// it, and one descheduled in between may store it after the round read its buffer. An event
/// that comes later anyway is read as out of order (`memprof_trace::Follow`), never lost.
const WRITTEN_MARGIN_NS: u64 = 100_000_000;

/// Every how many rounds the writer may say how far every thread's events are written (about
/// every 200 ms; see [`Sink::mark_written`]).
const WRITTEN_EVERY: u64 = 40;

/// zstd's level for event chunks: fast, and most of what higher levels give on these payloads.
const LEVEL: i32 = 1;

/// Bytes of definitions or symbols per chunk: past this, the records that follow go into a new
/// chunk. Every record the sink writes is far below the format's limit on a chunk
/// (`MAX_CHUNK_BYTES`, 16 MiB) less this, so no record ever ends the trace: a stack has at most
/// `MAX_STACK_DEPTH` frames, a label set at most 64 pairs of 64 KiB (`labels::sets`), a marker
/// label at most [`LABEL_BYTES`], a symbol at most [`SYMBOL_FRAMES`] frames of names cut to
/// [`SYMBOL_NAME`], a module list is split into records of about this size.
const DEFS_CHUNK: usize = 1 << 20;

/// The most frames (inlined ones and their function) a `SYMBOL` record gives one address.
const SYMBOL_FRAMES: usize = 128;

/// The most bytes of a function's or file's name in a `SYMBOL` record.
const SYMBOL_NAME: usize = 16 << 10;

/// Most marker labels kept to give a label used again its id, and most bytes of their text; past
/// either, they are forgotten (a label used again is given a new id, defined again).
const LABELS_KEPT: usize = 1 << 16;
/// See [`LABELS_KEPT`].
const LABEL_BYTES: usize = 4 << 20;

/// Marker labels: the ids of those used lately, by text, and those the trace has yet to define.
struct Labels {
    ids: Option<HashMap<String, u32>>,
    /// Bytes of text in `ids`.
    id_bytes: usize,
    /// Labels given an id and not yet written, in the order of their ids.
    new: Vec<(u32, String)>,
    /// Bytes of text in `new`.
    new_bytes: usize,
    /// The next id.
    next: u32,
}

static LABELS: Mutex<Labels> = Mutex::new(Labels {
    ids: None,
    id_bytes: 0,
    new: Vec::new(),
    new_bytes: 0,
    next: 0,
});

/// The id of a marker label, given one on first use; `None` when the labels waiting for the
/// writer hold [`LABELS_KEPT`] labels or [`LABEL_BYTES`] bytes already (the writer far behind
/// its destination): the marker is then lost. Call inside the reentrancy guard.
pub(crate) fn label_id(label: &str) -> Option<u32> {
    let mut guard = LABELS.lock().unwrap_or_else(PoisonError::into_inner);
    let labels = &mut *guard;
    let ids = labels.ids.get_or_insert_with(HashMap::new);
    if let Some(&id) = ids.get(label) {
        return Some(id);
    }
    if labels.new.len() >= LABELS_KEPT || labels.new_bytes + label.len() > LABEL_BYTES {
        return None;
    }
    if ids.len() >= LABELS_KEPT || labels.id_bytes + label.len() > LABEL_BYTES {
        ids.clear();
        ids.shrink_to(LABELS_KEPT);
        labels.id_bytes = 0;
    }
    let id = labels.next;
    labels.next = labels.next.wrapping_add(1);
    ids.insert(label.to_owned(), id);
    labels.id_bytes += label.len();
    labels.new.push((id, label.to_owned()));
    labels.new_bytes += label.len();
    Some(id)
}

/// Takes the labels the trace has yet to define.
fn new_labels() -> Vec<(u32, String)> {
    let mut labels = LABELS.lock().unwrap_or_else(PoisonError::into_inner);
    labels.new_bytes = 0;
    std::mem::take(&mut labels.new)
}

/// What the writer keeps between rounds.
pub(super) struct Sink {
    /// The destination as given (`%p` and the rest expanded).
    target: String,
    out: Option<io::BufWriter<Destination>>,
    header: Header,
    /// The clock at time 0.
    origin: (u64, Instant),
    calibration: Option<Calibration>,
    /// Chunk under construction, and the encoded bytes.
    chunk: ChunkEncoder,
    defs: ChunkEncoder,
    bytes: Vec<u8>,
    /// Chunks of definitions completed while a buffer is read, written after it.
    sealed: Vec<u8>,
    /// Kept from chunk to chunk.
    compressor: Compressor,
    /// Stack ids defined so far, as a bit set.
    stacks: Vec<u64>,
    /// Stack ids defined since their return addresses were last taken for symbols.
    stack_list: Vec<u32>,
    /// Return addresses taken for symbols: written, or in `unsymbolized`.
    symbolized: std::collections::HashSet<u64>,
    /// Return addresses taken from new stacks and not symbolized yet.
    unsymbolized: Vec<u64>,
    /// Whether the trace carries symbols (`MEMPROF_TRACE_SYMBOLS`).
    write_symbols: bool,
    /// Label sets defined so far.
    label_sets: std::collections::HashSet<u32>,
    /// Threads defined.
    threads: HashMap<u32, ()>,
    /// The loader's generation the last `MODULES` record was read at.
    modules: Option<Option<Generation>>,
    /// Build ids by module path and bias.
    build_ids: HashMap<(String, u64), Vec<u8>>,
    /// The next buffer expected of each thread.
    next_seq: HashMap<u32, u64>,
    /// Events written.
    events: u64,
    /// Events were written since the last `WRITTEN` record.
    unmarked: bool,
    /// The last `WRITTEN` record's time; 0 for none.
    written: u64,
    /// Rounds of [`Sink::drain`] so far.
    rounds: u64,
}

impl Sink {
    /// A sink for a trace to `target` (as expanded), beginning with `header`, its times counted
    /// from the clock's `origin`; it writes symbols when `write_symbols`. An error when zstd does
    /// not start.
    pub(super) fn new(
        target: String,
        header: Header,
        origin: (u64, Instant),
        write_symbols: bool,
    ) -> io::Result<Sink> {
        Ok(Sink {
            target,
            out: None,
            header,
            origin,
            calibration: None,
            chunk: ChunkEncoder::new(0),
            defs: ChunkEncoder::new(0),
            bytes: Vec::new(),
            sealed: Vec::new(),
            compressor: Compressor::new(LEVEL)?,
            stacks: Vec::new(),
            stack_list: Vec::new(),
            symbolized: std::collections::HashSet::new(),
            unsymbolized: Vec::new(),
            write_symbols,
            label_sets: std::collections::HashSet::new(),
            threads: HashMap::new(),
            modules: None,
            build_ids: HashMap::new(),
            next_seq: HashMap::new(),
            events: 0,
            unmarked: false,
            written: 0,
            rounds: 0,
        })
    }

    /// The destination as given (`%p` and the rest expanded).
    pub(super) fn target(&self) -> &str {
        &self.target
    }

    /// Makes the sink write into `destination`, the trace's header first.
    pub(super) fn open(&mut self, destination: Destination) -> io::Result<()> {
        let mut out = io::BufWriter::with_capacity(1 << 20, destination);
        self.header.write_to(&mut out)?;
        // At once: a trace whose process ends before the writer's first round still has it.
        out.flush()?;
        self.out = Some(out);
        Ok(())
    }

    /// What is left of every thread's events, the symbols, the end record; the memory record
    /// before it when `memory` (it holds the live table still).
    pub(super) fn close(&mut self, memory: bool) -> io::Result<PathBuf> {
        self.drain(true)?;
        self.symbols(None)?;
        if self.write_symbols {
            crate::symbolize::with_symbolizer(|symbolizer| symbolizer.release_debug_info());
        }
        let lost = buffer::LOST.load(Ordering::Relaxed);
        self.chunk.reset(0);
        if memory {
            self.chunk.memory(&crate::breakdown::trace_parts());
        }
        self.chunk.end(self.events, lost);
        self.write_chunk(false)?;
        let out = self.out.as_mut().expect("open");
        out.flush()?;
        // Never said to be written when another process's file took its place.
        out.get_ref().check_still_at(&self.target)?;
        Ok(PathBuf::from(&self.target))
    }

    /// Writes the labels given ids since the last round, as a chunk of definitions.
    fn define_labels(&mut self) -> io::Result<()> {
        let labels = new_labels();
        if labels.is_empty() {
            return Ok(());
        }
        self.defs.reset(0);
        for (id, text) in &labels {
            self.defs.label(*id, text);
            self.room()?;
        }
        if !self.defs.is_empty() {
            self.write_chunk(true)?;
        }
        Ok(())
    }

    /// Writes the chunk of definitions begun when it holds [`DEFS_CHUNK`] bytes, and begins
    /// another.
    fn room(&mut self) -> io::Result<()> {
        if self.defs.len() >= DEFS_CHUNK {
            self.write_chunk(true)?;
            self.defs.reset(0);
        }
        Ok(())
    }

    /// Writes the buffers handed over (and, when `closing`, those being filled), in each
    /// thread's order.
    pub(super) fn drain(&mut self, closing: bool) -> io::Result<()> {
        // The module list first, at the first round: a process that ends without closing its
        // trace (`_exit`, a signal) leaves a trace whose stacks can be named.
        if self.modules.is_none() {
            self.defs.reset(0);
            self.define_modules()?;
            self.write_chunk(true)?;
        }
        // Labels are written each round, so that few wait for the writer.
        self.define_labels()?;
        self.rounds += 1;
        // Read before the buffers: the events stamped before it are stored in them (but see
        // `WRITTEN_MARGIN_NS`).
        let now = clock::ticks();
        let ready = buffer::ready(
            closing,
            self.rounds.is_multiple_of(ENDED_THREADS_EVERY),
            self.rounds.is_multiple_of(PARTLY_EVERY),
        );
        if ready.is_empty() {
            self.mark_written(now, closing)?;
            // What this round wrote (the modules, labels), out now: a cheap call when nothing.
            return self.out.as_mut().expect("open").flush();
        }
        match &mut self.calibration {
            Some(calibration) => calibration.refine(),
            None => self.calibration = Some(clock::calibrate(self.origin)),
        }
        for (buffer, full) in ready {
            let (thread, tid, seq) = buffer.owner();
            let expected = self.next_seq.entry(thread).or_insert(0);
            // A buffer of this thread handed over before it is not seen yet: next round.
            if !closing && seq != *expected {
                continue;
            }
            // One still filled, written in part, is read on later from where this ends.
            if full || closing {
                *expected = seq + 1;
            }
            self.write_buffer(buffer, thread, tid)?;
            self.unmarked = true;
            if full {
                buffer.recycle();
            }
        }
        self.mark_written(now, closing)?;
        // Whole chunks reach the destination each round: a process killed loses only the
        // events not handed over yet.
        self.out.as_mut().expect("open").flush()
    }

    /// Every [`WRITTEN_EVERY`] rounds but at the close, when events were written since the last
    /// one, writes a `WRITTEN` record in a chunk of its own: the events stamped before the
    /// oldest one not written yet (or before the clock read `now`, at the round's start, when
    /// every one is) are written, less a margin. A reader following the trace applies them
    /// without waiting for the buffers still being filled.
    fn mark_written(&mut self, now: u64, closing: bool) -> io::Result<()> {
        if closing || !self.unmarked || !self.rounds.is_multiple_of(WRITTEN_EVERY) {
            return Ok(());
        }
        let Some(calibration) = self.calibration.as_mut() else {
            return Ok(());
        };
        let ticks = buffer::oldest_unsent().map_or(now, |oldest| oldest.min(now));
        let time = calibration.ns(ticks).saturating_sub(WRITTEN_MARGIN_NS);
        calibration.converted(ticks);
        // Nothing new to say (the trace's first 100 ms, a thread whose oldest event waits).
        if time <= self.written {
            return Ok(());
        }
        self.written = time;
        self.defs.reset(0);
        self.defs.written(time);
        self.write_chunk(true)?;
        self.unmarked = false;
        Ok(())
    }

    /// Writes the chunk in `self.chunk` (`definitions`: in `self.defs`) and empties it.
    fn write_chunk(&mut self, definitions: bool) -> io::Result<()> {
        self.bytes.clear();
        let chunk = if definitions {
            &mut self.defs
        } else {
            &mut self.chunk
        };
        chunk.finish(Some(&mut self.compressor), &mut self.bytes)?;
        self.out
            .as_mut()
            .expect("a sink writes once open")
            .write_all(&self.bytes)
    }

    /// Writes the events of `buffer` as one chunk, after a chunk of the definitions they need
    /// (one pass over the buffer builds both).
    fn write_buffer(&mut self, buffer: &Buffer, thread: u32, tid: u64) -> io::Result<()> {
        self.defs.reset(0);
        if thread != 0 && self.threads.insert(thread, ()).is_none() {
            let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                .map(|n| n.trim_end().to_owned())
                .unwrap_or_default();
            self.defs.thread(thread, tid, &name);
        }
        if self.modules.is_none() {
            self.define_modules()?;
        }
        self.chunk.reset(thread);
        let mut new_stack = false;
        let mut failed = None;
        self.sealed.clear();
        let (chunk, defs, stacks, stack_list, label_sets, compressor, sealed) = (
            &mut self.chunk,
            &mut self.defs,
            &mut self.stacks,
            &mut self.stack_list,
            &mut self.label_sets,
            &mut self.compressor,
            &mut self.sealed,
        );
        // A copy at hand: its fields stay in registers through the loop.
        let calibration = self
            .calibration
            .clone()
            .expect("calibrated before the first buffer");
        // The latest ticks converted: a segment of the clock begun later starts past them.
        let mut latest = 0;
        let mut scratch = Vec::new();
        let mut define = |id: u32| {
            let (word, bit) = (id as usize / 64, id % 64);
            if stacks.len() <= word {
                stacks.resize(word + 1, 0);
            }
            if stacks[word] & (1 << bit) == 0 {
                stacks[word] |= 1 << bit;
                new_stack = true;
                scratch.clear();
                TABLE.stacks.frames_into(StackId(id), &mut scratch);
                defs.stack(id, scratch.iter().map(|f| f.0 as u64));
                define_labels(defs, label_sets, id);
                stack_list.push(id);
                // A buffer's definitions go into as many chunks as they need.
                if defs.len() >= DEFS_CHUNK {
                    if let Err(error) = defs.finish(Some(compressor), sealed) {
                        failed.get_or_insert(error);
                    }
                    defs.reset(0);
                }
            }
        };
        let end = buffer.read(|event| {
            let ticks = event[0] >> 3;
            latest = latest.max(ticks);
            let time = calibration.ns(ticks);
            match event[0] & 7 {
                buffer::ALLOC => {
                    define(event[3] as u32);
                    chunk.alloc(time, event[1], event[2], event[3] as u32);
                    chunk.chunk_flags(chunk_flags(event[3]));
                }
                buffer::FREE => chunk.free(time, event[1]),
                buffer::REALLOC => {
                    define(event[3] as u32);
                    latest = latest.max(event[5]);
                    chunk.realloc(
                        time,
                        calibration.ns(event[5]),
                        event[4],
                        event[1],
                        event[2],
                        event[3] as u32,
                    );
                    chunk.chunk_flags(chunk_flags(event[3]));
                }
                buffer::MMAP => {
                    define(event[3] as u32);
                    chunk.mmap(
                        time,
                        event[1],
                        event[2],
                        event[3] as u32,
                        (event[4] >> 32) as u32,
                        event[4] as u32,
                    );
                }
                buffer::MUNMAP => chunk.munmap(time, event[1], event[2]),
                _ => chunk.mark(time, event[1] as u32),
            }
        });
        if let Some(calibration) = self.calibration.as_mut() {
            calibration.converted(latest);
        }
        // Stacks new in this buffer may come from a library loaded since the last module list:
        // the list goes first.
        if new_stack && self.modules != Some(modules::generation()) {
            let stacks_defined = std::mem::replace(&mut self.defs, ChunkEncoder::new(0));
            self.define_modules()?;
            if !self.defs.is_empty() {
                self.write_chunk(true)?;
            }
            self.defs = stacks_defined;
        }
        if let Some(error) = failed {
            return Err(error);
        }
        if !self.sealed.is_empty() {
            self.out
                .as_mut()
                .expect("a sink writes once open")
                .write_all(&self.sealed)?;
        }
        // A marker's label was given its id before the marker was appended: read after the
        // buffer, the new labels hold the ids of its markers.
        for (id, text) in new_labels() {
            self.defs.label(id, &text);
            self.room()?;
        }
        if !self.defs.is_empty() {
            self.write_chunk(true)?;
        }
        self.events += u64::from(self.chunk.events());
        if !self.chunk.is_empty() {
            self.write_chunk(false)?;
        }
        buffer.sent(end);
        Ok(())
    }

    /// Adds a `MODULES` record to the definitions when the loader's list changed since the last.
    fn define_modules(&mut self) -> io::Result<()> {
        let now = modules::generation();
        if self.modules == Some(now) && now.is_some() {
            return Ok(());
        }
        let (generation, loaded) = modules::listed();
        let entries: Vec<ModuleEntry> = loaded
            .iter()
            .map(|m| {
                let path = m.path.to_string_lossy().into_owned();
                let build_id = self
                    .build_ids
                    .entry((path.clone(), m.bias as u64))
                    .or_insert_with(|| modules::build_id(&m.path).unwrap_or_default())
                    .clone();
                ModuleEntry {
                    path,
                    bias: m.bias as u64,
                    build_id,
                    text: m
                        .text
                        .iter()
                        .map(|r| (r.start as u64, r.end as u64))
                        .collect(),
                }
            })
            .collect();
        // A list too long for one chunk goes into several records, which together list the
        // modules (readers look an address up in every list).
        let mut start = 0;
        let mut bytes = 0;
        for (i, entry) in entries.iter().enumerate() {
            let size = 32 + entry.path.len() + entry.build_id.len() + 20 * entry.text.len();
            if i > start && bytes + size > DEFS_CHUNK {
                self.defs.modules(&entries[start..i]);
                self.room()?;
                start = i;
                bytes = 0;
            }
            bytes += size;
        }
        self.defs.modules(&entries[start..]);
        self.modules = Some(generation);
        Ok(())
    }

    /// Writes the frames of the return addresses of the stacks defined and not symbolized yet:
    /// in the background (`budget`: for about that long, the rest in later rounds) or, at close
    /// (`None`), all that remain. So the close symbolizes only the stacks that appeared since the
    /// writer's last round.
    pub(super) fn symbols(&mut self, budget: Option<Duration>) -> io::Result<()> {
        if !self.write_symbols {
            self.stack_list.clear();
            return Ok(());
        }
        if !self.stack_list.is_empty() {
            let mut frames = Vec::new();
            for id in self.stack_list.drain(..) {
                frames.clear();
                TABLE.stacks.frames_into(StackId(id), &mut frames);
                for frame in &frames {
                    if self.symbolized.insert(frame.0 as u64) {
                        self.unsymbolized.push(frame.0 as u64);
                    }
                }
            }
        }
        if self.unsymbolized.is_empty() {
            return Ok(());
        }
        let deadline = budget.map(|budget| Instant::now() + budget);
        let mut resolved = Vec::new();
        let pending = &mut self.unsymbolized;
        crate::symbolize::with_symbolizer(|symbolizer| {
            use crate::symbolize::Resolve;
            while let Some(&address) = pending.last() {
                if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    break;
                }
                pending.pop();
                let address_of = ReturnAddress(address as usize);
                resolved.push((
                    address,
                    symbolizer.resolve(address_of),
                    symbolizer.direct_callee(address_of),
                ));
            }
        });
        self.defs.reset(0);
        for (address, frames, callee) in resolved {
            let frames: Vec<SymbolFrame> = frames
                .iter()
                .take(SYMBOL_FRAMES)
                .cloned()
                .map(SymbolFrame::from)
                .map(bounded)
                .collect();
            self.defs.symbol(address, &frames);
            // The function a tail call may have left off the stack: readers add it where the
            // younger frame is outside its code.
            if let Some((function, frame)) = callee {
                let frame = bounded(SymbolFrame::from(frame));
                self.defs
                    .callee(address, function.start as u64, function.end as u64, &frame);
            }
            if self.defs.len() >= DEFS_CHUNK {
                self.write_chunk(true)?;
                self.defs.reset(0);
            }
        }
        if !self.defs.is_empty() {
            self.write_chunk(true)?;
        }
        Ok(())
    }
}

/// `frame` with its names cut to [`SYMBOL_NAME`] bytes.
fn bounded(mut frame: SymbolFrame) -> SymbolFrame {
    for name in [&mut frame.function, &mut frame.file].into_iter().flatten() {
        if name.len() > SYMBOL_NAME {
            let mut end = SYMBOL_NAME;
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            name.truncate(end);
        }
    }
    frame
}

/// Defines the label set of stack `id` when it has one (a `LABEL_SET` record the first time the
/// set is named, then a `STACK_LABELS` record).
fn define_labels(defs: &mut ChunkEncoder, defined: &mut std::collections::HashSet<u32>, id: u32) {
    let labels = TABLE.stacks.labels(StackId(id));
    if labels == 0 {
        return;
    }
    if defined.insert(labels) {
        defs.label_set(labels, &crate::labels::sets::SETS.pairs(labels));
    }
    defs.stack_labels(id, labels);
}

/// The chunk flags an allocation's stack word carries (`record::buffer`): `None` unknown.
#[inline(always)]
fn chunk_flags(stack_word: u64) -> Option<memprof_trace::ChunkFlags> {
    let bits = stack_word >> buffer::CHUNK_FLAGS_SHIFT;
    (bits & 1 != 0).then_some(memprof_trace::ChunkFlags {
        mmapped: bits & 2 != 0,
        main_arena: bits & 4 == 0,
    })
}
