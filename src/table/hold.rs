//! What the current thread holds of the tables: a count per thread that says whether it may enter
//! a table again.
//!
//! While a thread holds a table still ([`Table::lock_all`](super::Table::lock_all)) or one of its
//! side tables, it must not enter the table, which would wait for itself: what it frees then is
//! the table's own memory, or a signal handler's free, which the table makes part of the
//! interrupted change (see `nested`). The door of the table and the side tables both count their
//! holds here, each in a [`Hold`].

use std::cell::Cell;

thread_local! {
    /// What this thread holds: [`WHOLE`] for each table it holds still, 1 for each side table it
    /// holds (or is about to take, or has just let go). While it holds any, it must not enter the
    /// table, which would wait for itself.
    static HELD: Cell<u32> = const { Cell::new(0) };
}

/// What a hold of a whole table adds to [`HELD`]; side tables add 1.
const WHOLE: u32 = 1 << 16;

/// Whether the current thread holds a table still, or one of its side tables.
#[inline]
pub(crate) fn holding_table() -> bool {
    HELD.try_with(Cell::get).unwrap_or(0) != 0
}

/// Whether the current thread holds a whole table still.
pub(super) fn holding_whole() -> bool {
    HELD.try_with(Cell::get).unwrap_or(0) >= WHOLE
}

/// Whether the current thread may hold a side table.
pub(super) fn holding_side() -> bool {
    !HELD.try_with(Cell::get).unwrap_or(0).is_multiple_of(WHOLE)
}

/// Counts a hold for [`holding_table`] while it lives.
pub(super) struct Hold(u32);

impl Hold {
    /// A hold of one side table.
    pub(super) fn side() -> Hold {
        Hold::add(1)
    }

    /// A hold of a whole table.
    pub(super) fn whole() -> Hold {
        Hold::add(WHOLE)
    }

    fn add(amount: u32) -> Hold {
        let _ = HELD.try_with(|held| held.set(held.get() + amount));
        Hold(amount)
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let _ = HELD.try_with(|held| held.set(held.get() - self.0));
    }
}
