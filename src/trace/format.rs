//! The trace file format's codec: the file header, chunks and records, encoded and decoded.
//!
//! `docs/trace-format.md` is the specification; this module is its one implementation, shared by
//! the recorder (which encodes) and every reader (which decodes). Decoding streams over any
//! [`Read`]: one chunk at a time, never the whole trace. Every length read from the input is
//! checked against a bound before anything is allocated for it ([`MAX_CHUNK_BYTES`],
//! [`MAX_HEADER_BYTES`], and for a count inside a record the bytes left in the record), so no
//! input makes a reader allocate without bound, loop without end or panic: bad input is an
//! [`Error`] that names the byte offset where it was found.

#![forbid(unsafe_code)]

use std::fmt;
use std::io::{self, Read, Write};

/// The first 8 bytes of every trace: a byte with the high bit set (a channel that strips it, or
/// a text file, never starts this way), then `MPTRACE`.
pub const MAGIC: [u8; 8] = *b"\x89MPTRACE";

/// The major version this codec writes and reads. A reader refuses a file of a newer major
/// version; a new minor version only adds what an older reader may skip.
pub const MAJOR: u16 = 1;

/// The minor version this codec writes.
pub const MINOR: u16 = 0;

/// The first 4 bytes of every chunk header.
pub const CHUNK_MAGIC: [u8; 4] = *b"MPCK";

/// Bytes of a chunk header as this version writes it.
pub const CHUNK_HEADER_BYTES: usize = 44;

/// Largest payload of a chunk, stored or decoded; a header that says more is corrupt.
pub const MAX_CHUNK_BYTES: u32 = 16 << 20;

/// Largest body of the file header.
pub const MAX_HEADER_BYTES: u32 = 1 << 20;

/// Kinds from this one on carry their body's length after the head, so a reader skips those it
/// does not know. Kinds below it are laid out by the major version.
pub const FIRST_SIZED_KIND: u8 = 0x40;

/// Recent addresses a chunk's events refer to by position (see `docs/trace-format.md`).
const ADDRESSES: usize = 16;

/// Recent stack ids likewise.
const STACKS: usize = 8;

/// Slots of the last size allocated, by stack id modulo this.
const SIZES: usize = 256;

/// Event classes, in the low two bits of an event's head in an `EVENTS` record.
pub mod class {
    /// An allocation.
    pub const ALLOC: u64 = 0;
    /// A free.
    pub const FREE: u64 = 1;
    /// A reallocation: a free and an allocation in one.
    pub const REALLOC: u64 = 2;
    /// A marker (`memprof::mark`).
    pub const MARK: u64 = 3;
}

/// Record kinds.
pub mod kind {
    /// A stack's return addresses.
    pub const STACK: u8 = 0x40;
    /// The loaded modules.
    pub const MODULES: u8 = 0x41;
    /// A thread's operating-system id and name.
    pub const THREAD: u8 = 0x42;
    /// A marker label's text.
    pub const LABEL: u8 = 0x43;
    /// The source frames of one return address.
    pub const SYMBOL: u8 = 0x44;
    /// The end of the trace: it was closed, not cut short.
    pub const END: u8 = 0x45;
    /// Events, stored field by field.
    pub const EVENTS: u8 = 0x46;
}

/// Flags of a chunk header.
pub mod flags {
    /// The chunk holds events of one thread (its `thread` field).
    pub const EVENTS: u8 = 1;
    /// The chunk holds definitions: stacks, modules, threads, labels.
    pub const DEFINITIONS: u8 = 2;
    /// The chunk holds symbols.
    pub const SYMBOLS: u8 = 4;
    /// The chunk holds the end record; it is the last one.
    pub const END: u8 = 8;
}

/// How a chunk's payload is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Codec {
    /// As it is.
    Stored,
    /// One zstd frame.
    Zstd,
}

impl Codec {
    fn byte(self) -> u8 {
        match self {
            Codec::Stored => 0,
            Codec::Zstd => 1,
        }
    }
}

/// What went wrong reading a trace.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The underlying reader failed.
    Io(io::Error),
    /// The input does not start with [`MAGIC`].
    NotATrace,
    /// The file is of a major version this reader does not know.
    UnsupportedVersion {
        /// The file's major version.
        major: u16,
        /// The file's minor version.
        minor: u16,
    },
    /// The input ends inside a header or a chunk.
    Truncated,
    /// The bytes do not follow the format.
    Corrupt(String),
}

/// An error with where it was found: the byte offset in the file, and for a problem inside a
/// chunk's decoded payload, the offset there too.
#[derive(Debug)]
pub struct Error {
    /// Byte offset in the file: of the header, or of the chunk in question.
    pub offset: u64,
    /// Byte offset in the chunk's decoded payload, for a problem in its records.
    pub record_offset: Option<u64>,
    /// What went wrong.
    pub kind: ErrorKind,
}

impl Error {
    fn new(offset: u64, kind: ErrorKind) -> Error {
        Error {
            offset,
            record_offset: None,
            kind,
        }
    }

    fn corrupt(offset: u64, message: impl Into<String>) -> Error {
        Error::new(offset, ErrorKind::Corrupt(message.into()))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}", self.offset)?;
        if let Some(inner) = self.record_offset {
            write!(f, " (chunk payload byte {inner})")?;
        }
        f.write_str(": ")?;
        match &self.kind {
            ErrorKind::Io(error) => write!(f, "cannot read: {error}"),
            ErrorKind::NotATrace => f.write_str("not a memprof trace (no trace header)"),
            ErrorKind::UnsupportedVersion { major, minor } => write!(
                f,
                "trace format version {major}.{minor} is not supported by this reader, which \
                 reads version {MAJOR}.x; use a memprof as recent as the one that wrote it"
            ),
            ErrorKind::Truncated => f.write_str("the trace ends here, cut short"),
            ErrorKind::Corrupt(message) => write!(f, "corrupt trace: {message}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ErrorKind::Io(error) => Some(error),
            _ => None,
        }
    }
}

/// The file header: who wrote the trace and how.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Header {
    /// The file's major version.
    pub major: u16,
    /// The file's minor version.
    pub minor: u16,
    /// The traced process.
    pub pid: u32,
    /// When the trace started, in nanoseconds since the Unix epoch: event time 0.
    pub start_unix_ns: u64,
    /// Mean bytes between sampled allocations; 0 when every allocation is recorded. Under
    /// sampling each recorded allocation of `size` bytes stands for `1/p` blocks and `size/p`
    /// bytes, `p = 1 - exp(-size/interval)`.
    pub sample_interval: u64,
    /// Frames a report shows (`MEMPROF_STACK_DEPTH`) when the trace was recorded.
    pub stack_depth: u32,
    /// Frames skipped after trimming (`MEMPROF_STACK_SKIP`) when the trace was recorded.
    pub stack_skip: u32,
    /// The traced executable's path.
    pub executable: String,
}

impl Header {
    /// A header of this version for process `pid`.
    pub fn new(pid: u32, start_unix_ns: u64, executable: String) -> Header {
        Header {
            major: MAJOR,
            minor: MINOR,
            pid,
            start_unix_ns,
            executable,
            ..Header::default()
        }
    }

    /// This header with a sampling interval and the report settings it was recorded with.
    pub fn with_settings(mut self, sample_interval: u64, depth: u32, skip: u32) -> Header {
        self.sample_interval = sample_interval;
        self.stack_depth = depth;
        self.stack_skip = skip;
        self
    }

    /// Encodes the header, with this codec's version whatever `major` and `minor` say.
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        let mut body = Vec::new();
        put_varint(&mut body, u64::from(self.pid));
        put_varint(&mut body, self.start_unix_ns);
        put_varint(&mut body, self.sample_interval);
        put_varint(&mut body, u64::from(self.stack_depth));
        put_varint(&mut body, u64::from(self.stack_skip));
        put_bytes(&mut body, self.executable.as_bytes());
        let mut head = Vec::with_capacity(16 + body.len());
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&MAJOR.to_le_bytes());
        head.extend_from_slice(&MINOR.to_le_bytes());
        head.extend_from_slice(&(body.len() as u32).to_le_bytes());
        head.extend_from_slice(&body);
        out.write_all(&head)
    }
}

/// A chunk's header: enough to skip it, or to know whether its events matter, without decoding
/// its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// How the payload is stored.
    pub codec: Codec,
    /// What the chunk holds ([`flags`]).
    pub flags: u8,
    /// The thread whose events it holds (its `THREAD` record names it); 0 for a chunk without
    /// events, or for events of threads that had ended.
    pub thread: u32,
    /// Events (`ALLOC`, `FREE`, `REALLOC`, `MARK`) in the chunk.
    pub events: u32,
    /// Bytes of payload in the file, after the header.
    pub stored_len: u32,
    /// Bytes of payload decoded.
    pub raw_len: u32,
    /// Time of the chunk's first event (nanoseconds since the trace started); the base its
    /// events' time deltas start from.
    pub first_time: u64,
    /// Time of its last event.
    pub last_time: u64,
    /// CRC-32 of the header's first 40 bytes and the stored payload.
    pub crc: u32,
    /// Bytes of the header in the file (a later minor version may add fields).
    pub header_len: u16,
}

impl ChunkHeader {
    /// The header's bytes as written, without the CRC.
    fn fixed_bytes(&self) -> [u8; 40] {
        let mut b = [0u8; 40];
        b[0..4].copy_from_slice(&CHUNK_MAGIC);
        b[4] = self.codec.byte();
        b[5] = self.flags;
        b[6..8].copy_from_slice(&self.header_len.to_le_bytes());
        b[8..12].copy_from_slice(&self.thread.to_le_bytes());
        b[12..16].copy_from_slice(&self.events.to_le_bytes());
        b[16..20].copy_from_slice(&self.stored_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.raw_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.first_time.to_le_bytes());
        b[32..40].copy_from_slice(&self.last_time.to_le_bytes());
        b
    }
}

/// One return address and the source frames it stands for, as a `SYMBOL` record holds them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolFrame {
    /// The function's demangled name.
    pub function: Option<String>,
    /// The source file (relative to the recording's working directory when under it), or the
    /// module's path when the source is unknown.
    pub file: Option<String>,
    /// 1-based line; 0 when unknown.
    pub line: u32,
    /// 1-based column; 0 when unknown.
    pub column: u32,
}

/// One loaded module of a `MODULES` record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleEntry {
    /// The module's file.
    pub path: String,
    /// Load bias: actual address minus the address the file states.
    pub bias: u64,
    /// The GNU build id, when the file has one.
    pub build_id: Vec<u8>,
    /// Its executable segments, as actual addresses (`start..end`).
    pub text: Vec<(u64, u64)>,
}

/// One decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Record {
    /// A block allocated.
    Alloc {
        /// Nanoseconds since the trace started.
        time: u64,
        /// The block's address.
        address: u64,
        /// Its size in bytes.
        size: u64,
        /// The stack it was allocated from (a `STACK` record defines it).
        stack: u32,
    },
    /// A recorded block freed.
    Free {
        /// Nanoseconds since the trace started, just before the block was given back.
        time: u64,
        /// The block's address.
        address: u64,
    },
    /// A recorded block reallocated: freed at `time`, the new block allocated at `new_time`.
    Realloc {
        /// Just before the old block was given to the allocator.
        time: u64,
        /// When the new block was returned (at or after `time`).
        new_time: u64,
        /// The old block's address.
        old_address: u64,
        /// The new block's address.
        address: u64,
        /// The new block's size.
        size: u64,
        /// The stack of the reallocation.
        stack: u32,
    },
    /// A moment the program named (`memprof::mark`).
    Mark {
        /// Nanoseconds since the trace started.
        time: u64,
        /// The label's id (a `LABEL` record gives its text).
        label: u32,
    },
    /// A stack's return addresses, innermost first.
    Stack {
        /// Its id: the live table's stack id.
        id: u32,
        /// Return addresses.
        frames: Vec<u64>,
    },
    /// The modules loaded when the list was read.
    Modules(Vec<ModuleEntry>),
    /// A thread.
    Thread {
        /// The trace's thread number (chunk headers' `thread`).
        thread: u32,
        /// The operating system's thread id.
        tid: u64,
        /// Its name, when it has one.
        name: String,
    },
    /// A marker label's text.
    Label {
        /// The id marks refer to.
        id: u32,
        /// The text.
        text: String,
    },
    /// What a return address resolves to, innermost (most inlined) frame first.
    Symbol {
        /// The return address.
        address: u64,
        /// Its frames.
        frames: Vec<SymbolFrame>,
    },
    /// The trace was closed: nothing follows.
    End {
        /// Events written over the whole trace.
        events: u64,
        /// Events dropped (a buffer that could not be had, a signal handler that interrupted
        /// an event being written).
        lost: u64,
    },
    /// A sized record of a kind this reader does not know (a later minor version's), skipped.
    Unknown {
        /// Its kind.
        kind: u8,
    },
}

// ---------------------------------------------------------------------------------------------
// Encoding.

/// Appends `value` as a LEB128 varint: 7 bits a byte, low bits first, the high bit set on every
/// byte but the last.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Bytes of `value` as a varint.
fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// Zigzag: small magnitudes of either sign to small unsigned numbers.
#[inline]
fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

#[inline]
fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// An optional string: 0 for none, else its length plus one and its bytes.
fn put_opt_str(out: &mut Vec<u8>, text: Option<&str>) {
    match text {
        None => out.push(0),
        Some(text) => {
            put_varint(out, text.len() as u64 + 1);
            out.extend_from_slice(text.as_bytes());
        }
    }
}

/// What the encoder and the decoder of a chunk both remember of its events so far, to store an
/// event's address, stack and size by reference to them: the last [`ADDRESSES`] distinct
/// addresses and [`STACKS`] stack ids, most recent first, and the last size allocated from each
/// slot of stack ids. Allocators hand out the blocks just freed, and programs free the blocks just
/// allocated, so most addresses are among the recent ones.
#[derive(Clone, Debug)]
struct Model {
    addresses: [u64; ADDRESSES],
    stacks: [u32; STACKS],
    sizes: Box<[u64; SIZES]>,
}

impl Model {
    fn new() -> Model {
        Model {
            addresses: [0; ADDRESSES],
            stacks: [0; STACKS],
            sizes: Box::new([0; SIZES]),
        }
    }

    fn reset(&mut self) {
        self.addresses = [0; ADDRESSES];
        self.stacks = [0; STACKS];
        self.sizes.fill(0);
    }

    /// Moves `value`, at `from` (the last place when it was not there), to the front.
    #[inline]
    fn front<T: Copy>(list: &mut [T], from: usize, value: T) {
        // A plain loop: the lists are short, and most moves are of a few places, for which a
        // call to `memmove` costs more than the move.
        for i in (1..=from.min(list.len() - 1)).rev() {
            list[i] = list[i - 1];
        }
        list[0] = value;
    }

    /// The size slot of `stack`.
    #[inline]
    fn size_slot(stack: u32) -> usize {
        stack as usize % SIZES
    }
}

/// Builds one chunk: records are appended to a payload, then [`ChunkEncoder::finish`] compresses
/// it and prefixes the header. Times are deltas from the previous event of the chunk, and
/// addresses, stacks and sizes refer to the chunk's earlier events ([`Model`]), so each chunk
/// decodes on its own.
#[derive(Clone, Debug)]
pub struct ChunkEncoder {
    /// The payload so far.
    payload: Vec<u8>,
    /// Scratch for a sized record's body.
    body: Vec<u8>,
    flags: u8,
    thread: u32,
    events: u32,
    first_time: Option<u64>,
    last_time: u64,
    model: Model,
    /// The events not yet put in an `EVENTS` record: their count and their four columns (heads,
    /// addresses, stacks, sizes).
    pending: u64,
    columns: [Vec<u8>; 4],
}

/// The columns of an `EVENTS` record.
const HEADS: usize = 0;
const ADDRESS: usize = 1;
const STACK: usize = 2;
const SIZE: usize = 3;

impl ChunkEncoder {
    /// An empty chunk for the events of `thread` (0 for none).
    pub fn new(thread: u32) -> ChunkEncoder {
        ChunkEncoder {
            payload: Vec::new(),
            body: Vec::new(),
            flags: 0,
            thread,
            events: 0,
            first_time: None,
            last_time: 0,
            model: Model::new(),
            pending: 0,
            columns: Default::default(),
        }
    }

    /// Empties the chunk for another one of `thread`, keeping its memory.
    pub fn reset(&mut self, thread: u32) {
        self.payload.clear();
        self.flags = 0;
        self.thread = thread;
        self.events = 0;
        self.first_time = None;
        self.last_time = 0;
        self.model.reset();
        self.pending = 0;
        for column in &mut self.columns {
            column.clear();
        }
    }

    /// Bytes of payload so far.
    pub fn len(&self) -> usize {
        self.payload.len() + self.columns.iter().map(Vec::len).sum::<usize>()
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.payload.is_empty() && self.pending == 0
    }

    /// Events added.
    pub fn events(&self) -> u32 {
        self.events
    }

    /// The delta of `time` from the previous event's; a time before it counts as the same time
    /// (an event's time never goes back within a chunk).
    #[inline]
    fn time_delta(&mut self, time: u64) -> u64 {
        let base = *self.first_time.get_or_insert(time);
        let previous = self.last_time.max(base);
        let time = time.max(previous);
        self.last_time = time;
        self.events += 1;
        self.flags |= flags::EVENTS;
        time - previous
    }

    /// An event's head: its class and time delta (below 2^62 ns, 146 years).
    #[inline]
    fn head(&mut self, class: u64, time: u64) {
        let dt = self.time_delta(time).min((1 << 62) - 1);
        self.pending += 1;
        put_varint(&mut self.columns[HEADS], dt << 2 | class);
    }

    #[inline]
    fn put_address(&mut self, address: u64) {
        let list = &mut self.model.addresses;
        let out = &mut self.columns[ADDRESS];
        match list.iter().position(|&a| a == address) {
            Some(at) => {
                put_varint(out, at as u64);
                Model::front(list, at, address);
            }
            None => {
                let delta = address.wrapping_sub(list[0]) as i64;
                let high = zigzag(delta >> 4) << 1;
                let low = (delta & 15) as u8;
                put_varint(out, ADDRESSES as u64 + (high | u64::from(low != 0)));
                if low != 0 {
                    out.push(low);
                }
                Model::front(list, ADDRESSES - 1, address);
            }
        }
    }

    #[inline]
    fn put_stack_and_size(&mut self, stack: u32, size: u64) {
        let list = &mut self.model.stacks;
        let out = &mut self.columns[STACK];
        match list.iter().position(|&s| s == stack) {
            Some(at) => {
                put_varint(out, at as u64);
                Model::front(list, at, stack);
            }
            None => {
                put_varint(out, STACKS as u64 + u64::from(stack));
                Model::front(list, STACKS - 1, stack);
            }
        }
        let slot = &mut self.model.sizes[Model::size_slot(stack)];
        put_varint(&mut self.columns[SIZE], size ^ *slot);
        *slot = size;
    }

    /// An allocation.
    #[inline]
    pub fn alloc(&mut self, time: u64, address: u64, size: u64, stack: u32) {
        self.head(class::ALLOC, time);
        self.put_address(address);
        self.put_stack_and_size(stack, size);
    }

    /// A free.
    #[inline]
    pub fn free(&mut self, time: u64, address: u64) {
        self.head(class::FREE, time);
        self.put_address(address);
    }

    /// A reallocation: the old block freed at `time`, the new one returned at `new_time`.
    #[inline]
    pub fn realloc(
        &mut self,
        time: u64,
        new_time: u64,
        old_address: u64,
        address: u64,
        size: u64,
        stack: u32,
    ) {
        self.head(class::REALLOC, time);
        let time = self.last_time;
        let new_time = new_time.max(time);
        self.last_time = new_time;
        put_varint(&mut self.columns[HEADS], new_time - time);
        self.put_address(old_address);
        self.put_address(address);
        self.put_stack_and_size(stack, size);
    }

    /// A marker.
    pub fn mark(&mut self, time: u64, label: u32) {
        self.head(class::MARK, time);
        put_varint(&mut self.columns[HEADS], u64::from(label));
    }

    /// Puts the events added since the last `EVENTS` record into one.
    fn flush_events(&mut self) {
        if self.pending == 0 {
            return;
        }
        self.payload.push(kind::EVENTS);
        let len = varint_len(self.pending)
            + self
                .columns
                .iter()
                .map(|c| varint_len(c.len() as u64) + c.len())
                .sum::<usize>();
        put_varint(&mut self.payload, len as u64);
        put_varint(&mut self.payload, self.pending);
        for column in &mut self.columns {
            put_varint(&mut self.payload, column.len() as u64);
            self.payload.extend_from_slice(column);
            column.clear();
        }
        self.pending = 0;
    }

    /// Appends the sized record in `self.body` under `kind`.
    fn sized(&mut self, kind: u8, flag: u8) {
        self.flush_events();
        self.flags |= flag;
        self.payload.push(kind);
        put_varint(&mut self.payload, self.body.len() as u64);
        self.payload.extend_from_slice(&self.body);
        self.body.clear();
    }

    /// A stack's return addresses, innermost first.
    pub fn stack(&mut self, id: u32, frames: impl ExactSizeIterator<Item = u64>) {
        self.body.clear();
        put_varint(&mut self.body, u64::from(id));
        put_varint(&mut self.body, frames.len() as u64);
        let mut previous = 0u64;
        for frame in frames {
            put_varint(&mut self.body, zigzag(frame.wrapping_sub(previous) as i64));
            previous = frame;
        }
        self.sized(kind::STACK, flags::DEFINITIONS);
    }

    /// The modules loaded now.
    pub fn modules(&mut self, modules: &[ModuleEntry]) {
        self.body.clear();
        put_varint(&mut self.body, modules.len() as u64);
        for module in modules {
            put_bytes(&mut self.body, module.path.as_bytes());
            put_varint(&mut self.body, module.bias);
            put_bytes(&mut self.body, &module.build_id);
            put_varint(&mut self.body, module.text.len() as u64);
            for &(start, end) in &module.text {
                put_varint(&mut self.body, start);
                put_varint(&mut self.body, end.saturating_sub(start));
            }
        }
        self.sized(kind::MODULES, flags::DEFINITIONS);
    }

    /// A thread's operating-system id and name.
    pub fn thread(&mut self, thread: u32, tid: u64, name: &str) {
        self.body.clear();
        put_varint(&mut self.body, u64::from(thread));
        put_varint(&mut self.body, tid);
        put_bytes(&mut self.body, name.as_bytes());
        self.sized(kind::THREAD, flags::DEFINITIONS);
    }

    /// A marker label's text.
    pub fn label(&mut self, id: u32, text: &str) {
        self.body.clear();
        put_varint(&mut self.body, u64::from(id));
        put_bytes(&mut self.body, text.as_bytes());
        self.sized(kind::LABEL, flags::DEFINITIONS);
    }

    /// The frames of one return address.
    pub fn symbol(&mut self, address: u64, frames: &[SymbolFrame]) {
        self.body.clear();
        put_varint(&mut self.body, address);
        put_varint(&mut self.body, frames.len() as u64);
        for frame in frames {
            put_opt_str(&mut self.body, frame.function.as_deref());
            put_opt_str(&mut self.body, frame.file.as_deref());
            put_varint(&mut self.body, u64::from(frame.line));
            put_varint(&mut self.body, u64::from(frame.column));
        }
        self.sized(kind::SYMBOL, flags::SYMBOLS);
    }

    /// The end of the trace.
    pub fn end(&mut self, events: u64, lost: u64) {
        self.body.clear();
        put_varint(&mut self.body, events);
        put_varint(&mut self.body, lost);
        self.sized(kind::END, flags::END);
    }

    /// Appends the chunk, its header and its payload, to `out`: the payload compressed by
    /// `compressor`, or stored as it is without one.
    pub fn finish(
        &mut self,
        compressor: Option<&mut Compressor>,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        self.flush_events();
        if self.payload.len() > MAX_CHUNK_BYTES as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "chunk payload above MAX_CHUNK_BYTES",
            ));
        }
        let start = out.len();
        out.resize(start + CHUNK_HEADER_BYTES, 0);
        let codec = match compressor {
            Some(compressor) => {
                let scratch = &mut compressor.scratch;
                scratch.clear();
                scratch.reserve(zstd::zstd_safe::compress_bound(self.payload.len()));
                compressor
                    .inner
                    .compress_to_buffer(&self.payload[..], scratch)?;
                out.extend_from_slice(scratch);
                Codec::Zstd
            }
            None => {
                out.extend_from_slice(&self.payload);
                Codec::Stored
            }
        };
        let stored_len = (out.len() - start - CHUNK_HEADER_BYTES) as u32;
        let mut header = ChunkHeader {
            codec,
            flags: self.flags,
            thread: self.thread,
            events: self.events,
            stored_len,
            raw_len: self.payload.len() as u32,
            first_time: self.first_time.unwrap_or(0),
            last_time: self.last_time.max(self.first_time.unwrap_or(0)),
            crc: 0,
            header_len: CHUNK_HEADER_BYTES as u16,
        };
        let fixed = header.fixed_bytes();
        let mut crc = crc32fast::Hasher::new();
        crc.update(&fixed);
        crc.update(&out[start + CHUNK_HEADER_BYTES..]);
        header.crc = crc.finalize();
        out[start..start + 40].copy_from_slice(&fixed);
        out[start + 40..start + 44].copy_from_slice(&header.crc.to_le_bytes());
        Ok(())
    }
}

/// A zstd compressor for chunks, kept from one chunk to the next: making one costs more than
/// compressing a chunk.
pub struct Compressor {
    inner: zstd::bulk::Compressor<'static>,
    /// Where a chunk is compressed before it is appended.
    scratch: Vec<u8>,
}

impl fmt::Debug for Compressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compressor").finish_non_exhaustive()
    }
}

impl Compressor {
    /// A compressor at zstd's `level` (1 fastest, 3 zstd's default, up to 22).
    pub fn new(level: i32) -> io::Result<Compressor> {
        Ok(Compressor {
            inner: zstd::bulk::Compressor::new(level)?,
            scratch: Vec::new(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding.

/// Reads a trace: its header, then one chunk at a time.
#[derive(Debug)]
pub struct Reader<R> {
    input: R,
    /// Bytes consumed so far: the offset of what comes next.
    offset: u64,
    header: Header,
    /// The header of the chunk whose payload is next, when [`Reader::next_chunk_header`] was
    /// called and its payload was neither read nor skipped.
    pending: Option<(u64, ChunkHeader)>,
}

/// Reads exactly `buf.len()` bytes; a short input is [`ErrorKind::Truncated`] at `offset`.
fn read_exact_at(input: &mut impl Read, buf: &mut [u8], offset: u64) -> Result<(), Error> {
    input.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => Error::new(offset, ErrorKind::Truncated),
        _ => Error::new(offset, ErrorKind::Io(e)),
    })
}

impl<R: Read> Reader<R> {
    /// Reads the file header. Fails on input that is not a trace, or of another major version.
    pub fn new(mut input: R) -> Result<Reader<R>, Error> {
        let mut fixed = [0u8; 16];
        let mut got = 0;
        while got < fixed.len() {
            match input.read(&mut fixed[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::new(got as u64, ErrorKind::Io(e))),
            }
        }
        let magic_len = got.min(MAGIC.len());
        if fixed[..magic_len] != MAGIC[..magic_len] || got == 0 {
            return Err(Error::new(0, ErrorKind::NotATrace));
        }
        if got < fixed.len() {
            return Err(Error::new(got as u64, ErrorKind::Truncated));
        }
        let major = u16::from_le_bytes([fixed[8], fixed[9]]);
        let minor = u16::from_le_bytes([fixed[10], fixed[11]]);
        if major != MAJOR {
            return Err(Error::new(
                8,
                ErrorKind::UnsupportedVersion { major, minor },
            ));
        }
        let body_len = u32::from_le_bytes([fixed[12], fixed[13], fixed[14], fixed[15]]);
        if body_len > MAX_HEADER_BYTES {
            return Err(Error::corrupt(
                12,
                format!("header of {body_len} bytes, above the limit of {MAX_HEADER_BYTES}"),
            ));
        }
        let mut body = vec![0u8; body_len as usize];
        read_exact_at(&mut input, &mut body, 16)?;
        let mut cursor = Cursor::new(&body);
        let at = |e: Error| Error {
            offset: 16 + e.record_offset.unwrap_or(0),
            record_offset: None,
            kind: e.kind,
        };
        // Fields a later minor version appends are past those read here; fields an older one
        // did not have keep their defaults.
        let field = |cursor: &mut Cursor<'_>| -> Result<u64, Error> {
            if cursor.is_empty() {
                Ok(0)
            } else {
                cursor.varint().map_err(at)
            }
        };
        let pid = field(&mut cursor)? as u32;
        let start_unix_ns = field(&mut cursor)?;
        let sample_interval = field(&mut cursor)?;
        let stack_depth = field(&mut cursor)? as u32;
        let stack_skip = field(&mut cursor)? as u32;
        let executable = if cursor.is_empty() {
            String::new()
        } else {
            cursor.string().map_err(at)?
        };
        Ok(Reader {
            input,
            offset: 16 + u64::from(body_len),
            header: Header {
                major,
                minor,
                pid,
                start_unix_ns,
                sample_interval,
                stack_depth,
                stack_skip,
                executable,
            },
            pending: None,
        })
    }

    /// The file header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The offset of the next byte to read.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads the next chunk's header, leaving its payload for [`Reader::read_payload`] or
    /// [`Reader::skip_payload`] (a pending payload not read yet is skipped first). `Ok(None)` at
    /// the end of the input, where a chunk would start.
    pub fn next_chunk_header(&mut self) -> Result<Option<(u64, ChunkHeader)>, Error> {
        if self.pending.is_some() {
            self.skip_payload()?;
        }
        let start = self.offset;
        let mut fixed = [0u8; CHUNK_HEADER_BYTES];
        let mut got = 0;
        while got < fixed.len() {
            match self.input.read(&mut fixed[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::new(start + got as u64, ErrorKind::Io(e))),
            }
        }
        self.offset += got as u64;
        if got == 0 {
            return Ok(None);
        }
        if got < fixed.len() {
            return Err(Error::new(start, ErrorKind::Truncated));
        }
        if fixed[0..4] != CHUNK_MAGIC {
            return Err(Error::corrupt(start, "no chunk starts here"));
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([fixed[i], fixed[i + 1], fixed[i + 2], fixed[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        let codec = match fixed[4] {
            0 => Codec::Stored,
            1 => Codec::Zstd,
            other => {
                return Err(Error::corrupt(
                    start,
                    format!("unknown chunk codec {other}"),
                ));
            }
        };
        let header_len = u16::from_le_bytes([fixed[6], fixed[7]]);
        let header = ChunkHeader {
            codec,
            flags: fixed[5],
            header_len,
            thread: u32_at(8),
            events: u32_at(12),
            stored_len: u32_at(16),
            raw_len: u32_at(20),
            first_time: u64_at(24),
            last_time: u64_at(32),
            crc: u32_at(40),
        };
        if usize::from(header_len) < CHUNK_HEADER_BYTES || u32::from(header_len) > 4096 {
            return Err(Error::corrupt(
                start,
                format!("chunk header of {header_len} bytes"),
            ));
        }
        if header.stored_len > MAX_CHUNK_BYTES || header.raw_len > MAX_CHUNK_BYTES {
            return Err(Error::corrupt(
                start,
                format!(
                    "chunk of {} bytes ({} decoded), above the limit of {MAX_CHUNK_BYTES}",
                    header.stored_len, header.raw_len
                ),
            ));
        }
        if header.codec == Codec::Stored && header.stored_len != header.raw_len {
            return Err(Error::corrupt(
                start,
                "stored chunk whose two lengths differ",
            ));
        }
        if header.last_time < header.first_time {
            return Err(Error::corrupt(start, "chunk ends before it starts"));
        }
        // Fields of a later minor version, past those known here.
        let extra = u64::from(header_len) - CHUNK_HEADER_BYTES as u64;
        self.skip(extra, start)?;
        self.pending = Some((start, header));
        Ok(Some((start, header)))
    }

    fn skip(&mut self, n: u64, chunk: u64) -> Result<(), Error> {
        let copied = io::copy(&mut (&mut self.input).take(n), &mut io::sink())
            .map_err(|e| Error::new(self.offset, ErrorKind::Io(e)))?;
        self.offset += copied;
        if copied < n {
            return Err(Error::new(chunk, ErrorKind::Truncated));
        }
        Ok(())
    }

    /// Skips the payload of the chunk whose header was read last.
    pub fn skip_payload(&mut self) -> Result<(), Error> {
        let Some((start, header)) = self.pending.take() else {
            return Ok(());
        };
        self.skip(u64::from(header.stored_len), start)
    }

    /// Reads, checks and decodes the payload of the chunk whose header was read last.
    pub fn read_payload(&mut self) -> Result<Chunk, Error> {
        let Some((start, header)) = self.pending.take() else {
            return Err(Error::corrupt(
                self.offset,
                "no chunk header read before its payload",
            ));
        };
        let mut stored = vec![0u8; header.stored_len as usize];
        read_exact_at(&mut self.input, &mut stored, start)?;
        self.offset += u64::from(header.stored_len);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&header.fixed_bytes());
        crc.update(&stored);
        if crc.finalize() != header.crc {
            return Err(Error::corrupt(start, "chunk checksum mismatch"));
        }
        let payload = match header.codec {
            Codec::Stored => stored,
            Codec::Zstd => decompress(&stored, header.raw_len as usize)
                .map_err(|message| Error::corrupt(start, message))?,
        };
        Ok(Chunk {
            offset: start,
            header,
            payload,
        })
    }

    /// The next chunk, decoded; `Ok(None)` at the end of the input.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>, Error> {
        match self.next_chunk_header()? {
            None => Ok(None),
            Some(_) => self.read_payload().map(Some),
        }
    }
}

/// Decodes one zstd frame of exactly `raw_len` bytes, allocating no more than that.
fn decompress(stored: &[u8], raw_len: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(raw_len);
    let mut decoder = zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?;
    // A one-shot decode writes into `out` directly: no window buffer beyond it.
    let n = decoder
        .decompress_to_buffer(stored, &mut out)
        .map_err(|e| format!("cannot decompress chunk: {e}"))?;
    if n != raw_len {
        return Err(format!("chunk decodes to {n} bytes, not {raw_len}"));
    }
    Ok(out)
}

/// A chunk read from a trace, its payload decoded.
#[derive(Clone, Debug)]
pub struct Chunk {
    /// The chunk's byte offset in the file.
    pub offset: u64,
    /// Its header.
    pub header: ChunkHeader,
    /// Its decoded payload.
    pub payload: Vec<u8>,
}

impl Chunk {
    /// Its records, in order.
    pub fn records(&self) -> Records<'_> {
        Records {
            chunk: self.offset,
            cursor: Cursor::new(&self.payload),
            time: self.header.first_time,
            model: Model::new(),
            block: None,
            failed: false,
        }
    }
}

/// A chunk's records, decoded one at a time.
#[derive(Debug)]
pub struct Records<'a> {
    chunk: u64,
    cursor: Cursor<'a>,
    time: u64,
    model: Model,
    /// The `EVENTS` record being read: events left, and its columns.
    block: Option<(u64, [Cursor<'a>; 4])>,
    failed: bool,
}

impl<'a> Records<'a> {
    fn after(&mut self, dt: u64, column: &Cursor<'_>) -> Result<u64, Error> {
        self.time = self
            .time
            .checked_add(dt)
            .ok_or_else(|| column.error("time past 2^64 ns"))?;
        Ok(self.time)
    }

    fn address(model: &mut Model, column: &mut Cursor<'_>) -> Result<u64, Error> {
        let code = column.varint()?;
        let list = &mut model.addresses;
        if code < ADDRESSES as u64 {
            let at = code as usize;
            let address = list[at];
            Model::front(list, at, address);
            return Ok(address);
        }
        let stored = code - ADDRESSES as u64;
        let mut delta = unzigzag(stored >> 1).wrapping_shl(4);
        if stored & 1 == 1 {
            let low = column.byte()?;
            if low == 0 || low > 15 {
                return Err(column.error("address delta with bad low bits"));
            }
            delta |= i64::from(low);
        }
        let address = list[0].wrapping_add(delta as u64);
        Model::front(list, ADDRESSES - 1, address);
        Ok(address)
    }

    fn stack_and_size(
        model: &mut Model,
        stacks: &mut Cursor<'_>,
        sizes: &mut Cursor<'_>,
    ) -> Result<(u32, u64), Error> {
        let code = stacks.varint()?;
        let (at, stack) = if code < STACKS as u64 {
            (code as usize, model.stacks[code as usize])
        } else {
            let id = u32::try_from(code - STACKS as u64)
                .map_err(|_| stacks.error("stack id above 2^32"))?;
            (STACKS - 1, id)
        };
        Model::front(&mut model.stacks, at, stack);
        let slot = &mut model.sizes[Model::size_slot(stack)];
        let size = sizes.varint()? ^ *slot;
        *slot = size;
        Ok((stack, size))
    }

    /// The next event of the `EVENTS` record being read.
    fn event(&mut self, mut columns: [Cursor<'a>; 4]) -> Result<(Record, [Cursor<'a>; 4]), Error> {
        let [heads, addresses, stacks, sizes] = &mut columns;
        let head = heads.varint()?;
        let time = self.after(head >> 2, heads)?;
        let model = &mut self.model;
        let record = match head & 3 {
            class::ALLOC => {
                let address = Self::address(model, addresses)?;
                let (stack, size) = Self::stack_and_size(model, stacks, sizes)?;
                Record::Alloc {
                    time,
                    address,
                    size,
                    stack,
                }
            }
            class::FREE => Record::Free {
                time,
                address: Self::address(model, addresses)?,
            },
            class::REALLOC => {
                let later = heads.varint()?;
                let old_address = Self::address(model, addresses)?;
                let address = Self::address(model, addresses)?;
                let (stack, size) = Self::stack_and_size(model, stacks, sizes)?;
                let new_time = self.after(later, heads)?;
                Record::Realloc {
                    time,
                    new_time,
                    old_address,
                    address,
                    size,
                    stack,
                }
            }
            _ => {
                let label = heads.varint()?;
                Record::Mark {
                    time,
                    label: u32::try_from(label).map_err(|_| heads.error("label id above 2^32"))?,
                }
            }
        };
        Ok((record, columns))
    }

    fn record(&mut self) -> Result<Option<Record>, Error> {
        if let Some((left, columns)) = self.block.take() {
            if left > 0 {
                let (record, columns) = self.event(columns)?;
                self.block = Some((left - 1, columns));
                return Ok(Some(record));
            }
            if let Some(column) = columns.iter().find(|c| !c.is_empty()) {
                return Err(column.error("bytes left in a column after the events"));
            }
        }
        if self.cursor.is_empty() {
            return Ok(None);
        }
        let kind = self.cursor.byte()?;
        match kind {
            kind::EVENTS => {
                let len = self.cursor.varint()?;
                let body = self.cursor.take(len)?;
                let base = self.cursor.position() - body.len() as u64;
                let mut body = Cursor::at(body, base);
                let count = body.varint()?;
                let mut column = || -> Result<Cursor<'a>, Error> {
                    let bytes = body.bytes()?;
                    Ok(Cursor::at(bytes, body.position() - bytes.len() as u64))
                };
                let columns = [column()?, column()?, column()?, column()?];
                // Each event takes at least one byte of heads.
                if count > columns[HEADS].bytes.len() as u64 {
                    return Err(columns[HEADS].error(format!("{count} events in fewer bytes")));
                }
                self.block = Some((count, columns));
                self.record()
            }
            kind if kind >= FIRST_SIZED_KIND => {
                let len = self.cursor.varint()?;
                let body = self.cursor.take(len)?;
                let base = self.cursor.position() - body.len() as u64;
                let mut body = Cursor::at(body, base);
                let record = match kind {
                    kind::STACK => decode_stack(&mut body)?,
                    kind::MODULES => decode_modules(&mut body)?,
                    kind::THREAD => Record::Thread {
                        thread: body.u32()?,
                        tid: body.varint()?,
                        name: body.string()?,
                    },
                    kind::LABEL => Record::Label {
                        id: body.u32()?,
                        text: body.string()?,
                    },
                    kind::SYMBOL => decode_symbol(&mut body)?,
                    kind::END => Record::End {
                        events: body.varint()?,
                        lost: body.varint()?,
                    },
                    kind => Record::Unknown { kind },
                };
                // Fields a later minor version appends to a known kind are skipped with the rest
                // of the body.
                Ok(Some(record))
            }
            kind => Err(self.cursor.error(format!(
                "unknown record kind {kind:#04x} of this major version"
            ))),
        }
    }
}

fn decode_stack(body: &mut Cursor<'_>) -> Result<Record, Error> {
    let id = body.u32()?;
    let count = body.count(1)?;
    let mut frames = Vec::with_capacity(count);
    let mut previous = 0u64;
    for _ in 0..count {
        previous = previous.wrapping_add(unzigzag(body.varint()?) as u64);
        frames.push(previous);
    }
    Ok(Record::Stack { id, frames })
}

fn decode_modules(body: &mut Cursor<'_>) -> Result<Record, Error> {
    let count = body.count(4)?;
    let mut modules = Vec::with_capacity(count);
    for _ in 0..count {
        let path = body.string()?;
        let bias = body.varint()?;
        let build_id = body.bytes()?.to_vec();
        let ranges = body.count(2)?;
        let mut text = Vec::with_capacity(ranges);
        for _ in 0..ranges {
            let start = body.varint()?;
            let len = body.varint()?;
            text.push((start, start.saturating_add(len)));
        }
        modules.push(ModuleEntry {
            path,
            bias,
            build_id,
            text,
        });
    }
    Ok(Record::Modules(modules))
}

fn decode_symbol(body: &mut Cursor<'_>) -> Result<Record, Error> {
    let address = body.varint()?;
    let count = body.count(4)?;
    let mut frames = Vec::with_capacity(count);
    for _ in 0..count {
        frames.push(SymbolFrame {
            function: body.opt_string()?,
            file: body.opt_string()?,
            line: body.u32()?,
            column: body.u32()?,
        });
    }
    Ok(Record::Symbol { address, frames })
}

impl Iterator for Records<'_> {
    type Item = Result<Record, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let result = self.record().map_err(|mut e| {
            e.offset = self.chunk;
            e
        });
        // After an error the rest of the payload cannot be framed: stop.
        self.failed = result.is_err();
        result.transpose()
    }
}

/// A position in a decoded payload.
#[derive(Debug)]
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    /// The offset of `bytes[0]` in the payload, for errors.
    base: u64,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor::at(bytes, 0)
    }

    fn at(bytes: &'a [u8], base: u64) -> Cursor<'a> {
        Cursor { bytes, at: 0, base }
    }

    fn is_empty(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn position(&self) -> u64 {
        self.base + self.at as u64
    }

    fn error(&self, message: impl Into<String>) -> Error {
        Error {
            offset: 0,
            record_offset: Some(self.position()),
            kind: ErrorKind::Corrupt(message.into()),
        }
    }

    fn byte(&mut self) -> Result<u8, Error> {
        let byte = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| self.error("record cut short"))?;
        self.at += 1;
        Ok(byte)
    }

    fn varint(&mut self) -> Result<u64, Error> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(self.error("varint past 64 bits"));
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error("varint past 64 bits"))
    }

    fn u32(&mut self) -> Result<u32, Error> {
        let value = self.varint()?;
        u32::try_from(value).map_err(|_| self.error("value above 2^32"))
    }

    /// A count of items of at least `min_bytes` each: never more than the bytes left allow.
    fn count(&mut self, min_bytes: usize) -> Result<usize, Error> {
        let count = self.varint()?;
        let left = (self.bytes.len() - self.at) / min_bytes.max(1);
        if count > left as u64 {
            return Err(self.error(format!("count of {count} past the record's end")));
        }
        Ok(count as usize)
    }

    fn take(&mut self, len: u64) -> Result<&'a [u8], Error> {
        let left = self.bytes.len() - self.at;
        if len > left as u64 {
            return Err(self.error(format!("length of {len} past the payload's end")));
        }
        let taken = &self.bytes[self.at..self.at + len as usize];
        self.at += len as usize;
        Ok(taken)
    }

    fn bytes(&mut self) -> Result<&'a [u8], Error> {
        let len = self.varint()?;
        self.take(len)
    }

    fn string(&mut self) -> Result<String, Error> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }

    fn opt_string(&mut self) -> Result<Option<String>, Error> {
        match self.varint()? {
            0 => Ok(None),
            len => Ok(Some(
                String::from_utf8_lossy(self.take(len - 1)?).into_owned(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(chunks: &[ChunkEncoder], level: Option<i32>) -> Vec<u8> {
        let mut out = Vec::new();
        Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
            .with_settings(0, 5, 0)
            .write_to(&mut out)
            .unwrap();
        let mut compressor = level.map(|l| Compressor::new(l).unwrap());
        for chunk in chunks {
            chunk.clone().finish(compressor.as_mut(), &mut out).unwrap();
        }
        out
    }

    type Decoded = (Header, Vec<(ChunkHeader, Vec<Record>)>);

    fn decode(bytes: &[u8]) -> Result<Decoded, Error> {
        let mut reader = Reader::new(bytes)?;
        let mut chunks = Vec::new();
        while let Some(chunk) = reader.next_chunk()? {
            let records = chunk.records().collect::<Result<Vec<_>, _>>()?;
            chunks.push((chunk.header, records));
        }
        Ok((reader.header().clone(), chunks))
    }

    #[test]
    fn records_round_trip_stored_and_compressed() {
        let mut defs = ChunkEncoder::new(0);
        defs.stack(3, [0x5555_0000_1234u64, 0x5555_0000_1000, 7].into_iter());
        defs.modules(&[ModuleEntry {
            path: "/bin/app".into(),
            bias: 0x5555_0000_0000,
            build_id: vec![1, 2, 3],
            text: vec![(0x5555_0000_1000, 0x5555_0000_9000)],
        }]);
        defs.thread(1, 4242, "main");
        defs.label(0, "request 42 done");
        defs.symbol(
            0x5555_0000_1234,
            &[SymbolFrame {
                function: Some("app::main".into()),
                file: None,
                line: 3,
                column: 0,
            }],
        );
        let mut events = ChunkEncoder::new(1);
        events.alloc(100, 0x7f00_0000_0010, 24, 3);
        events.free(150, 0x7f00_0000_0010);
        events.realloc(200, 260, 0x7f00_0000_0ff1, 0x7f00_0000_0010, 48, 3);
        events.mark(300, 0);
        events.alloc(300, 0x10, u64::MAX, u32::MAX);
        let mut end = ChunkEncoder::new(0);
        end.end(5, 0);
        for level in [None, Some(3)] {
            let chunks = [defs_clone(&defs), events_clone(&events), end_clone(&end)];
            let (header, decoded) = decode(&trace(&chunks, level)).unwrap();
            assert_eq!(header.pid, 42);
            assert_eq!(header.executable, "/bin/app");
            assert_eq!(header.stack_depth, 5);
            assert_eq!(decoded.len(), 3);
            assert_eq!(decoded[0].0.flags, flags::DEFINITIONS | flags::SYMBOLS);
            assert_eq!(
                decoded[0].1[0],
                Record::Stack {
                    id: 3,
                    frames: vec![0x5555_0000_1234, 0x5555_0000_1000, 7]
                }
            );
            let (head, records) = &decoded[1];
            assert_eq!((head.thread, head.events), (1, 5));
            assert_eq!((head.first_time, head.last_time), (100, 300));
            assert_eq!(
                records,
                &vec![
                    Record::Alloc {
                        time: 100,
                        address: 0x7f00_0000_0010,
                        size: 24,
                        stack: 3
                    },
                    Record::Free {
                        time: 150,
                        address: 0x7f00_0000_0010
                    },
                    Record::Realloc {
                        time: 200,
                        new_time: 260,
                        old_address: 0x7f00_0000_0ff1,
                        address: 0x7f00_0000_0010,
                        size: 48,
                        stack: 3
                    },
                    Record::Mark {
                        time: 300,
                        label: 0
                    },
                    Record::Alloc {
                        time: 300,
                        address: 0x10,
                        size: u64::MAX,
                        stack: u32::MAX
                    },
                ]
            );
            assert_eq!(decoded[2].1, vec![Record::End { events: 5, lost: 0 }]);
        }
    }

    // The encoders hold their payloads; tests reuse them by value.
    fn defs_clone(e: &ChunkEncoder) -> ChunkEncoder {
        e.clone()
    }
    use defs_clone as events_clone;
    use defs_clone as end_clone;

    #[test]
    fn newer_major_versions_and_other_files_are_refused() {
        let mut bytes = trace(&[], None);
        bytes[8] = 2;
        let error = Reader::new(&bytes[..]).unwrap_err();
        assert!(matches!(
            error.kind,
            ErrorKind::UnsupportedVersion { major: 2, .. }
        ));
        assert!(error.to_string().contains("version 2.0"), "{error}");
        let error = Reader::new(&b"PK\x03\x04 a zip"[..]).unwrap_err();
        assert!(matches!(error.kind, ErrorKind::NotATrace));
    }

    #[test]
    fn unknown_sized_kinds_and_header_fields_are_skipped() {
        let mut chunk = ChunkEncoder::new(0);
        chunk.body.extend_from_slice(b"future");
        chunk.sized(0x7e, 0);
        chunk.label(1, "x");
        let mut bytes = trace(&[chunk], None);
        // A longer header body, as a later minor version may write.
        let body_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
        let insert_at = 16 + body_len as usize;
        bytes.splice(insert_at..insert_at, [9, 9, 9]);
        bytes[12..16].copy_from_slice(&(body_len + 3).to_le_bytes());
        bytes[10] = 7;
        let (header, chunks) = decode(&bytes).unwrap();
        assert_eq!(header.minor, 7);
        assert_eq!(
            chunks[0].1,
            vec![
                Record::Unknown { kind: 0x7e },
                Record::Label {
                    id: 1,
                    text: "x".into()
                }
            ]
        );
    }

    #[test]
    fn cut_and_damaged_traces_fail_with_offsets() {
        let mut chunk = ChunkEncoder::new(1);
        for i in 0..100 {
            chunk.alloc(i * 10, 0x1000 + i * 16, 32, 0);
        }
        let bytes = trace(&[defs_clone(&chunk), defs_clone(&chunk)], Some(1));
        let header_len = Reader::new(&bytes[..]).unwrap().offset() as usize;
        let chunk_len = (bytes.len() - header_len) / 2;
        // Cut inside the second chunk: the first still reads, then a truncation at its start.
        let cut = &bytes[..bytes.len() - 5];
        let mut reader = Reader::new(cut).unwrap();
        assert_eq!(reader.next_chunk().unwrap().unwrap().records().count(), 100);
        let error = reader.next_chunk().unwrap_err();
        assert!(matches!(error.kind, ErrorKind::Truncated));
        assert_eq!(error.offset, (header_len + chunk_len) as u64);
        // A flipped byte in the payload fails the checksum.
        let mut damaged = bytes.clone();
        damaged[header_len + CHUNK_HEADER_BYTES + 3] ^= 0x40;
        let error = decode(&damaged).unwrap_err();
        assert_eq!(error.offset, header_len as u64);
        assert!(error.to_string().contains("checksum"), "{error}");
    }

    #[test]
    fn address_deltas_round_trip() {
        let addresses = [
            0u64,
            16,
            0,
            1,
            u64::MAX,
            17,
            1 << 63,
            0x7fff_0000_0010,
            15,
            0x1000,
        ];
        let mut chunk = ChunkEncoder::new(1);
        for (i, &address) in addresses.iter().enumerate() {
            chunk.free(i as u64, address);
        }
        let chunk = decode(&trace(&[chunk], None)).unwrap().1.remove(0).1;
        let decoded: Vec<u64> = chunk
            .iter()
            .map(|r| match r {
                Record::Free { address, .. } => *address,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(decoded, addresses);
    }
}
