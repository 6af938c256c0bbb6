//! Allocations of known sizes from known functions appear with exactly their counts and bytes,
//! under their function names and file; freed ones disappear.

mod common;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
#[allow(clippy::vec_box, reason = "the boxes are the allocations under test")]
fn make_boxes() -> Vec<Box<[u8; 4000]>> {
    let mut boxes = Vec::with_capacity(300);
    for _ in 0..300 {
        boxes.push(Box::new([7u8; 4000]));
    }
    boxes
}

#[inline(never)]
fn make_strings() -> Vec<String> {
    let strings = (0..1000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8).to_string().repeat(100))
        .collect();
    // Keeps this frame on the stack: a tail call would hide it from every unwinder.
    std::hint::black_box(strings)
}

#[inline(never)]
fn make_buffer() -> Vec<u64> {
    Vec::with_capacity(12_345)
}

fn totals(needle: &str) -> (u64, u64) {
    common::groups_mentioning(needle, 16)
        .iter()
        .fold((0, 0), |(b, s), g| (b + g.blocks, s + g.bytes))
}

#[test]
fn exact_counts_then_frees() {
    let boxes = make_boxes();
    let strings = make_strings();
    let buffer = make_buffer();

    // 300 boxes of 4000 bytes, plus the Vec of 300 pointers that holds them.
    let groups = common::groups_mentioning("exact_counts::make_boxes", 16);
    let boxed: Vec<_> = groups.iter().filter(|g| g.bytes == 300 * 4000).collect();
    assert_eq!(boxed.len(), 1, "{groups:#?}");
    assert_eq!(boxed[0].blocks, 300);
    assert!(
        boxed[0]
            .context
            .iter()
            .any(|f| f.starts_with("tests/exact_counts.rs:")
                && f.ends_with("in 'exact_counts::make_boxes'")),
        "{:#?}",
        boxed[0].context
    );
    assert_eq!(
        totals("exact_counts::make_boxes"),
        (301, 300 * 4000 + 300 * 8)
    );

    // 1000 strings of 100 bytes, plus the Vec that holds them.
    assert_eq!(
        totals("exact_counts::make_strings"),
        (1001, 1000 * 100 + 1000 * 24)
    );
    assert_eq!(totals("exact_counts::make_buffer"), (1, 12_345 * 8));

    // With the default depth the first frames are the collection call, then the caller.
    let default_depth = common::groups_mentioning("exact_counts::make_buffer", 5);
    assert_eq!(default_depth.len(), 1);
    assert!(
        default_depth[0].context[0].contains("with_capacity"),
        "{default_depth:#?}"
    );
    assert!(default_depth[0].context[1].contains("'exact_counts::make_buffer'"));

    drop(boxes);
    drop(strings);
    assert_eq!(totals("exact_counts::make_boxes"), (0, 0));
    assert_eq!(totals("exact_counts::make_strings"), (0, 0));
    assert_eq!(totals("exact_counts::make_buffer"), (1, 12_345 * 8));
    drop(buffer);
    assert_eq!(totals("exact_counts::make_buffer"), (0, 0));
}
