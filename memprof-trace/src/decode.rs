//! Reading a trace: its header, then one chunk at a time ([`Reader`]), each chunk's records
//! decoded one at a time ([`Records`]). Decoding streams over any [`Read`]: one chunk at a time,
//! never the whole trace.

use crate::model::{ADDRESSES, HEADS, Model, STACKS, unzigzag};
use crate::records::{
    CHUNK_HEADER_BYTES, CHUNK_MAGIC, ChunkFlags, ChunkHeader, Codec, Error, ErrorKind,
    FIRST_SIZED_KIND, Header, MAGIC, MAJOR, MAX_CHUNK_BYTES, MAX_HEADER_BYTES, ModuleEntry, Record,
    SymbolFrame, class, kind,
};
use std::io::{self, Read};

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
            first_time: self.header.first_time,
            model: Model::new(),
            block: None,
            failed: false,
            next_flags: None,
            flags: None,
        }
    }
}

/// A `BLOCK_FLAGS` record: glibc's flags of the allocations of an `EVENTS` record.
#[derive(Debug)]
struct FlagList {
    /// The value of the allocations not listed.
    common: u8,
    /// The others: their place among the allocations, and their value.
    exceptions: Vec<(u64, u8)>,
    /// The next exception to meet.
    next: usize,
    /// Allocations met so far.
    seen: u64,
}

impl FlagList {
    /// Decodes a record's body.
    fn decode(body: &mut Cursor<'_>) -> Result<FlagList, Error> {
        let code = |body: &mut Cursor<'_>| -> Result<u8, Error> {
            let value = body.varint()?;
            // Values past 4 are unknown too (a later version's).
            Ok(value.min(4) as u8)
        };
        let common = code(body)?;
        // Each exception takes at least two bytes.
        let count = body.count(2)?;
        let mut exceptions = Vec::with_capacity(count);
        let mut at = 0u64;
        for i in 0..count {
            let skip = body.varint()?;
            at = at
                .checked_add(skip)
                .and_then(|a| a.checked_add(u64::from(i > 0)))
                .ok_or_else(|| body.error("block flags past 2^64 allocations"))?;
            exceptions.push((at, code(body)?));
        }
        Ok(FlagList {
            common,
            exceptions,
            next: 0,
            seen: 0,
        })
    }
}

/// A chunk's records, decoded one at a time.
#[derive(Debug)]
pub struct Records<'a> {
    chunk: u64,
    cursor: Cursor<'a>,
    time: u64,
    /// The chunk's `first_time`, which mapping records' times count from.
    first_time: u64,
    model: Model,
    /// The `EVENTS` record being read: events left, and its columns.
    block: Option<(u64, [Cursor<'a>; 4])>,
    failed: bool,
    /// A `BLOCK_FLAGS` record read, for the next `EVENTS` record.
    next_flags: Option<FlagList>,
    /// The flags of the `EVENTS` record being read, when it had them.
    flags: Option<FlagList>,
}

/// `time` moved on by `dt`.
#[inline]
fn after(time: &mut u64, dt: u64, column: &Cursor<'_>) -> Result<u64, Error> {
    *time = time
        .checked_add(dt)
        .ok_or_else(|| column.error("time past 2^64 ns"))?;
    Ok(*time)
}

impl<'a> Records<'a> {
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

    /// A mapping record's time: its delta from the chunk's `first_time`.
    fn mapping_time(&self, body: &mut Cursor<'_>) -> Result<u64, Error> {
        self.first_time
            .checked_add(body.varint()?)
            .ok_or_else(|| body.error("time past 2^64 ns"))
    }

    /// glibc's flags of the next allocation of the `EVENTS` record being read (`flags`).
    fn next_flags(flags: &mut Option<FlagList>) -> Option<ChunkFlags> {
        let list = flags.as_mut()?;
        let at = list.seen;
        list.seen += 1;
        let code = match list.exceptions.get(list.next) {
            Some(&(place, code)) if place == at => {
                list.next += 1;
                code
            }
            _ => list.common,
        };
        ChunkFlags::from_code(u64::from(code))
    }

    /// The next event of the `EVENTS` record being read, whose columns are `columns`.
    #[inline]
    fn event(
        columns: &mut [Cursor<'a>; 4],
        time: &mut u64,
        model: &mut Model,
        flags: &mut Option<FlagList>,
    ) -> Result<Record, Error> {
        let [heads, addresses, stacks, sizes] = columns;
        let head = heads.varint()?;
        let at = after(time, head >> 2, heads)?;
        let record = match head & 3 {
            class::ALLOC => {
                let address = Self::address(model, addresses)?;
                let (stack, size) = Self::stack_and_size(model, stacks, sizes)?;
                Record::Alloc {
                    time: at,
                    address,
                    size,
                    stack,
                    flags: Self::next_flags(flags),
                }
            }
            class::FREE => Record::Free {
                time: at,
                address: Self::address(model, addresses)?,
            },
            class::REALLOC => {
                let later = heads.varint()?;
                let old_address = Self::address(model, addresses)?;
                let address = Self::address(model, addresses)?;
                let (stack, size) = Self::stack_and_size(model, stacks, sizes)?;
                let new_time = after(time, later, heads)?;
                Record::Realloc {
                    time: at,
                    new_time,
                    old_address,
                    address,
                    size,
                    stack,
                    flags: Self::next_flags(flags),
                }
            }
            _ => {
                let label = heads.varint()?;
                Record::Mark {
                    time: at,
                    label: u32::try_from(label).map_err(|_| heads.error("label id above 2^32"))?,
                }
            }
        };
        Ok(record)
    }

    /// The next event of the `EVENTS` record being read, when it has any left: what
    /// [`Iterator::next`] gives then, without the general path's framing.
    #[inline]
    pub(crate) fn next_event(&mut self) -> Option<Result<Record, Error>> {
        if self.failed {
            return None;
        }
        let (left, columns) = self.block.as_mut()?;
        if *left == 0 {
            return None;
        }
        *left -= 1;
        match Self::event(columns, &mut self.time, &mut self.model, &mut self.flags) {
            Ok(record) => Some(Ok(record)),
            Err(mut error) => {
                self.block = None;
                self.failed = true;
                error.offset = self.chunk;
                Some(Err(error))
            }
        }
    }

    /// The next record; a `BLOCK_FLAGS` record is kept for the events it describes.
    fn record(&mut self) -> Result<Option<Record>, Error> {
        loop {
            match self.read()? {
                Some(Record::Unknown {
                    kind: kind::BLOCK_FLAGS,
                }) => {}
                other => return Ok(other),
            }
        }
    }

    /// The next record, a `BLOCK_FLAGS` one as `Record::Unknown`.
    fn read(&mut self) -> Result<Option<Record>, Error> {
        if let Some((left, columns)) = &mut self.block {
            if *left > 0 {
                *left -= 1;
                let record = Self::event(columns, &mut self.time, &mut self.model, &mut self.flags);
                if record.is_err() {
                    self.block = None;
                }
                return record.map(Some);
            }
            if let Some(column) = columns.iter().find(|c| !c.is_empty()) {
                let error = column.error("bytes left in a column after the events");
                self.block = None;
                return Err(error);
            }
            self.block = None;
            self.flags = None;
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
                self.flags = self.next_flags.take();
                self.record()
            }
            kind if kind >= FIRST_SIZED_KIND => {
                let len = self.cursor.varint()?;
                let body = self.cursor.take(len)?;
                let base = self.cursor.position() - body.len() as u64;
                let mut body = Cursor::at(body, base);
                let record = match kind {
                    kind::BLOCK_FLAGS => {
                        // Read with the events it describes, not returned on its own.
                        self.next_flags = Some(FlagList::decode(&mut body)?);
                        return Ok(Some(Record::Unknown { kind }));
                    }
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
                    kind::CALLEE => {
                        let address = body.varint()?;
                        let start = body.varint()?;
                        let end = start.saturating_add(body.varint()?);
                        let frame = SymbolFrame {
                            function: body.opt_string()?,
                            file: body.opt_string()?,
                            line: body.u32()?,
                            column: body.u32()?,
                        };
                        Record::Callee {
                            address,
                            start,
                            end,
                            frame,
                        }
                    }
                    kind::LABEL_SET => {
                        let id = body.u32()?;
                        // Each pair takes at least two bytes (two empty strings).
                        let count = body.count(2)?;
                        let mut pairs = Vec::with_capacity(count);
                        for _ in 0..count {
                            pairs.push((body.string()?, body.string()?));
                        }
                        Record::LabelSet { id, pairs }
                    }
                    kind::STACK_LABELS => Record::StackLabels {
                        stack: body.u32()?,
                        labels: body.u32()?,
                    },
                    kind::MMAP => Record::Mmap {
                        time: self.mapping_time(&mut body)?,
                        address: body.varint()?,
                        length: body.varint()?,
                        stack: body.u32()?,
                        prot: body.u32()?,
                        flags: body.u32()?,
                    },
                    kind::MUNMAP => Record::Munmap {
                        time: self.mapping_time(&mut body)?,
                        address: body.varint()?,
                        length: body.varint()?,
                    },
                    kind::END => Record::End {
                        events: body.varint()?,
                        lost: body.varint()?,
                    },
                    kind::WRITTEN => Record::Written {
                        time: body.varint()?,
                    },
                    kind::MEMORY => {
                        let resident = body.varint()?;
                        let heap_requested = body.varint()?;
                        // 0 for none, else the value plus 1.
                        let heap_rounding = body.varint()?.checked_sub(1);
                        let allocator_free = body.varint()?.checked_sub(1);
                        Record::Memory(crate::records::MemoryParts {
                            resident,
                            heap_requested,
                            heap_rounding,
                            allocator_free,
                            memprof_own: body.varint()?,
                            stacks: body.varint()?,
                            code_and_files: body.varint()?,
                            other_mappings: body.varint()?,
                            allocator_resident: body.varint()?,
                        })
                    }
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
