//! The stack table's tests, and two measurements of its memory and speed (ignored: run them
//! alone, in a release build).

use super::*;

#[test]
fn empty_cache_entries_match_no_lookup() {
    for (slot, &(hash, _)) in no_ids().iter().enumerate() {
        assert_ne!(hash as usize % RECENT, slot);
    }
}

#[test]
fn cached_ids_stay_with_their_table() {
    let frames = |i: usize| [ReturnAddress(0x1000 + i), ReturnAddress(0x2000)];
    let first = Stacks::new();
    for i in 0..8 {
        assert_eq!(first.intern(&frames(i)), StackId(i as u32));
    }
    let second = Stacks::new();
    assert_eq!(second.intern(&frames(7)), StackId(0));
    assert_eq!(first.intern(&frames(7)), StackId(7));
    assert_eq!(second.intern(&frames(7)), StackId(0));
    assert_eq!(second.intern(&frames(3)), StackId(1));
    assert_eq!(first.intern(&frames(3)), StackId(3));
    assert_eq!(second.len(), 2);
    assert_eq!(first.len(), 8);
}

#[test]
fn stacks_sharing_a_prefix_share_its_nodes() {
    let table = Stacks::new();
    // Innermost first: two frames of their own, then the 30 shared outer frames.
    let prefix: Vec<ReturnAddress> = (0..30).map(|i| ReturnAddress(0x10_0000 + i)).collect();
    for i in 0..1000 {
        let mut frames = vec![
            ReturnAddress(0x20_0000 + i),
            ReturnAddress(0x30_0000 + i % 10),
        ];
        frames.extend_from_slice(&prefix);
        let id = table.intern(&frames);
        assert_eq!(table.frames(id), frames);
    }
    assert_eq!(table.len(), 1000);
    // 32,000 frames in all; nodes: the prefix's 30, 10 below it, and one per stack.
    assert_eq!(table.nodes(), 30 + 10 + 1000);
}

#[test]
fn the_empty_stack_and_its_frames() {
    let table = Stacks::new();
    let empty = table.intern(&[]);
    let one = table.intern(&[ReturnAddress(7)]);
    assert_ne!(empty, one);
    assert_eq!(table.intern(&[]), empty);
    assert!(table.frames(empty).is_empty());
    assert_eq!(table.frames(one), [ReturnAddress(7)]);
    // A stack whose innermost node is another's inner node.
    let longer = table.intern(&[ReturnAddress(8), ReturnAddress(7)]);
    assert_eq!(table.frames(longer), [ReturnAddress(8), ReturnAddress(7)]);
    assert_eq!(table.intern(&[ReturnAddress(7)]), one);
    assert_eq!(table.nodes(), 2);
}

#[test]
fn a_labelled_stack_shares_its_frames_and_keeps_its_label() {
    let table = Stacks::new();
    let frames = [ReturnAddress(0x20), ReturnAddress(0x10)];
    let plain = table.intern(&frames);
    let acme = table.intern_labelled(&frames, 1);
    let other = table.intern_labelled(&frames, 2);
    assert_eq!(table.intern_labelled(&frames, 1), acme);
    assert_eq!(table.intern_labelled(&frames, 0), plain);
    assert!(plain != acme && acme != other);
    for (id, labels) in [(plain, 0), (acme, 1), (other, 2)] {
        assert_eq!(table.frames(id), frames);
        assert_eq!(table.labels(id), labels);
    }
    // The frames' two nodes, and one per label.
    assert_eq!(table.nodes(), 4);
    let empty = table.intern_labelled(&[], 3);
    assert!(table.frames(empty).is_empty());
    assert_eq!(table.labels(empty), 3);
}

/// The resident set of this process, in bytes.
fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: usize = statm
        .split(' ')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("rss");
    pages * 4096
}

/// Interns the stacks of a depth-first walk of a binary tree of `levels` levels below
/// `outer` shared outer frames: each node's path is its own stack, as in the `tree` workload.
fn intern_tree(table: &Stacks, outer: usize, levels: usize) -> usize {
    fn visit(table: &Stacks, frames: &mut Vec<ReturnAddress>, left: usize, count: &mut usize) {
        table.intern(frames);
        *count += 1;
        if left > 0 {
            for call_site in [0x7000, 0x7010] {
                frames.insert(0, ReturnAddress(call_site));
                visit(table, frames, left - 1, count);
                frames.remove(0);
            }
        }
    }
    let mut frames: Vec<ReturnAddress> = (0..outer)
        .map(|i| ReturnAddress(0x1000 + i * 0x10))
        .collect();
    let mut count = 0;
    visit(table, &mut frames, levels, &mut count);
    count
}

/// The table's memory per stack at depth 32 on a tree of a million stacks: `cargo nextest
/// run -p memprof --release -E 'test(memory_per_stack)' --run-ignored only --no-capture`.
#[test]
#[ignore = "a measurement: run it alone, in a release build"]
fn memory_per_stack_on_a_tree() {
    let table = Stacks::new();
    let before = resident();
    let start = std::time::Instant::now();
    // 12 outer frames and 19 levels below the root: 2^20 - 1 stacks of 12 to 31 frames.
    let stacks = intern_tree(&table, 12, 19);
    let elapsed = start.elapsed();
    let grown = resident() - before;
    println!(
        "{stacks} stacks ({} interned, {} nodes): {:.1} MB resident, {:.1} bytes per stack, \
         {:.0} ns per intern",
        table.len(),
        table.nodes(),
        grown as f64 / 1e6,
        grown as f64 / stacks as f64,
        elapsed.as_nanos() as f64 / stacks as f64,
    );
    assert_eq!(table.len(), stacks);
}

/// The table's memory and time per stack on call paths shaped like the `paths` workload's
/// (`examples/workload`): 20 levels of two mutually recursive functions chosen by the bits
/// of a counter, below 10 outer frames, each path a stack of 32 frames that shares little
/// with the one before: `cargo nextest run -p memprof --release -E 'test(paths_like)'
/// --run-ignored only --no-capture`.
#[test]
#[ignore = "a measurement: run it alone, in a release build"]
fn paths_like_the_workload() {
    let table = Stacks::new();
    let before = resident();
    let start = std::time::Instant::now();
    let paths: usize = 1 << 20;
    let mut frames = Vec::with_capacity(32);
    for i in 0..paths {
        frames.clear();
        frames.push(ReturnAddress(0x9000));
        // The call sites of the recursion, innermost first: which function calls which.
        let mut sites = [0usize; 21];
        let mut caller = 0;
        for (level, site) in sites.iter_mut().enumerate().take(20) {
            let bit = (i >> level) & 1;
            *site = 0x7000 + caller * 0x100 + bit * 0x10;
            caller = bit;
        }
        sites[20] = 0x7000 + caller * 0x100 + 0x20;
        frames.extend(sites.iter().rev().map(|&a| ReturnAddress(a)));
        frames.extend((0..10).map(|k| ReturnAddress(0x1000 + k * 0x10)));
        table.intern(&frames);
    }
    let elapsed = start.elapsed();
    let grown = resident() - before;
    println!(
        "{} stacks, {} nodes: {:.1} MB resident, {:.1} bytes per stack, {:.0} ns per intern",
        table.len(),
        table.nodes(),
        grown as f64 / 1e6,
        grown as f64 / paths as f64,
        elapsed.as_nanos() as f64 / paths as f64,
    );
    assert_eq!(table.len(), paths);
}

/// Stacks met in an order that shares little from one to the next, then again from another
/// thread (whose remembered walks are empty), then shallower and deeper ones: each keeps its id
/// and frames, and every node is made once.
#[test]
fn a_walk_that_jumps_over_known_frames_finds_every_stack() {
    let table = Stacks::new();
    let stack = |i: usize, depth: usize| -> Vec<ReturnAddress> {
        // Innermost first; frame k of the path depends on bit k of `i` (outermost = bit 0).
        let mut frames: Vec<ReturnAddress> = (0..depth)
            .map(|k| ReturnAddress(0x4000 + ((i >> k) & 1) * 0x10 + k * 0x100))
            .collect();
        frames.reverse();
        frames
    };
    let ids: Vec<StackId> = (0..512).map(|i| table.intern(&stack(i, 9))).collect();
    // 2 + 4 + ... + 512 nodes: every distinct prefix once.
    assert_eq!(table.nodes(), (1..=9).map(|k| 1 << k).sum::<usize>());
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(table.frames(id), stack(i, 9));
    }
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in (0..512).rev() {
                assert_eq!(table.intern(&stack(i, 9)), ids[i]);
            }
        });
    });
    // A prefix of a known stack is a new stack on known nodes; a deeper one adds a node.
    let shallow = table.intern(&stack(5, 4)[..]);
    assert_eq!(table.frames(shallow), stack(5, 4));
    let mut deeper = stack(7, 9);
    deeper.insert(0, ReturnAddress(0x9_9990));
    let deep = table.intern(&deeper);
    assert_eq!(table.frames(deep), deeper);
    assert_eq!(table.nodes(), (1..=9).map(|k| 1 << k).sum::<usize>() + 1);
    assert_eq!(table.len(), 514);
}
