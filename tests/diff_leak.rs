//! A diff between two snapshots finds exactly the site that leaked between them.

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Handles a request: its scratch space is freed, but every request leaks a 3000-byte entry.
#[inline(never)]
fn handle_request(cache: &mut Vec<Box<[u8]>>, n: usize) {
    let scratch = vec![n as u8; 50_000];
    std::hint::black_box(&scratch);
    cache.push(leaky_entry(n));
}

#[inline(never)]
fn leaky_entry(n: usize) -> Box<[u8]> {
    std::hint::black_box(vec![n as u8; 3000].into_boxed_slice())
}

#[test]
fn diff_finds_the_leak() {
    let mut cache = Vec::with_capacity(1000);
    handle_request(&mut cache, 0);
    let earlier = memprof::Snapshot::take();
    for n in 1..=100 {
        handle_request(&mut cache, n);
    }
    let later = memprof::Snapshot::take();

    let diff = later.diff(&earlier);
    let options = memprof::ReportOptions::default().depth(8);
    let report = memprof::with_symbolizer(|s| memprof::DiffReport::new(&diff, s, &options));
    assert_eq!(report.changes.len(), 1, "{report:#?}");
    let change = &report.changes[0];
    assert_eq!((change.blocks, change.bytes), (100, 300_000));
    assert!(
        change
            .context
            .iter()
            .any(|f| f.ends_with("in 'diff_leak::leaky_entry'")),
        "{change:#?}"
    );
    assert!(
        change
            .context
            .iter()
            .any(|f| f.ends_with("in 'diff_leak::handle_request'"))
    );

    // Rendered: Markdown with signed numbers, and TSV.
    let mut markdown = Vec::new();
    memprof::pretty_log_diff(&later.diff(&earlier), &mut markdown).unwrap();
    let markdown = String::from_utf8(markdown).unwrap();
    let rows: Vec<&str> = markdown.lines().skip(2).collect();
    assert_eq!(rows.len(), 1, "{markdown}");
    assert!(rows[0].starts_with("| +100 | +300,000 | "), "{markdown}");
    let mut tsv = Vec::new();
    memprof::log_diff(&later.diff(&earlier), &mut tsv).unwrap();
    let tsv = String::from_utf8(tsv).unwrap();
    assert!(tsv.starts_with("1\n100\t300000\t"), "{tsv}");

    // The other way round, the same site shrinks.
    drop(cache);
    let after = memprof::Snapshot::take();
    let shrink = after.diff(&later);
    let report = memprof::with_symbolizer(|s| memprof::DiffReport::new(&shrink, s, &options));
    // All 101 entries (made from two call sites of this test) show as shrinkage.
    let shrunk = report
        .changes
        .iter()
        .filter(|c| c.context.iter().any(|f| f.contains("leaky_entry")))
        .fold((0, 0), |(b, s), c| (b + c.blocks, s + c.bytes));
    assert_eq!(shrunk, (-101, -303_000), "{report:#?}");
}
