//! memprof's trace format, and the replay of a trace.
//!
//! A trace is what memprof's trace mode writes (`MEMPROF_TRACE=path`): every allocation,
//! reallocation and free of the traced program with its time, thread and stack, in compressed
//! chunks, then the symbols of its stacks. `docs/trace-format.md` specifies the format; this
//! crate is its one implementation, shared by the recorder (the `memprof` library, which
//! encodes) and every reader (the `memprof` command and its viewer, which decode and replay).
//!
//! - The codec, by role: the format's records, headers and errors ([`Record`], [`Header`],
//!   [`ChunkHeader`], [`Error`], the [`kind`], [`class`] and [`flags`] numbers); the encoder
//!   ([`ChunkEncoder`], [`Compressor`], [`Header::write_to`]); the streaming decoder
//!   ([`Reader`], [`Chunk`], [`Records`]).
//! - The replay: a [`Trace`] opened once (its definitions read, its event chunks indexed), its
//!   events merged across threads in time order and applied to one live heap ([`Heap`]) by one
//!   loop that tells a [`Visitor`] what each event means ([`Trace::visit`]); replays to a
//!   [`Moment`] ([`Trace::replay`]) and to the peak are visitors of that loop, as are the
//!   command's summary, index, scans, exports and event streams.
//! - [`Follow`]: the same replay of a trace still being written, kept from one update to the
//!   next, each update reading and applying only what was appended.
//! - [`RangeMap`]: disjoint address ranges as the kernel keeps mappings (trimmed, split and
//!   replaced), for the live mappings of the replay ([`Heap::mappings`]) and of the recorder.
//! - [`write_symbolized`]: a trace written again with a new symbol section (through
//!   `memprof-files`, never through a planted link).
//!
//! ```
//! use memprof_trace::{ChunkEncoder, Header, Reader, Record};
//!
//! let mut bytes = Vec::new();
//! Header::new(42, 0, "/bin/app".into()).write_to(&mut bytes)?;
//! let mut chunk = ChunkEncoder::new(1);
//! chunk.alloc(100, 0x1000, 24, 0);
//! chunk.free(150, 0x1000);
//! chunk.finish(None, &mut bytes)?;
//!
//! let mut reader = Reader::new(&bytes[..])?;
//! assert_eq!(reader.header().pid, 42);
//! let chunk = reader.next_chunk()?.expect("one chunk");
//! let records: Vec<Record> = chunk.records().collect::<Result<_, _>>()?;
//! assert_eq!(records.len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod addresses;
mod decode;
mod encode;
mod follow;
mod heap;
mod model;
mod moment;
mod ranges;
mod records;
mod replay;
mod rewrite;
mod visit;

#[cfg(test)]
mod tests;

pub use addresses::{AddressHasher, AddressMap};
pub use decode::{Chunk, Reader, Records};
pub use encode::{ChunkEncoder, Compressor};
pub use follow::{FOLLOW_SLACK_NS, Follow, Followed};
pub use heap::{Block, Heap, LiveBlocks, Mapping, weight};
pub use moment::{Moment, Position};
pub use ranges::RangeMap;
pub use records::{
    CHUNK_HEADER_BYTES, CHUNK_MAGIC, ChunkFlags, ChunkHeader, Codec, Error, ErrorKind,
    FIRST_SIZED_KIND, Header, MAGIC, MAJOR, MAX_CHUNK_BYTES, MAX_HEADER_BYTES, MINOR, MemoryParts,
    ModuleEntry, Record, SymbolFrame, class, flags, kind,
};
pub use replay::{Event, Timed, Trace, TraceError};
pub use rewrite::write_symbolized;
pub use visit::{Accumulated, Visitor};
