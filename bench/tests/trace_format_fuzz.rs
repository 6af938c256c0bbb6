//! The trace decoder on random and damaged input: it never panics, never allocates more than the
//! format's limits allow, and always ends, whatever the bytes.

#![cfg(feature = "trace")]

use memprof::trace::{
    ChunkEncoder, ChunkHeader, Codec, Compressor, Header, ModuleEntry, Reader, SymbolFrame,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The largest single allocation made while decoding.
static LARGEST: AtomicUsize = AtomicUsize::new(0);

struct Counting;

// SAFETY: forwards every call to `System` unchanged; only notes the largest size asked for.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: as for `dealloc`, with the caller's new size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Most any decode may allocate at once: a chunk's decoded payload (16 MiB) and slack.
const LIMIT: usize = (16 << 20) + (1 << 20);

/// A small valid trace with every kind of record, stored and compressed.
fn sample_trace() -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(7, 1, "/bin/app".into())
        .write_to(&mut out)
        .unwrap();
    let mut defs = ChunkEncoder::new(0);
    defs.modules(&[ModuleEntry {
        path: "/bin/app".into(),
        bias: 0x5555_0000_0000,
        build_id: vec![0xab; 20],
        text: vec![(0x5555_0000_1000, 0x5555_0001_0000)],
    }]);
    defs.stack(0, [0x5555_0000_1234u64, 0x5555_0000_2000].into_iter());
    defs.thread(1, 99, "main");
    defs.label(0, "start");
    defs.finish(None, &mut out).unwrap();
    let mut events = ChunkEncoder::new(1);
    for i in 0..200u64 {
        events.alloc(i * 50, 0x7f00_0000_0000 + i * 48, 32 + i % 7, 0);
        if i % 3 == 0 {
            events.free(i * 50 + 20, 0x7f00_0000_0000 + i * 48);
        }
    }
    events.realloc(20_000, 20_100, 0x7f00_0000_0030, 0x7f00_0000_9000, 4096, 0);
    events.mark(20_200, 0);
    events
        .finish(Some(&mut Compressor::new(1).unwrap()), &mut out)
        .unwrap();
    let mut symbols = ChunkEncoder::new(0);
    symbols.symbol(
        0x5555_0000_1234,
        &[SymbolFrame {
            function: Some("app::main".into()),
            file: Some("src/main.rs".into()),
            line: 3,
            column: 5,
        }],
    );
    symbols.end(402, 0);
    symbols
        .finish(Some(&mut Compressor::new(3).unwrap()), &mut out)
        .unwrap();
    out
}

/// Decodes everything it can; returns the records read.
fn decode(bytes: &[u8]) -> usize {
    let mut records = 0;
    let Ok(mut reader) = Reader::new(bytes) else {
        return 0;
    };
    // Each step consumes at least a chunk header's bytes, so this ends.
    while let Ok(Some(chunk)) = reader.next_chunk() {
        for record in chunk.records() {
            if record.is_err() {
                break;
            }
            records += 1;
        }
    }
    records
}

/// Decodes `payload` as the records of a chunk, as if its checksum had held.
fn decode_payload(payload: Vec<u8>) -> usize {
    let chunk = memprof::trace::Chunk {
        offset: 0,
        header: ChunkHeader {
            codec: Codec::Stored,
            flags: 1,
            thread: 1,
            events: 0,
            stored_len: payload.len() as u32,
            raw_len: payload.len() as u32,
            first_time: 0,
            last_time: 0,
            crc: 0,
            header_len: 44,
        },
        payload,
    };
    chunk.records().take_while(Result::is_ok).count()
}

#[test]
fn decoder_survives_any_bytes() {
    let valid = sample_trace();
    assert_eq!(decode(&valid), 4 + 200 + 67 + 2 + 2);
    let cases = std::env::var("MEMPROF_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3000);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let len = valid.len();
    // Random bytes, behind a valid magic half the time so the header parser is reached.
    runner
        .run(
            &(any::<bool>(), prop::collection::vec(any::<u8>(), 0..600)),
            |(magic, mut bytes)| {
                if magic {
                    bytes.splice(0..0, valid[..16].iter().copied());
                }
                decode(&bytes);
                decode_payload(bytes);
                prop_assert!(LARGEST.load(Ordering::Relaxed) <= LIMIT);
                Ok(())
            },
        )
        .unwrap();
    // The valid trace with bytes changed, cut, or spliced in; and its first chunk's payload with
    // bytes changed (past the checksum, to reach the record decoder).
    let first_payload = {
        let mut reader = Reader::new(&valid[..]).unwrap();
        let _ = reader.next_chunk().unwrap();
        reader.next_chunk().unwrap().unwrap().payload
    };
    runner
        .run(
            &(
                prop::collection::vec((0..len, any::<u8>()), 1..8),
                0..=len,
                prop::collection::vec(any::<u8>(), 0..16),
            ),
            |(changes, cut, insert)| {
                let mut bytes = valid.clone();
                let mut payload = first_payload.clone();
                for &(at, byte) in &changes {
                    bytes[at] = byte;
                    let n = payload.len();
                    payload[at % n] = byte;
                }
                decode(&bytes);
                decode_payload(payload);
                bytes.truncate(cut);
                decode(&bytes);
                bytes.splice(cut / 2..cut / 2, insert);
                decode(&bytes);
                prop_assert!(LARGEST.load(Ordering::Relaxed) <= LIMIT);
                Ok(())
            },
        )
        .unwrap();
}
