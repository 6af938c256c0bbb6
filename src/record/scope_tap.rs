//! The allocation path's tap into the heap assertions for tests ([`Scope`](crate::Scope)): the
//! counts of a thread's open scopes, kept per thread, that the path updates at every allocation
//! and free of the thread. The path's only cost while the thread has no open scope is one
//! thread-local load ([`any_open`]).
//!
//! The assertions themselves, and the reports that explain a failing one, read these counts from
//! `crate::scope`; the path never reaches up to them.

#![forbid(unsafe_code)]

use crate::address::StackId;
use crate::guard::Guard;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a scope has seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScopeStats {
    /// Blocks allocated (a `realloc` counts as a free and an allocation).
    pub allocated_blocks: u64,
    /// Bytes allocated.
    pub allocated_bytes: u64,
    /// Blocks freed.
    pub freed_blocks: u64,
    /// Bytes freed.
    pub freed_bytes: u64,
    /// Blocks allocated and not freed yet.
    pub live_blocks: u64,
    /// Bytes allocated and not freed yet.
    pub live_bytes: u64,
    /// The most `live_bytes` reached.
    pub peak_bytes: u64,
}

/// One open scope of a thread.
pub(crate) struct State {
    /// The scope's number, to find it when it closes.
    pub(crate) id: u64,
    /// Its counts.
    pub(crate) stats: ScopeStats,
    /// Blocks allocated per stack (when the stack was recorded).
    pub(crate) sites: HashMap<StackId, (u64, u64)>,
    /// Blocks allocated in the scope and not freed yet: address → size and stack (when recorded).
    pub(crate) live: HashMap<usize, (u64, Option<StackId>)>,
}

thread_local! {
    /// This thread's open scopes, innermost last.
    static SCOPES: RefCell<Vec<State>> = const { RefCell::new(Vec::new()) };
    /// Whether this thread has an open scope: the allocation path's only cost when it has none.
    static OPEN: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread is allocating a probe (see `Scope::recording_reaches_scopes`),
    /// which is seen and not counted.
    static PROBING: Cell<bool> = const { Cell::new(false) };
}

/// Whether any scope of the process was ever told of an allocation: then memprof is the global
/// allocator and records.
pub(crate) static SEEN: AtomicBool = AtomicBool::new(false);

/// Whether any thread ever opened a scope: until one does, [`any_open`] is one relaxed load of
/// this, and no thread-local is reached (in the preloaded library every thread-local costs a
/// call into the dynamic loader, `__tls_get_addr`).
static EVER_OPENED: AtomicBool = AtomicBool::new(false);

/// Whether the current thread has an open scope.
#[inline]
pub(crate) fn any_open() -> bool {
    EVER_OPENED.load(Ordering::Relaxed) && OPEN.try_with(Cell::get).unwrap_or(false)
}

/// Counts an allocation of this thread in its open scopes. Runs inside the guard.
pub(crate) fn on_alloc(_guard: &Guard, address: usize, size: usize, stack: Option<StackId>) {
    if !SEEN.load(Ordering::Relaxed) {
        SEEN.store(true, Ordering::Relaxed);
    }
    if PROBING.try_with(Cell::get).unwrap_or(false) {
        return;
    }
    let _ = SCOPES.try_with(|scopes| {
        let Ok(mut scopes) = scopes.try_borrow_mut() else {
            return;
        };
        for scope in scopes.iter_mut() {
            let stats = &mut scope.stats;
            stats.allocated_blocks += 1;
            stats.allocated_bytes += size as u64;
            stats.live_blocks += 1;
            stats.live_bytes += size as u64;
            stats.peak_bytes = stats.peak_bytes.max(stats.live_bytes);
            if let Some(stack) = stack {
                let site = scope.sites.entry(stack).or_default();
                site.0 += 1;
                site.1 += size as u64;
            }
            scope.live.insert(address, (size as u64, stack));
        }
    });
}

/// Counts the free of a block of this thread's open scopes. Never allocates.
pub(crate) fn on_free(address: usize) {
    let _ = SCOPES.try_with(|scopes| {
        let Ok(mut scopes) = scopes.try_borrow_mut() else {
            return;
        };
        for scope in scopes.iter_mut() {
            if let Some((size, _)) = scope.live.remove(&address) {
                let stats = &mut scope.stats;
                stats.freed_blocks += 1;
                stats.freed_bytes += size;
                stats.live_blocks -= 1;
                stats.live_bytes -= size;
            }
        }
    });
}

/// Opens a scope numbered `id` on the current thread. Call it untracked: the scope's state
/// allocates.
pub(crate) fn open(id: u64) {
    SCOPES.with_borrow_mut(|scopes| {
        scopes.push(State {
            id,
            stats: ScopeStats::default(),
            sites: HashMap::new(),
            live: HashMap::new(),
        })
    });
    // Before the thread's own flag: a thread that sees its flag set has seen this too (the same
    // thread set both), so its next allocation is counted.
    EVER_OPENED.store(true, Ordering::Relaxed);
    OPEN.set(true);
}

/// Calls `f` with the state of the current thread's open scope `id`. Call it untracked.
pub(crate) fn with_state<R>(id: u64, f: impl FnOnce(&State) -> R) -> R {
    SCOPES.with_borrow(|scopes| {
        let state = scopes
            .iter()
            .find(|s| s.id == id)
            .expect("a scope's state lives as long as the scope");
        f(state)
    })
}

/// Closes the current thread's scope `id`. Call it untracked.
pub(crate) fn close(id: u64) {
    let _ = SCOPES.try_with(|scopes| {
        let mut scopes = scopes.borrow_mut();
        scopes.retain(|s| s.id != id);
        let _ = OPEN.try_with(|open| open.set(!scopes.is_empty()));
    });
}

/// Marks this thread's allocations as probes (`true`), seen and not counted, or counted again.
pub(crate) fn set_probing(probing: bool) {
    let _ = PROBING.try_with(|p| p.set(probing));
}
