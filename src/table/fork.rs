//! The table across `fork`: the child gets a copy of the parent's memory with only the forking
//! thread in it, so whatever another thread held at that moment (a lock, a writer inside the
//! table) would stay held in the child forever.
//!
//! Before `fork`, the forking thread takes every lock of the table in the order the table's own
//! code takes them ([`Table::hold_for_fork`]): the stack index's shards and the orphans' writer
//! (their holders may wait at the table's door), then the table itself, held still as a reader
//! holds it (no writer inside, every side table locked), then the slots' extras, then the peak
//! table. The fork copies
//! that; the parent lets it all go ([`ForkHold::release_in_parent`]), and the child too, after
//! handing back the writers of the threads that did not come along ([`ForkHold::release_in_child`]):
//! their counters stay, since the blocks they counted are in the child's heap too, and the next
//! threads the child starts claim them.

use super::door::{Locked, OrphanGuard};
use super::hold::holding_table;
use super::side::Extras;
use super::stacks::{HeldShard, INDEX_SHARDS};
use super::{PeakTable, Table};
use crate::fence::{SignalsHeld, hold_signals};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{MutexGuard, PoisonError};

/// The table held across `fork` by the forking thread. Its fields are released in the order
/// they are declared, the reverse of the order they were taken in.
pub(crate) struct ForkHold<'a> {
    /// The per-stack table of the peak.
    _peak: MutexGuard<'a, PeakTable>,
    /// What some blocks of the slots keep beside them.
    _extras: MutexGuard<'a, Extras>,
    /// The table, held still.
    locked: Locked<'a>,
    /// The orphans' writer.
    _orphan: Option<OrphanGuard<'a>>,
    /// The stack index.
    _index: [HeldShard<'a>; INDEX_SHARDS],
    /// This thread's signals, blocked throughout.
    _signals: SignalsHeld,
}

impl Table {
    /// Takes every lock of the table, for `fork`; `None` when this thread is inside the table or
    /// holds part of it already (a `fork` from a signal handler that interrupted memprof), which
    /// it cannot wait for. `in_guard`: this thread is inside the reentrancy guard, where it may be
    /// interning a stack; then a held shard of the stack index means `None` too.
    pub(crate) fn hold_for_fork(&self, in_guard: bool) -> Option<ForkHold<'_>> {
        if holding_table() || self.inside_writer().is_some() {
            return None;
        }
        let signals = hold_signals();
        let index = self.stacks.hold_index(in_guard)?;
        // `None` only when this thread holds it already, which `inside_writer` rules out.
        let orphan = self.lock_orphan();
        let locked = self.lock_all();
        let extras = self.slots.extras();
        let peak = self
            .peak
            .table
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Some(ForkHold {
            _peak: peak,
            _extras: extras,
            locked,
            _orphan: orphan,
            _index: index,
            _signals: signals,
        })
    }
}

impl ForkHold<'_> {
    /// After `fork`, in the parent: lets the table go.
    pub(crate) fn release_in_parent(self) {}

    /// After `fork`, in the child, where the forking thread is the only one: hands back the
    /// writers of the other threads, then lets the table go.
    pub(crate) fn release_in_child(self) {
        let table = self.locked.table;
        let mine = table.claimed_writer().map(std::ptr::from_ref);
        for (_, writer) in table.writers.claimed.iter() {
            if Some(std::ptr::from_ref(writer)) != mine {
                writer.reset_after_fork();
            }
        }
        table.writers.orphan.reset_after_fork();
        table.door.nested_waiting.store(0, Relaxed);
        for deferred in &table.nested.deferred {
            deferred.reset_after_fork();
        }
        table.slots.reset_after_fork();
    }
}
