//! The trace format's vocabulary: the file's constants, record kinds, event classes and chunk
//! flags, the file and chunk headers, the decoded records, and the errors a reader reports.
//!
//! `docs/trace-format.md` is the specification; [`encode`](crate::encode) writes what is defined
//! here and [`decode`](crate::decode) reads it. Every length read from the input is checked
//! against a bound before anything is allocated for it ([`MAX_CHUNK_BYTES`],
//! [`MAX_HEADER_BYTES`], and for a count inside a record the bytes left in the record), so no
//! input makes a reader allocate without bound, loop without end or panic: bad input is an
//! [`Error`] that names the byte offset where it was found.

use std::fmt;
use std::io;

/// The first 8 bytes of every trace: a byte with the high bit set (a channel that strips it, or
/// a text file, never starts this way), then `MPTRACE`.
pub const MAGIC: [u8; 8] = *b"\x89MPTRACE";

/// The major version this codec writes and reads. A reader refuses a file of a newer major
/// version; a new minor version only adds what an older reader may skip.
pub const MAJOR: u16 = 1;

/// The minor version this codec writes.
pub const MINOR: u16 = 5;

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
    /// A memory mapping the program made (`mmap`, or the new range of an `mremap`); version 1.1.
    pub const MMAP: u8 = 0x47;
    /// A recorded mapping's range unmapped (`munmap`, the old range of an `mremap`, or pages an
    /// `mmap` with `MAP_FIXED` replaced); version 1.1.
    pub const MUNMAP: u8 = 0x48;
    /// A label set's (key, value) pairs; version 1.2.
    pub const LABEL_SET: u8 = 0x49;
    /// The label set a stack's blocks were allocated with; version 1.2.
    pub const STACK_LABELS: u8 = 0x4A;
    /// The process's resident memory by what holds it, when the trace was closed; version 1.2.
    pub const MEMORY: u8 = 0x4B;
    /// glibc's chunk flags of the allocations of the next `EVENTS` record; version 1.3.
    pub const BLOCK_FLAGS: u8 = 0x4C;
    /// The function a return address's direct call went to, whose frame a tail call may have
    /// left off the stack; version 1.4.
    pub const CALLEE: u8 = 0x4D;
    /// Every thread's events up to a time are in the chunks before it; version 1.5.
    pub const WRITTEN: u8 = 0x4E;
}

/// What glibc's `malloc` says of a block in the header of its chunk, as the trace recorded it
/// (the `BLOCK_FLAGS` record, version 1.3): only where the allocator was glibc's; elsewhere, and
/// in older traces, a block's flags are unknown (`None` where an `Option<ChunkFlags>` is held).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ChunkFlags {
    /// The block has a mapping of its own (`IS_MMAPPED`): glibc maps blocks above its mmap
    /// threshold (128 KiB at first, adjusted as the program frees them) by themselves.
    pub mmapped: bool,
    /// The block came from the main arena (`NON_MAIN_ARENA` clear); else from one of the arenas
    /// glibc gives other threads. glibc clears the flag of every mmapped block.
    pub main_arena: bool,
}

impl ChunkFlags {
    /// The value the format stores: bit 0 mmapped, bit 1 not the main arena; 4 unknown.
    pub(crate) fn code(flags: Option<ChunkFlags>) -> u8 {
        match flags {
            None => 4,
            Some(f) => u8::from(f.mmapped) | u8::from(!f.main_arena) << 1,
        }
    }

    /// The flags a stored value stands for (`None`, unknown, for 4 and above).
    pub(crate) fn from_code(code: u64) -> Option<ChunkFlags> {
        (code < 4).then_some(ChunkFlags {
            mmapped: code & 1 != 0,
            main_arena: code & 2 == 0,
        })
    }
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
    pub(crate) fn byte(self) -> u8 {
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
    pub(crate) fn new(offset: u64, kind: ErrorKind) -> Error {
        Error {
            offset,
            record_offset: None,
            kind,
        }
    }

    pub(crate) fn corrupt(offset: u64, message: impl Into<String>) -> Error {
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
    pub(crate) fn fixed_bytes(&self) -> [u8; 40] {
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

/// The body of a `MEMORY` record: the process's resident memory by what holds it, in bytes, as
/// `memprof::MemoryBreakdown` measures it (`docs/dumps.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryParts {
    /// Resident memory.
    pub resident: u64,
    /// Live heap as requested.
    pub heap_requested: u64,
    /// The allocator's rounding and headers; `None` when glibc's allocator did not hold the heap.
    pub heap_rounding: Option<u64>,
    /// Free memory the allocator kept; `None` as for `heap_rounding`.
    pub allocator_free: Option<u64>,
    /// memprof's own memory.
    pub memprof_own: u64,
    /// Thread stacks.
    pub stacks: u64,
    /// Code, libraries, mapped files.
    pub code_and_files: u64,
    /// Other anonymous mappings.
    pub other_mappings: u64,
    /// Resident in the allocator's mappings.
    pub allocator_resident: u64,
}

impl MemoryParts {
    /// Of the four heap parts (requested, rounding, free, memprof's own), the bytes that are not
    /// resident: what glibc counts beyond what its mappings hold resident (blocks never touched,
    /// free memory it grew and never touched or gave back to the system). 0 when glibc's allocator
    /// did not hold the heap.
    pub fn heap_not_resident(&self) -> u64 {
        if self.heap_rounding.is_none() {
            return 0;
        }
        self.heap_parts().saturating_sub(self.allocator_resident)
    }

    /// `resident` less every part, the heap parts counted as far as they are resident
    /// ([`MemoryParts::heap_not_resident`]): what no part explains.
    pub fn unaccounted(&self) -> i64 {
        let parts = self.heap_parts() - self.heap_not_resident()
            + self.stacks
            + self.code_and_files
            + self.other_mappings;
        self.resident as i64 - parts as i64
    }

    /// The four heap parts, as the allocator counts them.
    fn heap_parts(&self) -> u64 {
        self.heap_requested
            + self.heap_rounding.unwrap_or(0)
            + self.allocator_free.unwrap_or(0)
            + self.memprof_own
    }
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
        /// glibc's flags of the block (a `BLOCK_FLAGS` record gives them); `None`: unknown.
        flags: Option<ChunkFlags>,
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
        /// glibc's flags of the new block, as for [`Record::Alloc`].
        flags: Option<ChunkFlags>,
    },
    /// A moment the program named (`memprof::mark`).
    Mark {
        /// Nanoseconds since the trace started.
        time: u64,
        /// The label's id (a `LABEL` record gives its text).
        label: u32,
    },
    /// A memory mapping the program made (`mmap`, or the new range of an `mremap`).
    Mmap {
        /// Nanoseconds since the trace started, after the mapping was made.
        time: u64,
        /// Its first byte (page-aligned).
        address: u64,
        /// Its length in bytes.
        length: u64,
        /// The stack it was made from (a `STACK` record defines it).
        stack: u32,
        /// `mmap`'s `prot` (`PROT_*`).
        prot: u32,
        /// `mmap`'s `flags` (`MAP_*`).
        flags: u32,
    },
    /// Part or all of a recorded mapping unmapped.
    Munmap {
        /// Nanoseconds since the trace started, before the pages were given back.
        time: u64,
        /// The first byte unmapped.
        address: u64,
        /// Bytes unmapped (all of them recorded as mapped).
        length: u64,
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
    /// A label set (`memprof::with_labels`): (key, value) pairs, sorted by key.
    LabelSet {
        /// The id `STACK_LABELS` records refer to (never 0).
        id: u32,
        /// The pairs.
        pairs: Vec<(String, String)>,
    },
    /// The label set of a stack: every block allocated from it carries those labels.
    StackLabels {
        /// The stack (a `STACK` record defines it).
        stack: u32,
        /// The label set (a `LABEL_SET` record defines it).
        labels: u32,
    },
    /// What a return address resolves to, innermost (most inlined) frame first.
    Symbol {
        /// The return address.
        address: u64,
        /// Its frames.
        frames: Vec<SymbolFrame>,
    },
    /// The function the direct call before a return address went to (`CALLEE`, version 1.4):
    /// when the next-younger frame of a stack lies outside its code, the function's frame was
    /// left off the stack by a tail call, and a reader adds `frame` before the address's own.
    Callee {
        /// The return address.
        address: u64,
        /// The function's code, as addresses of the recording: `start..end`.
        start: u64,
        /// See `start`.
        end: u64,
        /// The function, at the line of its first instruction.
        frame: SymbolFrame,
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
    /// The process's memory when the trace was closed (`MEMORY`, version 1.2).
    Memory(MemoryParts),
    /// Every event of every thread up to `time` is in the chunks before this record (`WRITTEN`,
    /// version 1.5): a reader of a trace still being written may apply them.
    Written {
        /// Nanoseconds since the trace started.
        time: u64,
    },
}
