//! A trace written again with a new symbol section (what `memprof symbolize` produces): every
//! complete chunk copied as it is, but those that hold only symbols.

use crate::decode::Reader;
use crate::encode::{ChunkEncoder, Compressor};
use crate::records::{Error, ErrorKind, SymbolFrame, flags};
use crate::replay::{Trace, TraceError};
use memprof_files::Replacement;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Writes `trace` to `out` with `symbols` as its symbol section: every complete chunk of the
/// file as it is, but the chunks that hold only symbols, then the new symbol chunks, then the
/// `END` chunk if the trace has one. A trace cut short stays without `END`, and loses the
/// incomplete chunk at its end. `out` may be the trace's own path: the file is written under a
/// new temporary name beside it and renamed over it ([`Replacement`]); what is at `out` must be
/// a regular file or a symbolic link (replaced, not followed), else nothing is written.
pub fn write_symbolized(
    trace: &Trace,
    symbols: &[(u64, Vec<SymbolFrame>)],
    out: &Path,
) -> Result<(), TraceError> {
    let path = trace.path();
    let fail = |offset: u64, e: io::Error| TraceError {
        path: path.to_path_buf(),
        error: Error {
            offset,
            record_offset: None,
            kind: ErrorKind::Io(e),
        },
    };
    let mut replacement = Replacement::create(out).map_err(|e| TraceError {
        path: out.to_path_buf(),
        error: Error {
            offset: 0,
            record_offset: None,
            kind: ErrorKind::Io(e),
        },
    })?;
    let written = (|| -> Result<(), TraceError> {
        let mut reader = Reader::new(BufReader::new(File::open(path).map_err(|e| fail(0, e))?))
            .map_err(|error| TraceError {
                path: path.to_path_buf(),
                error,
            })?;
        let mut copy = File::open(path).map_err(|e| fail(0, e))?;
        let mut sink = BufWriter::new(replacement.file().try_clone().map_err(|e| fail(0, e))?);
        let put = |sink: &mut BufWriter<File>, e: io::Result<()>| {
            e.map_err(|e| TraceError {
                path: out.to_path_buf(),
                error: Error {
                    offset: sink.get_ref().stream_position().unwrap_or(0),
                    record_offset: None,
                    kind: ErrorKind::Io(e),
                },
            })
        };
        let header_len = reader.offset();
        let result = io::copy(&mut (&mut copy).take(header_len), &mut sink).map(|_| ());
        put(&mut sink, result)?;
        let mut end_chunk = None;
        loop {
            let (offset, chunk) = match reader.next_chunk_header() {
                Ok(Some(found)) => found,
                Ok(None) => break,
                Err(error) if matches!(error.kind, ErrorKind::Truncated) => break,
                Err(error) => {
                    return Err(TraceError {
                        path: path.to_path_buf(),
                        error,
                    });
                }
            };
            match reader.skip_payload() {
                Ok(()) => {}
                Err(error) if matches!(error.kind, ErrorKind::Truncated) => break,
                Err(error) => {
                    return Err(TraceError {
                        path: path.to_path_buf(),
                        error,
                    });
                }
            }
            let len = reader.offset() - offset;
            if chunk.events == 0 && chunk.flags & !flags::SYMBOLS == 0 {
                continue;
            }
            if chunk.events == 0 && chunk.flags == flags::END {
                end_chunk = Some((offset, len));
                continue;
            }
            let result = copy
                .seek(SeekFrom::Start(offset))
                .and_then(|_| io::copy(&mut (&mut copy).take(len), &mut sink))
                .map(|_| ());
            put(&mut sink, result)?;
        }
        let mut compressor = Compressor::new(3).map_err(|e| fail(0, e))?;
        let mut encoder = ChunkEncoder::new(0);
        let mut bytes = Vec::new();
        // The trace's own records of the direct calls' callees (nothing recomputes them from the
        // binaries) go with the new symbols, in the chunks that replace the old ones.
        let mut callees: Vec<_> = trace.callees().iter().collect();
        callees.sort_unstable_by_key(|(address, _)| **address);
        for i in 0..symbols.len() + callees.len() {
            match symbols.get(i) {
                Some((address, frames)) => encoder.symbol(*address, frames),
                None => {
                    let (address, (start, end, frame)) = callees[i - symbols.len()];
                    encoder.callee(*address, *start, *end, frame);
                }
            }
            if encoder.len() >= 1 << 20 {
                bytes.clear();
                let result = encoder
                    .finish(Some(&mut compressor), &mut bytes)
                    .and_then(|()| sink.write_all(&bytes));
                put(&mut sink, result)?;
                encoder.reset(0);
            }
        }
        if !encoder.is_empty() {
            bytes.clear();
            let result = encoder
                .finish(Some(&mut compressor), &mut bytes)
                .and_then(|()| sink.write_all(&bytes));
            put(&mut sink, result)?;
        }
        if let Some((offset, len)) = end_chunk {
            let result = copy
                .seek(SeekFrom::Start(offset))
                .and_then(|_| io::copy(&mut (&mut copy).take(len), &mut sink))
                .map(|_| ());
            put(&mut sink, result)?;
        }
        let result = sink.flush();
        put(&mut sink, result)?;
        let result = sink.get_ref().sync_all();
        put(&mut sink, result)
    })();
    written?;
    replacement.commit().map(drop).map_err(|e| TraceError {
        path: out.to_path_buf(),
        error: Error {
            offset: 0,
            record_offset: None,
            kind: ErrorKind::Io(e),
        },
    })
}
