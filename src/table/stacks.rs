//! Interned stacks: each distinct raw stack is stored once and named by a dense [`StackId`].
//!
//! A stack is a path in a tree of nodes, each a return address below its parent (pprof's
//! locations, heaptrack's trace tree). The tree's roots are outermost frames: stacks share their
//! outer frames (`main`, the program's loops) and differ at the inner end, so a new stack costs
//! the nodes of its new inner frames only, and its record names its innermost node. Nodes,
//! records and the records' counters sit in append-only arrays of zeroed buckets, read by id
//! without a lock; a bucket's pages cost nothing until used, so the counters mostly cost
//! nothing: those of what was allocated only stacks counted outside the threads' writers use,
//! those of what is live (an array of their own) only a tracked peak. What the first million
//! stacks allocate is counted per thread (see [`super::writers`]), without a locked
//! instruction.
//!
//! Finding the id of a stack: first the thread's cache of recent stacks, by the whole stack's
//! hash, without a lock; then the table's shared cache; past a miss, the tree. A node is indexed
//! by the hash of its whole path from the outermost frame (`index`: one array of words per shard,
//! behind a small lock), so a walk can look up any frame of a stack without the nodes above it:
//! it looks up the innermost frame (a stack seen before), then halves the run of frames it does
//! not know, and adds the nodes of the new inner frames below the deepest one found. A new stack
//! of 32 frames costs about six lookups, the same at a thousand stacks as at a million, and their
//! places in the index are prefetched together before the first. The thread keeps the nodes of
//! the last stacks it walked (one per outermost frame, of a few), so a walk starts below the
//! frames it shares with the last stack that began at the same frame.

mod index;

use crate::address::{ReturnAddress, StackId};
use crate::config::MAX_STACK_DEPTH;
use std::cell::RefCell;
use std::sync::OnceLock;
use std::sync::atomic::{
    AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// Index shards of the stack table; a power of two.
pub(super) const INDEX_SHARDS: usize = 16;

/// Entries of the per-thread cache of recently interned stacks; a power of two.
const RECENT: usize = 512;

/// Entries of the stack table's shared cache of recent stacks, beside the threads' own; a power
/// of two.
const SHARED: usize = 1 << 18;

/// Bits of a shared cache entry that hold its stack id + 1; the others hold the top of its hash.
const SHARED_ID_BITS: u32 = 24;

/// The parent of the outermost frames' nodes, and the leaf of the empty stack.
const ROOT: u32 = u32::MAX;

/// Outer frames a remembered walk keeps: as many as the deepest stack memprof keeps.
const PATH: usize = MAX_STACK_DEPTH;

/// Walks a thread remembers, by their outermost frame; a power of two. Stacks cut at their
/// depth in a deep recursion start at a different outer frame from one recursion level to the
/// next, so one remembered walk would miss from level to level.
const PATHS: usize = 4;

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
    /// `(path hash, node)`, outermost first; the node is [`UNKNOWN`] where the walk did not
    /// look at it (it jumped over that frame, see [`Stacks::walk_from`]).
    nodes: [(u64, u32); PATH],
}

/// A node a remembered walk did not look up.
const UNKNOWN: u32 = u32::MAX - 1;

impl LastPath {
    /// A walk remembered by no thread: for a thread whose own cannot be had.
    const EMPTY: LastPath = LastPath {
        owner: 0,
        len: 0,
        nodes: [(0, UNKNOWN); PATH],
    };
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

    /// The nodes of the stacks this thread last walked, by their outermost frame: a new stack
    /// usually shares most of its outer frames with the one before (a recursion one level
    /// deeper, a sibling call).
    static LAST_PATHS: RefCell<[LastPath; PATHS]> = const {
        RefCell::new(
            [const {
                LastPath {
                    owner: 0,
                    len: 0,
                    nodes: [(0, UNKNOWN); PATH],
                }
            }; PATHS],
        )
    };
}

/// A shard of the node index, held.
pub(super) type HeldShard<'a> = MutexGuard<'a, index::Shard>;

/// Entries in the first bucket of an [`Array`]; bucket `b` holds `FIRST << b`.
const FIRST: usize = 1 << 10;

/// Buckets of an [`Array`]: enough for every 32-bit id.
const BUCKETS: usize = 23;

/// The bucket of entry `i`, and its place there.
fn locate(i: u32) -> (usize, usize) {
    let q = i as usize / FIRST + 1;
    let bucket = (usize::BITS - 1 - q.leading_zeros()) as usize;
    (bucket, i as usize - FIRST * ((1 << bucket) - 1))
}

/// An array of zeroed entries by 32-bit id, in buckets made on first use.
struct Array<T> {
    buckets: [OnceLock<Box<[T]>>; BUCKETS],
}

impl<T: bytemuck::Zeroable> Array<T> {
    const fn new() -> Array<T> {
        Array {
            buckets: [const { OnceLock::new() }; BUCKETS],
        }
    }

    /// Entry `i`, when its bucket is made.
    #[inline]
    fn get(&self, i: u32) -> Option<&T> {
        let (bucket, index) = locate(i);
        self.buckets.get(bucket)?.get()?.get(index)
    }

    /// Entry `i`, its bucket made if need be; `None` when the allocation failed.
    #[inline]
    fn make(&self, i: u32) -> Option<&T> {
        if let Some(entry) = self.get(i) {
            return Some(entry);
        }
        self.make_bucket(i)
    }

    #[cold]
    #[inline(never)]
    fn make_bucket(&self, i: u32) -> Option<&T> {
        let (bucket, index) = locate(i);
        let cell = self.buckets.get(bucket)?;
        if cell.get().is_none() {
            // Zeroed memory: its pages stay untouched, and cost nothing, until entries are used.
            let entries = bytemuck::allocation::try_zeroed_slice_box::<T>(FIRST << bucket).ok()?;
            let _ = cell.set(entries);
        }
        cell.get()?.get(index)
    }
}

/// A node of the tree: a return address called from its parent's. Word 0: the return address,
/// with bits of the hash of its path from the outermost frame ([`node_word`]). Word 1: the parent
/// node + 1 (0 for an outermost frame) in the low half, and the stack whose innermost frame the
/// node is + 1 (0 while there is none) in the high half.
type Node = [AtomicU64; 2];

/// A stack's blocks and bytes: those allocated over the run, where threads do not count them in
/// their own writers (stack ids from 2^20 on, see [`super::Table::allocated`]), or those live
/// now, kept only while the table tracks its peak. Each kind in an array of its own, so that the
/// live ones cost nothing when the peak is not tracked.
type Counters = [AtomicU64; 2];

/// Where counts go when the counters' bucket could not be allocated: lost.
static SPARE: Counters = [const { AtomicU64::new(0) }; 2];

/// One distinct stack's blocks and bytes of one kind, for counting.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StackRecord<'a>(&'a Counters);

impl StackRecord<'_> {
    /// Counts `blocks` of `bytes` in all more.
    #[inline]
    pub(super) fn add(self, blocks: u64, bytes: u64) {
        self.0[0].fetch_add(blocks, Relaxed);
        self.0[1].fetch_add(bytes, Relaxed);
    }

    /// Counts `blocks` of `bytes` in all fewer.
    #[inline]
    pub(super) fn sub(self, blocks: u64, bytes: u64) {
        self.0[0].fetch_sub(blocks, Relaxed);
        self.0[1].fetch_sub(bytes, Relaxed);
    }
}

/// One distinct stack's counts, read.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StackCounts {
    /// Blocks allocated from this stack over the run, where threads do not count them in their
    /// own writers (stack ids from 2^20 on); see [`super::Table::allocated`].
    pub allocated_blocks: u64,
    /// Bytes likewise.
    pub allocated_bytes: u64,
    /// Blocks from this stack live now; kept only while the table tracks its peak.
    pub live_blocks: u64,
    /// Bytes from this stack live now; kept only while the table tracks its peak.
    pub live_bytes: u64,
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

/// What a label set adds to a stack's hash: nothing for none.
#[inline(always)]
fn labels_hash(labels: u32) -> u64 {
    const K: u64 = 0xC2B2_AE3D_27D4_EB4F;
    (u64::from(labels).wrapping_mul(K)).rotate_left(29)
}

/// The address of the node that names a label set, below a labelled stack's innermost frame,
/// with the set's id in the low half: above the user half of a 48-bit address space, where no
/// return address of a program is, and within the 48 bits a node keeps ([`ADDRESS_BITS`]).
const LABEL_NODE: usize = 0x0000_FF00_0000_0000;

/// The bits of a return address a node keeps: what a user-space address on the 64-bit targets
/// has. The 16 above hold bits of the node's path hash ([`node_word`]).
const ADDRESS_BITS: u32 = 48;

/// A node's first word: the low [`ADDRESS_BITS`] of its return address, and bits 16 to 31 of its
/// path hash above them. A lookup by path hash compares it whole: with the high half of the hash
/// in the index's word and the low bits in the shard's number, 52 bits of the hash and the
/// address must match.
#[inline]
fn node_word(hash: u64, address: usize) -> u64 {
    let address = address as u64 & ((1 << ADDRESS_BITS) - 1);
    address | ((hash >> 16) & 0xFFFF) << ADDRESS_BITS
}

/// The label set a node's address names, when it is a label's node.
#[inline]
fn label_of(address: usize) -> Option<u32> {
    (address & !0xFFFF_FFFF == LABEL_NODE).then_some(address as u32)
}

/// The hash of the path above the outermost frames: the root's.
const ROOT_HASH: u64 = 0x243F_6A88_85A3_08D3;

/// The hash of a node's path from the outermost frame: the hash of its parent's path, `parent`,
/// with its return address. A node's key in the index: a walk can look a frame up without the
/// nodes above it, and so jump over the frames a new stack shares with the stacks seen.
#[inline]
fn path_hash(parent: u64, address: usize) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let h = (parent.rotate_left(23) ^ address as u64).wrapping_mul(K);
    (h ^ (h >> 29)).wrapping_mul(K) ^ (h >> 32)
}

/// The index shard of a node's path hash: its low bits, which the shard's words do not keep
/// (they keep the high half, see [`index`]).
#[inline]
fn shard_of(hash: u64) -> usize {
    hash as usize % INDEX_SHARDS
}

/// The stack table.
pub(crate) struct Stacks {
    /// The innermost node + 1 of each stack by stack id (0 for the empty stack).
    leaves: Array<AtomicU32>,
    /// Stacks interned, whose entries in `leaves` are written. Ids are given in order under the
    /// lock of the index's first shard, which `fork` holds with the others.
    len: AtomicU32,
    /// Blocks and bytes allocated, by stack id (stack ids from 2^20 on).
    allocated: Array<Counters>,
    /// Blocks and bytes live, by stack id, while the peak is tracked.
    live: Array<Counters>,
    /// Nodes of the tree by node id.
    nodes: Array<Node>,
    /// Nodes in the tree; node ids are given under the lock of the node's index shard.
    node_count: AtomicU32,
    /// Node ids by the hash of their path ([`path_hash`]), sharded by its low bits ([`shard_of`]).
    index: [Mutex<index::Shard>; INDEX_SHARDS],
    /// Where each shard's words are, to prefetch from without its lock.
    hints: [index::Hint; INDEX_SHARDS],
    /// The id of the empty stack + 1; 0 until it is interned.
    empty: AtomicU64,
    /// This table's tag for the threads' caches of recent ids; 0 until first needed.
    tag: AtomicU64,
    /// Recently interned stacks of every thread, [`SHARED`] entries by the stack's hash, made on
    /// first use: the ids a thread's own cache misses when its stacks are more than it holds (a
    /// deep recursion, many call paths at a large depth). An entry is one word, the top of the
    /// hash over the id + 1, so that a reader never sees one stack's hash with another's id.
    shared: OnceLock<Box<[AtomicU64]>>,
}

impl Stacks {
    pub(super) const fn new() -> Stacks {
        Stacks {
            leaves: Array::new(),
            len: AtomicU32::new(0),
            allocated: Array::new(),
            live: Array::new(),
            nodes: Array::new(),
            node_count: AtomicU32::new(0),
            index: [const { Mutex::new(index::Shard::new()) }; INDEX_SHARDS],
            hints: [const { index::Hint::new() }; INDEX_SHARDS],
            empty: AtomicU64::new(0),
            tag: AtomicU64::new(0),
            shared: OnceLock::new(),
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

    /// The id of `frames` without labels, interning it on first sight: [`Stacks::intern_labelled`]
    /// with label set 0, for tests.
    #[cfg(test)]
    pub(crate) fn intern(&self, frames: &[ReturnAddress]) -> StackId {
        self.intern_labelled(frames, 0)
    }

    /// The id of `frames` with the label set `labels` (0 for none), interning it on first
    /// sight: a labelled stack is its frames' path in the tree and one node below it that names
    /// the set ([`LABEL_NODE`]), so that it shares every frame's node with the same stack
    /// unlabelled and costs one node more. Inlined always: the allocation path's two instances
    /// (one per kind of block, `record::new_block`) both call it, and a plain `#[inline]` leaves
    /// it a call in each of them; misses go out of line, to [`Stacks::intern_missed`].
    #[inline(always)]
    pub(crate) fn intern_labelled(&self, frames: &[ReturnAddress], labels: u32) -> StackId {
        let hash = hash(frames) ^ labels_hash(labels);
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
        self.intern_missed(frames, labels, hash, tag)
    }

    /// [`Stacks::intern_labelled`] past a miss of the thread's cache: the id from the tree, then cached.
    /// Out of line, so that the allocation path's frame holds none of it (resetting the cache
    /// builds its whole array).
    #[cold]
    #[inline(never)]
    fn intern_missed(&self, frames: &[ReturnAddress], labels: u32, hash: u64, tag: u64) -> StackId {
        let id = match self.shared_get(hash) {
            Some(id) => id,
            None => {
                let id = self.intern_walked(frames, labels, tag);
                self.shared_put(hash, id);
                id
            }
        };
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

    /// The id of the stack of `hash` in the shared cache, when there. As in the threads' caches
    /// a hit is trusted on its hash: 56 of its bits (the entry's place and the top 40 kept in it),
    /// about one chance in 2^56 per lookup that two distinct stacks collide.
    #[inline]
    fn shared_get(&self, hash: u64) -> Option<StackId> {
        let entry = self.shared.get()?[hash as usize % SHARED].load(Acquire);
        let id = entry & ((1 << SHARED_ID_BITS) - 1);
        (id != 0 && entry >> SHARED_ID_BITS == hash >> SHARED_ID_BITS)
            .then(|| StackId(id as u32 - 1))
    }

    /// Keeps `id`, the stack of `hash`, in the shared cache (made on first use), in place of the
    /// stack there; ids past what an entry holds are not kept.
    fn shared_put(&self, hash: u64, id: StackId) {
        let Some(plus_one) = u64::from(id.0).checked_add(1) else {
            return;
        };
        if plus_one >> SHARED_ID_BITS != 0 {
            return;
        }
        let entries = match self.shared.get() {
            Some(entries) => entries,
            None => {
                // Zeroed: untouched pages cost nothing. Without the memory, nothing is cached.
                let Ok(made) = bytemuck::allocation::try_zeroed_slice_box::<AtomicU64>(SHARED)
                else {
                    return;
                };
                let _ = self.shared.set(made);
                match self.shared.get() {
                    Some(entries) => entries,
                    None => return,
                }
            }
        };
        let entry = (hash >> SHARED_ID_BITS << SHARED_ID_BITS) | plus_one;
        entries[hash as usize % SHARED].store(entry, Release);
    }

    /// The id of `frames` from the tree: the innermost node, found below the frames shared with
    /// the thread's last walk, then the node of `labels` below it (when not 0), then its stack.
    #[cold]
    fn intern_walked(&self, frames: &[ReturnAddress], labels: u32, tag: u64) -> StackId {
        let path = frames.last().map_or(0, |outermost| {
            ((outermost.0 as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59) as usize % PATHS
        });
        let (leaf, leaf_hash) = match LAST_PATHS.try_with(|last| match last.try_borrow_mut() {
            Ok(mut last) => Some(self.walk_from(&mut last[path], frames, tag)),
            Err(_) => None,
        }) {
            Ok(Some(leaf)) => leaf,
            _ => {
                let mut none = LastPath::EMPTY;
                self.walk_from(&mut none, frames, tag)
            }
        };
        // Should the label's node not be made, the stack goes unlabelled.
        let leaf = match labels {
            0 => leaf,
            labels => self
                .child(leaf, leaf_hash, LABEL_NODE | labels as usize)
                .map_or(leaf, |(node, _)| node),
        };
        self.stack_of(leaf)
    }

    /// The innermost node of `frames` and the hash of its path, found past the frames it shares
    /// with `last`, which then holds the nodes of `frames`. Should a node's memory run out, the
    /// stack ends at the frames found so far.
    ///
    /// The nodes of a stack's outer frames are in the tree before those of its inner ones, so the
    /// frames of `frames` already in the tree are a run from the outermost one: the walk looks up
    /// the innermost frame first (a stack seen before, out of the caches), then halves the run it
    /// does not know, a lookup by path hash each, and adds the nodes of the new inner frames
    /// below the last one found. A new stack of 32 frames that shares none with `last` costs
    /// about six lookups, not 32.
    fn walk_from(&self, last: &mut LastPath, frames: &[ReturnAddress], tag: u64) -> (u32, u64) {
        if last.owner != tag {
            last.owner = tag;
            last.len = 0;
        }
        let depth = frames.len().min(PATH);
        let outward = || frames.iter().rev().map(|f| f.0);
        // The path hash of every frame, outermost first.
        let mut hashes = [0u64; PATH];
        let mut hash = ROOT_HASH;
        for (slot, address) in hashes.iter_mut().zip(outward()) {
            hash = path_hash(hash, address);
            *slot = hash;
        }
        let shared = last.nodes[..last.len]
            .iter()
            .zip(&hashes[..depth])
            .take_while(|&(&(remembered, _), &hash)| remembered == hash)
            .count();
        // The nodes of this walk's frames, where known: those shared with the last walk first.
        let mut nodes = [UNKNOWN; PATH];
        for (node, remembered) in nodes.iter_mut().zip(&last.nodes[..shared]) {
            *node = remembered.1;
        }
        // The deepest frame known to be in the tree: `found` frames, ending at `node`.
        let (mut found, mut node) = (0, ROOT);
        if let Some(at) = nodes[..shared].iter().rposition(|&n| n != UNKNOWN) {
            (found, node) = (at + 1, nodes[at]);
        }
        let address_at = |level: usize| frames[frames.len() - 1 - level].0;
        if found < depth {
            for &hash in &hashes[found..depth] {
                self.hints[shard_of(hash)].prefetch(hash);
            }
        }
        // The frames in the tree end between `found` and `absent`, excluded.
        let mut absent = depth + 1;
        while found + 1 < absent {
            let probe = match absent == depth + 1 {
                true => depth,
                false => (found + absent) / 2,
            };
            match self.find(hashes[probe - 1], address_at(probe - 1)) {
                Some(id) => {
                    (found, node) = (probe, id);
                    nodes[probe - 1] = id;
                }
                None => absent = probe,
            }
        }
        let mut hash = match found {
            0 => ROOT_HASH,
            n => hashes[n - 1],
        };
        let mut walked = found;
        for (level, slot) in nodes.iter_mut().enumerate().take(depth).skip(found) {
            match self.child(node, hash, address_at(level)) {
                Some((child, child_hash)) => {
                    (node, hash) = (child, child_hash);
                    *slot = child;
                    walked = level + 1;
                }
                None => break,
            }
        }
        for ((remembered, &hash), &node) in
            last.nodes.iter_mut().zip(&hashes).zip(&nodes).take(walked)
        {
            *remembered = (hash, node);
        }
        last.len = walked;
        (node, hash)
    }

    /// The return address and parent of node `id`, which is in the tree.
    #[inline]
    fn node(&self, id: u32) -> (usize, u32) {
        match self.nodes.get(id) {
            Some(node) => (
                (node[0].load(Relaxed) & ((1 << ADDRESS_BITS) - 1)) as usize,
                (node[1].load(Relaxed) as u32).wrapping_sub(1),
            ),
            None => (0, ROOT),
        }
    }

    /// The node whose path hashes to `hash`, its return address `address`, when in the tree.
    fn find(&self, hash: u64, address: usize) -> Option<u32> {
        let index = self.index[shard_of(hash)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let word = node_word(hash, address);
        index.find(hash, |id| self.word(id) == word)
    }

    /// The first word of node `id` ([`node_word`]), which is in the tree.
    #[inline]
    fn word(&self, id: u32) -> u64 {
        self.nodes.get(id).map_or(0, |node| node[0].load(Relaxed))
    }

    /// The node of `address` below `parent` (whose path hashes to `parent_hash`) with its path's
    /// hash, added on first sight; `None` when its memory could not be allocated.
    fn child(&self, parent: u32, parent_hash: u64, address: usize) -> Option<(u32, u64)> {
        let hash = path_hash(parent_hash, address);
        let mut index = self.index[shard_of(hash)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let word = node_word(hash, address);
        if let Some(id) = index.find(hash, |id| {
            self.word(id) == word && self.node(id).1 == parent
        }) {
            return Some((id, hash));
        }
        // Every id below `node_count` is given once; the node is written before the index, or
        // this thread's last path, or a stack's leaf hands it out.
        let id = self.node_count.fetch_add(1, Relaxed);
        let node = self.nodes.make(id)?;
        node[0].store(word, Relaxed);
        node[1].store(u64::from(parent.wrapping_add(1)), Relaxed);
        index
            .insert(hash, id, &self.hints[shard_of(hash)])
            .then_some((id, hash))
    }

    /// The stack whose innermost node is `leaf`, interned on first sight. Should its memory run
    /// out, the stack is counted as the first one.
    fn stack_of(&self, leaf: u32) -> StackId {
        let slot = match leaf {
            ROOT => &self.empty,
            _ => match self.nodes.get(leaf) {
                Some(node) => &node[1],
                None => return StackId(0),
            },
        };
        match slot.load(Acquire) >> 32 {
            0 => {}
            id => return StackId(id as u32 - 1),
        }
        let _adding = self.index[0].lock().unwrap_or_else(PoisonError::into_inner);
        match slot.load(Acquire) >> 32 {
            0 => {}
            id => return StackId(id as u32 - 1),
        }
        let id = self.len.load(Relaxed);
        let Some(entry) = self.leaves.make(id) else {
            return StackId(0);
        };
        entry.store(leaf.wrapping_add(1), Relaxed);
        self.len.store(id + 1, Release);
        slot.fetch_or(u64::from(id + 1) << 32, Release);
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

    /// The allocated blocks and bytes of an interned stack, to count in.
    #[inline]
    pub(crate) fn allocated_record(&self, id: StackId) -> StackRecord<'_> {
        StackRecord(self.allocated.make(id.0).unwrap_or(&SPARE))
    }

    /// The live blocks and bytes of an interned stack, to count an allocation in.
    #[inline]
    pub(crate) fn live_record(&self, id: StackId) -> StackRecord<'_> {
        StackRecord(self.live.make(id.0).unwrap_or(&SPARE))
    }

    /// The live blocks and bytes of an interned stack, to count a free in: never allocates (a
    /// free may come from a signal handler), so counts go nowhere while the stack's counters
    /// are not made (no allocation from it was counted in them).
    #[inline]
    pub(crate) fn made_live_record(&self, id: StackId) -> StackRecord<'_> {
        StackRecord(self.live.get(id.0).unwrap_or(&SPARE))
    }

    /// The counts of an interned stack.
    pub(crate) fn counts(&self, id: u32) -> StackCounts {
        let pair = |array: &Array<Counters>| {
            array
                .get(id)
                .map_or((0, 0), |c| (c[0].load(Relaxed), c[1].load(Relaxed)))
        };
        let (allocated_blocks, allocated_bytes) = pair(&self.allocated);
        let (live_blocks, live_bytes) = pair(&self.live);
        StackCounts {
            allocated_blocks,
            allocated_bytes,
            live_blocks,
            live_bytes,
        }
    }

    /// The return addresses of an interned stack, innermost first, appended to `out`. A walk up
    /// the tree: for reports, snapshots and the trace's definitions, not the allocation path.
    /// A label's node is not a frame: it is left out.
    pub(crate) fn frames_into(&self, id: StackId, out: &mut Vec<ReturnAddress>) {
        let mut node = self.leaf(id);
        while node != ROOT {
            let (address, parent) = self.node(node);
            if label_of(address).is_none() {
                out.push(ReturnAddress(address));
            }
            node = parent;
        }
    }

    /// The innermost node of an interned stack.
    fn leaf(&self, id: StackId) -> u32 {
        self.leaves
            .get(id.0)
            .map_or(ROOT, |leaf| leaf.load(Relaxed).wrapping_sub(1))
    }

    /// The label set of an interned stack; 0 for none.
    pub(crate) fn labels(&self, id: StackId) -> u32 {
        match self.leaf(id) {
            ROOT => 0,
            leaf => label_of(self.node(leaf).0).unwrap_or(0),
        }
    }

    /// The return addresses of an interned stack, innermost first.
    pub(crate) fn frames(&self, id: StackId) -> Vec<ReturnAddress> {
        let mut out = Vec::new();
        self.frames_into(id, &mut out);
        out
    }

    /// Number of interned stacks; ids run from 0 to this.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Acquire) as usize
    }

    /// Number of nodes in the tree.
    #[cfg(test)]
    pub(crate) fn nodes(&self) -> usize {
        self.node_count.load(Relaxed) as usize
    }

    /// Whether no stack was interned yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every stack's counts, by id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (StackId, StackCounts)> {
        (0..self.len() as u32).map(|id| (StackId(id), self.counts(id)))
    }
}

#[cfg(test)]
mod tests;
