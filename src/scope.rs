//! Heap assertions for tests: what the code a thread runs allocates, frees and keeps.
//!
//! The user's side is [`Scope`]; the allocation path calls [`on_alloc`] and [`on_free`].

#![forbid(unsafe_code)]

use crate::guard::{Guard, untracked};
use crate::report::{self, Group, Report, ReportOptions};
use crate::table::{StackId, TABLE};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
struct State {
    /// The scope's number, to find it when it closes.
    id: u64,
    /// Its counts.
    stats: ScopeStats,
    /// Blocks allocated per stack (when the stack was recorded).
    sites: HashMap<StackId, (u64, u64)>,
    /// Blocks allocated in the scope and not freed yet: address → size and stack (when recorded).
    live: HashMap<usize, (u64, Option<StackId>)>,
}

thread_local! {
    /// This thread's open scopes, innermost last.
    static SCOPES: RefCell<Vec<State>> = const { RefCell::new(Vec::new()) };
    /// Whether this thread has an open scope: the allocation path's only cost when it has none.
    static OPEN: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread is allocating a probe (see [`Scope::recording_reaches_scopes`]),
    /// which is seen and not counted.
    static PROBING: Cell<bool> = const { Cell::new(false) };
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Whether any scope of the process was ever told of an allocation: then memprof is the global
/// allocator and records.
static SEEN: AtomicBool = AtomicBool::new(false);

/// The context of the row that stands for a scope's blocks recorded without a stack.
const NO_STACK: &str = "(no stack: allocated while recording was paused, or not sampled)";

/// Whether the current thread has an open scope.
#[inline]
pub fn any_open() -> bool {
    OPEN.try_with(Cell::get).unwrap_or(false)
}

/// Counts an allocation of this thread in its open scopes. Runs inside the guard.
pub fn on_alloc(_guard: &Guard, address: usize, size: usize, stack: Option<StackId>) {
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
pub fn on_free(address: usize) {
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

/// Which of a scope's blocks a failing assertion lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blocks {
    /// Every block allocated in the scope.
    Allocated,
    /// The blocks still live.
    Live,
}

/// Heap assertions for tests: counts this thread's allocations and frees until it is dropped.
///
/// A scope counts the allocations and frees *of the thread that opened it*, from its start
/// until it is dropped, so tests running in parallel in one test binary each see their own code
/// only. Counts are exact even under sampling (they come from the allocator's own arguments), and
/// the scope remembers where its blocks came from, so a failing assertion can say so.
///
/// ```rust,standalone_crate
/// #[global_allocator]
/// static GLOBAL: memprof::MemProf = memprof::MemProf::new();
///
/// fn main() {
///     let scope = memprof::Scope::start();
///     let v: Vec<u64> = Vec::with_capacity(100);
///     scope.assert_max_allocated_bytes(800);
///     drop(v);
///     scope.assert_no_leaks();
/// }
/// ```
///
/// Only the blocks the thread allocates in the scope count, and only the thread's own frees of
/// them: a block handed to another thread and freed there stays live for the scope, and freeing a
/// block allocated before the scope changes nothing. A `realloc` is a free and an allocation.
/// memprof's own work (the scope's bookkeeping, the assertions' messages, the table's) is never
/// counted, and the table of a failing assertion adds up to the figure it explains (blocks
/// recorded without a stack, while paused or under sampling, make one row).
///
/// When nothing is recorded (memprof is not the global allocator, or `MEMPROF_ENABLED=0`), the
/// counts stay 0 and every assertion fails, saying so: a scope cannot tell a leak from nothing.
#[must_use = "a scope counts only while it is alive"]
#[derive(Debug)]
pub struct Scope {
    /// Which of the thread's scopes this is.
    id: u64,
    /// A scope belongs to the thread that opened it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Scope {
    /// Opens a scope on the current thread.
    pub fn start() -> Scope {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        untracked(|| {
            SCOPES.with_borrow_mut(|scopes| {
                scopes.push(State {
                    id,
                    stats: ScopeStats::default(),
                    sites: HashMap::new(),
                    live: HashMap::new(),
                })
            });
            OPEN.set(true);
        });
        Scope {
            id,
            _not_send: std::marker::PhantomData,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        untracked(|| {
            SCOPES.with_borrow(|scopes| {
                let state = scopes
                    .iter()
                    .find(|s| s.id == self.id)
                    .expect("a scope's state lives as long as the scope");
                f(state)
            })
        })
    }

    /// The counts so far.
    pub fn stats(&self) -> ScopeStats {
        self.with(|s| s.stats)
    }

    /// Where the blocks allocated in the scope came from, grouped by context like the allocation
    /// report.
    pub fn allocated_sites(&self) -> Report {
        self.sites(Blocks::Allocated)
    }

    /// Where the scope's blocks that are still live came from, grouped by context like the
    /// allocation report.
    pub fn live_sites(&self) -> Report {
        self.sites(Blocks::Live)
    }

    /// The scope's allocated or live blocks grouped by context; blocks recorded without a stack
    /// make one row of their own, so the rows add up to the scope's counts.
    fn sites(&self, which: Blocks) -> Report {
        untracked(|| {
            let (per_stack, total) = self.with(|s| match which {
                Blocks::Allocated => (
                    s.sites.clone(),
                    (s.stats.allocated_blocks, s.stats.allocated_bytes),
                ),
                Blocks::Live => {
                    let mut per_stack: HashMap<StackId, (u64, u64)> = HashMap::new();
                    for &(size, stack) in s.live.values() {
                        if let Some(stack) = stack {
                            let site = per_stack.entry(stack).or_default();
                            site.0 += 1;
                            site.1 += size;
                        }
                    }
                    (per_stack, (s.stats.live_blocks, s.stats.live_bytes))
                }
            });
            let options = ReportOptions::from_env().min_bytes(0);
            crate::symbolize::with_symbolizer(|symbolizer| {
                let mut groups: HashMap<Vec<String>, (u64, u64)> = HashMap::new();
                let mut listed = (0, 0);
                for (stack, (blocks, bytes)) in per_stack {
                    let frames = TABLE.stacks.record(stack).frames.clone();
                    let context = report::context_of(&frames, symbolizer, &options);
                    let group = groups.entry(context).or_default();
                    group.0 += blocks;
                    group.1 += bytes;
                    listed.0 += blocks;
                    listed.1 += bytes;
                }
                let unlisted = (total.0 - listed.0, total.1 - listed.1);
                if unlisted.0 > 0 {
                    groups.insert(vec![NO_STACK.to_owned()], unlisted);
                }
                let groups = groups
                    .into_iter()
                    .map(|(context, (blocks, bytes))| Group {
                        blocks,
                        bytes,
                        context,
                    })
                    .collect();
                Report::from_groups(groups, 0)
            })
        })
    }

    /// Whether this thread's allocations reach its scopes, that is whether memprof is the global
    /// allocator and records (`MEMPROF_ENABLED` is not `0`). When no scope has seen an allocation
    /// yet and the table holds nothing, it allocates one byte (a probe, not counted) to find out.
    fn recording_reaches_scopes(&self) -> bool {
        if SEEN.load(Ordering::Relaxed) || TABLE.has_recorded() {
            return true;
        }
        let _ = PROBING.try_with(|probing| probing.set(true));
        drop(std::hint::black_box(Box::new(0u8)));
        let _ = PROBING.try_with(|probing| probing.set(false));
        SEEN.load(Ordering::Relaxed)
    }

    /// Panics with what was expected, what was measured and where the blocks came from, unless
    /// `ok` holds of the scope's counts; also when nothing was recorded at all, since then the
    /// counts say nothing. Every step runs untracked, so the assertion's own allocations do not
    /// count in the scope nor show in its table.
    #[track_caller]
    fn check(
        &self,
        ok: impl FnOnce(&ScopeStats) -> bool,
        expected: impl FnOnce() -> String,
        measured: impl FnOnce(&ScopeStats) -> String,
        which: Blocks,
    ) {
        let stats = self.stats();
        // Outside the guard: the probe must take the allocation path.
        let recorded = stats.allocated_blocks > 0 || self.recording_reaches_scopes();
        if recorded && ok(&stats) {
            return;
        }
        let message = untracked(|| {
            if !recorded {
                let why = if crate::config::get().enabled {
                    "memprof is not the program's global allocator \
                     (`#[global_allocator] static GLOBAL: memprof::MemProf = memprof::MemProf::new();`)"
                } else {
                    "MEMPROF_ENABLED=0 turned recording off"
                };
                return format!(
                    "memprof: expected {} in this scope, but nothing was recorded: {why}",
                    expected()
                );
            }
            let mut sites = Vec::new();
            let _ = self.sites(which).write_markdown(&mut sites);
            format!(
                "memprof: expected {} in this scope, measured {}.\nWhere the {} blocks came from:\n{}",
                expected(),
                measured(&stats),
                match which {
                    Blocks::Allocated => "allocated",
                    Blocks::Live => "live",
                },
                String::from_utf8_lossy(&sites)
            )
        });
        std::panic::panic_any(message);
    }

    /// Asserts that at most `n` blocks were allocated.
    #[track_caller]
    pub fn assert_max_allocated_blocks(&self, n: u64) {
        self.check(
            |s| s.allocated_blocks <= n,
            || format!("at most {n} blocks allocated"),
            |s| format!("{} blocks", s.allocated_blocks),
            Blocks::Allocated,
        );
    }

    /// Asserts that at most `n` bytes were allocated.
    #[track_caller]
    pub fn assert_max_allocated_bytes(&self, n: u64) {
        self.check(
            |s| s.allocated_bytes <= n,
            || format!("at most {n} bytes allocated"),
            |s| {
                format!(
                    "{} bytes in {} blocks",
                    s.allocated_bytes, s.allocated_blocks
                )
            },
            Blocks::Allocated,
        );
    }

    /// Asserts that the live heap never grew by more than `n` bytes.
    #[track_caller]
    pub fn assert_max_peak_bytes(&self, n: u64) {
        self.check(
            |s| s.peak_bytes <= n,
            || format!("a peak of at most {n} bytes"),
            |s| format!("a peak of {} bytes", s.peak_bytes),
            Blocks::Allocated,
        );
    }

    /// Asserts that at most `n` bytes allocated in the scope are still live.
    #[track_caller]
    pub fn assert_max_live_bytes(&self, n: u64) {
        self.check(
            |s| s.live_bytes <= n,
            || format!("at most {n} bytes still live"),
            |s| format!("{} bytes in {} blocks", s.live_bytes, s.live_blocks),
            Blocks::Live,
        );
    }

    /// Asserts that everything allocated in the scope was freed.
    #[track_caller]
    pub fn assert_no_leaks(&self) {
        self.check(
            |s| s.live_blocks == 0,
            || "no block still live".to_owned(),
            |s| format!("{} bytes in {} blocks", s.live_bytes, s.live_blocks),
            Blocks::Live,
        );
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        untracked(|| {
            let _ = SCOPES.try_with(|scopes| {
                let mut scopes = scopes.borrow_mut();
                scopes.retain(|s| s.id != self.id);
                let _ = OPEN.try_with(|open| open.set(!scopes.is_empty()));
            });
        });
    }
}
