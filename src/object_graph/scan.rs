//! The memory scanner: the one place memprof reads the memory of the program's blocks.
//!
//! A reference is MemProf's conservative rule: a pointer-aligned word inside a live block whose
//! value equals the start address of a live block. The scan is safe because:
//!
//! - the live table is held still for the whole scan ([`crate::snapshot::hold`]). A free (and the
//!   free half of a `realloc`) removes its block from the table *before* handing it back to the
//!   wrapped allocator, so while the table is held no tracked block can be freed: frees of other
//!   threads wait at the table's door (a signal handler's free too, or, when it interrupted its
//!   thread inside the table, the hold waits for it), this thread's own signals wait until the
//!   table is let go, and its own frees and allocations (it runs inside the reentrancy guard) go
//!   to the wrapped allocator without touching the table;
//! - only words that lie entirely inside `[address, address + size)` of a block that is live in
//!   the held table are read, with aligned volatile reads (a block is memory the allocator handed
//!   out and has not taken back, whatever the program keeps in it);
//! - and only where the process had readable memory once the table was held ([`Readable`], from
//!   `/proc/self/maps`): a block the table holds although its memory is not the program's (an
//!   address reported through the C ABI that was never allocated, or a block freed without telling
//!   memprof) is never read where nothing is mapped. What lies outside every listed mapping is
//!   copied with `process_vm_readv`, which fails cleanly there, rather than read;
//! - nothing is written, and progress goes to stderr with `write(2)`, never through a lock another
//!   thread could hold while it waits for the table.
//!
//! What remains: such a block whose memory is still mapped (freed to the allocator, which kept
//! the pages) is read, harmlessly, and its words may be taken for references.
//!
//! Memory: the blocks (32 bytes each), their start addresses (8 bytes each) and the references
//! found (8 bytes each). Time: one pass over the scanned words, each either rejected by a range
//! and alignment test or looked up by binary search.

#![allow(unsafe_code)]

use crate::address::StackId;
use crate::snapshot::LiveBlock;
use std::time::{Duration, Instant};

/// Word size: references are pointer-aligned words.
const WORD: usize = std::mem::size_of::<usize>();

/// Words scanned between two looks at the clock.
const CLOCK_EVERY: usize = 1 << 16;

/// How the scan treats a block, by its type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BlockKind {
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
pub(crate) struct Starts {
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
    pub(crate) fn new(blocks: &[LiveBlock]) -> Starts {
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
    pub(crate) fn find(&self, word: usize) -> Option<usize> {
        if word < self.min || word > self.max || word & self.mask != 0 {
            return None;
        }
        self.starts.binary_search(&word).ok()
    }

    /// The index of the block whose `[start, start + size)` holds `address`, if any.
    pub(crate) fn containing(&self, blocks: &[LiveBlock], address: usize) -> Option<usize> {
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

/// The memory the process could read when a scan started, from `/proc/self/maps`.
pub(crate) struct Readable {
    /// Sorted, disjoint `[start, end)` ranges of readable mappings, adjacent ones merged; `None`
    /// when the list could not be read, and then every block is read directly.
    ranges: Option<Vec<(usize, usize)>>,
}

impl Readable {
    /// The readable mappings of the process now.
    pub(crate) fn now() -> Readable {
        let ranges = std::fs::read_to_string("/proc/self/maps")
            .ok()
            .map(|maps| Self::parse(&maps));
        Readable { ranges }
    }

    /// The readable ranges of a `/proc/self/maps` text. The kernel's `vvar` pages are left out:
    /// some of them fault when read.
    fn parse(maps: &str) -> Vec<(usize, usize)> {
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for line in maps.lines() {
            let Some(crate::memory::MapsLine {
                start,
                end,
                perms,
                name,
                ..
            }) = crate::memory::maps_line(line)
            else {
                continue;
            };
            if !perms.starts_with('r') || name.starts_with("[vvar") {
                continue;
            }
            match ranges.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => ranges.push((start, end)),
            }
        }
        ranges.sort_unstable();
        ranges
    }

    /// Calls `found(offset, word)` for every pointer-aligned word that lies wholly inside the
    /// `size` bytes at `address` and could be read: directly where a listed mapping holds it,
    /// copied through the kernel elsewhere (nothing where that fails).
    ///
    /// # Safety
    /// The parts of the `size` bytes at `address` that lie in a mapping listed when this value
    /// was made must still be mapped and readable for the whole call: memory the allocator handed
    /// out and cannot take back meanwhile.
    unsafe fn words(&self, address: usize, size: usize, mut found: impl FnMut(usize, usize)) {
        let Some(ranges) = &self.ranges else {
            // SAFETY: the caller's promise; without the list, the block is trusted whole.
            unsafe { words(address, size, found) };
            return;
        };
        let end = address.saturating_add(size);
        let mut at = address;
        let mut i = ranges.partition_point(|&(_, e)| e <= at);
        while at < end {
            let (piece_end, mapped) = match ranges.get(i) {
                Some(&(start, stop)) if start <= at => (stop.min(end), true),
                Some(&(start, _)) => (start.min(end), false),
                None => (end, false),
            };
            let mut shifted = |offset: usize, word: usize| found(at - address + offset, word);
            if mapped {
                // SAFETY: `[at, piece_end)` lies in a listed readable mapping and in the block;
                // the caller guarantees it readable.
                unsafe { words(at, piece_end - at, &mut shifted) };
                i += 1;
            } else {
                copied_words(at, piece_end - at, &mut shifted);
            }
            at = piece_end;
        }
    }
}

/// [`words`] through the kernel's `process_vm_readv`, which copies what is mapped and fails,
/// without a fault, where nothing is: for memory that no listed mapping holds. Stops at the
/// first part that cannot be copied.
fn copied_words(address: usize, size: usize, mut found: impl FnMut(usize, usize)) {
    let end = address.saturating_add(size);
    let mut at = address.next_multiple_of(WORD);
    let mut buffer = [0usize; 512];
    while at + WORD <= end {
        let words = ((end - at) / WORD).min(buffer.len());
        let local = libc::iovec {
            iov_base: buffer.as_mut_ptr().cast(),
            iov_len: words * WORD,
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: words * WORD,
        };
        // SAFETY: `local` describes `buffer`, which the call may write; `remote` is only read by
        // the kernel, which checks it and fails with EFAULT where nothing is mapped.
        let copied = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        let Ok(copied) = usize::try_from(copied) else {
            return;
        };
        for (i, &word) in buffer[..copied / WORD].iter().enumerate() {
            found(at + i * WORD - address, word);
        }
        if copied < words * WORD {
            return;
        }
        at += copied;
    }
}

/// Writes a line to stderr with `write(2)`: no lock of `std::io::stderr`, which a thread waiting
/// for the live table could hold.
pub(crate) fn progress_line(line: &str) {
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
pub(crate) struct Progress {
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
    pub(crate) fn new(what: &'static str, after: Duration) -> Progress {
        Progress {
            started: Instant::now(),
            after,
            last: None,
            what,
        }
    }

    /// Notes that `done` of `total` units are through.
    pub(crate) fn update(&mut self, done: u64, total: u64, unit: &str) {
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
    pub(crate) fn finish(&self, total: u64, unit: &str) {
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
pub(crate) struct Scanned {
    /// Live blocks, sorted by address.
    pub blocks: Vec<LiveBlock>,
    /// References of block `i` are `to[first[i]..first[i + 1]]`.
    pub first: Vec<usize>,
    /// The block each reference points to.
    pub to: Vec<u32>,
    /// The byte offset of each reference in its block (saturated at `u32::MAX`).
    pub offset: Vec<u32>,
}

/// Copies the live blocks of the process's table and finds every reference between them, holding
/// the table meanwhile. `kind(stack, tag)` tells how to treat each block. Run it inside the
/// reentrancy guard.
pub(crate) fn scan_table(
    kind: &dyn Fn(StackId, u32) -> BlockKind,
    progress_after: Duration,
) -> Scanned {
    let mut progress = Progress::new("scanning the heap", progress_after);
    let held = crate::snapshot::hold();
    let readable = Readable::now();
    let blocks = held.blocks();
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
        // SAFETY: the block is live in the table, which is held still until after this loop,
        // so it cannot be freed meanwhile (see the module docs); `size` is the size it was
        // allocated with; `readable` was listed after the table was held.
        unsafe {
            readable.words(block.address, block.size as usize, |at, word| {
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

/// The bytes of the live blocks of the process's table reachable from the bytes of `value`: the
/// block holding `value` when it lies in one, plus every block reached through references, each
/// counted once. `kind(stack, tag)` tells how to treat each block. Holds the table still
/// meanwhile; run it inside the reentrancy guard.
pub(crate) fn reachable_from<T: ?Sized>(
    value: &T,
    kind: &dyn Fn(StackId, u32) -> BlockKind,
) -> u64 {
    let len = std::mem::size_of_val(value);
    let value = (value as *const T).cast::<u8>() as usize;
    let held = crate::snapshot::hold();
    let readable = Readable::now();
    let blocks = held.blocks();
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
        // SAFETY: as in `scan_table`: the block is live in the table, which is held still, and
        // `readable` was listed after.
        unsafe {
            readable.words(block.address, block.size as usize, |_, word| {
                if let Some(target) = lookup.find(word) {
                    visit(target, &mut bytes, &mut pending);
                }
            });
        }
    }
    drop(held);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_ranges_are_parsed_and_merged() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 /bin/x
55d0c0001000-55d0c0003000 r-xp 00001000 08:01 123 /bin/x
55d0c0003000-55d0c0004000 ---p 00000000 00:00 0
55d0c0004000-55d0c0005000 rw-p 00000000 00:00 0 [heap]
7ffd1000a000-7ffd1000c000 r--p 00000000 00:00 0 [vvar]
7ffd1000c000-7ffd1000e000 r-xp 00000000 00:00 0 [vdso]
";
        assert_eq!(
            Readable::parse(maps),
            vec![
                (0x55d0c0000000, 0x55d0c0003000),
                (0x55d0c0004000, 0x55d0c0005000),
                (0x7ffd1000c000, 0x7ffd1000e000),
            ]
        );
    }

    /// A "block" over three pages whose middle one is not mapped: the words of the outer pages
    /// are found, the middle one is skipped, and nothing faults.
    #[test]
    fn unmapped_memory_is_never_read() {
        const PAGE: usize = 4096;
        // SAFETY: a fresh anonymous mapping of three pages, filled through its own pointer, its
        // middle page unmapped before the read and the rest unmapped after.
        let base = unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                3 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            let words = base.cast::<usize>();
            for i in 0..3 * PAGE / WORD {
                *words.add(i) = i + 1;
            }
            assert_eq!(libc::munmap(base.cast::<u8>().add(PAGE).cast(), PAGE), 0);
            base as usize
        };
        let readable = Readable::now();
        let mut seen = Vec::new();
        // SAFETY: the first and last pages stay mapped until the end of the test.
        unsafe {
            readable.words(base + 4, 3 * PAGE - 4, |offset, word| {
                seen.push((offset, word))
            })
        };
        let expected: Vec<(usize, usize)> = (1..PAGE / WORD)
            .chain(2 * PAGE / WORD..3 * PAGE / WORD)
            .map(|i| (i * WORD - 4, i + 1))
            .collect();
        assert_eq!(seen, expected);
        // Outside every listed mapping, the copy path reads what is there and stops at the hole.
        let mut copied = Vec::new();
        copied_words(base, 3 * PAGE, |offset, word| copied.push((offset, word)));
        assert_eq!(copied.len(), PAGE / WORD);
        // SAFETY: unmaps the two pages left.
        unsafe {
            libc::munmap(base as *mut libc::c_void, PAGE);
            libc::munmap((base + 2 * PAGE) as *mut libc::c_void, PAGE);
        }
    }
}
