//! `fork` while other threads run memprof: the child is a copy of the parent's memory with only
//! the forking thread in it, so a lock that another thread held at that moment would stay held in
//! the child forever, and the first report (or allocation) there would wait for it.
//!
//! As allocators do, memprof registers `pthread_atfork` handlers when it starts. Before the fork
//! (`prepare`), the forking thread takes every lock memprof's own code may hold, in the order that
//! code takes them: the HTTP endpoint's turn at making a profile, the symbolizer, the type
//! inference caches, the tag registry, the DWARF unwinder's build lock, the modules seen and the table of label
//! sets (whose holders may wait for the table), then the whole table
//! ([`Table::hold_for_fork`](crate::table::Table::hold_for_fork)). After the fork, the parent
//! lets them all go (`parent`); so does the child (`child`), after handing back the table's
//! writers of the threads that did not come along. A lock released in the child is released by
//! the thread that took it: the forking thread is the child's only thread.
//!
//! The child closes its copies of the HTTP endpoint's listening sockets: it has none of the
//! endpoint's threads, and the parent keeps serving.
//!
//! A `fork` from inside memprof on the forking thread (a signal handler that interrupted it, or
//! code run inside the reentrancy guard) takes only what that thread cannot be holding itself.

use crate::guard::Guard;
use crate::table::{ForkHold, TABLE};
use std::any::Any;
use std::cell::RefCell;

/// What the forking thread holds from `prepare` to `parent` or `child`.
struct Held {
    /// The table, released first.
    table: Option<ForkHold<'static>>,
    /// The locks of the later stages, released after the table.
    stages: Option<Box<dyn Any>>,
}

thread_local! {
    /// What this thread holds across its `fork`. `fork` handlers run one `fork` at a time.
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// Registers the handlers. Runs once, when the profiler starts, inside the reentrancy guard.
pub(crate) fn install() {
    // SAFETY: the three handlers are `extern "C" fn()` that never unwind. It fails only for want
    // of memory; forks then go unguarded.
    let _ = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

/// The later stages' locks, in the order their code takes them.
fn lock_stages() -> Box<dyn Any> {
    #[cfg(feature = "http")]
    let endpoint = crate::http::lock_for_fork();
    #[cfg(not(feature = "http"))]
    let endpoint = ();
    let symbolizer = crate::symbolize::lock_for_fork();
    let inference = crate::types::lock_inference_for_fork();
    let tags = crate::types::lock_tags_for_fork();
    #[cfg(target_arch = "x86_64")]
    let unwinder = crate::capture::dwarf::lock_for_fork();
    #[cfg(not(target_arch = "x86_64"))]
    let unwinder = ();
    // After the unwinder's build lock and the symbolizer, whose holders note modules seen.
    let seen_modules = crate::modules::lock_for_fork();
    // Taken by the preloaded library's mapping path, which holds nothing else while it waits.
    #[cfg(feature = "preload")]
    let mappings = crate::table::mappings::lock_for_fork();
    #[cfg(not(feature = "preload"))]
    let mappings = ();
    // Last: its holders take nothing else of memprof's but the table (freeing while they
    // intern), and holders of the others may take it (a snapshot made for a report).
    let label_sets = crate::labels::sets::SETS.lock_for_fork();
    Box::new((
        endpoint,
        label_sets,
        symbolizer,
        inference,
        tags,
        unwinder,
        seen_modules,
        mappings,
    ))
}

extern "C" fn prepare() {
    // Inside the guard already, this thread may hold any of the stages' locks: take none of them,
    // and of the table's only those it cannot be holding.
    let guard = Guard::enter();
    let stages = guard.as_ref().map(|_| lock_stages());
    let table = TABLE.hold_for_fork(guard.is_none());
    let _ = HELD.try_with(|held| *held.borrow_mut() = Some(Held { table, stages }));
    drop(guard);
}

/// Takes what `prepare` left.
fn take() -> Option<Held> {
    HELD.try_with(|held| held.borrow_mut().take())
        .ok()
        .flatten()
}

extern "C" fn parent() {
    let _guard = Guard::enter();
    if let Some(held) = take() {
        if let Some(table) = held.table {
            table.release_in_parent();
        }
        drop(held.stages);
    }
}

extern "C" fn child() {
    let _guard = Guard::enter();
    crate::trace::in_forked_child();
    if let Some(held) = take() {
        if let Some(table) = held.table {
            table.release_in_child();
        }
        drop(held.stages);
    }
    // The HTTP endpoint's threads did not come along: its listening sockets would keep the
    // parent's address bound, with nobody accepting, once the parent is gone.
    #[cfg(feature = "http")]
    crate::http::forget_listeners_in_child(|fd| {
        // SAFETY: `fd` is the child's copy of a listening socket that no thread of the child
        // uses: the endpoint's threads, its only users, exist in the parent alone.
        unsafe {
            libc::close(fd);
        }
    });
}
