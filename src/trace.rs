//! Trace mode: every allocation, reallocation and free, with its time, thread and stack, written
//! to a file (or a FIFO, or a TCP peer) while the program runs, for tools to analyse afterwards.
//!
//! The file format is specified in `docs/trace-format.md` and implemented once, in [`format`]:
//! the recorder encodes with it, and readers decode with it ([`Reader`], one chunk at a time).

pub mod format;

pub use format::{
    Chunk, ChunkEncoder, ChunkHeader, Codec, Error, ErrorKind, Header, ModuleEntry, Reader, Record,
    Records, SymbolFrame,
};
