//! What a trace holds and what it costs on disk: events, stacks, chunks and bytes per event, by
//! part (events, definitions, symbols). Reads the trace one chunk at a time.
//!
//! ```text
//! MEMPROF_TRACE=/tmp/churn.mptrace cargo run --release --features trace --example workload -- churn 2000000
//! cargo run --release --features trace --example trace_size -- /tmp/churn.mptrace
//! ```

use memprof_trace::{Reader, Record, flags, kind};
use std::collections::HashSet;

fn main() {
    let path = std::env::args().nth(1).expect("usage: trace_size TRACE");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let size = file.metadata().unwrap().len();
    let mut reader =
        Reader::new(std::io::BufReader::new(file)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (mut events, mut chunks, mut event_bytes, mut def_bytes, mut symbol_bytes) =
        (0u64, 0, 0u64, 0u64, 0u64);
    let (mut raw_event_bytes, mut stacks, mut used) = (0u64, 0u64, HashSet::new());
    let mut threads = HashSet::new();
    // glibc's chunk flags (`BLOCK_FLAGS` records): how many, their bytes before compression, and
    // the allocations whose flags are known.
    let (mut flag_records, mut flag_bytes, mut flagged, mut allocations) = (0u64, 0u64, 0u64, 0u64);
    let mut ended = false;
    loop {
        let chunk = match reader.next_chunk() {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(error) => {
                eprintln!("{path}: {error}");
                break;
            }
        };
        chunks += 1;
        let stored = u64::from(chunk.header.stored_len) + 44;
        let f = chunk.header.flags;
        if f & flags::EVENTS != 0 {
            event_bytes += stored;
            raw_event_bytes += u64::from(chunk.header.raw_len);
            threads.insert(chunk.header.thread);
        } else if f & flags::SYMBOLS != 0 {
            symbol_bytes += stored;
        } else {
            def_bytes += stored;
        }
        events += u64::from(chunk.header.events);
        let (records, bytes) = block_flags_bytes(&chunk.payload);
        flag_records += records;
        flag_bytes += bytes;
        for record in chunk.records() {
            match record {
                Ok(Record::Stack { .. }) => stacks += 1,
                Ok(Record::Alloc { stack, flags, .. } | Record::Realloc { stack, flags, .. }) => {
                    used.insert(stack);
                    allocations += 1;
                    flagged += u64::from(flags.is_some());
                }
                Ok(Record::End { .. }) => ended = true,
                Ok(_) => {}
                Err(error) => {
                    eprintln!("{path}: {error}");
                    break;
                }
            }
        }
    }
    let per = |bytes: u64| bytes as f64 / events.max(1) as f64;
    println!(
        "{path}: {size} bytes, {chunks} chunks, {} threads, closed: {ended}",
        threads.len()
    );
    println!(
        "events: {events}; stacks defined: {stacks} ({} used by allocations)",
        used.len()
    );
    println!(
        "bytes per event: {:.2} in all; events {:.2} (uncompressed {:.2}), definitions {:.3}, symbols {:.3}",
        per(size),
        per(event_bytes),
        per(raw_event_bytes),
        per(def_bytes),
        per(symbol_bytes)
    );
    println!(
        "chunk flags: {flagged} of {allocations} allocations; {flag_records} BLOCK_FLAGS records, \
         {flag_bytes} bytes before compression ({:.4}% of the events')",
        100.0 * flag_bytes as f64 / raw_event_bytes.max(1) as f64
    );
}

/// The `BLOCK_FLAGS` records of a decoded payload, and their bytes: every record kind of this
/// major version is sized (a kind, a varint length, the body).
fn block_flags_bytes(payload: &[u8]) -> (u64, u64) {
    let (mut records, mut bytes, mut at) = (0, 0, 0);
    while at < payload.len() {
        let start = at;
        let record = payload[at];
        at += 1;
        let (mut len, mut shift) = (0u64, 0);
        while let Some(&byte) = payload.get(at) {
            at += 1;
            len |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte < 0x80 || shift >= 64 {
                break;
            }
        }
        at = at.saturating_add(len as usize);
        if record == kind::BLOCK_FLAGS {
            records += 1;
            bytes += (at.min(payload.len()) - start) as u64;
        }
    }
    (records, bytes)
}
