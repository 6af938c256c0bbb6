//! The trace writer: a background thread that turns the threads' full buffers into chunks, and
//! the close that writes what is left, the symbols and the end record.
//!
//! The destination is opened by the writer thread (a FIFO's `open` waits for a reader), or by
//! the close when the writer has not yet. Each round the writer takes the buffers handed over, in
//! each thread's order, and for each writes first the definitions its events need (the loaded
//! modules when they changed, new stacks, threads and labels), then its events as one chunk. The
//! writer thread runs inside the reentrancy guard for its whole life, so nothing it allocates is
//! recorded; so does the close.
//!
//! Times: the allocation path stores clock ticks; the writer turns them into nanoseconds since
//! the trace started with one conversion for the whole trace, measured once against the
//! monotonic clock (`clock::calibrate`), so that times keep the ticks' order.

#![forbid(unsafe_code)]

use crate::address::ReturnAddress;
use crate::address::StackId;
use crate::config::warn;
use crate::guard::Guard;
use crate::modules::{self, Generation};
use crate::native::{self, clock, clock::Calibration};
use crate::record::buffer::{self, Buffer};
use crate::table::TABLE;
use memprof_trace::{ChunkEncoder, Compressor, Header, ModuleEntry, SymbolFrame};
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// How often the writer looks for full buffers.
const POLL: Duration = Duration::from_millis(5);

/// How long the clock's rate is measured over before the first chunk is written.
const CALIBRATION: Duration = Duration::from_millis(50);

/// zstd's level for event chunks: fast, and most of what higher levels give on these payloads.
const LEVEL: i32 = 1;

/// Bytes of symbols per chunk.
const SYMBOL_CHUNK: usize = 1 << 20;

/// Stack of the writer thread: symbolizing at close needs more than a small stack.
const WRITER_STACK: usize = 2 << 20;

/// Where the trace goes, once opened.
enum Destination {
    File(std::fs::File),
    Tcp(TcpStream),
}

impl Write for Destination {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Destination::File(f) => f.write(bytes),
            Destination::Tcp(s) => s.write(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Destination::File(f) => f.flush(),
            Destination::Tcp(s) => s.flush(),
        }
    }
}

/// The trace's state.
enum State {
    /// Not started, or in a forked child.
    Idle,
    /// Started; the destination is not open yet.
    Pending(Box<Sink>),
    /// Writing.
    Open(Box<Sink>),
    /// Closed, or failed.
    Closed,
}

/// What the writer keeps between rounds.
struct Sink {
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
    /// Kept from chunk to chunk.
    compressor: Compressor,
    /// Stack ids defined so far, as a bit set.
    stacks: Vec<u64>,
    /// Stack ids defined, in order (for the symbols at close).
    stack_list: Vec<u32>,
    /// Threads defined.
    threads: HashMap<u32, ()>,
    /// Labels defined: ids below this.
    labels: usize,
    /// The loader's generation the last `MODULES` record was read at.
    modules: Option<Option<Generation>>,
    /// Build ids by module path and bias.
    build_ids: HashMap<(String, u64), Vec<u8>>,
    /// The next buffer expected of each thread.
    next_seq: HashMap<u32, u64>,
    /// Events written.
    events: u64,
}

static STATE: Mutex<State> = Mutex::new(State::Idle);

/// Marker labels by id.
static LABELS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Set in a forked child: the state may have been held by the parent's writer thread.
static FORKED: AtomicBool = AtomicBool::new(false);

/// The id of a marker label, given one on first use. Call inside the reentrancy guard.
pub(crate) fn label_id(label: &str) -> u32 {
    let mut labels = LABELS.lock().unwrap_or_else(PoisonError::into_inner);
    match labels.iter().position(|l| l == label) {
        Some(id) => id as u32,
        None => {
            labels.push(label.to_owned());
            (labels.len() - 1) as u32
        }
    }
}

/// Expands the trace's destination: `%p`, `%t`, `%e` in a path, as `MEMPROF_OUTPUT` does.
fn expand(spec: &str, now: Duration) -> String {
    let executable = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".to_owned());
    crate::export::expand_path(spec, std::process::id(), now, &executable)
}

/// Starts the trace and its writer thread; `false` when the thread cannot start.
pub(crate) fn start(spec: &str, sample_interval: u64) -> bool {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let origin = clock::origin();
    let config = crate::config::get();
    let executable = std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let header = Header::new(std::process::id(), now.as_nanos() as u64, executable).with_settings(
        sample_interval,
        config.stack_depth as u32,
        config.stack_skip as u32,
    );
    let sink = Sink {
        target: expand(spec, now),
        out: None,
        header,
        origin,
        calibration: None,
        chunk: ChunkEncoder::new(0),
        defs: ChunkEncoder::new(0),
        bytes: Vec::new(),
        compressor: match Compressor::new(LEVEL) {
            Ok(compressor) => compressor,
            Err(error) => {
                warn(format_args!(
                    "MEMPROF_TRACE: cannot start zstd ({error}); no trace"
                ));
                return false;
            }
        },
        stacks: Vec::new(),
        stack_list: Vec::new(),
        threads: HashMap::new(),
        labels: 0,
        modules: None,
        build_ids: HashMap::new(),
        next_seq: HashMap::new(),
        events: 0,
    };
    *STATE.lock().unwrap_or_else(PoisonError::into_inner) = State::Pending(Box::new(sink));
    if let Err(error) = native::spawn(c"memprof-trace", WRITER_STACK, writer_thread) {
        warn(format_args!(
            "MEMPROF_TRACE: cannot start the writer thread ({}); no trace",
            io::Error::from_raw_os_error(error)
        ));
        *STATE.lock().unwrap_or_else(PoisonError::into_inner) = State::Closed;
        return false;
    }
    if !native::at_exit(close_at_exit) {
        warn(format_args!(
            "MEMPROF_TRACE: cannot register the at-exit close; the trace ends at its last full \
             chunk"
        ));
    }
    true
}

/// After `fork`, in the child: the trace is the parent's.
pub(crate) fn forget_in_child() {
    FORKED.store(true, Ordering::Relaxed);
}

extern "C" fn close_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        crate::guard::untracked(|| match close() {
            Ok(Some(path)) if path.to_string_lossy().starts_with("tcp://") => {
                warn(format_args!("trace sent to {}", path.display()))
            }
            Ok(Some(path)) => warn(format_args!("trace written to {}", path.display())),
            Ok(None) => {}
            Err(error) => warn(format_args!(
                "MEMPROF_TRACE: closing the trace failed: {error}"
            )),
        })
    });
}

/// The writer thread.
fn writer_thread() {
    let _guard = Guard::enter();
    loop {
        std::thread::sleep(POLL);
        if FORKED.load(Ordering::Relaxed) {
            return;
        }
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        let result = match &mut *state {
            State::Idle | State::Closed => return,
            State::Pending(sink) if !opens_existing(&sink.target) => {
                // A new file, made under the state's lock: the close, which would make its own
                // if this one were not there yet, cannot rename a second one over it.
                let target = sink.target.clone();
                connect(&target, true).and_then(|d| install(&mut state, d))
            }
            State::Pending(sink) => {
                // Opened without holding the state: a FIFO's `open` waits for a reader, a TCP
                // peer may be slow to answer, and the close must not wait for them too.
                let target = sink.target.clone();
                drop(state);
                let destination = connect(&target, true);
                state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
                match &*state {
                    State::Pending(_) => destination.and_then(|d| install(&mut state, d)),
                    _ => continue,
                }
            }
            State::Open(sink) => sink.drain(false),
        };
        if let Err(error) = result {
            fail(&mut state, &error);
            return;
        }
    }
}

/// Stops tracing after a write failed.
fn fail(state: &mut State, error: &io::Error) {
    super::ON.store(false, Ordering::Relaxed);
    let target = match state {
        State::Pending(sink) | State::Open(sink) => sink.target.clone(),
        _ => String::new(),
    };
    warn(format_args!(
        "MEMPROF_TRACE: cannot write {target}: {error}; tracing stops"
    ));
    *state = State::Closed;
}

/// Opens `target`: `tcp://HOST:PORT`; a FIFO or a character device there, written into; else a
/// new file, created under a temporary name beside `target` without following any link and
/// renamed over what was there (a regular file or a symbolic link, which is replaced, not
/// followed; anything else is an error). A FIFO's `open` waits for a reader; without
/// `wait_for_reader`, a FIFO nobody reads is an error at once.
fn connect(target: &str, wait_for_reader: bool) -> io::Result<Destination> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(address) = target.strip_prefix("tcp://") {
        return Ok(Destination::Tcp(TcpStream::connect(address)?));
    }
    if !opens_existing(target) {
        let file = crate::files::Replacement::create(std::path::Path::new(target))?.commit()?;
        return Ok(Destination::File(file));
    }
    let open = |flags: i32| {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | flags)
            .open(target)
    };
    if !wait_for_reader {
        open(libc::O_NONBLOCK).map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => io::Error::other("a FIFO that nobody reads"),
            _ => e,
        })?;
    }
    let file = open(0)?;
    // What was checked may have been swapped since for something else: written into only if it
    // is still a FIFO or a device.
    let meta = file.metadata()?;
    if !written_into(&meta) {
        return Err(io::Error::other(format!(
            "{} replaced the FIFO or device while it was opened; not written",
            crate::files::kind(&meta)
        )));
    }
    Ok(Destination::File(file))
}

/// Whether `target` is a destination that exists already and is written into (`tcp://`, a FIFO,
/// a character device) rather than a file made anew.
fn opens_existing(target: &str) -> bool {
    target.starts_with("tcp://")
        || std::fs::symlink_metadata(target).is_ok_and(|m| written_into(&m))
}

/// A FIFO or a character device: written into, never replaced.
fn written_into(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    meta.file_type().is_fifo() || meta.file_type().is_char_device()
}

/// Makes a pending trace open on `destination`, its header written.
fn install(state: &mut State, destination: Destination) -> io::Result<()> {
    if let State::Pending(sink) = state {
        let mut out = io::BufWriter::with_capacity(1 << 20, destination);
        sink.header.write_to(&mut out)?;
        sink.out = Some(out);
        let State::Pending(sink) = std::mem::replace(state, State::Closed) else {
            unreachable!("matched above")
        };
        *state = State::Open(sink);
    }
    Ok(())
}

/// The open trace; a pending one is opened first, not waiting for a FIFO's reader.
fn open(state: &mut State) -> io::Result<&mut Sink> {
    if let State::Pending(sink) = state {
        let destination = connect(&sink.target, false)?;
        install(state, destination)?;
    }
    match state {
        State::Open(sink) => Ok(sink),
        _ => Err(io::Error::other("the trace is closed")),
    }
}

/// Closes the trace: what is left of every thread's events, the symbols, the end record. `None`
/// when no trace was open.
pub(crate) fn close() -> io::Result<Option<PathBuf>> {
    if FORKED.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    if matches!(*state, State::Idle | State::Closed) {
        return Ok(None);
    }
    let result = (|| {
        let sink = open(&mut state)?;
        sink.drain(true)?;
        sink.symbols()?;
        let lost = buffer::LOST.load(Ordering::Relaxed);
        sink.chunk.reset(0);
        sink.chunk.end(sink.events, lost);
        sink.write_chunk(false)?;
        let out = sink.out.as_mut().expect("open");
        out.flush()?;
        Ok(PathBuf::from(&sink.target))
    })();
    match result {
        Ok(path) => {
            *state = State::Closed;
            Ok(Some(path))
        }
        Err(error) => {
            fail(&mut state, &error);
            Err(error)
        }
    }
}

impl Sink {
    /// Writes the buffers handed over (and, when `closing`, those being filled), in each
    /// thread's order.
    fn drain(&mut self, closing: bool) -> io::Result<()> {
        let ready = buffer::ready(closing);
        if ready.is_empty() {
            return Ok(());
        }
        if self.calibration.is_none() {
            self.calibration = Some(clock::calibrate(self.origin, CALIBRATION));
        }
        for (buffer, full) in ready {
            let (thread, tid, seq) = buffer.owner();
            let expected = self.next_seq.entry(thread).or_insert(0);
            // A buffer of this thread handed over before it is not seen yet: next round.
            if !closing && seq != *expected {
                continue;
            }
            *expected = seq + 1;
            self.write_buffer(buffer, thread, tid)?;
            if full {
                buffer.recycle();
            }
        }
        // Whole chunks reach the destination each round: a process killed loses only the
        // events not handed over yet.
        self.out.as_mut().expect("open").flush()
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
        let calibration = self
            .calibration
            .expect("calibrated before the first buffer");
        self.defs.reset(0);
        if thread != 0 && self.threads.insert(thread, ()).is_none() {
            let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                .map(|n| n.trim_end().to_owned())
                .unwrap_or_default();
            self.defs.thread(thread, tid, &name);
        }
        if self.modules.is_none() {
            self.define_modules();
        }
        self.chunk.reset(thread);
        let mut new_stack = false;
        let mut labels = self.labels;
        let (chunk, defs, stacks, stack_list) = (
            &mut self.chunk,
            &mut self.defs,
            &mut self.stacks,
            &mut self.stack_list,
        );
        let mut define = |id: u32| {
            let (word, bit) = (id as usize / 64, id % 64);
            if stacks.len() <= word {
                stacks.resize(word + 1, 0);
            }
            if stacks[word] & (1 << bit) == 0 {
                stacks[word] |= 1 << bit;
                new_stack = true;
                let frames = &TABLE.stacks.record(StackId(id)).frames;
                defs.stack(id, frames.iter().map(|f| f.0 as u64));
                stack_list.push(id);
            }
        };
        buffer.read(|event| {
            let time = calibration.ns(event[0] >> 3);
            match event[0] & 7 {
                buffer::ALLOC => {
                    define(event[3] as u32);
                    chunk.alloc(time, event[1], event[2], event[3] as u32);
                }
                buffer::FREE => chunk.free(time, event[1]),
                buffer::REALLOC => {
                    define(event[3] as u32);
                    chunk.realloc(
                        time,
                        calibration.ns(event[5]),
                        event[4],
                        event[1],
                        event[2],
                        event[3] as u32,
                    );
                }
                _ => {
                    labels = labels.max(event[1] as usize + 1);
                    chunk.mark(time, event[1] as u32);
                }
            }
        });
        // Stacks new in this buffer may come from a library loaded since the last module list:
        // the list goes first.
        if new_stack && self.modules != Some(modules::generation()) {
            let stacks_defined = std::mem::replace(&mut self.defs, ChunkEncoder::new(0));
            self.define_modules();
            if !self.defs.is_empty() {
                self.write_chunk(true)?;
            }
            self.defs = stacks_defined;
        }
        if labels > self.labels {
            let all = LABELS.lock().unwrap_or_else(PoisonError::into_inner);
            for (id, text) in all.iter().enumerate().take(labels).skip(self.labels) {
                self.defs.label(id as u32, text);
            }
            self.labels = labels.min(all.len());
        }
        if !self.defs.is_empty() {
            self.write_chunk(true)?;
        }
        self.events += u64::from(self.chunk.events());
        if !self.chunk.is_empty() {
            self.write_chunk(false)?;
        }
        Ok(())
    }

    /// Adds a `MODULES` record to the definitions when the loader's list changed since the last.
    fn define_modules(&mut self) {
        let now = modules::generation();
        if self.modules == Some(now) && now.is_some() {
            return;
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
        self.defs.modules(&entries);
        self.modules = Some(generation);
    }

    /// Writes the frames of every return address of every stack defined.
    fn symbols(&mut self) -> io::Result<()> {
        let mut addresses: Vec<u64> = self
            .stack_list
            .iter()
            .flat_map(|&id| TABLE.stacks.record(StackId(id)).frames.iter())
            .map(|f| f.0 as u64)
            .collect();
        addresses.sort_unstable();
        addresses.dedup();
        let mut resolved = Vec::with_capacity(addresses.len());
        crate::symbolize::with_symbolizer(|symbolizer| {
            use crate::symbolize::Resolve;
            for &address in &addresses {
                resolved.push((address, symbolizer.resolve(ReturnAddress(address as usize))));
            }
        });
        self.defs.reset(0);
        for (address, frames) in resolved {
            let frames: Vec<SymbolFrame> = frames.iter().cloned().map(SymbolFrame::from).collect();
            self.defs.symbol(address, &frames);
            if self.defs.len() >= SYMBOL_CHUNK {
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
