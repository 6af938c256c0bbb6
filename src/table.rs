//! The live table: every live block by address, with its size and interned stack.
//!
//! A block is one word in the [`shadow`] of the address space, at a place computed from its
//! address, so consecutive blocks have neighbouring words and the allocation and free paths touch
//! cache lines they touched moments before. What does not fit a word (sizes of 4 GiB or more, type
//! tags, addresses the shadow cannot hold) is rare and kept in side tables behind small locks.
//! Counters are per thread ([`writers`]): each recording thread writes its own with plain stores,
//! and readers add them up. A change of the table costs one locked instruction, the door that
//! lets a reader hold the table still ([`Table::lock_all`]) while it copies or scans it. A block's
//! stack is interned once in [`stacks`]; the block keeps only the stack's id. Everything here is
//! called inside the reentrancy guard, so the table's own growth goes to the wrapped allocator
//! unrecorded.
//!
//! The heap's peak is counted from per-thread batches of at most [`PEAK_BATCH`] bytes, so without
//! [`Table::set_track_peak`] it may miss the true peak by that much per thread; with it, every
//! change reaches the peak counter at once and the peak is exact.
//!
//! Under sampling (a non-zero [`Table::sample_interval`]) only sampled blocks are in the table and
//! every count is an estimate: allocated totals add each block's randomly rounded weight, live
//! figures sum the weights of the live blocks when they are read, and a small counting filter lets
//! the free of a block that was never sampled skip the table.

#![forbid(unsafe_code)]

pub mod shadow;
pub mod stacks;
pub mod stats;
pub mod writers;

use crate::address::ReturnAddress;
use crate::guard::Guard;
use crate::sampling;
use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use writers::{CLAIMED, Entered, MINE, RELEASE, RELEASED, Writer, bump};

pub use shadow::Shadow;
pub use stacks::{StackId, StackRecord, Stacks};
pub use stats::{HeapStats, Peak, PeakTable};

thread_local! {
    /// How many tables this thread holds still, or side tables it holds: while it holds any, the
    /// blocks it frees are the table's own memory, and looking them up would wait for itself.
    static HELD: Cell<u32> = const { Cell::new(0) };
}

/// Whether the current thread holds a table still, or one of its side tables.
#[inline]
pub fn holding_table() -> bool {
    HELD.try_with(Cell::get).unwrap_or(0) != 0
}

/// Counts a hold for [`holding_table`] while it lives.
struct Hold;

impl Hold {
    fn new() -> Hold {
        let _ = HELD.try_with(|held| held.set(held.get() + 1));
        Hold
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let _ = HELD.try_with(|held| held.set(held.get() - 1));
    }
}

/// Side tables; a power of two.
const SIDES: usize = 16;

/// Slots of the sampled-block filter; a power of two. Each slot is a byte, so the filter takes
/// 16 KiB, small enough for the first-level cache that every free reads it from, and a free's
/// check is one load and a compare.
const FILTER: usize = 1 << 14;

/// A filter counter's largest value; a counter that reaches it stays there.
const COUNT_MAX: u8 = u8::MAX;

/// Live bytes a thread may gather before it adds them to the peak counter, unless the peak is
/// tracked exactly.
pub const PEAK_BATCH: i64 = 64 * 1024;

/// Stacks whose allocations a thread counts in its own writer, without a locked instruction: the
/// first million interned (a program with deep stacks makes tens of thousands). Their counters
/// are made as a thread first uses them, so its memory for them follows the stacks it allocates
/// from: 5 KiB per writer, then 1 KiB per 64 ids it touches and 4 KiB per 16,384 ids past the
/// first 16,384. The stacks after them count in shared atomics.
const WRITER_STACKS: u32 = 1 << 20;

/// Ids of tables, so a thread knows which table its claimed writer belongs to.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// What the table knows of one live block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Requested size in bytes.
    pub size: u64,
    /// The stack that allocated it (or reallocated it last).
    pub stack: StackId,
    /// A type tag; 0 means unknown. Reserved for per-type attribution.
    pub tag: u32,
}

/// The settings a change of the table depends on, read once per change (both are set before the
/// first block is recorded).
#[derive(Clone, Copy)]
struct Mode {
    /// [`Table::sample_interval`].
    interval: u64,
    /// [`Table::tracks_peak`].
    track_peak: bool,
}

/// Hashes an address: a folded multiply, so the bits the side-table index and the hash maps'
/// buckets use all depend on every address bit (blocks are 16-byte aligned, so the low bits alone
/// say nothing).
#[inline]
fn mix(address: usize) -> u64 {
    let product = (address as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (product as u64) ^ ((product >> 64) as u64)
}

/// The hash map's hasher for addresses.
#[derive(Clone, Copy, Default)]
pub struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix((self.0 as usize).rotate_left(8) ^ usize::from(b));
        }
    }
    fn write_usize(&mut self, address: usize) {
        self.0 = mix(address);
    }
}

impl BuildHasher for AddressHasher {
    type Hasher = AddressHasher;
    fn build_hasher(&self) -> AddressHasher {
        AddressHasher(0)
    }
}

/// How a block is stored: one word, in the shadow or in [`Side::odd`]. The low half is the size
/// plus one (so a stored word is never 0), or [`LARGE`] when the size is kept in [`Side::large`];
/// the high half is the stack id, with [`TAGGED`] set when the block has a tag in [`Side::tags`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Word(u64);

/// A size field that says the size is kept in [`Side::large`].
const LARGE: u32 = u32::MAX;
/// The bit of the stack field that says the block has a tag; stack ids stay below it.
const TAGGED: u32 = 1 << 31;

impl Word {
    fn new(block: &Block) -> Word {
        let size = block
            .size
            .checked_add(1)
            .and_then(|s| u32::try_from(s).ok())
            .filter(|&s| s != LARGE)
            .unwrap_or(LARGE);
        let tagged = if block.tag != 0 { TAGGED } else { 0 };
        let stack = block.stack.0 & !TAGGED | tagged;
        Word(u64::from(size) | u64::from(stack) << 32)
    }

    fn is_large(self) -> bool {
        self.0 as u32 == LARGE
    }

    fn is_tagged(self) -> bool {
        (self.0 >> 32) as u32 & TAGGED != 0
    }

    fn stack(self) -> StackId {
        StackId((self.0 >> 32) as u32 & !TAGGED)
    }

    /// Whether part of the block is kept in the side tables.
    fn has_side(self) -> bool {
        self.is_large() || self.is_tagged()
    }

    /// The size, when it is kept in the word.
    fn small_size(self) -> u64 {
        u64::from(self.0 as u32 - 1)
    }

    /// The block, when nothing of it is kept in the side tables.
    fn block(self) -> Block {
        Block {
            size: self.small_size(),
            stack: self.stack(),
            tag: 0,
        }
    }
}

/// Live blocks at addresses the shadow does not cover, keyed by address.
type Blocks = hashbrown::HashMap<usize, Word, AddressHasher>;

/// What does not fit in the shadow's words, for the addresses that map to one side table.
pub struct Side {
    /// Live blocks the shadow cannot hold (addresses not 16-byte aligned, or above 2^47), and
    /// every live block under sampling.
    odd: Blocks,
    /// Sizes that do not fit a word, by address.
    large: hashbrown::HashMap<usize, u64, AddressHasher>,
    /// Type tags set explicitly, by address.
    tags: hashbrown::HashMap<usize, u32, AddressHasher>,
}

impl Side {
    const fn new() -> Side {
        Side {
            odd: hashbrown::HashMap::with_hasher(AddressHasher(0)),
            large: hashbrown::HashMap::with_hasher(AddressHasher(0)),
            tags: hashbrown::HashMap::with_hasher(AddressHasher(0)),
        }
    }

    /// The block at `address` as stored in `word`.
    fn unpack(&self, address: usize, word: Word) -> Block {
        Block {
            size: if word.is_large() {
                self.large
                    .get(&address)
                    .copied()
                    .unwrap_or(u64::from(LARGE))
            } else {
                word.small_size()
            },
            stack: word.stack(),
            tag: if word.is_tagged() {
                self.tags.get(&address).copied().unwrap_or(0)
            } else {
                0
            },
        }
    }
}

/// This thread inside a table as a writer; leaving is dropping it.
struct Inside<'a> {
    /// The writer that entered.
    entered: Entered<'a>,
    /// Held while the writer is the orphans'; released after leaving.
    _orphan: Option<MutexGuard<'a, ()>>,
}

/// A held side table; [`holding_table`] says so while it lives.
struct SideGuard<'a> {
    side: MutexGuard<'a, Side>,
    _hold: Hold,
}

/// A table held still: while it lives no block is added or removed, and its blocks and totals
/// agree with each other.
pub struct Locked<'a> {
    table: &'a Table,
    sides: [MutexGuard<'a, Side>; SIDES],
    _freezer: MutexGuard<'a, ()>,
    _hold: Hold,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.table
            .frozen
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

impl Locked<'_> {
    /// Live blocks.
    pub fn len(&self) -> usize {
        self.table.counts().live_blocks as usize
    }

    /// Whether no block is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f(address, block)` for every live block: those in the shadow by increasing address,
    /// then the others.
    pub fn for_each_block(&self, mut f: impl FnMut(usize, Block)) {
        self.table.shadow.for_each(|address, word| {
            let word = Word(word);
            let block = if word.has_side() {
                self.sides[side_of(address)].unpack(address, word)
            } else {
                word.block()
            };
            f(address, block);
        });
        for side in &self.sides {
            for (&address, &word) in &side.odd {
                f(address, side.unpack(address, word));
            }
        }
    }

    /// The totals of the held table.
    pub fn stats(&self) -> HeapStats {
        let mut stats = self.table.counts();
        if let interval @ 1.. = self.table.sample_interval() {
            let (mut blocks, mut bytes) = (0.0, 0.0);
            self.for_each_block(|_, block| {
                let (wb, ws) = sampling::weight(block.size, interval);
                blocks += wb;
                bytes += ws;
            });
            stats.live_blocks = blocks.round() as u64;
            stats.live_bytes = bytes.round() as u64;
        }
        stats.peak_bytes = self.table.peak.peak_bytes().max(stats.live_bytes);
        stats
    }
}

/// The live bytes a block of `size` stands for under the sampling `interval` (not 0).
#[cold]
fn sampled_bytes(size: u64, interval: u64) -> u64 {
    sampling::weight(size, interval).1.round() as u64
}

/// The side table of `address`.
#[inline]
fn side_of(address: usize) -> usize {
    (mix(address) >> 60) as usize % SIDES
}

/// `N` empty cells, built on the heap directly: the table's arrays of cells made on first use are
/// too large for the stack of every thread. `None` when the allocation failed.
fn empty_cells<T, const N: usize>() -> Option<Box<[OnceLock<T>; N]>> {
    let cells: Box<[OnceLock<T>]> = (0..N).map(|_| OnceLock::new()).collect();
    cells.try_into().ok()
}

/// A live table: the process has one, [`TABLE`]; tests make their own.
pub struct Table {
    /// Live blocks by address.
    shadow: Shadow,
    /// What does not fit the shadow's words, by address.
    sides: [Mutex<Side>; SIDES],
    /// How many blocks [`Side::odd`] holds over all side tables: while 0, a free that the shadow
    /// does not know needs no lock.
    odd_blocks: AtomicUsize,
    /// One per thread that recorded; see [`writers`].
    writers: boxcar::Vec<Writer>,
    /// The writer of threads that are ending (their own was given back), behind `orphan_lock`.
    orphan: Writer,
    /// Serializes the users of `orphan`.
    orphan_lock: Mutex<()>,
    /// Set while a reader holds the table still.
    frozen: AtomicBool,
    /// One reader at a time holds the table still.
    freezer: Mutex<()>,
    /// This table's id for [`writers::CLAIMED`]; 0 until a thread first claims a writer.
    id: AtomicU64,
    /// The stacks blocks were allocated from.
    pub stacks: Stacks,
    /// Live bytes over all threads (in batches), and their peak.
    peak: Peak,
    /// Mean bytes between sampled allocations; 0 records every allocation.
    sample_interval: AtomicU64,
    /// Under sampling: how many live blocks fall in each slot (saturating at [`COUNT_MAX`], then
    /// sticky), so a slot at 0 proves an address was never recorded.
    filter: [AtomicU8; FILTER],
    /// Whether stacks count their live blocks and the peak table is kept.
    track_peak: AtomicBool,
    /// A new peak was reached since the last capture of the peak table.
    peak_due: AtomicBool,
    /// The live heap per stack at the peak, when tracked.
    peak_table: Mutex<PeakTable>,
}

impl Default for Table {
    fn default() -> Self {
        Table::new()
    }
}

impl Table {
    /// An empty table.
    pub const fn new() -> Table {
        Table {
            shadow: Shadow::new(),
            sides: [const { Mutex::new(Side::new()) }; SIDES],
            odd_blocks: AtomicUsize::new(0),
            writers: boxcar::Vec::new(),
            orphan: Writer::new(),
            orphan_lock: Mutex::new(()),
            frozen: AtomicBool::new(false),
            freezer: Mutex::new(()),
            id: AtomicU64::new(0),
            stacks: Stacks::new(),
            peak: Peak::new(),
            sample_interval: AtomicU64::new(0),
            filter: [const { AtomicU8::new(0) }; FILTER],
            track_peak: AtomicBool::new(false),
            peak_due: AtomicBool::new(false),
            peak_table: Mutex::new(PeakTable {
                live_bytes: 0,
                stacks: Vec::new(),
            }),
        }
    }

    /// This table's id, assigned on first use.
    fn id(&self) -> u64 {
        match self.id.load(Relaxed) {
            0 => {
                let new = NEXT_TABLE_ID.fetch_add(1, Relaxed);
                match self.id.compare_exchange(0, new, Relaxed, Relaxed) {
                    Ok(_) => new,
                    Err(current) => current,
                }
            }
            id => id,
        }
    }

    /// Enters the table as this thread's writer, to change it until the result is dropped; `None`
    /// when this thread is inside the table already or holds it still.
    #[inline(always)]
    fn enter(&self) -> Option<Inside<'_>> {
        if holding_table() {
            return None;
        }
        let writer = if std::ptr::eq(self, &TABLE)
            && let Ok(Some(writer)) = MINE.try_with(Cell::get)
        {
            Some(writer)
        } else {
            self.writer()
        };
        let (writer, orphan) = match writer {
            Some(writer) => (writer, None),
            None => (&self.orphan, Some(self.lock_orphan())),
        };
        let entered = writer.enter(&self.frozen)?;
        Some(Inside {
            entered,
            _orphan: orphan,
        })
    }

    /// Serializes the users of the orphans' writer.
    #[cold]
    fn lock_orphan(&self) -> MutexGuard<'_, ()> {
        self.orphan_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// This thread's writer, claimed on first use; `None` once the thread gave it back.
    #[cold]
    fn writer(&self) -> Option<&Writer> {
        let id = self.id();
        let index = match CLAIMED.try_with(Cell::get) {
            Ok((table, index)) if table == id => Some(index),
            Ok((RELEASED, _)) | Err(_) => None,
            Ok(_) => {
                // Claiming may allocate, and so does registering the release at thread exit.
                let _guard = Guard::enter();
                let index = self.claim_writer();
                let _ = CLAIMED.try_with(|claimed| claimed.set((id, index)));
                let _ = RELEASE.try_with(|_| ());
                if std::ptr::eq(self, &TABLE) {
                    let _ = MINE.try_with(|mine| mine.set(TABLE.writers.get(index)));
                }
                Some(index)
            }
        };
        index.and_then(|index| self.writers.get(index))
    }

    #[cold]
    fn claim_writer(&self) -> usize {
        for (index, writer) in self.writers.iter() {
            if writer.try_claim() {
                return index;
            }
        }
        self.writers.push(Writer::claimed())
    }

    /// Every writer, the orphans' included.
    fn all_writers(&self) -> impl Iterator<Item = &Writer> {
        self.writers
            .iter()
            .map(|(_, w)| w)
            .chain(std::iter::once(&self.orphan))
    }

    /// The writers' counters added up (not under sampling's weights), without a peak.
    fn counts(&self) -> HeapStats {
        let mut stats = HeapStats::default();
        for w in self.all_writers() {
            stats.live_blocks = stats.live_blocks.wrapping_add(w.live_blocks.load(Relaxed));
            stats.live_bytes = stats.live_bytes.wrapping_add(w.live_bytes.load(Relaxed));
            stats.total_blocks = stats
                .total_blocks
                .wrapping_add(w.total_blocks.load(Relaxed));
            stats.total_bytes = stats.total_bytes.wrapping_add(w.total_bytes.load(Relaxed));
        }
        // Read while other threads change them, the sums may be caught between a block's
        // allocation in one thread and its free in another.
        if stats.live_blocks > i64::MAX as u64 {
            stats.live_blocks = 0;
        }
        if stats.live_bytes > i64::MAX as u64 {
            stats.live_bytes = 0;
        }
        stats
    }

    /// `(blocks, bytes)` allocated per stack id, over all threads.
    pub fn allocated(&self) -> Vec<(u64, u64)> {
        let mut allocated: Vec<(u64, u64)> = self
            .stacks
            .iter()
            .map(|(_, r)| {
                (
                    r.allocated_blocks.load(Relaxed),
                    r.allocated_bytes.load(Relaxed),
                )
            })
            .collect();
        for w in self.all_writers() {
            w.add_stacks(&mut allocated);
        }
        allocated
    }

    /// Keeps per-stack live counts and the table of the heap's peak from now on, and makes the
    /// peak exact. Call it before the first block is recorded.
    pub fn set_track_peak(&self, track: bool) {
        self.track_peak.store(track, Relaxed);
    }

    /// Whether the peak table is kept.
    #[inline]
    pub fn tracks_peak(&self) -> bool {
        self.track_peak.load(Relaxed)
    }

    /// Adds `bytes` (negative when a block goes) to the live bytes of the peak accounting: at
    /// once when the peak is tracked, else in the writer's batch.
    #[inline]
    fn peak_change(&self, writer: &Writer, bytes: i64, mode: Mode) -> bool {
        let pending = writer.pending_peak.load(Relaxed) + bytes;
        if !mode.track_peak && pending.abs() < PEAK_BATCH {
            writer.pending_peak.store(pending, Relaxed);
            return false;
        }
        writer.pending_peak.store(0, Relaxed);
        self.peak.change(pending)
    }

    /// The settings of a change, read now.
    #[inline]
    fn mode(&self) -> Mode {
        Mode {
            interval: self.sample_interval(),
            track_peak: self.tracks_peak(),
        }
    }

    /// Adds a live block to the peak accounting.
    #[inline]
    fn grow(&self, writer: &Writer, stack: StackId, size: u64, mode: Mode) {
        let bytes = self.peak_bytes_of(size, mode.interval);
        let new_peak = self.peak_change(writer, bytes as i64, mode);
        if mode.track_peak {
            self.stacks.record(stack).on_live(true, bytes);
            if new_peak {
                self.peak_due.store(true, Relaxed);
            }
        }
    }

    /// Takes a live block out of the peak accounting; first captures the peak table when a new
    /// peak is due (the heap is about to come down from it).
    #[inline]
    fn shrink(&self, writer: &Writer, stack: StackId, size: u64, mode: Mode) {
        let bytes = self.peak_bytes_of(size, mode.interval);
        if mode.track_peak {
            if self.peak_due.load(Relaxed) {
                self.capture_peak();
            }
            self.stacks.record(stack).on_live(false, bytes);
        }
        self.peak_change(writer, -(bytes as i64), mode);
    }
    #[cold]
    fn capture_peak(&self) {
        // Never wait on the allocation path: another thread capturing now does it for us.
        let Ok(mut peak) = self.peak_table.try_lock() else {
            return;
        };
        let live = self.peak.live_bytes();
        if live <= peak.live_bytes {
            return;
        }
        self.peak_due.store(false, Relaxed);
        if live - peak.live_bytes <= peak.live_bytes / 64 {
            return;
        }
        peak.live_bytes = live;
        peak.stacks.clear();
        peak.stacks.extend(self.stacks.iter().map(|(_, record)| {
            (
                record.live_blocks.load(Relaxed),
                record.live_bytes.load(Relaxed),
            )
        }));
    }

    /// The table of the heap's peak, when tracked: `None` otherwise.
    pub fn peak_table(&self) -> Option<PeakTable> {
        self.tracks_peak().then(|| {
            self.peak_table
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }

    /// Mean bytes between sampled allocations; 0 when every allocation is recorded.
    #[inline]
    pub fn sample_interval(&self) -> u64 {
        self.sample_interval.load(Relaxed)
    }

    /// Sets the sampling interval. Call it before the first block is recorded.
    pub fn set_sample_interval(&self, interval: u64) {
        self.sample_interval.store(interval, Relaxed);
    }

    /// Under sampling, whether a block may be recorded at `address`: `false` proves it is not,
    /// without touching the table. (Without sampling, any block may be.)
    #[inline]
    pub fn may_hold_sampled(&self, address: usize) -> bool {
        self.filter[Self::slot(address)].load(Relaxed) != 0
    }

    /// The filter slot of `address`: by 16-byte granule, so blocks next to a sampled one (where
    /// the allocator is busy) have counters of their own, and addresses share one only 256 KiB
    /// apart.
    #[inline]
    fn slot(address: usize) -> usize {
        (address >> 4) % FILTER
    }

    fn filter_add(&self, address: usize) {
        let _ = self.filter[Self::slot(address)].fetch_update(Relaxed, Relaxed, |count| {
            (count < COUNT_MAX).then(|| count + 1)
        });
    }

    fn filter_remove(&self, address: usize) {
        let _ = self.filter[Self::slot(address)].fetch_update(Relaxed, Relaxed, |count| {
            (count > 0 && count < COUNT_MAX).then(|| count - 1)
        });
    }

    /// The live bytes a block stands for in the peak: its size, or its weight under the sampling
    /// `interval`.
    #[inline]
    fn peak_bytes_of(&self, size: u64, interval: u64) -> u64 {
        match interval {
            0 => size,
            interval => sampled_bytes(size, interval),
        }
    }

    /// The current totals. Without sampling it adds up the threads' counters (while other threads
    /// record, a moment's changes may be caught half-way); under sampling it weighs every live
    /// block, holding the table still.
    pub fn stats(&self) -> HeapStats {
        if self.sample_interval() != 0 {
            return self.lock_all().stats();
        }
        let mut stats = self.counts();
        stats.peak_bytes = self.peak.peak_bytes().max(stats.live_bytes);
        stats
    }

    /// The side table of `address`, held.
    fn side(&self, address: usize) -> SideGuard<'_> {
        let _hold = Hold::new();
        SideGuard {
            side: self.sides[side_of(address)]
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            _hold,
        }
    }

    /// Stores `block` at `address`; returns the block that was there. Under sampling, blocks go to
    /// the side tables: they are few and far apart, and each would touch a page of the shadow of
    /// its own.
    #[inline]
    fn add(
        &self,
        entered: &Entered<'_>,
        address: usize,
        block: Block,
        interval: u64,
    ) -> Option<Block> {
        let word = Word::new(&block);
        let old = match (interval == 0)
            .then(|| self.shadow.set(address, word.0))
            .flatten()
        {
            Some(0) => None,
            Some(old) => Some(Word(old)),
            None => self.add_odd(address, word),
        };
        let stale = old.map(|old| self.forget(entered, address, old));
        if word.has_side() {
            self.add_side(address, word, &block);
        }
        bump(&entered.writer.live_blocks, 1);
        bump(&entered.writer.live_bytes, block.size);
        stale
    }

    /// Stores `word` at `address` in [`Side::odd`]; returns the word that was there.
    #[cold]
    fn add_odd(&self, address: usize, word: Word) -> Option<Word> {
        let old = self.side(address).side.odd.insert(address, word);
        if old.is_none() {
            self.odd_blocks.fetch_add(1, Relaxed);
        }
        old
    }

    /// Keeps what does not fit `word` of `block`, at `address`, in the side tables.
    #[cold]
    fn add_side(&self, address: usize, word: Word, block: &Block) {
        let mut side = self.side(address);
        if word.is_large() {
            side.side.large.insert(address, block.size);
        }
        if block.tag != 0 {
            side.side.tags.insert(address, block.tag);
        }
    }

    /// Clears what `word`, just taken out, kept beside it and counts the block gone; returns it.
    #[inline]
    fn forget(&self, entered: &Entered<'_>, address: usize, word: Word) -> Block {
        let block = if word.has_side() {
            self.forget_side(address, word)
        } else {
            word.block()
        };
        bump(&entered.writer.live_blocks, 1u64.wrapping_neg());
        bump(&entered.writer.live_bytes, block.size.wrapping_neg());
        block
    }

    /// The block `word` stands for at `address`, its side-table entries cleared.
    #[cold]
    fn forget_side(&self, address: usize, word: Word) -> Block {
        let mut side = self.side(address);
        let block = side.side.unpack(address, word);
        side.side.large.remove(&address);
        side.side.tags.remove(&address);
        block
    }

    /// The word of the block at `address`, left in place.
    fn word(&self, address: usize) -> Option<Word> {
        match self.shadow.get(address) {
            0 if self.odd_blocks.load(Relaxed) == 0 => None,
            0 => self.side(address).side.odd.get(&address).copied(),
            word => Some(Word(word)),
        }
    }

    /// Takes the block at `address` out.
    #[inline]
    fn take(&self, entered: &Entered<'_>, address: usize) -> Option<Block> {
        let word = match self.shadow.take(address) {
            0 if self.odd_blocks.load(Relaxed) == 0 => return None,
            0 => self.take_odd(address)?,
            word => Word(word),
        };
        Some(self.forget(entered, address, word))
    }

    /// Takes the word at `address` out of [`Side::odd`].
    #[cold]
    fn take_odd(&self, address: usize) -> Option<Word> {
        let word = self.side(address).side.odd.remove(&address)?;
        self.odd_blocks.fetch_sub(1, Relaxed);
        Some(word)
    }

    /// The shadow word a block at `address` would be recorded in, when it exists: for the
    /// allocation path to prefetch while it walks the stack. `None` under sampling (sampled blocks
    /// live in the side tables).
    #[inline]
    pub fn shadow_word(&self, address: usize) -> Option<&AtomicU64> {
        if self.sample_interval() != 0 {
            return None;
        }
        self.shadow.existing(address)
    }

    /// Records a new live block allocated from `frames`.
    #[inline]
    pub fn insert(&self, address: usize, size: usize, frames: &[ReturnAddress]) -> StackId {
        let stack = self.stacks.intern(frames);
        self.insert_block(address, size as u64, stack);
        stack
    }

    /// Records a new live block whose stack is already interned.
    #[inline]
    pub fn insert_block(&self, address: usize, size: u64, stack: StackId) {
        let mode = self.mode();
        if mode.interval != 0 {
            self.filter_add(address);
        }
        let Some(inside) = self.enter() else {
            return;
        };
        let entered = &inside.entered;
        let (blocks, bytes) = sampling::estimate(size, mode.interval);
        let writer = entered.writer;
        if stack.0 < WRITER_STACKS {
            writer.count_stack(stack.0, blocks, bytes);
        } else {
            let record = self.stacks.record(stack);
            record.allocated_blocks.fetch_add(blocks, Relaxed);
            record.allocated_bytes.fetch_add(bytes, Relaxed);
        }
        bump(&writer.total_blocks, blocks);
        bump(&writer.total_bytes, bytes);
        self.grow(writer, stack, size, mode);
        let block = Block {
            size,
            stack,
            tag: 0,
        };
        // An address handed out twice without a free in between means a free went unseen
        // (another allocator, or one made before memprof was ready): the stale block is gone.
        if let Some(stale) = self.add(entered, address, block, mode.interval) {
            self.retire(entered, address, &stale, mode);
        }
    }

    /// Removes a block about to be freed; `None` when the table never saw it.
    #[inline]
    pub fn remove(&self, address: usize) -> Option<Block> {
        self.remove_block(address)
    }

    /// [`Table::remove`] for callers that do not need the block (the free path).
    #[inline(never)]
    pub fn discard(&self, address: usize) {
        self.remove_block(address);
    }

    #[inline(always)]
    fn remove_block(&self, address: usize) -> Option<Block> {
        let inside = self.enter()?;
        let mode = self.mode();
        let block = self.take(&inside.entered, address)?;
        self.retire(&inside.entered, address, &block, mode);
        Some(block)
    }

    /// Undoes what recording `block` added to the peak and the filter.
    #[inline]
    fn retire(&self, entered: &Entered<'_>, address: usize, block: &Block, mode: Mode) {
        self.shrink(entered.writer, block.stack, block.size, mode);
        if mode.interval != 0 {
            self.filter_remove(address);
        }
    }

    /// Puts back a block that [`Table::remove`] took out, when the free did not happen after all
    /// (a failed `realloc`).
    pub fn restore(&self, address: usize, block: Block) {
        let mode = self.mode();
        if mode.interval != 0 {
            self.filter_add(address);
        }
        let Some(inside) = self.enter() else {
            return;
        };
        let entered = &inside.entered;
        self.grow(entered.writer, block.stack, block.size, mode);
        if let Some(stale) = self.add(entered, address, block, mode.interval) {
            self.retire(entered, address, &stale, mode);
        }
    }

    /// Whether any block was ever recorded (every recorded block has an interned stack): one
    /// relaxed load, for callers that must cost nothing when memprof is not the global allocator.
    #[inline]
    pub fn has_recorded(&self) -> bool {
        !self.stacks.is_empty()
    }

    /// Sets the type tag of the live block that starts at `address`; returns the block's stack and
    /// its previous tag, or `None` when no live block starts there. Call it inside the reentrancy
    /// guard: the tag map may allocate.
    pub fn set_tag(&self, address: usize, tag: u32) -> Option<(StackId, u32)> {
        let inside = self.enter()?;
        let word = self.word(address)?;
        let block = if word.has_side() {
            self.side(address).side.unpack(address, word)
        } else {
            word.block()
        };
        self.add(
            &inside.entered,
            address,
            Block { tag, ..block },
            self.sample_interval(),
        );
        Some((block.stack, block.tag))
    }

    /// Holds the table still: waits until no thread is changing it, and makes threads that come to
    /// change it wait until the result is dropped. This thread must not hold it already.
    pub fn lock_all(&self) -> Locked<'_> {
        let _hold = Hold::new();
        let freezer = self.freezer.lock().unwrap_or_else(PoisonError::into_inner);
        writers::freeze(&self.frozen, self.all_writers());
        let sides =
            std::array::from_fn(|i| self.sides[i].lock().unwrap_or_else(PoisonError::into_inner));
        Locked {
            table: self,
            sides,
            _freezer: freezer,
            _hold,
        }
    }
}

/// The process's live table.
pub static TABLE: Table = Table::new();

#[cfg(test)]
mod tests;
