//! The trace writer: a background thread that turns the threads' full buffers into chunks, and
//! the close that writes what is left, the symbols and the end record.
//!
//! The destination is opened by the writer thread (a FIFO's `open` waits for a reader; a TCP
//! connect gives up after [`CONNECT_TIMEOUT`]). Each round the writer takes the buffers handed
//! over, in each thread's order, and for each writes first the definitions its events need (the
//! loaded modules when they changed, new stacks, threads and labels), then its events as one
//! chunk. The writer thread runs inside the reentrancy guard for its whole life, so nothing it
//! allocates is recorded; so does the close.
//!
//! Only the writer thread touches the destination, and only it takes the trace's state: the close
//! (at exit, or `close_trace`) asks the writer to close and waits for its answer, and gives the
//! trace up when the writer has been waiting on its destination for [`CLOSE_PATIENCE`] in all
//! since the close began: a destination that stopped reading (a TCP peer, a FIFO's reader) or a
//! connect that does not complete never holds the program's exit for longer. The writer thread
//! blocks `SIGPIPE` for itself, so a FIFO whose reader went away is an error it reports, never a
//! signal that ends the program (sockets are written with `MSG_NOSIGNAL`, as std does).
//!
//! Times: the allocation path stores clock ticks; the writer turns them into nanoseconds since
//! the trace started, measured against the monotonic clock without waiting when the first buffer
//! is written (or at close), then measured again each time the run has doubled in length
//! (`clock::Calibration`): a conversion that keeps the ticks' order.

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
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// How often the writer looks for full buffers.
const POLL: Duration = Duration::from_millis(5);

/// Every how many rounds the writer looks for the buffers of threads that ended without an
/// end-of-thread flush (one system call per such buffer; see `record::buffer`): 100 ms.
const ENDED_THREADS_EVERY: u64 = 20;

/// Every how many rounds the writer writes out what the threads' buffers hold so far, though not
/// full (about a second): a program gone idle has its last events, and its markers, written.
const PARTLY_EVERY: u64 = 200;

/// zstd's level for event chunks: fast, and most of what higher levels give on these payloads.
const LEVEL: i32 = 1;

/// Bytes of symbols per chunk.
const SYMBOL_CHUNK: usize = 1 << 20;

/// How long a round of the writer spends symbolizing the return addresses of new stacks, in the
/// background, before it goes back to the buffers (checked after each address; the first address
/// of a module also reads the module's debug information, however long that takes).
const SYMBOL_BUDGET: Duration = Duration::from_millis(10);

/// Stack of the writer thread: symbolizing at close needs more than a small stack.
const WRITER_STACK: usize = 2 << 20;

/// How long a TCP connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long, in all, the close lets the writer wait on its destination (writes, a connect, a
/// FIFO's open) before it gives the trace up.
const CLOSE_PATIENCE: Duration = Duration::from_secs(3);

/// Most marker labels kept to give a label used again its id, and most bytes of their text; past
/// either, they are forgotten (a label used again is given a new id, defined again).
const LABELS_KEPT: usize = 1 << 16;
/// See [`LABELS_KEPT`].
const LABEL_BYTES: usize = 4 << 20;

/// Where the trace goes, once opened.
enum Destination {
    File(std::fs::File),
    Tcp(TcpStream),
}

impl Write for Destination {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let _waiting = Waiting::begin();
        let result = match self {
            Destination::File(f) => f.write(bytes),
            Destination::Tcp(s) => s.write(bytes),
        };
        if let Err(error) = &result
            && error.kind() == io::ErrorKind::BrokenPipe
        {
            // Raised for this thread by a FIFO whose reader went away, and blocked here.
            native::take_pending_sigpipe();
        }
        result
    }

    fn flush(&mut self) -> io::Result<()> {
        let _waiting = Waiting::begin();
        match self {
            Destination::File(f) => f.flush(),
            Destination::Tcp(s) => s.flush(),
        }
    }
}

/// The writer waiting on its destination, from [`Waiting::begin`] to its drop: what the close
/// measures its patience against.
struct Waiting;

/// Milliseconds (since [`now_ms`]'s origin) spent waiting on the destination, ended waits.
static WAITED_MS: AtomicU64 = AtomicU64::new(0);
/// When the wait under way began, plus one (0: none under way).
static WAITING_SINCE: AtomicU64 = AtomicU64::new(0);

/// Milliseconds since the first call.
fn now_ms() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_millis() as u64
}

impl Waiting {
    fn begin() -> Waiting {
        WAITING_SINCE.store(now_ms() + 1, Ordering::Relaxed);
        Waiting
    }

    /// Milliseconds spent waiting so far, the wait under way included.
    fn total() -> u64 {
        let since = WAITING_SINCE.load(Ordering::Relaxed);
        let current = match since {
            0 => 0,
            since => now_ms().saturating_sub(since - 1),
        };
        WAITED_MS.load(Ordering::Relaxed) + current
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let since = WAITING_SINCE.swap(0, Ordering::Relaxed);
        if since != 0 {
            WAITED_MS.fetch_add(now_ms().saturating_sub(since - 1), Ordering::Relaxed);
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
    /// Rounds of [`Sink::drain`] so far.
    rounds: u64,
}

/// The trace's state: taken by the writer thread only (and by `start`, before it runs).
static STATE: Mutex<State> = Mutex::new(State::Idle);

/// Where the trace goes, as expanded: for the close's warnings and its check of a FIFO.
static TARGET: OnceLock<String> = OnceLock::new();

/// [`IDLE`], [`RUNNING`] or [`DONE`]: the trace's state as the close sees it, without the lock
/// the writer holds while it writes.
static PHASE: AtomicU8 = AtomicU8::new(IDLE);
/// No trace started.
const IDLE: u8 = 0;
/// The writer thread runs.
const RUNNING: u8 = 1;
/// Closed, failed or given up.
const DONE: u8 = 2;

/// Whether the writer opened its destination.
static OPENED: AtomicBool = AtomicBool::new(false);

/// A close is asked of the writer thread.
static CLOSING: AtomicBool = AtomicBool::new(false);

/// The close's answer, once the writer gave it: `None` until then; an answer taken already is
/// `Some(Ok(None))`.
static ANSWER: Mutex<Option<io::Result<Option<PathBuf>>>> = Mutex::new(None);
/// Signalled when [`ANSWER`] is set.
static ANSWERED: Condvar = Condvar::new();

/// Set in a forked child: the state may have been held by the parent's writer thread.
static FORKED: AtomicBool = AtomicBool::new(false);

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

/// Expands the trace's destination: `%p`, `%t`, `%e` in a path, as `MEMPROF_OUTPUT` does.
fn expand(spec: &str, now: Duration) -> String {
    let program = native::program_name();
    crate::export::expand_path(spec, std::process::id(), now, &program)
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
    let target = expand(spec, now);
    let _ = TARGET.set(target.clone());
    let sink = Sink {
        target,
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
        symbolized: std::collections::HashSet::new(),
        unsymbolized: Vec::new(),
        write_symbols: config.trace_symbols,
        label_sets: std::collections::HashSet::new(),
        threads: HashMap::new(),
        modules: None,
        build_ids: HashMap::new(),
        next_seq: HashMap::new(),
        events: 0,
        rounds: 0,
    };
    *STATE.lock().unwrap_or_else(PoisonError::into_inner) = State::Pending(Box::new(sink));
    PHASE.store(RUNNING, Ordering::Release);
    if let Err(error) = native::spawn(c"memprof-trace", WRITER_STACK, writer_thread) {
        warn(format_args!(
            "MEMPROF_TRACE: cannot start the writer thread ({}); no trace",
            io::Error::from_raw_os_error(error)
        ));
        *STATE.lock().unwrap_or_else(PoisonError::into_inner) = State::Closed;
        PHASE.store(DONE, Ordering::Release);
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
    let _answer = AnswerAtEnd;
    // Its writes into a FIFO whose reader went away fail with `EPIPE`, and the signal stays
    // pending on this thread, never delivered.
    native::block_sigpipe();
    loop {
        if !CLOSING.load(Ordering::Acquire) {
            std::thread::sleep(POLL);
        }
        if FORKED.load(Ordering::Relaxed) || PHASE.load(Ordering::Acquire) == DONE {
            return;
        }
        let closing = CLOSING.load(Ordering::Acquire);
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        let result = match &mut *state {
            State::Idle | State::Closed => return,
            State::Pending(sink) if !opens_existing(&sink.target) => {
                // A new file, made under the state's lock.
                let target = sink.target.clone();
                connect(&target).and_then(|d| install(&mut state, d))
            }
            State::Pending(sink) => {
                // Opened without holding the state: a FIFO's `open` waits for a reader, a TCP
                // peer may be slow to answer.
                let target = sink.target.clone();
                drop(state);
                let destination = connect(&target);
                state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
                if PHASE.load(Ordering::Acquire) == DONE {
                    return;
                }
                destination.and_then(|d| install(&mut state, d))
            }
            State::Open(sink) if closing => {
                let result = sink.close();
                if let Err(error) = &result {
                    fail(&mut state, error);
                }
                *state = State::Closed;
                PHASE.store(DONE, Ordering::Release);
                answer(result.map(Some));
                return;
            }
            State::Open(sink) => sink
                .drain(false)
                .and_then(|()| sink.symbols(Some(SYMBOL_BUDGET))),
        };
        if let Err(error) = result {
            fail(&mut state, &error);
            return;
        }
    }
}

/// Gives the close its answer, and wakes it.
fn answer(result: io::Result<Option<PathBuf>>) {
    let mut slot = ANSWER.lock().unwrap_or_else(PoisonError::into_inner);
    if slot.is_none() {
        *slot = Some(result);
    }
    ANSWERED.notify_all();
}

/// Ends the writer thread's life, however it ends: a close waiting has its answer (no trace,
/// when the writer failed before), and none waits for a writer that is gone.
struct AnswerAtEnd;

impl Drop for AnswerAtEnd {
    fn drop(&mut self) {
        PHASE.store(DONE, Ordering::Release);
        answer(Ok(None));
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
    PHASE.store(DONE, Ordering::Release);
}

/// Opens `target`: `tcp://HOST:PORT` (each of its addresses tried for [`CONNECT_TIMEOUT`]); a
/// FIFO or a character device there, written into; else a new file, created under a temporary
/// name beside `target` without following any link and renamed over what was there (a regular
/// file or a symbolic link, which is replaced, not followed; anything else is an error). A
/// FIFO's `open` waits for a reader.
fn connect(target: &str) -> io::Result<Destination> {
    if let Some(address) = target.strip_prefix("tcp://") {
        use std::net::ToSocketAddrs;
        let mut last = io::Error::other("the address resolves to nothing");
        for address in address.to_socket_addrs()? {
            let _waiting = Waiting::begin();
            match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
                Ok(stream) => return Ok(Destination::Tcp(stream)),
                Err(error) => last = error,
            }
        }
        return Err(last);
    }
    if !opens_existing(target) {
        let file = crate::files::Replacement::create(std::path::Path::new(target))?.commit()?;
        return Ok(Destination::File(file));
    }
    let file = {
        let _waiting = Waiting::begin();
        open_existing(target, 0)?
    };
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

/// Opens the FIFO or device at `target` for writing, not following a link, with `flags` more.
fn open_existing(target: &str, flags: i32) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | flags)
        .open(target)
}

/// An error when `target` is a FIFO that nobody reads now (a device, or a FIFO with a reader:
/// none).
fn check_reader(target: &str) -> io::Result<()> {
    open_existing(target, libc::O_NONBLOCK)
        .map(drop)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => io::Error::other("a FIFO that nobody reads"),
            _ => e,
        })
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
        OPENED.store(true, Ordering::Release);
        let State::Pending(sink) = std::mem::replace(state, State::Closed) else {
            unreachable!("matched above")
        };
        *state = State::Open(sink);
    }
    Ok(())
}

/// Closes the trace: what is left of every thread's events, the symbols, the end record,
/// written by the writer thread, which this waits for. `None` when no trace was open. A FIFO
/// nobody reads yet is given up at once; a destination the writer has waited on for
/// [`CLOSE_PATIENCE`] since the close began is given up then, an error naming it and the events
/// not written.
pub(crate) fn close() -> io::Result<Option<PathBuf>> {
    if FORKED.load(Ordering::Relaxed) || PHASE.load(Ordering::Acquire) != RUNNING {
        return Ok(None);
    }
    let target = TARGET.get().map_or("", String::as_str);
    // A FIFO that nobody reads yet: given up at once.
    if !OPENED.load(Ordering::Acquire)
        && !target.starts_with("tcp://")
        && opens_existing(target)
        && let Err(error) = check_reader(target)
    {
        give_up();
        warn(format_args!(
            "MEMPROF_TRACE: cannot write {target}: {error}; tracing stops"
        ));
        return Err(error);
    }
    let waited = Waiting::total();
    CLOSING.store(true, Ordering::Release);
    let patience = CLOSE_PATIENCE.as_millis() as u64;
    let mut slot = ANSWER.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if let Some(answer) = slot.as_mut() {
            return std::mem::replace(answer, Ok(None));
        }
        if Waiting::total().saturating_sub(waited) >= patience {
            drop(slot);
            give_up();
            let lost = buffer::unwritten() + buffer::LOST.load(Ordering::Relaxed);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{target} kept the trace waiting for {} s; given up, {lost} events \
                     not written",
                    CLOSE_PATIENCE.as_secs()
                ),
            ));
        }
        slot = ANSWERED
            .wait_timeout(slot, Duration::from_millis(20))
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// Stops tracing without the writer: it finds the trace done when its destination lets it go.
fn give_up() {
    super::ON.store(false, Ordering::Relaxed);
    PHASE.store(DONE, Ordering::Release);
}

impl Sink {
    /// What is left of every thread's events, the symbols, the end record.
    fn close(&mut self) -> io::Result<PathBuf> {
        self.drain(true)?;
        self.symbols(None)?;
        if self.write_symbols {
            crate::symbolize::with_symbolizer(|symbolizer| symbolizer.release_debug_info());
        }
        let lost = buffer::LOST.load(Ordering::Relaxed);
        self.chunk.reset(0);
        self.chunk.memory(&crate::breakdown::trace_parts());
        self.chunk.end(self.events, lost);
        self.write_chunk(false)?;
        self.out.as_mut().expect("open").flush()?;
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
        }
        self.write_chunk(true)
    }

    /// Writes the buffers handed over (and, when `closing`, those being filled), in each
    /// thread's order.
    fn drain(&mut self, closing: bool) -> io::Result<()> {
        // Labels are written each round, so that few wait for the writer.
        self.define_labels()?;
        self.rounds += 1;
        let ready = buffer::ready(
            closing,
            self.rounds.is_multiple_of(ENDED_THREADS_EVERY),
            self.rounds.is_multiple_of(PARTLY_EVERY),
        );
        if ready.is_empty() {
            return Ok(());
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
        let (chunk, defs, stacks, stack_list, label_sets) = (
            &mut self.chunk,
            &mut self.defs,
            &mut self.stacks,
            &mut self.stack_list,
            &mut self.label_sets,
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
            self.define_modules();
            if !self.defs.is_empty() {
                self.write_chunk(true)?;
            }
            self.defs = stacks_defined;
        }
        // A marker's label was given its id before the marker was appended: read after the
        // buffer, the new labels hold the ids of its markers.
        for (id, text) in new_labels() {
            self.defs.label(id, &text);
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

    /// Writes the frames of the return addresses of the stacks defined and not symbolized yet:
    /// in the background (`budget`: for about that long, the rest in later rounds) or, at close
    /// (`None`), all that remain. So the close symbolizes only the stacks that appeared since the
    /// writer's last round.
    fn symbols(&mut self, budget: Option<Duration>) -> io::Result<()> {
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
