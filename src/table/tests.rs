//! The table against a naive model: random allocs, reallocs and frees, then every block, every
//! stack's counters and the totals must agree with a `BTreeMap` of what should be live.
//!
//! The random operations come from a small seeded generator ([`Rng`]): the same cases on every
//! run, and on a failure the case's seed and operations are printed to run it again alone.

use super::*;
use crate::header::Headed;
use crate::snapshot::Which;
use std::collections::{BTreeMap, BTreeSet};
use writers::Writer;

#[derive(Clone, Debug)]
enum Op {
    Alloc { slot: u8, size: u16, stack: u8 },
    Realloc { slot: u8, size: u16, stack: u8 },
    Free { slot: u8 },
    FreeUnknown { slot: u8 },
}

/// SplitMix64: a seeded stream of well-mixed 64-bit values, enough to draw test cases from.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One operation: each kind equally likely, slots in `0..32`, sizes in `0..5000`, stacks in
/// `0..6`.
fn op(rng: &mut Rng) -> Op {
    let slot = rng.below(32) as u8;
    let (size, stack) = (rng.below(5000) as u16, rng.below(6) as u8);
    match rng.below(4) {
        0 => Op::Alloc { slot, size, stack },
        1 => Op::Realloc { slot, size, stack },
        2 => Op::Free { slot },
        _ => Op::FreeUnknown { slot },
    }
}

/// How many random cases each model test runs (`MEMPROF_TABLE_CASES` for more).
const CASES: u64 = 256;

/// Runs `check` on a case that failed before (one allocation of 0 bytes), then on [`CASES`]
/// random cases of 1 to 299 operations each. The seeds are fixed; `MEMPROF_TABLE_SEED` picks
/// another first seed to explore other cases.
fn for_each_case(check: impl Fn(Vec<Op>)) {
    check(vec![Op::Alloc {
        slot: 0,
        size: 0,
        stack: 0,
    }]);
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let first = var("MEMPROF_TABLE_SEED").unwrap_or(1);
    for seed in first..first + var("MEMPROF_TABLE_CASES").unwrap_or(CASES) {
        let mut rng = Rng(seed);
        let ops: Vec<Op> = (0..1 + rng.below(299)).map(|_| op(&mut rng)).collect();
        // Names the failing case when `check` panics.
        struct Case<'a>(u64, &'a [Op]);
        impl Drop for Case<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    eprintln!(
                        "failing case: MEMPROF_TABLE_SEED={} ops = {:?}",
                        self.0, self.1
                    );
                }
            }
        }
        let case = Case(seed, &ops);
        check(case.1.to_vec());
    }
}

fn frames(stack: u8) -> Vec<ReturnAddress> {
    (0..=usize::from(stack))
        .map(|i| ReturnAddress(0x1000 + i * 0x10 + usize::from(stack)))
        .collect()
}

/// Addresses: slot `s` lives at one of two places, so reallocs move blocks, between 16-byte and
/// 8-byte aligned addresses, and between pages (so between side tables).
fn address(slot: u8, generation: bool) -> usize {
    0x10_0000 + usize::from(slot) * 0x1100 + if generation { 0x88 } else { 0 }
}

/// Every block of `snapshot`: address -> (size, frames).
fn blocks_of(snapshot: &crate::snapshot::Snapshot) -> BTreeMap<usize, (u64, Vec<ReturnAddress>)> {
    snapshot
        .blocks
        .iter()
        .map(|b| (b.address, (b.size, snapshot.stack(b.stack).frames.clone())))
        .collect()
}

/// The blocks a model holds (address -> (size, stack number)), as [`blocks_of`] gives them.
fn model_blocks(model: &BTreeMap<usize, (u64, u8)>) -> BTreeMap<usize, (u64, Vec<ReturnAddress>)> {
    model
        .iter()
        .map(|(&a, &(size, stack))| (a, (size, frames(stack))))
        .collect()
}

#[test]
fn table_matches_model() {
    for_each_case(|ops| {
        let table = Table::new();
        // address -> (size, stack number)
        let mut model: BTreeMap<usize, (u64, u8)> = BTreeMap::new();
        let mut allocated: BTreeMap<u8, (u64, u64)> = BTreeMap::new();
        let mut generation = [false; 32];
        for op in ops {
            match op {
                Op::Alloc { slot, size, stack } => {
                    let at = address(slot, generation[slot as usize]);
                    if model.contains_key(&at) {
                        continue;
                    }
                    table.insert(at, size as usize, &frames(stack));
                    model.insert(at, (size as u64, stack));
                    let a = allocated.entry(stack).or_default();
                    a.0 += 1;
                    a.1 += size as u64;
                }
                Op::Realloc { slot, size, stack } => {
                    let old = address(slot, generation[slot as usize]);
                    generation[slot as usize] ^= true;
                    let new = address(slot, generation[slot as usize]);
                    table.take(old);
                    model.remove(&old);
                    table.insert(new, size as usize, &frames(stack));
                    model.insert(new, (size as u64, stack));
                    let a = allocated.entry(stack).or_default();
                    a.0 += 1;
                    a.1 += size as u64;
                }
                Op::Free { slot } => {
                    let at = address(slot, generation[slot as usize]);
                    let removed = table.take(at);
                    assert_eq!(removed.map(|b| b.size), model.remove(&at).map(|m| m.0));
                }
                Op::FreeUnknown { slot } => {
                    assert!(table.take(0x9000_0000 + usize::from(slot) * 16).is_none());
                }
            }
        }
        let snapshot = crate::snapshot::Snapshot::of(&table, Which::All);
        assert_eq!(blocks_of(&snapshot), model_blocks(&model));
        // A snapshot of the live heap: the same blocks, the stacks of the live blocks only, each
        // with what it allocated.
        let live = crate::snapshot::Snapshot::of(&table, Which::Live);
        assert_eq!(blocks_of(&live), model_blocks(&model));
        let live_stacks: BTreeSet<u8> = model.values().map(|m| m.1).collect();
        assert_eq!(live.stacks.len(), live_stacks.len());
        for summary in &live.stacks {
            let stack = (summary.frames.len() - 1) as u8;
            let totals = (summary.allocated_blocks, summary.allocated_bytes);
            assert_eq!(totals, allocated[&stack]);
        }
        // Per-stack counters: live ones from the snapshot, allocated ones from the threads' counters.
        let allocated_per_stack = table.allocated();
        for (id, _) in table.stacks.iter() {
            assert_eq!(table.allocated_of(id), allocated_per_stack[id.0 as usize]);
            let stack = (table.stacks.frames(id).len() - 1) as u8;
            let live: Vec<_> = model.values().filter(|m| m.1 == stack).collect();
            let summary = snapshot.stack(id);
            assert_eq!(summary.live_blocks, live.len() as u64);
            assert_eq!(summary.live_bytes, live.iter().map(|m| m.0).sum::<u64>());
            assert_eq!(allocated_per_stack[id.0 as usize], allocated[&stack]);
        }
        assert_eq!(table.stacks.len(), allocated.len());
        let stats = table.stats();
        assert_eq!(stats.live_blocks, model.len() as u64);
        assert_eq!(stats.live_bytes, model.values().map(|m| m.0).sum::<u64>());
        assert_eq!(
            stats.total_blocks,
            allocated.values().map(|a| a.0).sum::<u64>()
        );
        assert!(stats.peak_bytes >= stats.live_bytes);
    });
}

/// The same for blocks in slots: a program's headers beside the table.
#[test]
fn slots_match_model() {
    for_each_case(|ops| {
        let table = Table::new();
        let mut model: BTreeMap<usize, (u64, u8)> = BTreeMap::new();
        // What each live block's header holds.
        let mut headers: BTreeMap<usize, Headed> = BTreeMap::new();
        let mut generation = [false; 32];
        let insert = |at: usize, size: u16, stack: u8| {
            table.insert_headed(at, u64::from(size), table.stacks.intern(&frames(stack)))
        };
        for op in ops {
            match op {
                Op::Alloc { slot, size, stack } => {
                    let at = address(slot, generation[slot as usize]);
                    if model.contains_key(&at) {
                        continue;
                    }
                    let headed = insert(at, size, stack);
                    assert!(headed.is_recorded());
                    headers.insert(at, headed);
                    model.insert(at, (u64::from(size), stack));
                }
                Op::Realloc { slot, size, stack } => {
                    let old = address(slot, generation[slot as usize]);
                    if let Some(headed) = headers.remove(&old) {
                        assert!(table.remove_headed(old, headed).is_some());
                        model.remove(&old);
                    }
                    generation[slot as usize] ^= true;
                    let new = address(slot, generation[slot as usize]);
                    headers.insert(new, insert(new, size, stack));
                    model.insert(new, (u64::from(size), stack));
                }
                Op::Free { slot } | Op::FreeUnknown { slot } => {
                    let at = address(slot, generation[slot as usize]);
                    if let Some(headed) = headers.remove(&at) {
                        assert_eq!(headed.size, model.remove(&at).unwrap().0);
                        assert!(table.remove_headed(at, headed).is_some());
                    }
                }
            }
        }
        let snapshot = crate::snapshot::Snapshot::of(&table, Which::Live);
        assert_eq!(blocks_of(&snapshot), model_blocks(&model));
        let stats = table.stats();
        assert_eq!(stats.live_blocks, model.len() as u64);
        assert_eq!(stats.live_bytes, model.values().map(|m| m.0).sum::<u64>());
        // No two live blocks share a slot.
        let mut slots: Vec<u32> = headers.values().map(|h| h.slot).collect();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), headers.len());
    });
}

#[test]
fn restore_undoes_remove() {
    let table = Table::new();
    table.insert(0x1000, 64, &frames(1));
    let block = table.take(0x1000).unwrap();
    table.restore(0x1000, block);
    let stats = table.stats();
    assert_eq!(
        (stats.live_blocks, stats.live_bytes, stats.total_blocks),
        (1, 64, 1)
    );
    assert_eq!(table.take(0x1000), Some(block));
}

#[test]
fn an_address_reused_without_free_retires_the_stale_block() {
    let table = Table::new();
    table.insert(0x2000, 10, &frames(0));
    table.insert(0x2000, 30, &frames(1));
    let stats = table.stats();
    assert_eq!((stats.live_blocks, stats.live_bytes), (1, 30));
}

#[test]
fn large_sizes_and_tags_survive_packing() {
    let table = Table::new();
    let huge = 5u64 << 30;
    table.insert_block(0x3000, huge, table.stacks.intern(&frames(2)));
    table.insert(0x4000, u32::MAX as usize, &frames(2));
    table.insert(0x5000, 48, &frames(3));
    assert_eq!(
        table.set_tag(0x5000, 7),
        Some((table.stacks.intern(&frames(3)), 0))
    );
    assert_eq!(table.set_tag(0x6000, 7), None);
    let snapshot = crate::snapshot::Snapshot::of(&table, Which::Live);
    let sizes: Vec<(usize, u64, u32)> = snapshot
        .blocks
        .iter()
        .map(|b| (b.address, b.size, b.tag))
        .collect();
    assert_eq!(
        sizes,
        [
            (0x3000, huge, 0),
            (0x4000, u32::MAX as u64, 0),
            (0x5000, 48, 7)
        ]
    );
    assert_eq!(snapshot.stats.live_bytes, huge + u32::MAX as u64 + 48);
    assert_eq!(table.take(0x3000).map(|b| b.size), Some(huge));
    assert_eq!(table.take(0x5000).map(|b| b.tag), Some(7));
    // Removing a tagged block clears its tag: a new block at that address starts untagged.
    table.insert(0x5000, 16, &frames(3));
    assert_eq!(table.take(0x5000).map(|b| b.tag), Some(0));
    assert_eq!(table.stats().live_bytes, u32::MAX as u64);
}

/// Serializes the tests that use the process table.
static PROCESS_TABLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn ending_threads_give_their_writers_back() {
    let _only = PROCESS_TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let mut used = std::collections::BTreeSet::new();
    for i in 0..16 {
        let writer = std::thread::spawn(move || {
            let at = 0x7700_0000 + i * 16;
            TABLE.insert(at, 8, &frames(1));
            assert!(TABLE.take(at).is_some());
            writers::MINE.with(|mine| mine.get().map(|w| w as *const Writer as usize))
        })
        .join()
        .unwrap();
        used.insert(writer.expect("the thread claimed a writer"));
    }
    // Each thread gave its writer back at its end, for the next one to claim. (Other tests'
    // threads may claim one meanwhile; without the release, every thread would need a new one.)
    assert!(used.len() <= 8, "{} writers for 16 threads", used.len());
}

#[test]
fn a_held_table_makes_other_threads_wait() {
    let table = Table::new();
    table.insert(0x8000, 8, &frames(0));
    let held = table.lock_all();
    std::thread::scope(|scope| {
        let freer = scope.spawn(|| table.take(0x8000));
        std::thread::sleep(std::time::Duration::from_millis(50));
        // The free waits at the door while the table is held.
        assert!(!freer.is_finished());
        assert_eq!(held.len(), 1);
        drop(held);
        assert!(freer.join().unwrap().is_some());
    });
    assert_eq!(table.stats().live_blocks, 0);
}

#[test]
fn allocations_count_per_stack_beyond_the_threads_own_counters() {
    let table = Table::new();
    let stacks = WRITER_STACKS as usize + 100;
    for i in 0..stacks {
        let frames = [ReturnAddress(0x10_0000 + i * 16), ReturnAddress(0x2000)];
        table.insert(0x4000_0000 + i * 16, i + 1, &frames);
        table.insert(0x5000_0000 + i * 16, 1, &frames);
    }
    let allocated = table.allocated();
    assert_eq!(allocated.len(), stacks);
    for (i, &(blocks, bytes)) in allocated.iter().enumerate() {
        assert_eq!((blocks, bytes), (2, i as u64 + 2), "stack {i}");
    }
}

#[test]
fn frees_after_the_writer_is_given_back_go_through_the_shared_writer() {
    let _only = PROCESS_TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let before = TABLE.counts();
    let orphan_before = TABLE.writers.orphan.total_blocks.load(Relaxed);
    std::thread::spawn(|| {
        TABLE.insert(0x7800_0000, 24, &frames(2));
        // What the thread-local destructor does when the thread ends; other destructors of the
        // thread may free blocks after it.
        drop(writers::ReleaseOnExit);
        assert_eq!(TABLE.take(0x7800_0000).map(|b| b.size), Some(24));
        TABLE.insert(0x7800_0010, 8, &frames(2));
        assert!(TABLE.take(0x7800_0010).is_some());
    })
    .join()
    .unwrap();
    let after = TABLE.counts();
    assert_eq!(after.live_blocks, before.live_blocks);
    assert_eq!(after.total_blocks, before.total_blocks + 2);
    assert_eq!(
        TABLE.writers.orphan.total_blocks.load(Relaxed),
        orphan_before + 1
    );
}

#[test]
fn a_held_table_is_consistent_while_threads_change_it() {
    let table = Table::new();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for t in 0..3usize {
            let (table, stop) = (&table, &stop);
            scope.spawn(move || {
                let base = 0x1000_0000 * (t + 1);
                let mut i = 0usize;
                while !stop.load(Relaxed) {
                    let at = base + (i % 512) * 16;
                    table.insert(at, 16 + t, &frames(t as u8));
                    if !i.is_multiple_of(3) {
                        assert!(table.take(at).is_some());
                    }
                    i += 1;
                }
            });
        }
        // Stops the writers when the checks end, also when one fails.
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Relaxed);
            }
        }
        let _stop = Stop(&stop);
        for _ in 0..200 {
            let held = table.lock_all();
            let (mut blocks, mut bytes) = (0u64, 0u64);
            held.for_each_block(|_, block| {
                blocks += 1;
                bytes += block.size;
            });
            let stats = held.stats();
            assert_eq!((stats.live_blocks, stats.live_bytes), (blocks, bytes));
            assert_eq!(held.len() as u64, blocks);
            drop(held);
            std::thread::yield_now();
        }
    });
}

/// The live blocks of a table, `(address, size, tag)`, held still.
fn live(table: &Table) -> Vec<(usize, u64, u32)> {
    let mut blocks = Vec::new();
    table
        .lock_all()
        .for_each_block(|a, b| blocks.push((a, b.size, b.tag)));
    blocks.sort_unstable();
    blocks
}

/// Frees made while their thread is inside the table (a signal handler that interrupted a
/// change) take their blocks out at once: plain blocks, a block with a tag, a block at an
/// address that is not 16-byte aligned.
#[test]
fn frees_nested_in_a_change_are_applied() {
    let table = Table::new();
    let (plain, tagged, odd, kept) = (0x10_0000, 0x10_0100, 0x10_0208, 0x10_0300);
    table.insert(plain, 100, &frames(1));
    table.insert(tagged, 200, &frames(2));
    assert_eq!(table.set_tag(tagged, 7).map(|t| t.1), Some(0));
    table.insert(odd, 300, &frames(3));
    table.insert(kept, 400, &frames(4));
    let inside = table.enter().expect("outside the table");
    table.remove(plain);
    assert_eq!(table.take(tagged), None);
    table.remove(odd);
    table.remove(0x10_0400);
    drop(inside);
    assert_eq!(live(&table), vec![(kept, 400, 0)]);
    let stats = table.stats();
    assert_eq!((stats.live_blocks, stats.live_bytes), (1, 400));
    // The tag went with its block.
    table.insert(tagged, 500, &frames(2));
    assert_eq!(live(&table), vec![(tagged, 500, 0), (kept, 400, 0)]);
}

/// A nested free whose side table its own thread holds (the interrupted change is inside it) is
/// deferred to that side table, and applied before anyone uses it again.
#[test]
fn a_nested_free_into_a_held_side_table_is_deferred() {
    let table = Table::new();
    let tagged = 0x20_0000;
    let held = (1..)
        .map(|i| tagged + i * 0x10)
        .find(|&a| side::side_of(a) == side::side_of(tagged))
        .unwrap();
    table.insert(tagged, 500, &frames(1));
    table.set_tag(tagged, 3);
    table.insert(held, 600, &frames(2));
    let inside = table.enter().expect("outside the table");
    let side = table.side(held);
    // The block waits for the side table, which this thread holds.
    table.remove(tagged);
    drop(side);
    drop(inside);
    assert_eq!(live(&table), vec![(held, 600, 0)]);
    let stats = table.stats();
    assert_eq!((stats.live_blocks, stats.live_bytes), (1, 600));
    // The tag went with the block: a new block there has none.
    table.insert(tagged, 700, &frames(1));
    assert_eq!(live(&table), vec![(tagged, 700, 0), (held, 600, 0)]);
}

/// A side table gives memory back once most of its blocks are gone (down to a small map, which it
/// keeps), and keeps the blocks that remain.
#[test]
fn side_tables_shrink_when_blocks_go() {
    let table = Table::new();
    let addresses: Vec<usize> = (0..40_000).map(|i| 0x40_0000 + i * 0x30).collect();
    for &a in &addresses {
        table.insert(a, 32, &frames(1));
    }
    let capacity = |table: &Table| -> usize {
        (0..side::SIDES)
            .map(|i| table.sides[i].lock().unwrap().blocks.capacity())
            .sum()
    };
    let full = capacity(&table);
    for &a in &addresses[100..] {
        table.remove(a);
    }
    let left = capacity(&table);
    assert!(
        full > side::SIDES * 2048 && left <= side::SIDES * 1024,
        "{left} of {full}"
    );
    let kept: Vec<(usize, u64, u32)> = addresses[..100].iter().map(|&a| (a, 32, 0)).collect();
    assert_eq!(live(&table), kept);
    let stats = table.stats();
    assert_eq!((stats.live_blocks, stats.live_bytes), (100, 3200));
}

/// A random stack of 0 to 40 frames, innermost first, over a few return addresses, so that
/// stacks share their outer frames, differ at the inner end, and repeat.
fn random_stack(rng: &mut Rng) -> Vec<ReturnAddress> {
    let prefix = rng.below(4) as usize;
    let len = rng.below(41) as usize;
    (0..len)
        .map(|i| {
            // The outer frames (high `i`) come from `prefix` alone; the inner ones vary.
            let outer = i >= len / 2;
            let variety = if outer { prefix as u64 } else { rng.below(3) };
            ReturnAddress(0x4000 + (i % 7) * 0x10 + variety as usize)
        })
        .collect()
}

#[test]
fn stack_tree_matches_a_naive_interner() {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let first = var("MEMPROF_TABLE_SEED").unwrap_or(1);
    for seed in first..first + var("MEMPROF_TABLE_CASES").unwrap_or(CASES) {
        let mut rng = Rng(seed);
        let stacks = stacks::Stacks::new();
        // The oracle: each distinct stack, in the order first seen, is its id.
        let mut oracle: Vec<Vec<ReturnAddress>> = Vec::new();
        for _ in 0..1 + rng.below(300) {
            let frames = random_stack(&mut rng);
            let expected = match oracle.iter().position(|s| *s == frames) {
                Some(at) => at,
                None => {
                    oracle.push(frames.clone());
                    oracle.len() - 1
                }
            };
            let id = stacks.intern(&frames);
            assert_eq!(id, StackId(expected as u32), "seed {seed}: {frames:?}");
            assert_eq!(stacks.frames(id), frames, "seed {seed}");
        }
        assert_eq!(stacks.len(), oracle.len(), "seed {seed}");
        for (id, _) in stacks.iter() {
            assert_eq!(stacks.frames(id), oracle[id.0 as usize], "seed {seed}");
        }
        // No more nodes than the distinct non-empty prefixes, counted from the outer end.
        let mut prefixes = std::collections::BTreeSet::new();
        for stack in &oracle {
            for n in 1..=stack.len() {
                prefixes.insert(stack[stack.len() - n..].to_vec());
            }
        }
        assert_eq!(stacks.nodes(), prefixes.len(), "seed {seed}");
    }
}

#[test]
fn stacks_interned_on_many_threads_agree() {
    let table = stacks::Stacks::new();
    let stack = |i: usize| -> Vec<ReturnAddress> {
        (0..20)
            .map(|depth| ReturnAddress(0x5000 + depth * 0x10 + if depth < 3 { i % 50 } else { 0 }))
            .collect()
    };
    let ids: Vec<Vec<StackId>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let table = &table;
                scope.spawn(move || {
                    (0..200)
                        .map(|i| table.intern(&stack((i * 7 + t * 13) % 200)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(table.len(), 50);
    for (t, ids) in ids.iter().enumerate() {
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(table.frames(*id), stack((i * 7 + t * 13) % 200));
        }
    }
}
