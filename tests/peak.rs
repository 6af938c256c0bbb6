//! The heap's peak: a program whose peak is known (two phases live at once, then freed) finds,
//! per call site, exactly what was live at that moment, and the DHAT export says so "at t-gmax".

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new().track_peak(true);

#[inline(never)]
fn phase_one() -> Vec<Vec<u8>> {
    let mut blocks = Vec::with_capacity(100);
    for _ in 0..100 {
        blocks.push(vec![1u8; 10_000]);
    }
    std::hint::black_box(blocks)
}

#[inline(never)]
fn phase_two() -> Vec<Vec<u8>> {
    let mut blocks = Vec::with_capacity(50);
    for _ in 0..50 {
        blocks.push(vec![2u8; 40_000]);
    }
    std::hint::black_box(blocks)
}

#[inline(never)]
fn after_the_peak() -> Vec<Vec<u8>> {
    std::hint::black_box((0..10).map(|_| vec![3u8; 1000]).collect())
}

/// `(peak blocks, peak bytes, live blocks, live bytes)` of the buffers made by `function`.
fn site(snapshot: &memprof::Snapshot, function: &str, size: u64) -> (u64, u64, u64, u64) {
    let report = memprof::with_symbolizer(|symbolizer| {
        let options = memprof::ReportOptions::default().depth(8);
        snapshot
            .stacks
            .iter()
            .filter(|s| {
                memprof::context_of(&s.frames, symbolizer, &options)
                    .iter()
                    .any(|f| f.contains(function))
            })
            .cloned()
            .collect::<Vec<_>>()
    });
    // The buffers' own stacks: those whose allocated bytes are a multiple of the buffer size.
    report
        .iter()
        .filter(|s| s.allocated_bytes % size == 0 && s.allocated_blocks > 1)
        .fold((0, 0, 0, 0), |t, s| {
            (
                t.0 + s.peak_blocks,
                t.1 + s.peak_bytes,
                t.2 + s.live_blocks,
                t.3 + s.live_bytes,
            )
        })
}

/// Whether a snapshot's totals say their peak is exact.
fn snapshot_peak_exact() -> bool {
    memprof::Snapshot::take().stats.peak_exact
}

#[test]
fn the_peak_is_found() {
    let before = memprof::HeapStats::get();
    let one = phase_one();
    let two = phase_two();
    drop(one);
    drop(two);
    let after = after_the_peak();

    let stats = memprof::HeapStats::get();
    assert!(
        stats.peak_bytes >= before.live_bytes + 3_000_000,
        "{stats:?}"
    );
    // Tracked, the peak is exact and printed as a plain figure.
    assert!(stats.peak_exact, "{stats:?}");
    assert!(
        stats
            .to_string()
            .contains(&format!("; peak {} bytes;", stats.peak_bytes)),
        "{stats}"
    );
    assert!(snapshot_peak_exact(), "{stats:?}");

    let snapshot = memprof::Snapshot::take();
    assert!(snapshot.peak_known);
    assert_eq!(
        site(&snapshot, "peak::phase_one", 10_000),
        (100, 1_000_000, 0, 0)
    );
    assert_eq!(
        site(&snapshot, "peak::phase_two", 40_000),
        (50, 2_000_000, 0, 0)
    );
    assert_eq!(
        site(&snapshot, "peak::after_the_peak", 1000),
        (0, 0, 10, 10_000)
    );

    // The DHAT export carries it: "gb" (at t-gmax) of phase two is its 2,000,000 bytes.
    let mut json = Vec::new();
    let options = memprof::ExportOptions::default();
    memprof::with_symbolizer(|s| {
        memprof::export::write(
            memprof::export::Format::Dhat,
            &snapshot,
            s,
            &options,
            &mut json,
        )
    })
    .unwrap();
    let json = String::from_utf8(json).unwrap();
    assert!(
        json.lines()
            .any(|l| l.contains("\"gb\":2000000,\"gbk\":50,")),
        "{json}"
    );
    drop(after);
}
