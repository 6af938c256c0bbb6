//! The memory scanner: the one place memprof reads the memory of the program's blocks.
//!
//! A reference is MemProf's conservative rule: a pointer-aligned word inside a live block whose
//! value equals the start address of a live block. The scan is safe because:
//!
//! - the live table is held still for the whole scan ([`Table::lock_all`]). A free (and the free
//!   half of a `realloc`) removes its block from the table *before* handing it back to the
//!   wrapped allocator, so while the table is held no tracked block can be freed: frees of other
//!   threads wait at the table's door, and this thread's own frees and allocations (it runs
//!   inside the reentrancy guard) go to the wrapped allocator without touching the table;
//! - only words that lie entirely inside `[address, address + size)` of a block that is live in
//!   the held table are read, with aligned volatile reads (a block is memory the allocator handed
//!   out and has not taken back, whatever the program keeps in it);
//! - nothing is written, and progress goes to stderr with `write(2)`, never through a lock another
//!   thread could hold while it waits for the table.
//!
//! A block the table calls live must really be: a block freed behind memprof's back (freed while
//! its thread was inside [`untracked`](crate::untracked), or reported through the C ABI and freed
//! without `memprof_record_free`) would be read after its free.
//!
//! Memory: the blocks (32 bytes each), their start addresses (8 bytes each) and the references
//! found (8 bytes each). Time: one pass over the scanned words, each either rejected by a range
//! and alignment test or looked up by binary search.

#![allow(unsafe_code)]

use crate::snapshot::LiveBlock;
use crate::table::{StackId, Table};
use std::time::{Duration, Instant};

/// Word size: references are pointer-aligned words.
const WORD: usize = std::mem::size_of::<usize>();

/// Words scanned between two looks at the clock.
const CLOCK_EVERY: usize = 1 << 16;

/// How the scan treats a block, by its type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockKind {
    /// Its type holds no pointer: the block is counted but not read.
    pub pointer_free: bool,
    /// Its owner points inside it rather than at its start (hashbrown's tables are pointed to at
    /// their control bytes, past the buckets): a word anywhere inside it is a reference to it too.
    pub interior: bool,
}

/// Finds the block a word refers to: the one it is the start of, or, for the blocks whose kind
/// allows it, the one it points inside.
struct Lookup<'a> {
    starts: Starts,
    blocks: &'a [LiveBlock],
    kinds: Vec<BlockKind>,
    /// Whether any block takes interior references (if none, only starts are looked up).
    any_interior: bool,
    /// The end of the last block that takes interior references.
    interior_end: usize,
}

impl<'a> Lookup<'a> {
    fn new(blocks: &'a [LiveBlock], kind: &dyn Fn(StackId, u32) -> BlockKind) -> Lookup<'a> {
        let kinds: Vec<BlockKind> = blocks.iter().map(|b| kind(b.stack, b.tag)).collect();
        let interior_end = blocks
            .iter()
            .zip(&kinds)
            .filter(|(_, k)| k.interior)
            .map(|(b, _)| b.address.saturating_add(b.size as usize))
            .max();
        Lookup {
            starts: Starts::new(blocks),
            blocks,
            any_interior: interior_end.is_some(),
            interior_end: interior_end.unwrap_or(0),
            kinds,
        }
    }

    #[inline]
    fn find(&self, word: usize) -> Option<usize> {
        if let Some(index) = self.starts.find(word) {
            return Some(index);
        }
        if !self.any_interior || word < self.starts.min || word >= self.interior_end {
            return None;
        }
        let index = self.starts.containing(self.blocks, word)?;
        self.kinds[index].interior.then_some(index)
    }
}

/// The start addresses of the live blocks, for "is this word the start of a live block".
pub struct Starts {
    /// Sorted start addresses.
    starts: Vec<usize>,
    /// Smallest start.
    min: usize,
    /// Largest start.
    max: usize,
    /// Bits that are zero in every start address (their common alignment, minus one).
    mask: usize,
}

impl Starts {
    /// The index over `blocks`, which are sorted by address.
    pub fn new(blocks: &[LiveBlock]) -> Starts {
        let starts: Vec<usize> = blocks.iter().map(|b| b.address).collect();
        let any = starts.iter().fold(0usize, |acc, &s| acc | s);
        let mask = if any == 0 {
            0
        } else {
            (1usize << any.trailing_zeros()) - 1
        };
        Starts {
            min: starts.first().copied().unwrap_or(usize::MAX),
            max: starts.last().copied().unwrap_or(0),
            starts,
            mask,
        }
    }

    /// The index of the block that starts at `word`, if any.
    #[inline]
    pub fn find(&self, word: usize) -> Option<usize> {
        if word < self.min || word > self.max || word & self.mask != 0 {
            return None;
        }
        self.starts.binary_search(&word).ok()
    }

    /// The index of the block whose `[start, start + size)` holds `address`, if any.
    pub fn containing(&self, blocks: &[LiveBlock], address: usize) -> Option<usize> {
        let index = self
            .starts
            .partition_point(|&s| s <= address)
            .checked_sub(1)?;
        let block = &blocks[index];
        (((address - block.address) as u64) < block.size).then_some(index)
    }
}

/// Calls `found(offset, word)` for every pointer-aligned word that lies wholly inside the `size`
/// bytes at `address`.
///
/// # Safety
/// The `size` bytes at `address` must be readable for the whole call: memory the allocator handed
/// out and cannot take back meanwhile, or memory behind a live reference.
#[inline]
unsafe fn words(address: usize, size: usize, mut found: impl FnMut(usize, usize)) {
    let end = address.saturating_add(size);
    let mut at = address.next_multiple_of(WORD);
    while at + WORD <= end {
        // SAFETY: `at` is word-aligned and `[at, at + WORD)` lies inside `[address, end)`, which
        // the caller guarantees readable. A volatile read: the program may write the block
        // meanwhile, and the value is only compared, never trusted.
        let word = unsafe { std::ptr::read_volatile(at as *const usize) };
        found(at - address, word);
        at += WORD;
    }
}

/// Writes a line to stderr with `write(2)`: no lock of `std::io::stderr`, which a thread waiting
/// for the live table could hold.
pub fn progress_line(line: &str) {
    let bytes = line.as_bytes();
    let mut written = 0;
    while written < bytes.len() {
        // SAFETY: the pointer and length describe the live `bytes[written..]`; fd 2 is only written.
        let n = unsafe { libc::write(2, bytes[written..].as_ptr().cast(), bytes.len() - written) };
        if n <= 0 {
            break;
        }
        written += n as usize;
    }
}

/// Reports progress on stderr once a scan has taken more than `after`: one line a second.
pub struct Progress {
    /// When the scan started.
    started: Instant,
    /// Silence before the first line.
    after: Duration,
    /// When the last line was written, if one was.
    last: Option<Instant>,
    /// What is being done, for the lines (`scanning the heap`).
    what: &'static str,
}

impl Progress {
    /// Starts the clock.
    pub fn new(what: &'static str, after: Duration) -> Progress {
        Progress {
            started: Instant::now(),
            after,
            last: None,
            what,
        }
    }

    /// Notes that `done` of `total` units are through.
    pub fn update(&mut self, done: u64, total: u64, unit: &str) {
        let now = Instant::now();
        let due = match self.last {
            None => now.duration_since(self.started) >= self.after,
            Some(last) => now.duration_since(last) >= Duration::from_secs(1),
        };
        if due {
            self.last = Some(now);
            let percent = (done * 100).checked_div(total).unwrap_or(100);
            progress_line(&format!(
                "memprof: {}: {percent}% ({done} of {total} {unit})\n",
                self.what
            ));
        }
    }

    /// Closes the report: a last line with the time taken, if any line was written.
    pub fn finish(&self, total: u64, unit: &str) {
        if self.last.is_some() {
            progress_line(&format!(
                "memprof: {}: done, {total} {unit} in {:.1} s\n",
                self.what,
                self.started.elapsed().as_secs_f64()
            ));
        }
    }
}

/// What a full scan found.
pub struct Scanned {
    /// Live blocks, sorted by address.
    pub blocks: Vec<LiveBlock>,
    /// References of block `i` are `to[first[i]..first[i + 1]]`.
    pub first: Vec<usize>,
    /// The block each reference points to.
    pub to: Vec<u32>,
    /// The byte offset of each reference in its block (saturated at `u32::MAX`).
    pub offset: Vec<u32>,
}

/// Copies the live blocks of `table` and finds every reference between them, holding the table
/// meanwhile. `kind(stack, tag)` tells how to treat each block. Run it inside the reentrancy
/// guard.
pub fn scan_table(
    table: &Table,
    kind: &dyn Fn(StackId, u32) -> BlockKind,
    progress_after: Duration,
) -> Scanned {
    let mut progress = Progress::new("scanning the heap", progress_after);
    let held = table.lock_all();
    let blocks = crate::snapshot::blocks_of(&held);
    let lookup = Lookup::new(&blocks, kind);
    let total_bytes: u64 = blocks.iter().map(|b| b.size).sum();
    let mut first = Vec::with_capacity(blocks.len() + 1);
    let mut to = Vec::new();
    let mut offset = Vec::new();
    let mut scanned_bytes = 0u64;
    let mut since_clock = 0usize;
    for (index, block) in blocks.iter().enumerate() {
        first.push(to.len());
        if lookup.kinds[index].pointer_free {
            scanned_bytes += block.size;
            continue;
        }
        // SAFETY: the block is live in `table`, which is held still until after this loop,
        // so it cannot be freed meanwhile (see the module docs); `size` is the size it was
        // allocated with.
        unsafe {
            words(block.address, block.size as usize, |at, word| {
                if let Some(target) = lookup.find(word)
                    && target != index
                {
                    to.push(target as u32);
                    offset.push(u32::try_from(at).unwrap_or(u32::MAX));
                }
            });
        }
        scanned_bytes += block.size;
        since_clock += block.size as usize / WORD + 1;
        if since_clock >= CLOCK_EVERY {
            since_clock = 0;
            progress.update(scanned_bytes, total_bytes, "bytes");
        }
    }
    first.push(to.len());
    drop(held);
    drop(lookup);
    progress.finish(total_bytes, "bytes");
    Scanned {
        blocks,
        first,
        to,
        offset,
    }
}

/// The bytes of the live blocks of `table` reachable from the bytes of `value`: the block
/// holding `value` when it lies in one, plus every block reached through references, each counted
/// once. `kind(stack, tag)` tells how to treat each block. Holds the table still
/// meanwhile; run it inside the reentrancy guard.
///
pub fn reachable_from<T: ?Sized>(
    table: &Table,
    value: &T,
    kind: &dyn Fn(StackId, u32) -> BlockKind,
) -> u64 {
    let len = std::mem::size_of_val(value);
    let value = (value as *const T).cast::<u8>() as usize;
    let held = table.lock_all();
    let blocks = crate::snapshot::blocks_of(&held);
    let lookup = Lookup::new(&blocks, kind);
    let mut seen = vec![false; blocks.len()];
    let mut pending = Vec::new();
    let mut bytes = 0u64;
    if let Some(home) = lookup.starts.containing(&blocks, value) {
        // The value's own block counts; only the value's own bytes are roots.
        seen[home] = true;
        bytes += blocks[home].size;
    }
    let mut visit = |index: usize, bytes: &mut u64, pending: &mut Vec<usize>| {
        if !seen[index] {
            seen[index] = true;
            *bytes += blocks[index].size;
            pending.push(index);
        }
    };
    // SAFETY: `value` comes from a shared reference that outlives this call: its `len` bytes
    // are readable.
    unsafe {
        words(value, len, |_, word| {
            if let Some(target) = lookup.find(word) {
                visit(target, &mut bytes, &mut pending);
            }
        });
    }
    while let Some(index) = pending.pop() {
        let block = blocks[index];
        if lookup.kinds[index].pointer_free {
            continue;
        }
        // SAFETY: as in `scan_table`: the block is live in `table`, which is held still.
        unsafe {
            words(block.address, block.size as usize, |_, word| {
                if let Some(target) = lookup.find(word) {
                    visit(target, &mut bytes, &mut pending);
                }
            });
        }
    }
    drop(held);
    bytes
}
