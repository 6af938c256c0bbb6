//! The codec's round trips, refusals and error offsets.

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
                    stack: 3,
                    flags: None
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
                    stack: 3,
                    flags: None
                },
                Record::Mark {
                    time: 300,
                    label: 0
                },
                Record::Alloc {
                    time: 300,
                    address: 0x10,
                    size: u64::MAX,
                    stack: u32::MAX,
                    flags: None
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
    // A 1.0 file (without mapping records) reads as it did.
    bytes[10] = 0;
    assert_eq!(Reader::new(&bytes[..]).unwrap().header().minor, 0);
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

/// Addresses from a pool larger than the recent ones, many sharing a slot of the encoder's count
/// of them: each is found among the recent ones when it is there (the encoder checks that in
/// debug builds) and decodes as it was.
#[test]
fn addresses_in_and_out_of_the_recent_ones_round_trip() {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut addresses = Vec::new();
    let mut chunk = ChunkEncoder::new(1);
    for i in 0..20_000u64 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // 80 addresses, 16 of them in the same slot as 0 and as each other.
        let n = seed % 80;
        let address = if n < 16 {
            n << 20
        } else {
            0x5000_0000 + n * 48
        };
        addresses.push(address);
        if seed >> 40 & 1 == 0 {
            chunk.free(i, address);
        } else {
            chunk.alloc(i, address, 32, 1);
        }
    }
    let chunk = decode(&trace(&[chunk], Some(1))).unwrap().1.remove(0).1;
    let decoded: Vec<u64> = chunk
        .iter()
        .filter_map(|r| match r {
            Record::Free { address, .. } | Record::Alloc { address, .. } => Some(*address),
            _ => None,
        })
        .collect();
    assert_eq!(decoded, addresses);
}

/// Mapping records (version 1.1) keep their own times, and leave the `EVENTS` records' chain of
/// time deltas as a 1.0 reader, which skips them, reads it.
#[test]
fn mapping_records_round_trip_and_leave_event_times_alone() {
    let mut events = ChunkEncoder::new(1);
    events.mmap(90, 0x7f00_0000_0000, 3 * 4096, 3, 3, 0x22);
    events.alloc(100, 0x10, 24, 3);
    events.munmap(120, 0x7f00_0000_1000, 4096);
    events.free(150, 0x10);
    let (header, chunks) = decode(&trace(&[events], Some(3))).unwrap();
    assert_eq!(header.minor, MINOR);
    assert_eq!(MINOR, 5);
    let (chunk, records) = &chunks[0];
    assert_eq!(
        (chunk.first_time, chunk.last_time, chunk.events),
        (90, 150, 2)
    );
    assert_eq!(
        records,
        &[
            Record::Mmap {
                time: 90,
                address: 0x7f00_0000_0000,
                length: 3 * 4096,
                stack: 3,
                prot: 3,
                flags: 0x22,
            },
            Record::Alloc {
                time: 100,
                address: 0x10,
                size: 24,
                stack: 3,
                flags: None
            },
            Record::Munmap {
                time: 120,
                address: 0x7f00_0000_1000,
                length: 4096
            },
            Record::Free {
                time: 150,
                address: 0x10
            },
        ]
    );
    // The sized kinds are past FIRST_SIZED_KIND: a 1.0 reader skips them.
    const { assert!(kind::MMAP >= FIRST_SIZED_KIND && kind::MUNMAP >= FIRST_SIZED_KIND) };
}

/// Label records (version 1.2): a set's pairs, then the stacks that carry it.
#[test]
fn label_records_round_trip() {
    let mut defs = ChunkEncoder::new(0);
    defs.stack(3, [0x5555_0000_1234u64].into_iter());
    let pairs = vec![
        ("kind".to_owned(), "upload".to_owned()),
        ("tenant".to_owned(), "".to_owned()),
    ];
    defs.label_set(7, &pairs);
    defs.stack_labels(3, 7);
    let (_, chunks) = decode(&trace(&[defs], Some(3))).unwrap();
    assert_eq!(
        chunks[0].1[1..],
        [
            Record::LabelSet { id: 7, pairs },
            Record::StackLabels {
                stack: 3,
                labels: 7
            }
        ]
    );
    const { assert!(kind::LABEL_SET >= FIRST_SIZED_KIND && kind::STACK_LABELS >= FIRST_SIZED_KIND) };
}

/// The memory record (version 1.2): the parts, known or not.
#[test]
fn memory_records_round_trip() {
    let with_glibc = MemoryParts {
        resident: 94_310_400,
        heap_requested: 41_916_856,
        heap_rounding: Some(219_192),
        allocator_free: Some(8_764_848),
        memprof_own: 757_856,
        stacks: 9_359_360,
        code_and_files: 8_376_320,
        other_mappings: 25_399_296,
        allocator_resident: 51_175_424,
    };
    let without = MemoryParts {
        heap_rounding: None,
        allocator_free: None,
        resident: u64::MAX,
        ..with_glibc
    };
    let zero = MemoryParts {
        heap_rounding: Some(0),
        ..MemoryParts::default()
    };
    let mut end = ChunkEncoder::new(0);
    end.memory(&with_glibc);
    end.memory(&without);
    end.memory(&zero);
    end.end(0, 0);
    let (header, decoded) = decode(&trace(&[end], Some(3))).unwrap();
    assert_eq!(header.minor, MINOR);
    assert_eq!(decoded[0].0.flags, flags::END);
    assert_eq!(
        decoded[0].1,
        vec![
            Record::Memory(with_glibc),
            Record::Memory(without),
            Record::Memory(zero),
            Record::End { events: 0, lost: 0 }
        ]
    );
    assert_eq!(with_glibc.heap_not_resident(), 483_328);
    assert_eq!(with_glibc.unaccounted(), 0);
}

#[test]
fn written_records_round_trip_in_a_chunk_of_definitions() {
    let mut defs = ChunkEncoder::new(0);
    defs.written(0);
    defs.written(u64::MAX);
    let (header, decoded) = decode(&trace(&[defs], Some(3))).unwrap();
    assert_eq!(header.minor, MINOR);
    assert_eq!(decoded[0].0.flags, flags::DEFINITIONS);
    assert_eq!(
        decoded[0].1,
        vec![
            Record::Written { time: 0 },
            Record::Written { time: u64::MAX }
        ]
    );
}

#[test]
fn block_flags_round_trip_as_the_most_common_value_and_the_exceptions() {
    let main = Some(ChunkFlags {
        mmapped: false,
        main_arena: true,
    });
    let mapped = Some(ChunkFlags {
        mmapped: true,
        main_arena: true,
    });
    let other = Some(ChunkFlags {
        mmapped: false,
        main_arena: false,
    });
    // Flags of allocations 0..6; a mapping record in the middle splits the events in two
    // `EVENTS` records, each with its own `BLOCK_FLAGS`.
    let given = [main, mapped, main, other, main, main];
    let mut events = ChunkEncoder::new(1);
    for (i, flags) in given.iter().enumerate() {
        let i = i as u64;
        if i == 3 {
            events.mmap(100 + 10 * i, 0x7f00_0000_0000, 4096, 3, 3, 0x22);
        }
        events.alloc(100 + 10 * i, 0x1000 + 0x100 * i, 24 + i, 3);
        events.chunk_flags(*flags);
        events.free(105 + 10 * i, 0x1000 + 0x100 * i);
    }
    // Then a reallocation of unknown flags.
    events.realloc(200, 201, 0x9000, 0x9100, 8, 3);
    events.chunk_flags(None);
    let mut plain = ChunkEncoder::new(2);
    plain.alloc(300, 0x20, 8, 3);
    let (_, chunks) = decode(&trace(&[events, plain], Some(3))).unwrap();
    let decoded: Vec<Option<ChunkFlags>> = chunks[0]
        .1
        .iter()
        .filter_map(|record| match record {
            Record::Alloc { flags, .. } | Record::Realloc { flags, .. } => Some(*flags),
            _ => None,
        })
        .collect();
    let mut expected = given.to_vec();
    expected.push(None);
    assert_eq!(decoded, expected);
    assert!(matches!(
        chunks[1].1[..],
        [Record::Alloc { flags: None, .. }]
    ));
}

#[test]
fn a_reader_that_does_not_know_block_flags_skips_them() {
    let mut events = ChunkEncoder::new(1);
    events.alloc(100, 0x1000, 24, 3);
    events.chunk_flags(Some(ChunkFlags {
        mmapped: true,
        main_arena: true,
    }));
    let mut bytes = Vec::new();
    events.finish(None, &mut bytes).unwrap();
    // The payload: a sized record of kind 0x4C first, then the events.
    let payload = &bytes[CHUNK_HEADER_BYTES..];
    assert_eq!(payload[0], kind::BLOCK_FLAGS);
    const { assert!(kind::BLOCK_FLAGS >= FIRST_SIZED_KIND) };
    let len = payload[1] as usize;
    assert_eq!(payload[2 + len], kind::EVENTS);
    // All alike: the value alone, no exception.
    assert_eq!(&payload[..2 + len], &[kind::BLOCK_FLAGS, 2, 1, 0]);
    let (_, chunks) = decode(&trace(&[events], None)).unwrap();
    assert!(matches!(
        chunks[0].1[..],
        [Record::Alloc {
            flags: Some(ChunkFlags {
                mmapped: true,
                main_arena: true
            }),
            ..
        }]
    ));
}

#[test]
fn callee_records_round_trip_and_name_tail_called_frames() {
    let frame = SymbolFrame {
        function: Some("app::grow".into()),
        file: Some("src/main.rs".into()),
        line: 12,
        column: 1,
    };
    let mut symbols = ChunkEncoder::new(0);
    symbols.stack(0, [0x1010u64, 0x2010].into_iter());
    symbols.callee(0x2010, 0x1800, 0x1840, &frame);
    let bytes = trace(&[symbols], Some(3));
    let (_, chunks) = decode(&bytes).unwrap();
    assert_eq!(
        chunks[0].1[1],
        Record::Callee {
            address: 0x2010,
            start: 0x1800,
            end: 0x1840,
            frame: frame.clone(),
        }
    );
    assert_eq!(chunks[0].0.flags & flags::SYMBOLS, flags::SYMBOLS);
    // Read as a trace: the callee is added where the younger frame lies outside its code.
    let path = std::env::temp_dir().join(format!("memprof-trace-callee-{}", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let trace = Trace::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(trace.recovered_callee(0x2010, Some(0x1010)), Some(&frame));
    assert_eq!(trace.recovered_callee(0x2010, Some(0x1811)), None);
    assert_eq!(trace.recovered_callee(0x2010, None), None);
    assert_eq!(trace.recovered_callee(0x1010, Some(0x5000)), None);
}
