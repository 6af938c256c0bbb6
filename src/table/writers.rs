//! The threads that change a table, and how a reader holds it still.
//!
//! Each thread that records claims a [`Writer`] of the table: its own counters (live and
//! allocated blocks and bytes, overall and per stack for the first stacks), which only that
//! thread writes, with a plain load and store rather than a locked instruction, and which readers
//! add up. A thread that ends gives its writer back for the next thread to claim; the counters
//! are cumulative, so they stay.
//!
//! A writer changes the table between entering it and dropping the [`Entered`] it got. Entering
//! makes the writer's `busy` odd, fences, then checks that no reader froze the table; a reader
//! ([`super::Table::lock_all`]) sets `frozen`, fences, then waits until every writer's `busy` is
//! even. One of the two always sees the other's store (Dekker's pattern), so while a reader holds
//! the table no writer is inside it, and writers that come meanwhile wait at the door. The
//! reader's fence is the heavy one of `crate::fence`, a `membarrier` system call on Linux, so
//! that a writer's is a compiler fence: no locked instruction per table change (one where the
//! system lacks the call, against a lock's two).
//!
//! A signal handler that frees memory may interrupt its thread inside the table. It cannot enter
//! again, and it cannot wait for a reader that is waiting for its own thread; so it makes its
//! change as part of the interrupted one ([`nested`]): while the writer's `busy` is odd no reader
//! reads, provided the handler first waits out a reader that froze the table before `busy` went
//! odd (the moment between `enter`'s store and its check of `frozen`). It says so in the table's
//! count of waiting nested changes, and a freezing reader that finds it set while it waits for
//! writers lets the table go until those changes are done, then freezes it again ([`freeze`]):
//! the writer it waits for may be waiting for the handler's thread.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Stack ids whose per-stack counters are allocated together.
const GROUP: usize = 64;

/// The `(blocks, bytes)` counters of [`GROUP`] consecutive stack ids.
type Group = [[AtomicU64; 2]; GROUP];

/// Groups in one [`Groups`].
const GROUPS: usize = 256;

/// [`GROUPS`] consecutive groups, each made on first use.
type Groups = [OnceLock<Box<Group>>; GROUPS];

/// Adds `delta` to a counter that only its owner writes: a load and a store, no locked
/// instruction. Wrapping, so that readers can add signed changes up.
#[inline]
pub(super) fn bump(counter: &AtomicU64, delta: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(delta),
        Ordering::Relaxed,
    );
}

/// One thread's share of a table's counters and its door into the table. Aligned to two cache
/// lines (the unit adjacent-line prefetchers fetch), so two threads' writers never share one.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Writer {
    /// Whether a live thread owns this writer.
    claimed: AtomicBool,
    /// Odd while the owner changes the table.
    busy: AtomicU32,
    /// Live blocks this writer added minus those it removed (wrapping).
    pub(super) live_blocks: AtomicU64,
    /// Live bytes, likewise.
    pub(super) live_bytes: AtomicU64,
    /// Blocks allocated through this writer.
    pub(super) total_blocks: AtomicU64,
    /// Bytes allocated through this writer.
    pub(super) total_bytes: AtomicU64,
    /// Live bytes not yet added to the table's peak counter.
    pub(super) pending_peak: AtomicI64,
    /// The slots this writer freed, as a list (see `slots`): the first one's number plus one, 0
    /// when empty.
    pub(super) free_slots: AtomicU32,
    /// The next fresh slot of this writer's run.
    pub(super) fresh_next: AtomicU32,
    /// The end of this writer's run of fresh slots.
    pub(super) fresh_end: AtomicU32,
    /// `(blocks, bytes)` allocated through this writer, by stack id in groups of [`GROUP`], for
    /// the first [`GROUPS`] groups of ids; each group made on first use.
    near: Groups,
    /// The same for the next ids the table counts here (see `WRITER_STACKS`), [`GROUPS`] groups
    /// at a time; each array and each group made on first use.
    far: [OnceLock<Box<Groups>>; super::WRITER_STACKS as usize / (GROUP * GROUPS) - 1],
}

impl Default for Writer {
    fn default() -> Self {
        Writer::new()
    }
}

/// A table's writers: one per thread that recorded, claimed on first use, and the orphans'.
pub(super) struct Writers {
    /// One per thread that recorded.
    pub(super) claimed: boxcar::Vec<Writer>,
    /// The writer of threads that are ending (their own was given back), behind `orphan_lock`.
    pub(super) orphan: Writer,
    /// Serializes the users of `orphan`.
    pub(super) orphan_lock: Mutex<()>,
    /// The table's id for [`CLAIMED`]; 0 until a thread first claims a writer.
    pub(super) id: AtomicU64,
}

impl Writers {
    /// No writer claimed yet.
    pub(super) const fn new() -> Writers {
        Writers {
            claimed: boxcar::Vec::new(),
            orphan: Writer::new(),
            orphan_lock: Mutex::new(()),
            id: AtomicU64::new(0),
        }
    }
}

impl Writer {
    /// A writer nobody owns.
    pub(super) const fn new() -> Writer {
        Writer {
            claimed: AtomicBool::new(false),
            busy: AtomicU32::new(0),
            live_blocks: AtomicU64::new(0),
            live_bytes: AtomicU64::new(0),
            total_blocks: AtomicU64::new(0),
            total_bytes: AtomicU64::new(0),
            pending_peak: AtomicI64::new(0),
            free_slots: AtomicU32::new(0),
            fresh_next: AtomicU32::new(0),
            fresh_end: AtomicU32::new(0),
            near: [const { OnceLock::new() }; GROUPS],
            far: [const { OnceLock::new() }; super::WRITER_STACKS as usize / (GROUP * GROUPS) - 1],
        }
    }

    /// Claims this writer when nobody owns it.
    pub(super) fn try_claim(&self) -> bool {
        !self.claimed.load(Ordering::Relaxed)
            && self
                .claimed
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// A writer owned from the start.
    pub(super) fn claimed() -> Writer {
        let writer = Writer::new();
        writer.claimed.store(true, Ordering::Relaxed);
        writer
    }

    /// Gives the writer back.
    pub(super) fn release(&self) {
        self.claimed.store(false, Ordering::Release);
    }

    /// Counts an allocation from `stack`. Only the owner calls it, inside the reentrancy guard
    /// (the per-stack counters grow on first use of a stack).
    #[inline]
    pub(super) fn count_stack(&self, stack: u32, blocks: u64, bytes: u64) {
        let index = stack as usize;
        let groups = match index < GROUP * GROUPS {
            true => &self.near,
            false => match self.far_groups(index) {
                Some(groups) => groups,
                None => return,
            },
        };
        let slot = &groups[index / GROUP % GROUPS];
        let Some(group) = slot.get().map(|g| &**g).or_else(|| Self::make_group(slot)) else {
            return;
        };
        let [b, s] = &group[index % GROUP];
        bump(b, blocks);
        bump(s, bytes);
    }

    /// The group of `slot`, made on first use; `None` when the allocation failed.
    #[cold]
    #[inline(never)]
    fn make_group(slot: &OnceLock<Box<Group>>) -> Option<&Group> {
        let group = bytemuck::allocation::try_zeroed_box::<Group>().ok()?;
        Some(slot.get_or_init(|| group))
    }

    /// The groups of stack id `index`, past the [`Writer::near`] ones, made on first use; `None`
    /// past them all, or when the allocation failed.
    #[inline(never)]
    fn far_groups(&self, index: usize) -> Option<&Groups> {
        let slot = self.far.get(index / (GROUP * GROUPS) - 1)?;
        if let Some(groups) = slot.get() {
            return Some(groups);
        }
        let groups = super::empty_cells()?;
        Some(slot.get_or_init(|| groups))
    }

    /// This writer's `(blocks, bytes)` allocated from stack `id`.
    pub(super) fn stack_counts(&self, id: u32) -> (u64, u64) {
        let index = id as usize;
        let groups = match index < GROUP * GROUPS {
            true => Some(&self.near),
            false => self
                .far
                .get(index / (GROUP * GROUPS) - 1)
                .and_then(|slot| slot.get().map(|g| &**g)),
        };
        let group = groups.and_then(|groups| groups[index / GROUP % GROUPS].get());
        group.map_or((0, 0), |group| {
            let [b, s] = &group[index % GROUP];
            (b.load(Ordering::Relaxed), s.load(Ordering::Relaxed))
        })
    }

    /// Adds this writer's per-stack allocated counters to `into`, by stack id.
    pub(super) fn add_stacks(&self, into: &mut Vec<(u64, u64)>) {
        let far = self.far.iter().map(|groups| groups.get().map(|g| &**g));
        let arrays = std::iter::once(Some(&self.near)).chain(far);
        for (top, groups) in arrays.enumerate() {
            let Some(groups) = groups else { continue };
            for (g, slot) in groups.iter().enumerate() {
                let Some(group) = slot.get() else { continue };
                let first = (top * GROUPS + g) * GROUP;
                Self::add_group(first, group, into);
            }
        }
    }

    /// Adds the counters of `group`, whose first stack id is `first`, to `into`.
    fn add_group(first: usize, group: &Group, into: &mut Vec<(u64, u64)>) {
        for (id, [b, s]) in (first..).zip(group.iter()) {
            let (b, s) = (b.load(Ordering::Relaxed), s.load(Ordering::Relaxed));
            // Ids never counted here add nothing (and may not be interned yet).
            if b == 0 && s == 0 {
                continue;
            }
            if into.len() <= id {
                into.resize(id + 1, (0, 0));
            }
            into[id].0 = into[id].0.wrapping_add(b);
            into[id].1 = into[id].1.wrapping_add(s);
        }
    }

    /// Enters the table, waiting while a reader holds it; `None` when the owner is inside already
    /// (a free of the table's own memory, or a signal handler that interrupted a change).
    #[inline]
    pub(super) fn enter<'a>(&'a self, frozen: &AtomicBool) -> Option<Entered<'a>> {
        loop {
            let busy = self.busy.load(Ordering::Relaxed);
            if busy % 2 == 1 {
                return None;
            }
            crate::fence::store_then_fence(&self.busy, busy + 1);
            if !frozen.load(Ordering::SeqCst) {
                return Some(Entered { writer: self });
            }
            self.busy.store(busy + 2, Ordering::Release);
            wait_while(|| frozen.load(Ordering::Acquire));
        }
    }

    /// Whether the owner is inside the table (or just entering it).
    pub(super) fn is_inside(&self) -> bool {
        self.busy.load(Ordering::Relaxed) % 2 == 1
    }

    /// After `fork`, in the child, for a writer whose thread did not come along: nobody owns it
    /// and it is outside the table. What it counted stays.
    pub(super) fn reset_after_fork(&self) {
        let busy = self.busy.load(Ordering::Relaxed);
        self.busy.store(busy + busy % 2, Ordering::Relaxed);
        self.claimed.store(false, Ordering::Relaxed);
    }
}

/// Starts a change made while this thread's writer is inside the table already (a signal handler
/// that interrupted the writer's change): waits until no reader holds the table (`frozen`), and
/// keeps readers from reading until the result is dropped, without making any of them wait for
/// this thread. `waiting` is the table's count of such changes.
#[cold]
pub(super) fn nested<'a>(frozen: &AtomicBool, waiting: &'a AtomicU32) -> Nested<'a> {
    waiting.fetch_add(1, Ordering::SeqCst);
    std::sync::atomic::fence(Ordering::SeqCst);
    // A reader that froze the table before the writer's `busy` went odd may be reading it: wait
    // for it to finish. A reader that froze it after waits for the writer, and lets the table go
    // on seeing `waiting` (see `freeze`).
    wait_while(|| frozen.load(Ordering::SeqCst));
    Nested { waiting }
}

/// A nested change in progress ([`nested`]); ends when dropped.
pub(super) struct Nested<'a> {
    waiting: &'a AtomicU32,
}

impl Drop for Nested<'_> {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::Release);
    }
}

/// A writer inside its table; leaving is dropping it.
pub(crate) struct Entered<'a> {
    /// The writer that entered.
    pub writer: &'a Writer,
}

impl Drop for Entered<'_> {
    #[inline]
    fn drop(&mut self) {
        let busy = self.writer.busy.load(Ordering::Relaxed);
        self.writer.busy.store(busy + 1, Ordering::Release);
    }
}

/// Spins, then yields, then sleeps, while `busy()` holds. Only calls that are safe in a signal
/// handler (`sched_yield`, `nanosleep`).
fn wait_while(busy: impl Fn() -> bool) {
    let mut rounds = 0u32;
    while busy() {
        pause(&mut rounds);
    }
}

/// One round of waiting: a spin, a yield or a short sleep, by how many `rounds` came before.
fn pause(rounds: &mut u32) {
    if *rounds < 64 {
        std::hint::spin_loop();
    } else if *rounds < 128 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
    *rounds = rounds.saturating_add(1);
}

/// Freezes a table: sets `frozen` and waits until every writer of `writers()` is outside. The
/// caller keeps `frozen` set while it reads and clears it after. While nested changes wait
/// (`waiting`, see [`nested`]), the table is let go until they are done, and the freeze starts
/// over.
pub(super) fn freeze<'a, I: Iterator<Item = &'a Writer>>(
    frozen: &AtomicBool,
    waiting: &AtomicU32,
    writers: impl Fn() -> I,
) {
    'freeze: loop {
        frozen.store(true, Ordering::SeqCst);
        crate::fence::heavy();
        for writer in writers() {
            let mut rounds = 0u32;
            while writer.busy.load(Ordering::SeqCst) % 2 == 1 {
                if waiting.load(Ordering::SeqCst) != 0 {
                    frozen.store(false, Ordering::SeqCst);
                    wait_while(|| waiting.load(Ordering::Acquire) != 0);
                    continue 'freeze;
                }
                pause(&mut rounds);
            }
        }
        return;
    }
}

thread_local! {
    /// The writer this thread claimed: `(table id, index)`, `(0, 0)` before the first claim.
    /// Without a destructor, so reading it never registers one (which allocates).
    pub(super) static CLAIMED: Cell<(u64, usize)> = const { Cell::new((0, 0)) };
    /// Gives the process table's claimed writer back when the thread ends. Touched once, at the
    /// first claim, inside the reentrancy guard: that registers its destructor, which allocates.
    pub(super) static RELEASE: ReleaseOnExit = const { ReleaseOnExit };
    /// This thread's writer of the process table, once claimed: found without a lookup.
    pub(super) static MINE: Cell<Option<&'static Writer>> = const { Cell::new(None) };
}

/// The table id [`CLAIMED`] holds once the thread gave its writer back: what it frees from then
/// on goes through the table's shared writer.
pub(super) const RELEASED: u64 = u64::MAX;

/// See [`RELEASE`].
pub(super) struct ReleaseOnExit;

impl Drop for ReleaseOnExit {
    fn drop(&mut self) {
        let _ = CLAIMED.try_with(|claimed| claimed.set((RELEASED, 0)));
        if let Ok(Some(writer)) = MINE.try_with(|mine| mine.replace(None)) {
            writer.release();
        }
    }
}
