//! Where the resident memory goes ([`MemoryBreakdown`]): the live heap as the program asked for
//! it, what the allocator adds to it and keeps free, memprof's own memory, and the rest of the
//! process's mappings. Each part is measured from its own source, and what the parts leave of the
//! resident size is given too ([`MemoryBreakdown::unaccounted`]), so a reader can see how well
//! they add up.
//!
//! | part | measured from |
//! |---|---|
//! | `resident` | `Rss` of `/proc/self/smaps_rollup` |
//! | `heap_requested` | the live table: the live bytes of the recorded blocks ([`HeapStats`](crate::HeapStats)) |
//! | `heap_rounding` | glibc's `mallinfo2`: bytes in use in the allocator (`uordblks + hblkhd`) less `heap_requested` and `memprof_own`: rounding up to the allocator's sizes, its chunk headers, memprof's block headers, and blocks the table does not hold (under sampling, or while paused) |
//! | `allocator_free` | `mallinfo2`'s `fordblks`: free memory the allocator keeps in its arenas |
//! | `memprof_own` | bytes memprof allocates inside its reentrancy guard, counted by the global allocator (under the preloaded library, by the library's own allocator, which only memprof uses) |
//! | `heap_not_resident` | the four parts above less `allocator_resident` (`Rss` of the allocator's mappings), when more: what glibc counts that is not resident (blocks never touched, free memory grown and never touched or given back) |
//! | `stacks` | `Rss` of `[stack]`, of the mappings that hold a thread's stack pointer (`/proc/self/task/*/syscall`), and of those right above a guard page |
//! | `code_and_files` | `Rss` of file mappings (executable, libraries, mapped files) and of the kernel's (`[vdso]`) |
//! | `other_mappings` | `Rss` of the anonymous mappings that are not the allocator's (none of `[heap]`, a mapping holding a live block, a glibc arena heap) nor a stack: the program's own `mmap`s, memprof's trace buffers |
//!
//! The allocator's parts add up to what glibc holds from the system, not to what of it is
//! resident: a block allocated and never touched (`vec![0; n]` of a large `n`, whose pages the
//! kernel gives zeroed on first touch) counts in `heap_requested` and not in `resident`, and so
//! does the free memory glibc grew and never touched or gave back. `heap_not_resident` says how
//! much that is, so that the parts, less it, add up to `resident` (`unaccounted` is what the
//! mappings' classification leaves). With another allocator under memprof (jemalloc, mimalloc), glibc's
//! statistics do not describe the heap: `heap_rounding` and `allocator_free` are `None`, and what
//! that allocator holds beyond the requested bytes shows in `unaccounted` and `other_mappings`.

#![forbid(unsafe_code)]

use crate::memory;
use crate::native;
use crate::snapshot::Snapshot;
use std::io::{self, Write};

/// Bytes of resident memory, by what holds them. See [`MemoryBreakdown::get`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryBreakdown {
    /// The process's resident memory (`Rss`).
    pub resident: u64,
    /// Live heap bytes as the program requested them (recorded blocks; an estimate under
    /// sampling).
    pub heap_requested: u64,
    /// What the allocator uses beyond the requested bytes (its rounding and chunk headers,
    /// memprof's block headers): glibc's bytes in use less `heap_requested` and `memprof_own`;
    /// `None` when glibc's allocator does not hold the heap.
    pub heap_rounding: Option<u64>,
    /// Free memory glibc's allocator keeps (`mallinfo2().fordblks`); `None` as for
    /// `heap_rounding`.
    pub allocator_free: Option<u64>,
    /// memprof's own memory: its tables, caches and work, allocated inside its reentrancy guard.
    pub memprof_own: u64,
    /// Resident bytes of the mappings recognized as the allocator's (for comparison with the
    /// four parts above, which it holds).
    pub allocator_resident: u64,
    /// Resident bytes of thread stacks.
    pub stacks: u64,
    /// Resident bytes of file mappings: code, libraries, mapped files.
    pub code_and_files: u64,
    /// Resident bytes of the other anonymous mappings: the program's own `mmap`s.
    pub other_mappings: u64,
    /// Of the four heap parts (`heap_requested`, `heap_rounding`, `allocator_free`,
    /// `memprof_own`), the bytes that are not resident: their sum less `allocator_resident`, when
    /// more (blocks never touched, free memory grown and never touched or given back); 0 when
    /// glibc's allocator does not hold the heap.
    pub heap_not_resident: u64,
    /// `resident` less the sum of the parts (`heap_requested`, `heap_rounding`,
    /// `allocator_free`, `memprof_own`, less `heap_not_resident`, then `stacks`,
    /// `code_and_files`, `other_mappings`): what no part explains.
    pub unaccounted: i64,
}

impl MemoryBreakdown {
    /// Measures the process's memory now.
    ///
    /// It copies the live table (as [`Snapshot::take`] does) to tell the allocator's mappings by
    /// the blocks in them, and reads `/proc/self/smaps`: call it now and then (a scrape, a log
    /// line a minute), not in a loop. Outside Linux every part is 0.
    pub fn get() -> MemoryBreakdown {
        crate::guard::untracked(|| measure(&Snapshot::take()))
    }

    /// Measures the process's memory now, telling the allocator's mappings by the blocks of
    /// `snapshot`, a snapshot just taken (the endpoint's, taken under its throttle).
    #[cfg(feature = "http")]
    pub(crate) fn of(snapshot: &Snapshot) -> MemoryBreakdown {
        crate::guard::untracked(|| measure(snapshot))
    }

    /// The parts outside the heap: stacks, code and files, other mappings.
    pub fn rest(&self) -> u64 {
        self.stacks + self.code_and_files + self.other_mappings
    }

    /// The breakdown as text, one part a line: its name, its bytes, and its share of `resident`.
    pub fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        let resident = self.resident;
        let mut line = |name: &str, bytes: Option<i64>, what: &str| match bytes {
            Some(bytes) => writeln!(
                out,
                "{name:<16} {bytes:>15} {:>6.1}%  {what}",
                if resident == 0 {
                    0.0
                } else {
                    bytes as f64 * 100.0 / resident as f64
                }
            ),
            None => writeln!(out, "{name:<16} {:>15} {:>7}  {what}", "-", ""),
        };
        let some = |bytes: u64| Some(bytes as i64);
        line("resident", some(self.resident), "resident memory (RSS)")?;
        line(
            "heap_requested",
            some(self.heap_requested),
            "live heap, as requested",
        )?;
        line(
            "heap_rounding",
            self.heap_rounding.map(|b| b as i64),
            "allocator's rounding and headers",
        )?;
        line(
            "allocator_free",
            self.allocator_free.map(|b| b as i64),
            "free memory the allocator keeps",
        )?;
        line(
            "memprof_own",
            some(self.memprof_own),
            "memprof's own tables",
        )?;
        line(
            "heap_not_resident",
            self.heap_rounding.map(|_| -(self.heap_not_resident as i64)),
            "of these four, not resident (never touched, or given back)",
        )?;
        line("stacks", some(self.stacks), "thread stacks")?;
        line(
            "code_and_files",
            some(self.code_and_files),
            "code, libraries, mapped files",
        )?;
        line(
            "other_mappings",
            some(self.other_mappings),
            "other anonymous mappings (the program's own)",
        )?;
        line(
            "unaccounted",
            Some(self.unaccounted),
            "resident less the parts above",
        )?;
        line(
            "allocator_rss",
            some(self.allocator_resident),
            "resident in the allocator's mappings",
        )
    }
}

/// The breakdown now, as the trace's `MEMORY` record carries it.
#[cfg(feature = "trace")]
pub(crate) fn trace_parts() -> memprof_trace::MemoryParts {
    let b = MemoryBreakdown::get();
    memprof_trace::MemoryParts {
        resident: b.resident,
        heap_requested: b.heap_requested,
        heap_rounding: b.heap_rounding,
        allocator_free: b.allocator_free,
        memprof_own: b.memprof_own,
        stacks: b.stacks,
        code_and_files: b.code_and_files,
        other_mappings: b.other_mappings,
        allocator_resident: b.allocator_resident,
    }
}

/// What a mapping of `/proc/self/smaps` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Allocator,
    Stack,
    File,
    Other,
}

/// One mapping: its range, what its header line says, and its resident bytes.
#[derive(Debug)]
struct Mapping<'a> {
    start: usize,
    end: usize,
    perms: &'a str,
    inode: u64,
    name: &'a str,
    rss: u64,
}

/// The mappings of an `smaps` text.
fn mappings(smaps: &str) -> Vec<Mapping<'_>> {
    let mut out: Vec<Mapping<'_>> = Vec::new();
    for line in smaps.lines() {
        if line.starts_with("Rss:") {
            if let Some(last) = out.last_mut() {
                last.rss = memory::kib_field(line, "Rss:").unwrap_or(0);
            }
            continue;
        }
        let Some(memory::MapsLine {
            start,
            end,
            perms,
            inode,
            name,
        }) = memory::maps_line(line)
        else {
            continue;
        };
        out.push(Mapping {
            start,
            end,
            perms,
            inode,
            name,
            rss: 0,
        });
    }
    out
}

/// glibc's arenas other than the main one live in heaps of 64 MiB, aligned to their size.
const ARENA_HEAP: usize = 64 << 20;

/// Whether `mapping` (followed by `next`) is a glibc arena heap none of whose blocks is live: the
/// start of a 64 MiB reservation, whose part not yet in use follows it without access.
fn arena_heap(mapping: &Mapping<'_>, next: Option<&Mapping<'_>>) -> bool {
    mapping.start.is_multiple_of(ARENA_HEAP)
        && (mapping.end - mapping.start == ARENA_HEAP
            || next.is_some_and(|n| {
                n.start == mapping.end
                    && n.perms.starts_with("---")
                    && n.inode == 0
                    && n.end == mapping.start + ARENA_HEAP
            }))
}

/// Largest guard page below a thread's stack that [`kind`] recognizes.
const MAX_GUARD: usize = 1 << 20;

/// Whether `previous` is the guard below a thread stack at `mapping`: a small anonymous mapping
/// without access, right below it (glibc's `pthread_create` makes one under each stack).
fn guarded(previous: Option<&Mapping<'_>>, mapping: &Mapping<'_>) -> bool {
    previous.is_some_and(|p| {
        p.end == mapping.start
            && p.perms.starts_with("---")
            && p.inode == 0
            && p.end - p.start <= MAX_GUARD
    })
}

/// What `mapping` holds, given the mappings around it, the sorted addresses of the live blocks
/// and the threads' stack pointers.
fn kind(
    previous: Option<&Mapping<'_>>,
    mapping: &Mapping<'_>,
    next: Option<&Mapping<'_>>,
    blocks: &[usize],
    stack_pointers: &[usize],
) -> Kind {
    let holds = |sorted: &[usize]| {
        let i = sorted.partition_point(|&a| a < mapping.start);
        sorted.get(i).is_some_and(|&a| a < mapping.end)
    };
    match mapping.name {
        "[heap]" => Kind::Allocator,
        "[stack]" => Kind::Stack,
        "[vdso]" | "[vvar]" | "[vsyscall]" | "[vvar_vclock]" => Kind::File,
        _ if mapping.inode != 0 || mapping.name.starts_with('/') => Kind::File,
        _ if holds(stack_pointers) => Kind::Stack,
        _ if holds(blocks) || arena_heap(mapping, next) => Kind::Allocator,
        // A thread that was running when the stack pointers were read.
        _ if guarded(previous, mapping) && mapping.perms.starts_with("rw") => Kind::Stack,
        _ => Kind::Other,
    }
}

/// The stack pointers of this process's threads: the calling thread's, and each other thread's
/// as `/proc/self/task/TID/syscall` gives it (the last but one field; a thread running on another
/// processor at that moment gives none).
fn stack_pointers() -> Vec<usize> {
    let here = 0u8;
    let mut pointers = vec![std::hint::black_box(&here) as *const u8 as usize];
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let Ok(text) = std::fs::read_to_string(task.path().join("syscall")) else {
                continue;
            };
            let fields: Vec<&str> = text.split_whitespace().collect();
            if fields.len() >= 3
                && let Some(sp) = fields[fields.len() - 2].strip_prefix("0x")
                && let Ok(sp) = usize::from_str_radix(sp, 16)
            {
                pointers.push(sp);
            }
        }
    }
    pointers.sort_unstable();
    pointers
}

fn measure(snapshot: &Snapshot) -> MemoryBreakdown {
    let heap_requested = snapshot.stats.live_bytes;
    let memprof_own = memory::own_bytes();
    let mut blocks: Vec<usize> = snapshot.blocks.iter().map(|b| b.address).collect();
    blocks.sort_unstable();
    let stack_pointers = stack_pointers();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut breakdown = MemoryBreakdown {
        heap_requested,
        memprof_own,
        ..MemoryBreakdown::default()
    };
    let mappings = mappings(&smaps);
    for (i, mapping) in mappings.iter().enumerate() {
        breakdown.resident += mapping.rss;
        let previous = i.checked_sub(1).and_then(|p| mappings.get(p));
        let part = match kind(
            previous,
            mapping,
            mappings.get(i + 1),
            &blocks,
            &stack_pointers,
        ) {
            Kind::Allocator => &mut breakdown.allocator_resident,
            Kind::Stack => &mut breakdown.stacks,
            Kind::File => &mut breakdown.code_and_files,
            Kind::Other => &mut breakdown.other_mappings,
        };
        *part += mapping.rss;
    }
    if let Some(glibc) = native::allocator_statistics() {
        let in_use = glibc.in_use + glibc.mapped;
        // Less in use than requested: the heap is another allocator's.
        if in_use >= heap_requested {
            breakdown.heap_rounding = Some(in_use.saturating_sub(heap_requested + memprof_own));
            breakdown.allocator_free = Some(glibc.free);
        }
    }
    let heap = heap_requested
        + breakdown.heap_rounding.unwrap_or(0)
        + breakdown.allocator_free.unwrap_or(0)
        + memprof_own;
    if breakdown.heap_rounding.is_some() {
        breakdown.heap_not_resident = heap.saturating_sub(breakdown.allocator_resident);
    }
    let parts = heap - breakdown.heap_not_resident + breakdown.rest();
    breakdown.unaccounted = breakdown.resident as i64 - parts as i64;
    breakdown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_are_told_apart() {
        let smaps = "\
55d0c0000000-55d0c0021000 r-xp 00000000 08:01 1234 /usr/bin/app
Size:                132 kB
Rss:                  100 kB
55d0c1000000-55d0c1100000 rw-p 00000000 00:00 0 [heap]
Rss:                  900 kB
7f0000000000-7f0000200000 rw-p 00000000 00:00 0
Rss:                  2048 kB
7f0000200000-7f0004000000 ---p 00000000 00:00 0
Rss:                  0 kB
7f1000000000-7f1000100000 rw-p 00000000 00:00 0
Rss:                  64 kB
7f2000001000-7f2000800000 rw-p 00000000 00:00 0
Rss:                  32 kB
7f2000900000-7f2000a00000 rw-p 00000000 00:00 0
Rss:                  16 kB
7f2000a00000-7f2000a01000 ---p 00000000 00:00 0
Rss:                  0 kB
7f2000a01000-7f2000c00000 rw-p 00000000 00:00 0
Rss:                  40 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
Rss:                  24 kB
";
        let maps = mappings(smaps);
        assert_eq!(maps.len(), 10);
        assert_eq!(maps[2].rss, 2048 * 1024);
        let blocks = [0x7f2000900010];
        let stack_pointers = [0x7f2000700000];
        let kinds: Vec<Kind> = (0..maps.len())
            .map(|i| {
                let previous = i.checked_sub(1).map(|p| &maps[p]);
                kind(
                    previous,
                    &maps[i],
                    maps.get(i + 1),
                    &blocks,
                    &stack_pointers,
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                Kind::File,
                Kind::Allocator,
                // 64 MiB-aligned, the rest of its 64 MiB reserved: an arena heap.
                Kind::Allocator,
                Kind::Other,
                // 64 MiB-aligned, without the reservation: the program's.
                Kind::Other,
                Kind::Stack,
                Kind::Allocator,
                Kind::Other,
                // Above a guard page: a thread's stack, whose pointer was not read.
                Kind::Stack,
                Kind::Stack
            ]
        );
    }
}
