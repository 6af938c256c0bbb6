//! Writing a trace: the file header, and chunks built record by record ([`ChunkEncoder`]),
//! compressed by a [`Compressor`] kept from chunk to chunk.

use crate::model::{ADDRESS, ADDRESSES, HEADS, Model, SIZE, STACK, STACKS, zigzag};
use crate::records::{
    CHUNK_HEADER_BYTES, ChunkFlags, ChunkHeader, Codec, Header, MAGIC, MAJOR, MAX_CHUNK_BYTES,
    MINOR, ModuleEntry, SymbolFrame, class, flags, kind,
};
use std::fmt;
use std::io::{self, Write};

// Encoding.

/// Appends `value` as a LEB128 varint: 7 bits a byte, low bits first, the high bit set on every
/// byte but the last.
#[inline(always)]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Bytes of `value` as a varint.
pub(crate) fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
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

impl Header {
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

/// Builds one chunk: records are appended to a payload, then [`ChunkEncoder::finish`] compresses
/// it and prefixes the header. Times are deltas from the previous event of the chunk, and
/// addresses, stacks and sizes refer to the chunk's earlier events (`docs/trace-format.md`), so
/// each chunk decodes on its own.
#[derive(Clone, Debug)]
pub struct ChunkEncoder {
    /// The payload so far.
    payload: Vec<u8>,
    /// Scratch for a sized record's body.
    pub(crate) body: Vec<u8>,
    flags: u8,
    thread: u32,
    events: u32,
    first_time: Option<u64>,
    /// The time of the last event of `EVENTS` records: what the next one's `dt` counts from.
    last_time: u64,
    /// The time of the last event of any kind (mappings too): no later event goes below it.
    latest: u64,
    model: Model,
    /// How many of the model's recent addresses fall in each slot.
    address_seen: AddressSeen,
    /// The events not yet put in an `EVENTS` record: their count and their four columns (heads,
    /// addresses, stacks, sizes).
    pending: u64,
    columns: [Vec<u8>; 4],
    /// Allocations of the pending events whose flags [`ChunkEncoder::chunk_flags`] gave: the
    /// `BLOCK_FLAGS` record before their `EVENTS`.
    flags_given: u64,
    /// The first one's value ([`ChunkFlags::code`]): all of them have it while `block_flags` is
    /// empty, the common case, which costs a comparison per allocation.
    flags_first: u8,
    /// Every one's value, in order, once one differed from the first.
    block_flags: Vec<u8>,
}

/// How many of the recent addresses ([`Model`]) fall in each of 256 slots, by a hash of the
/// address: an address whose slot counts none is not among them. The encoder's alone: it saves
/// the search of the 32 places for most new addresses, and the format does not depend on it.
#[derive(Clone, Debug)]
struct AddressSeen([u8; 256]);

impl AddressSeen {
    /// The counts of a new chunk's model, whose recent addresses are all 0.
    fn new() -> AddressSeen {
        let mut counts = [0; 256];
        counts[AddressSeen::slot(0)] = ADDRESSES as u8;
        AddressSeen(counts)
    }

    /// The slot of `address`: blocks are 16-aligned, so bits 4 and up.
    #[inline(always)]
    fn slot(address: u64) -> usize {
        ((address >> 4) ^ (address >> 12)) as u8 as usize
    }
}

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
            latest: 0,
            model: Model::new(),
            address_seen: AddressSeen::new(),
            pending: 0,
            columns: Default::default(),
            flags_given: 0,
            flags_first: 0,
            block_flags: Vec::new(),
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
        self.latest = 0;
        self.model.reset();
        self.address_seen = AddressSeen::new();
        self.pending = 0;
        for column in &mut self.columns {
            column.clear();
        }
        self.flags_given = 0;
        self.block_flags.clear();
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
    #[inline(always)]
    fn time_delta(&mut self, time: u64) -> u64 {
        let base = *self.first_time.get_or_insert(time);
        let previous = self.last_time.max(base);
        let time = time.max(previous).max(self.latest);
        self.last_time = time;
        self.latest = time;
        self.events += 1;
        self.flags |= flags::EVENTS;
        time - previous
    }

    /// An event's head: its class and time delta (below 2^62 ns, 146 years).
    #[inline(always)]
    fn head(&mut self, class: u64, time: u64) {
        let dt = self.time_delta(time).min((1 << 62) - 1);
        self.pending += 1;
        put_varint(&mut self.columns[HEADS], dt << 2 | class);
    }

    #[inline(always)]
    fn put_address(&mut self, address: u64) {
        let list = &mut self.model.addresses;
        let out = &mut self.columns[ADDRESS];
        let seen = &mut self.address_seen;
        let slot = AddressSeen::slot(address);
        // Most allocations are of addresses not among the recent ones: the count of their slot,
        // most often 0, says so without a search.
        let found = if seen.0[slot] == 0 {
            None
        } else {
            list.iter().position(|&a| a == address)
        };
        debug_assert!(found.is_some() || !list.contains(&address));
        match found {
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
                seen.0[AddressSeen::slot(list[ADDRESSES - 1])] -= 1;
                seen.0[slot] += 1;
                Model::front(list, ADDRESSES - 1, address);
            }
        }
    }

    #[inline(always)]
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
    #[inline(always)]
    pub fn alloc(&mut self, time: u64, address: u64, size: u64, stack: u32) {
        self.head(class::ALLOC, time);
        self.put_address(address);
        self.put_stack_and_size(stack, size);
    }

    /// A free.
    #[inline(always)]
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
        self.latest = new_time;
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

    /// The time of a mapping event, as its record stores it: from the chunk's `first_time`, never
    /// below the chunk's last event. Mapping records leave the `EVENTS` records' chain of time
    /// deltas alone, so a reader that skips them (version 1.0) still reads the other times right.
    fn mapping_time(&mut self, time: u64) -> u64 {
        let base = *self.first_time.get_or_insert(time);
        let time = time.max(base).max(self.last_time).max(self.latest);
        self.latest = time;
        self.flags |= flags::EVENTS;
        time - base
    }

    /// A mapping made at `time` (an `MMAP` record).
    pub fn mmap(
        &mut self,
        time: u64,
        address: u64,
        length: u64,
        stack: u32,
        prot: u32,
        map_flags: u32,
    ) {
        self.body.clear();
        let dt = self.mapping_time(time);
        put_varint(&mut self.body, dt);
        put_varint(&mut self.body, address);
        put_varint(&mut self.body, length);
        put_varint(&mut self.body, u64::from(stack));
        put_varint(&mut self.body, u64::from(prot));
        put_varint(&mut self.body, u64::from(map_flags));
        self.sized(kind::MMAP, flags::EVENTS);
    }

    /// Pages of a recorded mapping unmapped at `time` (an `MUNMAP` record).
    pub fn munmap(&mut self, time: u64, address: u64, length: u64) {
        self.body.clear();
        let dt = self.mapping_time(time);
        put_varint(&mut self.body, dt);
        put_varint(&mut self.body, address);
        put_varint(&mut self.body, length);
        self.sized(kind::MUNMAP, flags::EVENTS);
    }

    /// glibc's flags of the allocation (or reallocation) just added. Called after every
    /// allocation of a chunk, or never (a trace without the flags): when any is known, a
    /// `BLOCK_FLAGS` record goes before the `EVENTS` record of the allocations.
    #[inline]
    pub fn chunk_flags(&mut self, flags: Option<ChunkFlags>) {
        let code = ChunkFlags::code(flags);
        if self.block_flags.is_empty() {
            if self.flags_given == 0 {
                self.flags_first = code;
            }
            if code == self.flags_first {
                self.flags_given += 1;
                return;
            }
            self.block_flags
                .resize(self.flags_given as usize, self.flags_first);
        }
        self.block_flags.push(code);
        self.flags_given += 1;
    }

    /// The `BLOCK_FLAGS` record of the pending allocations, when any of their flags is known:
    /// the most common value, then the allocations of another, each by the allocations skipped
    /// since the previous one.
    fn put_block_flags(&mut self) {
        let unknown = ChunkFlags::code(None);
        let given = std::mem::take(&mut self.flags_given);
        // Not `self.body`: a sized record's body waits there while the events before it are put.
        let mut body = Vec::with_capacity(16);
        if self.block_flags.is_empty() {
            // All alike.
            if self.flags_first == unknown {
                return;
            }
            put_varint(&mut body, u64::from(self.flags_first));
            put_varint(&mut body, 0);
            self.put_block_flags_record(&body);
            return;
        }
        debug_assert_eq!(given, self.block_flags.len() as u64);
        let mut counts = [0usize; 5];
        for &code in &self.block_flags {
            counts[usize::from(code.min(unknown))] += 1;
        }
        let common = (0..counts.len())
            .max_by_key(|&c| (counts[c], usize::MAX - c))
            .unwrap_or(0) as u8;
        put_varint(&mut body, u64::from(common));
        put_varint(
            &mut body,
            (self.block_flags.len() - counts[usize::from(common)]) as u64,
        );
        let mut skipped = 0u64;
        for &code in &self.block_flags {
            if code == common {
                skipped += 1;
            } else {
                put_varint(&mut body, skipped);
                put_varint(&mut body, u64::from(code));
                skipped = 0;
            }
        }
        self.block_flags.clear();
        self.put_block_flags_record(&body);
    }

    /// Appends a `BLOCK_FLAGS` record of `body`.
    fn put_block_flags_record(&mut self, body: &[u8]) {
        self.payload.push(kind::BLOCK_FLAGS);
        put_varint(&mut self.payload, body.len() as u64);
        self.payload.extend_from_slice(body);
    }

    /// Puts the events added since the last `EVENTS` record into one.
    fn flush_events(&mut self) {
        if self.pending == 0 {
            return;
        }
        if self.flags_given != 0 {
            self.put_block_flags();
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
    pub(crate) fn sized(&mut self, kind: u8, flag: u8) {
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

    /// A label set's pairs (a `LABEL_SET` record), before the first `STACK_LABELS` that names it.
    pub fn label_set(&mut self, id: u32, pairs: &[(String, String)]) {
        self.body.clear();
        put_varint(&mut self.body, u64::from(id));
        put_varint(&mut self.body, pairs.len() as u64);
        for (key, value) in pairs {
            put_bytes(&mut self.body, key.as_bytes());
            put_bytes(&mut self.body, value.as_bytes());
        }
        self.sized(kind::LABEL_SET, flags::DEFINITIONS);
    }

    /// The label set of a stack (a `STACK_LABELS` record), after the stack's `STACK` record.
    pub fn stack_labels(&mut self, stack: u32, labels: u32) {
        self.body.clear();
        put_varint(&mut self.body, u64::from(stack));
        put_varint(&mut self.body, u64::from(labels));
        self.sized(kind::STACK_LABELS, flags::DEFINITIONS);
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

    /// The function the direct call before return address `address` went to: its code
    /// `start..end` and its frame (`CALLEE`, version 1.4).
    pub fn callee(&mut self, address: u64, start: u64, end: u64, frame: &SymbolFrame) {
        self.body.clear();
        put_varint(&mut self.body, address);
        put_varint(&mut self.body, start);
        put_varint(&mut self.body, end.saturating_sub(start));
        put_opt_str(&mut self.body, frame.function.as_deref());
        put_opt_str(&mut self.body, frame.file.as_deref());
        put_varint(&mut self.body, u64::from(frame.line));
        put_varint(&mut self.body, u64::from(frame.column));
        self.sized(kind::CALLEE, flags::SYMBOLS);
    }

    /// The process's memory by what holds it (`MEMORY`), written with the end record.
    pub fn memory(&mut self, parts: &crate::records::MemoryParts) {
        self.body.clear();
        let optional = |v: Option<u64>| v.map_or(0, |v| v.saturating_add(1));
        for value in [
            parts.resident,
            parts.heap_requested,
            optional(parts.heap_rounding),
            optional(parts.allocator_free),
            parts.memprof_own,
            parts.stacks,
            parts.code_and_files,
            parts.other_mappings,
            parts.allocator_resident,
        ] {
            put_varint(&mut self.body, value);
        }
        self.sized(kind::MEMORY, flags::END);
    }

    /// That every thread's events up to `time` are in the chunks written before this one
    /// (`WRITTEN`, version 1.5), in a chunk of definitions.
    pub fn written(&mut self, time: u64) {
        self.body.clear();
        put_varint(&mut self.body, time);
        self.sized(kind::WRITTEN, flags::DEFINITIONS);
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
            last_time: self
                .last_time
                .max(self.latest)
                .max(self.first_time.unwrap_or(0)),
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
