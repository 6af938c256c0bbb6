//! Heap assertions for tests: what the code a thread runs allocates, frees and keeps.
//!
//! The user's side is [`Scope`]; the counting itself is a tap on the allocation path
//! (`record::scope_tap`), which this module reads.

#![forbid(unsafe_code)]

use crate::address::StackId;
use crate::guard::untracked;
use crate::record::scope_tap::{self, SEEN, State};
use crate::report::{self, Group, Report, ReportOptions};
use crate::table::TABLE;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

mod baseline;

pub use crate::record::scope_tap::ScopeStats;
pub use baseline::Tolerance;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The context of the row that stands for a scope's blocks recorded without a stack.
const NO_STACK: &str = "(no stack: allocated while recording was paused, or not sampled)";

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
        untracked(|| scope_tap::open(id));
        Scope {
            id,
            _not_send: std::marker::PhantomData,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        untracked(|| scope_tap::with_state(self.id, f))
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
                    let frames = TABLE.stacks.frames(stack);
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
        scope_tap::set_probing(true);
        drop(std::hint::black_box(Box::new(0u8)));
        scope_tap::set_probing(false);
        SEEN.load(Ordering::Relaxed)
    }

    /// Why nothing reached the scopes.
    fn why_nothing_recorded() -> &'static str {
        if crate::config::get().enabled {
            "memprof is not the program's global allocator \
             (`#[global_allocator] static GLOBAL: memprof::MemProf = memprof::MemProf::new();`)"
        } else {
            "MEMPROF_ENABLED=0 turned recording off"
        }
    }

    /// Why the scope's counts say nothing, when they do not: nothing reaches the scopes (see
    /// [`Scope::recording_reaches_scopes`]). Call it tracked: the probe must take the allocation
    /// path.
    fn nothing_recorded(&self) -> Option<&'static str> {
        let recorded = self.stats().allocated_blocks > 0 || self.recording_reaches_scopes();
        (!recorded).then(Scope::why_nothing_recorded)
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
                let why = Scope::why_nothing_recorded();
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
        untracked(|| scope_tap::close(self.id));
    }
}
