//! The one replay on a trace written with the encoder: events in time order across threads'
//! chunks, what each means for a block (its end, whether it was temporary, a block replaced at
//! an address whose free was not seen), and the replays to a moment built on it.

use memprof_trace::{Accumulated, Block, ChunkEncoder, Header, Moment, Timed, Trace, Visitor};
use std::ops::ControlFlow;

/// Two threads' chunks, written out of time order; stack 7 then stack 9 defined.
fn trace_file() -> std::path::PathBuf {
    let mut bytes = Vec::new();
    Header::new(1, 0, "/bin/app".into())
        .write_to(&mut bytes)
        .unwrap();
    let mut defs = ChunkEncoder::new(0);
    defs.stack(7, [0x1000u64].into_iter());
    defs.stack(9, [0x2000u64].into_iter());
    defs.label(0, "half");
    defs.finish(None, &mut bytes).unwrap();
    let mut second = ChunkEncoder::new(2);
    second.alloc(25, 0xb0, 100, 9);
    second.free(35, 0xa0);
    second.alloc(45, 0xc0, 5, 9);
    second.finish(None, &mut bytes).unwrap();
    let mut first = ChunkEncoder::new(1);
    first.alloc(10, 0xa0, 10, 7);
    first.alloc(20, 0xa8, 20, 7);
    first.free(30, 0xa8);
    first.mark(40, 0);
    // 0xb0 is live (thread 2's): its free went unseen.
    first.alloc(50, 0xb0, 1, 7);
    first.finish(None, &mut bytes).unwrap();
    let path = std::env::temp_dir().join(format!("memprof-trace-visit-{}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[derive(Default)]
struct Log(Vec<String>);

impl Visitor for Log {
    fn alloc(&mut self, timed: &Timed, address: u64, block: &Block, replaced: Option<&Block>) {
        self.0.push(format!(
            "{} alloc {address:#x} {} by {} replacing {:?}",
            timed.time,
            block.size,
            block.thread,
            replaced.map(|b| b.size)
        ));
    }

    fn free(&mut self, timed: &Timed, address: u64, freed: Option<&Block>, temporary: bool) {
        self.0.push(format!(
            "{} free {address:#x} {:?} temporary {temporary}",
            timed.time,
            freed.map(|b| (b.size, timed.time - b.time))
        ));
    }

    fn mark(&mut self, timed: &Timed, label: u32) {
        self.0.push(format!("{} mark {label}", timed.time));
    }

    fn after(&mut self, _: &Timed, state: &Accumulated) -> ControlFlow<()> {
        self.0.push(format!("  live {}", state.heap.live_bytes));
        ControlFlow::Continue(())
    }
}

#[test]
fn one_replay_tells_each_event_and_the_moments_follow() {
    let path = trace_file();
    let trace = Trace::open(&path).unwrap();
    let mut log = Log::default();
    let end = trace.visit(&mut log, &mut |_| {}).unwrap();
    assert_eq!(
        log.0,
        [
            "10 alloc 0xa0 10 by 1 replacing None",
            "  live 10",
            "20 alloc 0xa8 20 by 1 replacing None",
            "  live 30",
            "25 alloc 0xb0 100 by 2 replacing None",
            "  live 130",
            "30 free 0xa8 Some((20, 10)) temporary true",
            "  live 110",
            "35 free 0xa0 Some((10, 25)) temporary false",
            "  live 100",
            "40 mark 0",
            "  live 100",
            "45 alloc 0xc0 5 by 2 replacing None",
            "  live 105",
            "50 alloc 0xb0 1 by 1 replacing Some(100)",
            "  live 6",
        ]
    );
    assert_eq!((end.events, end.time, end.heap.live.len()), (8, 50, 2));
    assert_eq!(end.heap.allocated, vec![(3, 31), (2, 105)]);

    let peak = trace.find_peak(&mut |_| {}).unwrap();
    assert_eq!((peak.events, peak.time, peak.live_bytes), (3, 25, 130));
    let (heap, at) = trace
        .replay(&Moment::Marker("half".into()), &mut |_| {})
        .unwrap();
    assert!(at.found);
    assert_eq!((at.events, at.time, heap.live_bytes), (6, 40, 100));
    let (heap, at) = trace.replay(&Moment::Time(32), &mut |_| {}).unwrap();
    assert_eq!((at.events, heap.live_bytes, at.found), (4, 110, true));
    std::fs::remove_file(&path).unwrap();
}

/// Mapping events across two threads: a partial unmap splits, a fixed mapping replaces, the
/// replay's heap keeps the live mappings at each moment, and the visitor is told each.
#[test]
fn mappings_replay_split_and_replace() {
    const PAGE: u64 = 4096;
    let mut bytes = Vec::new();
    Header::new(1, 0, "/bin/app".into())
        .write_to(&mut bytes)
        .unwrap();
    let mut defs = ChunkEncoder::new(0);
    defs.stack(7, [0x1000u64].into_iter());
    defs.stack(9, [0x2000u64].into_iter());
    defs.label(0, "mid");
    defs.finish(None, &mut bytes).unwrap();
    let mut second = ChunkEncoder::new(2);
    // Replaces the middle page of thread 1's first mapping... already unmapped: nothing replaced.
    second.mmap(30, 0x10000 + PAGE, PAGE, 9, 1, 0x32);
    second.finish(None, &mut bytes).unwrap();
    let mut first = ChunkEncoder::new(1);
    first.mmap(10, 0x10000, 3 * PAGE, 7, 3, 0x22);
    first.alloc(15, 0xa0, 10, 7);
    first.munmap(20, 0x10000 + PAGE, PAGE);
    first.mark(25, 0);
    // Over the last page of the first mapping and beyond.
    first.mmap(40, 0x10000 + 2 * PAGE, 2 * PAGE, 7, 3, 0x32);
    first.finish(None, &mut bytes).unwrap();
    let path = std::env::temp_dir().join(format!("memprof-trace-maps-{}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();

    #[derive(Default)]
    struct Maps(Vec<String>);
    impl Visitor for Maps {
        fn map(
            &mut self,
            timed: &Timed,
            address: u64,
            length: u64,
            mapping: &memprof_trace::Mapping,
            replaced: &[(u64, u64, memprof_trace::Mapping)],
        ) {
            let replaced: Vec<_> = replaced.iter().map(|r| (r.0, r.1)).collect();
            self.0.push(format!(
                "{} map {address:#x} {length} stack {} by {} replacing {replaced:?}",
                timed.time, mapping.stack, mapping.thread
            ));
        }
        fn unmap(
            &mut self,
            timed: &Timed,
            address: u64,
            length: u64,
            removed: &[(u64, u64, memprof_trace::Mapping)],
        ) {
            let removed: Vec<_> = removed.iter().map(|r| (r.0, r.1)).collect();
            self.0.push(format!(
                "{} unmap {address:#x} {length} removing {removed:?}",
                timed.time
            ));
        }
    }
    let trace = Trace::open(&path).unwrap();
    let mut maps = Maps::default();
    let end = trace.visit(&mut maps, &mut |_| {}).unwrap();
    assert_eq!(
        maps.0,
        [
            "10 map 0x10000 12288 stack 0 by 1 replacing []",
            "20 unmap 0x11000 4096 removing [(69632, 4096)]",
            "30 map 0x11000 4096 stack 1 by 2 replacing []",
            "40 map 0x12000 8192 stack 0 by 1 replacing [(73728, 4096)]",
        ]
    );
    let live: Vec<_> = end
        .heap
        .mappings
        .iter()
        .map(|(s, l, m)| (s, l, m.stack))
        .collect();
    assert_eq!(
        live,
        [
            (0x10000, PAGE, 0),
            (0x10000 + PAGE, PAGE, 1),
            (0x10000 + 2 * PAGE, 2 * PAGE, 0)
        ]
    );
    assert_eq!(end.heap.live_bytes, 10);
    // At the marker: the first mapping split in two.
    let (heap, _) = trace
        .replay(&Moment::Marker("mid".into()), &mut |_| {})
        .unwrap();
    let live: Vec<_> = heap.mappings.iter().map(|(s, l, _)| (s, l)).collect();
    assert_eq!(live, [(0x10000, PAGE), (0x10000 + 2 * PAGE, PAGE)]);
    let _ = std::fs::remove_file(&path);
}
