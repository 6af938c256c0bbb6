//! Explicit tags: a value's block reported under the name chosen for it, winning over inference,
//! in the live counts and in the tallies over the run.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use memprof::types::{HeapValue, tag_block, tag_block_as};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

struct Foo {
    id: u64,
}

/// What the program means by a `Vec<u64>` buffer that inference can only call `[u64]`.
struct Samples;

fn counts() -> HashMap<String, u64> {
    let mut out = Vec::new();
    memprof::log_object_counts(&mut out).unwrap();
    parse(&String::from_utf8(out).unwrap())
}

fn tallies() -> HashMap<String, u64> {
    let mut out = Vec::new();
    memprof::log_object_tallies(&mut out).unwrap();
    parse(&String::from_utf8(out).unwrap())
}

fn parse(log: &str) -> HashMap<String, u64> {
    log.lines()
        .skip(1)
        .map(|l| {
            let (n, name) = l.split_once('\t').unwrap();
            (name.to_owned(), n.parse().unwrap())
        })
        .collect()
}

/// Whether a live block of `size` bytes starts at `address`.
fn is_block(address: usize, size: usize) -> bool {
    let snapshot = memprof::Snapshot::take();
    snapshot
        .blocks
        .binary_search_by_key(&address, |b| b.address)
        .is_ok_and(|i| snapshot.blocks[i].size == size as u64)
}

#[test]
fn explicit_tags_win_and_are_tallied() {
    // Each owner names the block the allocator handed out, whatever its layout.
    let boxed = Box::new([7u64; 5]);
    let vec: Vec<u32> = Vec::with_capacity(11);
    let string = String::with_capacity(13);
    let rc = Rc::new([1u16; 9]);
    let arc = Arc::new([3u8; 17]);
    let wide: Arc<[u128]> = Arc::from(vec![5u128; 3]);
    let word = std::mem::size_of::<usize>();
    assert!(is_block(boxed.heap_block().unwrap(), 40));
    assert!(is_block(vec.heap_block().unwrap(), 44));
    assert!(is_block(string.heap_block().unwrap(), 13));
    assert!(is_block(
        rc.heap_block().unwrap(),
        (2 * word + 18).next_multiple_of(word)
    ));
    assert!(is_block(
        arc.heap_block().unwrap(),
        (2 * word + 17).next_multiple_of(word)
    ));
    assert!(is_block(wide.heap_block().unwrap(), 16 + 48));
    assert_eq!(Vec::<u8>::new().heap_block(), None);

    let before = counts();
    let samples_name = std::any::type_name::<Samples>();
    let mut samples: Vec<Vec<u64>> = (0..25).map(|i| vec![i; 100]).collect();
    for buffer in &samples {
        tag_block::<Samples>(buffer.as_ptr().cast());
    }
    // Tagging twice counts once.
    tag_block::<Samples>(samples[0].as_ptr().cast());
    let foo = memprof::tagged(Box::new(Foo { id: 1 }));
    let named: Vec<u8> = (0..64).collect();
    tag_block_as(named.as_ptr() as usize, "app::Frame");

    let after = counts();
    let count = |map: &HashMap<String, u64>, name: &str| map.get(name).copied().unwrap_or(0);
    assert_eq!(count(&after, samples_name), 25, "{after:?}");
    // The tags won over inference: no new `[u64]` buffers are counted.
    assert_eq!(count(&after, "[u64]"), count(&before, "[u64]"), "{after:?}");
    assert_eq!(count(&after, std::any::type_name::<Foo>()), 1, "{after:?}");
    assert_eq!(count(&after, "app::Frame"), 1, "{after:?}");

    // Over the run: the tagged blocks move from `[u64]` to their tag, also after they are freed.
    for buffer in samples.drain(10..) {
        drop(buffer);
    }
    let tallies = tallies();
    assert_eq!(count(&tallies, samples_name), 25, "{tallies:?}");
    assert_eq!(count(&tallies, "app::Frame"), 1, "{tallies:?}");
    assert_eq!(count(&counts(), samples_name), 10);
    assert_eq!(foo.id + u64::from(named[1]), 2);
}
