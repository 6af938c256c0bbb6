//! Interned stacks: each distinct raw stack is stored once and named by a dense [`StackId`].
//!
//! A stack is a path in a tree of nodes, each a return address below its parent (pprof's
//! locations, heaptrack's trace tree). The tree's roots are outermost frames: stacks share their
//! outer frames (`main`, the program's loops) and differ at the inner end, so a new stack costs
//! the nodes of its new inner frames only, and its record names its innermost node. Nodes and
//! records sit in append-only concurrent vectors, so both are read by id without a lock, and a
//! record's counters are plain atomics. What the first million stacks allocate is counted per
//! thread instead (see [`super::writers`]), without a locked instruction.
//!
//! Finding the id of a stack: first the thread's cache of recent stacks, by the whole stack's
//! hash, without a lock; past a miss, node by node from the outermost frame, each child of a node
//! through a small hash index of (parent, return address) sharded by that pair's hash. The thread
//! keeps the nodes of the last stack it walked, so a walk starts below the frames it shares with
//! that stack.

use crate::address::{ReturnAddress, StackId};
use crate::config::MAX_STACK_DEPTH;
use std::cell::RefCell;
use std::sync::atomic::{
    AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// Index shards of the stack table; a power of two.
pub(super) const INDEX_SHARDS: usize = 16;

/// Entries of the per-thread cache of recently interned stacks; a power of two.
const RECENT: usize = 512;

/// The parent of the outermost frames' nodes, and the leaf of the empty stack.
const ROOT: u32 = u32::MAX;

/// A node's stack before it is the innermost node of an interned stack.
const NO_STACK: u32 = u32::MAX;

/// Frames of the longest stack the thread's last walk remembers: the deepest walk memprof makes,
/// with room for the frames it trims.
const PATH: usize = MAX_STACK_DEPTH * 2;

/// Tags of stack tables; 0 is never one.
static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

/// A thread's recently interned stacks, all of one stack table.
struct Recent {
    /// The tag of the stack table the ids belong to; 0 for none.
    owner: u64,
    /// `(hash, id)` by `hash % RECENT`.
    ids: [(u64, u32); RECENT],
}

/// Entries that match no stack: the hash of each is one no lookup of its slot asks for.
const fn no_ids() -> [(u64, u32); RECENT] {
    let mut ids = [(0, u32::MAX); RECENT];
    let mut slot = 0;
    while slot < RECENT {
        ids[slot].0 = (slot ^ 1) as u64;
        slot += 1;
    }
    ids
}

/// The nodes of the last stack a thread walked in the tree, outermost first.
struct LastPath {
    /// The tag of the stack table the nodes belong to; 0 for none.
    owner: u64,
    /// Frames walked.
    len: usize,
    /// `(return address, node)`, outermost first.
    nodes: [(usize, u32); PATH],
}

thread_local! {
    /// This thread's recently interned stacks: most allocations repeat a stack the thread used
    /// shortly before, and a hit needs no lock.
    static RECENT_IDS: RefCell<Recent> = const {
        RefCell::new(Recent {
            owner: 0,
            ids: no_ids(),
        })
    };

    /// The nodes of the stack this thread last walked: a new stack usually shares most of its
    /// outer frames with the one before (a recursion one level deeper, a sibling call).
    static LAST_PATH: RefCell<LastPath> = const {
        RefCell::new(LastPath {
            owner: 0,
            len: 0,
            nodes: [(0, ROOT); PATH],
        })
    };
}

/// A shard of the node index, held.
pub(super) type HeldShard<'a> = MutexGuard<'a, hashbrown::HashTable<u32>>;

/// One node of the tree: a return address called from its parent's.
#[derive(Debug)]
struct Node {
    /// The return address.
    address: usize,
    /// The node of the next frame out; [`ROOT`] for an outermost frame.
    parent: u32,
    /// The stack whose innermost frame this node is; [`NO_STACK`] while there is none.
    stack: AtomicU32,
}

/// One distinct stack and its counters.
#[derive(Debug)]
pub(crate) struct StackRecord {
    /// The node of the innermost frame; [`ROOT`] for the empty stack.
    leaf: u32,
    /// Blocks allocated from this stack over the run, where threads do not count them in their
    /// own writers (stack ids from 2^20 on); see [`super::Table::allocated`].
    pub allocated_blocks: AtomicU64,
    /// Bytes likewise.
    pub allocated_bytes: AtomicU64,
    /// Blocks from this stack live now; kept only while the table tracks its peak.
    pub live_blocks: AtomicU64,
    /// Bytes from this stack live now; kept only while the table tracks its peak.
    pub live_bytes: AtomicU64,
}

impl StackRecord {
    /// Counts a block of `bytes` live (`true`) or gone (`false`), for the peak table.
    #[inline]
    pub(super) fn on_live(&self, live: bool, bytes: u64) {
        if live {
            self.live_blocks.fetch_add(1, Relaxed);
            self.live_bytes.fetch_add(bytes, Relaxed);
        } else {
            self.live_blocks.fetch_sub(1, Relaxed);
            self.live_bytes.fetch_sub(bytes, Relaxed);
        }
    }
}

/// Hashes a raw stack: four independent multiply lanes, so the hash of a 30-frame stack is not one
/// 30-step dependency chain.
#[inline]
pub(crate) fn hash(frames: &[ReturnAddress]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [frames.len() as u64, 1, 2, 3];
    let mut chunks = frames.chunks_exact(4);
    for chunk in &mut chunks {
        for (lane, frame) in lanes.iter_mut().zip(chunk) {
            *lane = (*lane ^ frame.0 as u64).wrapping_mul(K);
        }
    }
    for (lane, frame) in lanes.iter_mut().zip(chunks.remainder()) {
        *lane = (*lane ^ frame.0 as u64).wrapping_mul(K);
    }
    let folded =
        lanes[0].rotate_left(7) ^ lanes[1].rotate_left(19) ^ lanes[2].rotate_left(31) ^ lanes[3];
    (folded ^ (folded >> 29)).wrapping_mul(K)
}

/// Hashes a node's key: its parent and its return address.
#[inline]
fn node_hash(parent: u32, address: usize) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let h = ((address as u64) ^ u64::from(parent).rotate_left(32)).wrapping_mul(K);
    (h ^ (h >> 29)).wrapping_mul(K)
}

/// The index shard of a node's key hash.
#[inline]
fn shard_of(hash: u64) -> usize {
    (hash >> 60) as usize % INDEX_SHARDS
}

/// The stack table.
pub(crate) struct Stacks {
    /// Records by stack id.
    records: boxcar::Vec<StackRecord>,
    /// Nodes of the tree by node id.
    nodes: boxcar::Vec<Node>,
    /// Node ids by the hash of (parent, return address), sharded by the hash's top bits.
    index: [Mutex<hashbrown::HashTable<u32>>; INDEX_SHARDS],
    /// The id of the empty stack; [`NO_STACK`] until it is interned.
    empty: AtomicU32,
    /// This table's tag for the threads' caches of recent ids; 0 until first needed.
    tag: AtomicU64,
}

impl Stacks {
    pub(super) const fn new() -> Stacks {
        Stacks {
            records: boxcar::Vec::new(),
            nodes: boxcar::Vec::new(),
            index: [const { Mutex::new(hashbrown::HashTable::new()) }; INDEX_SHARDS],
            empty: AtomicU32::new(NO_STACK),
            tag: AtomicU64::new(0),
        }
    }

    /// This table's tag, assigned on first use: no other stack table of the process has it.
    #[inline]
    fn tag(&self) -> u64 {
        match self.tag.load(Relaxed) {
            0 => self.assign_tag(),
            tag => tag,
        }
    }

    #[cold]
    fn assign_tag(&self) -> u64 {
        let new = NEXT_TAG.fetch_add(1, Relaxed);
        match self.tag.compare_exchange(0, new, Relaxed, Relaxed) {
            Ok(_) => new,
            Err(current) => current,
        }
    }

    /// The id of `frames`, interning it on first sight. Inlined always: the allocation path's
    /// two instances (one per kind of block) both call it, and a plain `#[inline]` leaves it a
    /// call in each of them (misses go out of line, to [`Stacks::intern_missed`]).
    #[inline(always)]
    pub(crate) fn intern(&self, frames: &[ReturnAddress]) -> StackId {
        let hash = hash(frames);
        let slot = hash as usize % RECENT;
        let tag = self.tag();
        let hint = RECENT_IDS
            .try_with(|recent| {
                let recent = recent.try_borrow().ok()?;
                (recent.owner == tag).then(|| recent.ids[slot])
            })
            .ok()
            .flatten();
        // A hit is trusted on its 64-bit hash (the cache holds ids of this table only, and every
        // id it holds was interned): two distinct stacks would have to collide, about one chance
        // in 2^64 per lookup.
        if let Some((cached, id)) = hint
            && cached == hash
        {
            return StackId(id);
        }
        self.intern_missed(frames, hash, tag)
    }

    /// [`Stacks::intern`] past a miss of the thread's cache: the id from the tree, then cached.
    /// Out of line, so that the allocation path's frame holds none of it (resetting the cache
    /// builds its whole array).
    #[cold]
    #[inline(never)]
    fn intern_missed(&self, frames: &[ReturnAddress], hash: u64, tag: u64) -> StackId {
        let id = self.intern_walked(frames, tag);
        let _ = RECENT_IDS.try_with(|recent| {
            if let Ok(mut recent) = recent.try_borrow_mut() {
                if recent.owner != tag {
                    recent.owner = tag;
                    recent.ids = no_ids();
                }
                recent.ids[hash as usize % RECENT] = (hash, id.0);
            }
        });
        id
    }

    /// The id of `frames` from the tree: the innermost node, found from the outermost frame in,
    /// past the frames shared with the thread's last walk, then its stack.
    #[cold]
    fn intern_walked(&self, frames: &[ReturnAddress], tag: u64) -> StackId {
        let leaf = match LAST_PATH.try_with(|last| match last.try_borrow_mut() {
            Ok(mut last) => Some(self.walk_from(&mut last, frames, tag)),
            Err(_) => None,
        }) {
            Ok(Some(leaf)) => leaf,
            _ => frames
                .iter()
                .rev()
                .fold(ROOT, |node, f| self.child(node, f.0)),
        };
        self.stack_of(leaf)
    }

    /// The innermost node of `frames`, walked below the frames it shares with `last`, which then
    /// holds the nodes of `frames`.
    fn walk_from(&self, last: &mut LastPath, frames: &[ReturnAddress], tag: u64) -> u32 {
        if last.owner != tag {
            last.owner = tag;
            last.len = 0;
        }
        let outward = frames.iter().rev().map(|f| f.0);
        let shared = last.nodes[..last.len]
            .iter()
            .zip(outward.clone())
            .take_while(|&(&(address, _), frame)| address == frame)
            .count();
        let mut node = match shared {
            0 => ROOT,
            n => last.nodes[n - 1].1,
        };
        last.len = shared;
        for address in outward.skip(shared) {
            node = self.child(node, address);
            if last.len < PATH {
                last.nodes[last.len] = (address, node);
                last.len += 1;
            }
        }
        node
    }

    /// The node of `address` below `parent`, added on first sight.
    fn child(&self, parent: u32, address: usize) -> u32 {
        let hash = node_hash(parent, address);
        let mut index = self.index[shard_of(hash)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let same = |id: &u32| {
            let node = &self.nodes[*id as usize];
            node.parent == parent && node.address == address
        };
        if let Some(&id) = index.find(hash, same) {
            return id;
        }
        let id = self.nodes.push(Node {
            address,
            parent,
            stack: AtomicU32::new(NO_STACK),
        }) as u32;
        index.insert_unique(hash, id, |id| {
            let node = &self.nodes[*id as usize];
            node_hash(node.parent, node.address)
        });
        id
    }

    /// The stack whose innermost node is `leaf`, interned on first sight under the lock of the
    /// node's index shard (the empty stack's under the first shard's).
    fn stack_of(&self, leaf: u32) -> StackId {
        let (slot, shard) = match leaf {
            ROOT => (&self.empty, 0),
            _ => {
                let node = &self.nodes[leaf as usize];
                (&node.stack, shard_of(node_hash(node.parent, node.address)))
            }
        };
        match slot.load(Acquire) {
            NO_STACK => {}
            id => return StackId(id),
        }
        let _held = self.index[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match slot.load(Acquire) {
            NO_STACK => {}
            id => return StackId(id),
        }
        let id = self.records.push(StackRecord {
            leaf,
            allocated_blocks: AtomicU64::new(0),
            allocated_bytes: AtomicU64::new(0),
            live_blocks: AtomicU64::new(0),
            live_bytes: AtomicU64::new(0),
        }) as u32;
        slot.store(id, Release);
        StackId(id)
    }

    /// Every shard of the index, held (for `fork`: no other thread is interning meanwhile). With
    /// `only_try`, `None` when a shard is held already, which may be by this thread.
    pub(super) fn hold_index(&self, only_try: bool) -> Option<[HeldShard<'_>; INDEX_SHARDS]> {
        let shards: [Option<HeldShard<'_>>; INDEX_SHARDS] =
            std::array::from_fn(|i| match only_try {
                false => Some(self.index[i].lock().unwrap_or_else(PoisonError::into_inner)),
                true => match self.index[i].try_lock() {
                    Ok(guard) => Some(guard),
                    Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                    Err(TryLockError::WouldBlock) => None,
                },
            });
        if shards.iter().any(Option::is_none) {
            return None;
        }
        Some(shards.map(|shard| shard.expect("every shard is held")))
    }

    /// The record of an interned stack.
    #[inline]
    pub(crate) fn record(&self, id: StackId) -> &StackRecord {
        // Ids are handed out only after their record is written, and records are never removed.
        &self.records[id.0 as usize]
    }

    /// The return addresses of an interned stack, innermost first, appended to `out`. A walk up
    /// the tree: for reports, snapshots and the trace's definitions, not the allocation path.
    pub(crate) fn frames_into(&self, id: StackId, out: &mut Vec<ReturnAddress>) {
        let mut node = self.record(id).leaf;
        while node != ROOT {
            let n = &self.nodes[node as usize];
            out.push(ReturnAddress(n.address));
            node = n.parent;
        }
    }

    /// The return addresses of an interned stack, innermost first.
    pub(crate) fn frames(&self, id: StackId) -> Vec<ReturnAddress> {
        let mut out = Vec::new();
        self.frames_into(id, &mut out);
        out
    }

    /// Number of interned stacks; ids run from 0 to this.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.records.count()
    }

    /// Number of nodes in the tree.
    #[cfg(test)]
    pub(crate) fn nodes(&self) -> usize {
        self.nodes.count()
    }

    /// Whether no stack was interned yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Every record, by id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (StackId, &StackRecord)> {
        self.records.iter().map(|(id, r)| (StackId(id as u32), r))
    }
}

#[cfg(test)]
mod tests {
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

    /// The resident set of this process, in bytes.
    fn resident() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
        let pages: usize = statm.split(' ').nth(1).and_then(|p| p.parse().ok()).expect("rss");
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
        let mut frames: Vec<ReturnAddress> =
            (0..outer).map(|i| ReturnAddress(0x1000 + i * 0x10)).collect();
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
}
