//! The door of a table: how a thread comes in to change it, and how a reader holds it still.
//!
//! A thread changes the table through its own [`Writer`], claimed on first use and given back when
//! the thread ends; a thread that already gave its writer back (its late frees, from other
//! thread-local destructors) shares the orphans' writer, one thread at a time, and so does a
//! thread that frees before it ever claimed one ([`Table::enter_to_free`]). Entering is
//! [`Writer::enter`]: it waits while a reader holds the table. A reader holds it with
//! [`Table::lock_all`], which shuts the writers out and takes every side table, and gets a
//! [`Locked`] whose blocks and totals agree with each other.
//!
//! While a thread holds the table or one of its side tables, it cannot enter the table again
//! ([`holding_table`]): what it frees then is the table's own memory (a side table's map growing,
//! say), or, on a thread inside the table, a signal handler's free, which the table applies as
//! part of the interrupted change (see `nested`). A thread that holds the table still has its
//! signals blocked meanwhile, so what it frees is always the table's own memory.

use super::hold::{Hold, holding_table};
use super::side::{SIDES, Side};
use super::writers::{self, CLAIMED, Entered, MINE, RELEASE, RELEASED, Writer};
use super::{Block, HeapStats, TABLE, Table};
use crate::fence::{SignalsHeld, hold_signals};
use crate::guard::Guard;
use crate::sampling;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

thread_local! {
    /// Whether this thread holds the orphans' writer (or is about to take it, or has just let go).
    static ORPHAN_HELD: Cell<bool> = const { Cell::new(false) };
}

/// A table's door: what lets a reader hold the table still while writers wait.
pub(super) struct Door {
    /// Set while a reader holds the table still.
    pub(super) frozen: AtomicBool,
    /// Nested changes (see `nested`) waiting for a reader to let the table go.
    pub(super) nested_waiting: AtomicU32,
    /// One reader at a time holds the table still.
    pub(super) freezer: Mutex<()>,
}

impl Door {
    /// Open: no reader holds the table.
    pub(super) const fn new() -> Door {
        Door {
            frozen: AtomicBool::new(false),
            nested_waiting: AtomicU32::new(0),
            freezer: Mutex::new(()),
        }
    }
}

/// The orphans' writer, held by this thread; see [`ORPHAN_HELD`].
pub(super) struct OrphanGuard<'a> {
    /// The lock, released before the flag is cleared.
    _lock: MutexGuard<'a, ()>,
    _flag: OrphanFlag,
}

/// Sets [`ORPHAN_HELD`] while it lives.
struct OrphanFlag;

impl Drop for OrphanFlag {
    fn drop(&mut self) {
        let _ = ORPHAN_HELD.try_with(|held| held.set(false));
    }
}

/// Ids of tables, so a thread knows which table its claimed writer belongs to.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// This thread inside a table as a writer; leaving is dropping it.
pub(super) struct Inside<'a> {
    /// The writer that entered.
    pub(super) entered: Entered<'a>,
    /// Held while the writer is the orphans'; released after leaving.
    _orphan: Option<OrphanGuard<'a>>,
}

/// A table held still: while it lives no block is added or removed, and its blocks and totals
/// agree with each other. Its thread's signals wait meanwhile (see [`crate::fence`]).
pub(crate) struct Locked<'a> {
    /// The table held.
    pub(super) table: &'a Table,
    /// Every side table, locked.
    sides: [MutexGuard<'a, Side>; SIDES],
    /// Keeps other readers out until this one is done.
    _freezer: MutexGuard<'a, ()>,
    /// Counts the hold for [`holding_table`].
    _hold: Hold,
    /// Blocks this thread's signals until the rest is released.
    _signals: SignalsHeld,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.table
            .door
            .frozen
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

impl Locked<'_> {
    /// Live blocks.
    pub(crate) fn len(&self) -> usize {
        self.table.counts().live_blocks as usize
    }

    /// Calls `f(address, block)` for every live block, in no particular order.
    pub(crate) fn for_each_block(&self, mut f: impl FnMut(usize, Block)) {
        for side in &self.sides {
            for (&address, &word) in &side.blocks {
                f(address, side.unpack(address, word));
            }
        }
        let extras = self.table.slot_extras();
        self.table.slots.for_each(|address, word| {
            let block = match &extras {
                Some(extras) => extras.unpack(address, word, true),
                None => word.block(),
            };
            f(address, block)
        });
    }

    /// The totals of the held table.
    pub(crate) fn stats(&self) -> HeapStats {
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
        stats.peak_bytes = self.table.peak.counter.peak_bytes().max(stats.live_bytes);
        stats.peak_exact = self.table.tracks_peak();
        stats
    }
}

impl Table {
    /// This table's id, assigned on first use.
    fn id(&self) -> u64 {
        match self.writers.id.load(Relaxed) {
            0 => {
                let new = NEXT_TABLE_ID.fetch_add(1, Relaxed);
                match self.writers.id.compare_exchange(0, new, Relaxed, Relaxed) {
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
    pub(super) fn enter(&self) -> Option<Inside<'_>> {
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
        self.enter_as(writer)
    }

    /// Enters the table to take blocks out, as [`Table::enter`] does, except that a thread without
    /// a writer goes through the orphans' writer rather than claim one: claiming may allocate, and
    /// registers the writer's release at thread exit, which allocates too. A signal handler that
    /// frees on a thread that never recorded (one made by C code) may have interrupted the C
    /// library's allocator, whose lock those allocations would wait for.
    #[inline(always)]
    pub(super) fn enter_to_free(&self) -> Option<Inside<'_>> {
        if holding_table() {
            return None;
        }
        self.enter_as(self.claimed_writer())
    }

    /// Enters the table through `writer`, or the orphans' writer when `None`.
    #[inline(always)]
    fn enter_as<'a>(&'a self, writer: Option<&'a Writer>) -> Option<Inside<'a>> {
        let (writer, orphan) = match writer {
            Some(writer) => (writer, None),
            None => (&self.writers.orphan, Some(self.lock_orphan()?)),
        };
        let entered = writer.enter(&self.door.frozen)?;
        Some(Inside {
            entered,
            _orphan: orphan,
        })
    }

    /// Serializes the users of the orphans' writer; `None` when this thread holds it already (a
    /// signal handler that interrupted its change).
    #[cold]
    pub(super) fn lock_orphan(&self) -> Option<OrphanGuard<'_>> {
        if ORPHAN_HELD
            .try_with(|held| held.replace(true))
            .unwrap_or(true)
        {
            return None;
        }
        let flag = OrphanFlag;
        let lock = self
            .writers
            .orphan_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Some(OrphanGuard {
            _lock: lock,
            _flag: flag,
        })
    }

    /// The writer this thread is inside the table with, if it is inside: its own, or the
    /// orphans' while it holds that one.
    pub(super) fn inside_writer(&self) -> Option<&Writer> {
        let writer = if ORPHAN_HELD.try_with(Cell::get).unwrap_or(false) {
            &self.writers.orphan
        } else {
            self.claimed_writer()?
        };
        writer.is_inside().then_some(writer)
    }

    /// The writer this thread claimed, if it holds one (never claims one).
    #[inline(always)]
    pub(super) fn claimed_writer(&self) -> Option<&Writer> {
        if std::ptr::eq(self, &TABLE)
            && let Ok(Some(writer)) = MINE.try_with(Cell::get)
        {
            return Some(writer);
        }
        match CLAIMED.try_with(Cell::get) {
            Ok((table, index)) if table == self.writers.id.load(Relaxed) && table != 0 => {
                self.writers.claimed.get(index)
            }
            _ => None,
        }
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
                    let _ = MINE.try_with(|mine| mine.set(TABLE.writers.claimed.get(index)));
                }
                Some(index)
            }
        };
        index.and_then(|index| self.writers.claimed.get(index))
    }

    #[cold]
    fn claim_writer(&self) -> usize {
        for (index, writer) in self.writers.claimed.iter() {
            if writer.try_claim() {
                return index;
            }
        }
        self.writers.claimed.push(Writer::claimed())
    }

    /// Every writer, the orphans' included.
    pub(super) fn all_writers(&self) -> impl Iterator<Item = &Writer> {
        self.writers
            .claimed
            .iter()
            .map(|(_, w)| w)
            .chain(std::iter::once(&self.writers.orphan))
    }

    /// Holds the table still: waits until no thread is changing it, and makes threads that come to
    /// change it wait until the result is dropped. This thread must not hold it already.
    pub(crate) fn lock_all(&self) -> Locked<'_> {
        let signals = hold_signals();
        let hold = Hold::whole();
        let freezer = self
            .door
            .freezer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        writers::freeze(&self.door.frozen, &self.door.nested_waiting, || {
            self.all_writers()
        });
        let mut sides: [MutexGuard<'_, Side>; SIDES] =
            std::array::from_fn(|i| self.sides[i].lock().unwrap_or_else(PoisonError::into_inner));
        for (i, side) in sides.iter_mut().enumerate() {
            self.apply_deferred(i, side);
        }
        Locked {
            table: self,
            sides,
            _freezer: freezer,
            _hold: hold,
            _signals: signals,
        }
    }
}
