//! A minimal replay of a trace for the tests: every event in time order, up to a marker or to
//! the end, into the set of live blocks; and the live table's own view, written by the traced
//! program, to compare it with.

use memprof_trace::{Header, ModuleEntry, Reader, Record, SymbolFrame};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A trace replayed.
#[derive(Debug, Default)]
pub struct Replay {
    pub header: Header,
    /// Live blocks: address → (size, stack id).
    pub live: BTreeMap<u64, (u64, u32)>,
    /// Allocated (blocks, bytes) per stack id, up to the moment replayed.
    pub allocated: HashMap<u32, (u64, u64)>,
    pub stacks: HashMap<u32, Vec<u64>>,
    pub symbols: HashMap<u64, Vec<SymbolFrame>>,
    pub modules: Vec<Vec<ModuleEntry>>,
    pub threads: HashMap<u32, (u64, String)>,
    /// The `END` record: (events, lost).
    pub end: Option<(u64, u64)>,
    /// Events in the chunks read.
    pub events: u64,
    pub chunks: usize,
    /// Allocations at an address already live, and frees of addresses not live.
    pub conflicts: Vec<String>,
    /// Whether the marker asked for was found.
    pub marked: bool,
    /// The error that stopped reading, if any.
    pub error: Option<String>,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Alloc { address: u64, size: u64, stack: u32 },
    Free { address: u64 },
    Mark { label: u32 },
}

/// Replays the trace in `bytes` up to the first marker labelled `until` (or to the end).
pub fn replay(bytes: &[u8], until: Option<&str>) -> Replay {
    let mut replay = Replay::default();
    let mut reader = match Reader::new(bytes) {
        Ok(reader) => reader,
        Err(error) => {
            replay.error = Some(error.to_string());
            return replay;
        }
    };
    replay.header = reader.header().clone();
    let mut events = Vec::new();
    let mut labels = HashMap::new();
    'chunks: loop {
        let chunk = match reader.next_chunk() {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(error) => {
                replay.error = Some(error.to_string());
                break;
            }
        };
        replay.chunks += 1;
        replay.events += u64::from(chunk.header.events);
        for record in chunk.records() {
            let record = match record {
                Ok(record) => record,
                Err(error) => {
                    replay.error = Some(error.to_string());
                    break 'chunks;
                }
            };
            let seq = events.len();
            match record {
                Record::Alloc {
                    time,
                    address,
                    size,
                    stack,
                    ..
                } => events.push((
                    time,
                    seq,
                    Event::Alloc {
                        address,
                        size,
                        stack,
                    },
                )),
                Record::Free { time, address } => events.push((time, seq, Event::Free { address })),
                Record::Realloc {
                    time,
                    new_time,
                    old_address,
                    address,
                    size,
                    stack,
                    ..
                } => {
                    events.push((
                        time,
                        seq,
                        Event::Free {
                            address: old_address,
                        },
                    ));
                    events.push((
                        new_time,
                        seq + 1,
                        Event::Alloc {
                            address,
                            size,
                            stack,
                        },
                    ));
                }
                Record::Mark { time, label } => events.push((time, seq, Event::Mark { label })),
                Record::Stack { id, frames } => {
                    replay.stacks.insert(id, frames);
                }
                Record::Symbol { address, frames } => {
                    replay.symbols.insert(address, frames);
                }
                // The callees of direct calls (1.4), checked by tests/trace_tail_call_frames.rs.
                Record::Callee { .. } => {}
                Record::Modules(modules) => replay.modules.push(modules),
                Record::Thread { thread, tid, name } => {
                    replay.threads.insert(thread, (tid, name));
                }
                Record::Label { id, text } => {
                    labels.insert(id, text);
                }
                Record::End { events, lost } => replay.end = Some((events, lost)),
                // The memory breakdown at the close (1.2), checked by tests/trace_memory.rs.
                Record::Memory(_) => {}
                // How far the events are written (1.5), for readers that follow the trace.
                Record::Written { .. } => {}
                other => panic!("unexpected record {other:?}"),
            }
        }
    }
    // Each thread's events are in time order already; merging by time keeps that order.
    events.sort_by_key(|&(time, seq, _)| (time, seq));
    for (time, _, event) in events {
        match event {
            Event::Alloc {
                address,
                size,
                stack,
            } => {
                if replay.live.insert(address, (size, stack)).is_some() {
                    replay
                        .conflicts
                        .push(format!("{time}: allocation at live {address:#x}"));
                }
                let allocated = replay.allocated.entry(stack).or_default();
                allocated.0 += 1;
                allocated.1 += size;
            }
            Event::Free { address } => {
                if replay.live.remove(&address).is_none() {
                    replay
                        .conflicts
                        .push(format!("{time}: free of {address:#x}, not live"));
                }
            }
            Event::Mark { label } => {
                if until.is_some() && labels.get(&label).map(String::as_str) == until {
                    replay.marked = true;
                    break;
                }
            }
        }
    }
    replay
}

/// Writes what the live table holds now, as text: `B address size stack` per live block, and
/// `S id allocated_blocks allocated_bytes frame...` per stack. Untracked, so writing it changes
/// nothing in the table.
pub fn write_table(path: &Path) {
    memprof::untracked(|| {
        let snapshot = memprof::Snapshot::take_all();
        let mut text = String::new();
        for block in &snapshot.blocks {
            text += &format!("B {:#x} {} {}\n", block.address, block.size, block.stack.0);
        }
        for (id, stack) in snapshot.stacks.iter().enumerate() {
            text += &format!(
                "S {id} {} {}",
                stack.allocated_blocks, stack.allocated_bytes
            );
            for frame in &stack.frames {
                text += &format!(" {:#x}", frame.0);
            }
            text += "\n";
        }
        std::fs::write(path, text).unwrap();
    })
}

/// The live table as [`write_table`] wrote it: blocks by address, and each stack's allocated
/// totals and frames.
pub type Table = (
    BTreeMap<u64, (u64, u32)>,
    HashMap<u32, ((u64, u64), Vec<u64>)>,
);

/// Reads what [`write_table`] wrote.
pub fn read_table(path: &Path) -> Table {
    let text = std::fs::read_to_string(path).unwrap();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let mut blocks = BTreeMap::new();
    let mut stacks = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields[0] {
            "B" => {
                blocks.insert(
                    hex(fields[1]),
                    (fields[2].parse().unwrap(), fields[3].parse().unwrap()),
                );
            }
            _ => {
                let frames = fields[4..].iter().map(|f| hex(f)).collect();
                let allocated = (fields[2].parse().unwrap(), fields[3].parse().unwrap());
                stacks.insert(fields[1].parse().unwrap(), (allocated, frames));
            }
        }
    }
    (blocks, stacks)
}

/// Checks a replay against the live table block for block: the same live blocks (address, size,
/// stack), the same frames for each of their stacks, and the same totals allocated per stack.
pub fn assert_same(replay: &Replay, table: &Table, what: &str) {
    assert!(
        replay.conflicts.is_empty(),
        "{what}: {:?}",
        &replay.conflicts[..replay.conflicts.len().min(10)]
    );
    let (blocks, stacks) = table;
    if replay.live != *blocks {
        let only_trace: Vec<_> = replay
            .live
            .iter()
            .filter(|(a, _)| !blocks.contains_key(a))
            .take(10)
            .collect();
        let only_table: Vec<_> = blocks
            .iter()
            .filter(|(a, _)| !replay.live.contains_key(a))
            .take(10)
            .collect();
        for (_, (_, stack)) in &only_table {
            let frames: Vec<String> = replay
                .stacks
                .get(stack)
                .into_iter()
                .flatten()
                .map(|a| {
                    replay
                        .symbols
                        .get(a)
                        .map(|f| format!("{:?}", f.last().and_then(|f| f.function.clone())))
                        .unwrap_or(format!("{a:#x}"))
                })
                .collect();
            eprintln!("stack {stack}: {frames:?}");
        }
        panic!(
            "{what}: {} blocks replayed, {} in the table; only in the trace: {only_trace:x?}; only in the table: {only_table:x?}",
            replay.live.len(),
            blocks.len()
        );
    }
    for (&stack, &(allocated_blocks, allocated_bytes)) in &replay.allocated {
        let ((blocks, bytes), frames) = &stacks[&stack];
        assert_eq!(
            &replay.stacks[&stack], frames,
            "{what}: frames of stack {stack}"
        );
        // Under sampling the table counts estimates, rounded at random: only the frames compare.
        if replay.header.sample_interval != 0 {
            continue;
        }
        assert_eq!(
            (allocated_blocks, allocated_bytes),
            (*blocks, *bytes),
            "{what}: allocated from stack {stack}"
        );
    }
}

/// The Markdown report of a replay, with the trace's own symbols.
pub fn markdown(replay: &Replay, depth: usize) -> String {
    let ids: Vec<u32> = {
        let mut ids: Vec<u32> = replay.stacks.keys().copied().collect();
        ids.sort();
        ids
    };
    let index: HashMap<u32, u32> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, i as u32))
        .collect();
    let stacks = ids
        .iter()
        .map(|id| memprof::StackSummary {
            frames: replay.stacks[id]
                .iter()
                .map(|&a| memprof::ReturnAddress(a as usize))
                .collect(),
            ..Default::default()
        })
        .collect();
    let blocks = replay
        .live
        .iter()
        .map(|(&address, &(size, stack))| memprof::LiveBlock {
            address: address as usize,
            size,
            stack: memprof::StackId(index[&stack]),
            tag: 0,
        })
        .collect();
    let snapshot = memprof::Snapshot::from_parts(blocks, stacks, 0);
    let mut resolver: HashMap<memprof::ReturnAddress, Vec<memprof::Frame>> = HashMap::new();
    for (&address, frames) in &replay.symbols {
        let frames = frames
            .iter()
            .map(|f| memprof::Frame {
                function: f.function.clone(),
                file: f.file.clone(),
                line: f.line,
                column: f.column,
            })
            .collect();
        resolver.insert(memprof::ReturnAddress(address as usize), frames);
    }
    let options = memprof::ReportOptions::default().min_bytes(0).depth(depth);
    let report = memprof::Report::live(&snapshot, &mut resolver, &options);
    let mut out = Vec::new();
    report.write_markdown(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// The Markdown report of the process's live table now, as [`markdown`] renders a replay.
pub fn live_markdown(depth: usize) -> String {
    memprof::untracked(|| {
        let snapshot = memprof::Snapshot::take();
        let options = memprof::ReportOptions::default().min_bytes(0).depth(depth);
        let report = memprof::with_symbolizer(|s| memprof::Report::live(&snapshot, s, &options));
        let mut out = Vec::new();
        report.write_markdown(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    })
}
