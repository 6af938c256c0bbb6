//! The DWARF unwinder: walks the stack with each module's `.eh_frame` call-frame information, so it
//! works in default builds, where functions use the frame-pointer register for anything they like.
//!
//! The walk keeps its own cache of unwind rules and evaluates them inline; gimli reads the rules
//! and framehop unwinds the frames the cache cannot describe. Nothing allocates or locks once a
//! thread has walked once:
//!
//! - **The registry** (once per process): every loaded module, as listed by
//!   [`loaded`](crate::modules::loaded), with its `.eh_frame_hdr` (the sorted index of
//!   functions) and `.eh_frame` (the rules), both as `&'static [u8]` slices straight into the
//!   mapped image; nothing is copied, and only the index's header is parsed up front. Each module
//!   is given to framehop too. The registry is published through an atomic pointer and never
//!   freed, so a walk never waits for it and never sees it go away. It is built by the first walk
//!   of the process (which runs inside the caller's reentrancy guard, so its allocations are not
//!   recorded).
//! - **The per-thread rule cache**: for each address a walk met (the walk's own instruction, then
//!   each call instruction, a return address minus one), the row of call-frame information that
//!   covers it, boiled down to a rule: the canonical frame address (CFA) is `rsp` or `rbp` plus an
//!   offset, the return address is at CFA − 8, the caller's `rbp` is unchanged or saved at CFA
//!   plus an offset. That describes nearly every frame of compiled code. A warm walk costs a cache
//!   lookup and two stack reads a frame (about 5 ns); a miss reads the rule with gimli (a binary
//!   search of the index and a short call-frame program). 2,048 rules, four-way set-associative
//!   by address hash: 32 KiB per thread, plus about 25 KiB of gimli's scratch space. Rows the
//!   cache cannot hold (a DWARF expression, as in the signal trampoline and PLT stubs; a CFA in
//!   another register; no entry at all) are remembered as "ask framehop", which keeps its own
//!   cache.
//! - **The walk**: the registers `rip`, `rsp` and `rbp` come from a few instructions of inline
//!   assembly in [`walk`] itself; then frame after frame, reading only aligned words between the
//!   walk's own stack pointer and the top of this thread's stack, each CFA above the last.
//!
//! # Modules loaded or unloaded later
//!
//! The modules present at the first walk are taken to stay loaded (the dynamic loader never unloads
//! the objects a program starts with, and the first walk normally happens at the program's first
//! allocation). When a return address falls in no registered module, or in one registered later
//! (which `dlclose` could unload), the walk first compares the loader's load and unload counters
//! (`dlpi_adds`, `dlpi_subs` of `dl_iterate_phdr`) with the registry's, at most once per walk, and
//! rebuilds the registry when they differ (the one allocation a walk may do, rare, inside the
//! guard; superseded registries are leaked, a few kilobytes per change). Code that stays unknown
//! (JIT-compiled code, or a rebuild that another thread holds the lock for) ends the walk at its
//! return address, which is still recorded; per thread, the counters are then compared only on the
//! 1st, 2nd, 4th, 8th... such miss, and every 4096th after that, so JIT-heavy programs do not
//! take the loader's lock on every allocation.
//!
//! # Limits
//!
//! - Signal frames: the signal trampoline's rules are a DWARF expression that neither the rule
//!   cache nor framehop evaluates, so a walk from inside a signal handler stops or goes astray at
//!   the trampoline; a handler running on an alternate signal stack (`sigaltstack`) captures
//!   nothing, since its stack pointer is outside the thread's stack.
//! - Modules without `.eh_frame_hdr` end the walk at their first frame.
//! - A walk that starts less than `HEADROOM` (32 KiB optimized, 256 KiB unoptimized) above the
//!   end of the thread's stack captures nothing, rather than risk overflowing it.
//! - A function that ends in a tail call has no frame left by then, so it cannot appear (true of
//!   every unwinder).
//! - Only x86-64 unwinds with DWARF; other architectures use the frame-pointer walker for now.

use super::{Budget, ReturnAddress};

#[cfg(target_arch = "x86_64")]
mod rules;

/// Captures up to `out.len()` return addresses of the current thread, innermost first, until it
/// holds the frames `budget` wants.
///
/// The first address is the return address into this function's caller. Never allocates once the
/// process's registry and this thread's cache exist (the first walk of each makes them).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
pub fn walk(out: &mut [ReturnAddress], budget: Budget) -> usize {
    let (pc, sp, bp) = registers();
    imp::unwind::<true>(pc, sp, bp, out, budget)
}

/// [`walk`] with framehop alone, without the rule cache: what the cache must agree with.
#[cfg(all(test, target_arch = "x86_64"))]
#[inline(never)]
fn walk_with_framehop(out: &mut [ReturnAddress]) -> usize {
    let (pc, sp, bp) = registers();
    imp::unwind::<false>(pc, sp, bp, out, Budget::unlimited())
}

/// The instruction pointer, stack pointer and frame-pointer register of the function this is
/// inlined into.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn registers() -> (usize, usize, usize) {
    let (pc, sp, bp): (usize, usize, usize);
    // SAFETY: copies the instruction pointer, the stack pointer and the frame-pointer register into
    // locals; reads and writes no memory and leaves the stack and flags as they were.
    unsafe {
        std::arch::asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    (pc, sp, bp)
}

/// Captures up to `out.len()` return addresses of the current thread, innermost first, until it
/// holds the frames `budget` wants.
///
/// Only x86-64 unwinds with DWARF so far: elsewhere this follows frame pointers.
#[cfg(not(target_arch = "x86_64"))]
#[inline(never)]
pub fn walk(out: &mut [ReturnAddress], budget: Budget) -> usize {
    super::fp::walk(out, budget)
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::super::{Budget, ReturnAddress, fp};
    use super::rules::{Cfi, Rule, Rules, Step};
    use crate::modules::{self, Module};
    use addr2line::gimli::UnwindContext;
    use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
    use framehop::{
        ExplicitModuleSectionInfo, FrameAddress, MustNotAllocateDuringUnwind, Unwinder,
    };
    use std::cell::RefCell;
    use std::ops::Range;
    use std::sync::atomic::{AtomicPtr, Ordering};
    use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};

    /// Section data: a slice of a loaded module's mapped image.
    type Section = &'static [u8];
    /// framehop's unwinder over in-memory sections, never allocating while it unwinds.
    type Framehop = UnwinderX86_64<Section, MustNotAllocateDuringUnwind>;
    /// framehop's per-thread rule cache and DWARF evaluation scratch space.
    type FramehopCache = CacheX86_64<MustNotAllocateDuringUnwind>;

    /// How far the walk may trust a range of code.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) enum Kind {
        /// Loaded before the first walk: stays loaded, its tables can always be read.
        Permanent,
        /// Loaded later: `dlclose` may unload it, so the registry must be confirmed current first.
        Unloadable,
        /// No unwind tables: the walk ends here.
        Opaque,
    }

    /// One executable segment of a registered module.
    #[derive(Clone, Debug)]
    pub(super) struct CodeRange {
        start: usize,
        end: usize,
        kind: Kind,
        /// The module's call-frame information in [`Registry::cfi`] (past its end: none).
        cfi: usize,
    }

    /// The dynamic loader's counters of objects loaded and unloaded so far.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) struct Generation {
        adds: u64,
        subs: u64,
    }

    /// The modules known to the unwinder, as of one loader generation.
    pub(super) struct Registry {
        framehop: Framehop,
        /// Every executable segment, sorted by start, disjoint.
        code: Vec<CodeRange>,
        /// The call-frame information of each module that has it.
        cfi: Vec<Cfi>,
        /// The loader's counters just before the modules were listed (`None`: unknown).
        generation: Option<Generation>,
    }

    /// The current registry: null until the first walk, then a leaked `Box<Registry>`. Replaced
    /// (never freed) when modules come or go.
    static CURRENT: AtomicPtr<Registry> = AtomicPtr::new(std::ptr::null_mut());
    /// Serializes building registries.
    static BUILD: Mutex<()> = Mutex::new(());
    /// The executable segments loaded when the first registry was built: they stay loaded.
    static PERMANENT: OnceLock<Vec<Range<usize>>> = OnceLock::new();

    /// Stack the walk keeps free below its own frame, or it captures nothing: framehop evaluates
    /// call-frame programs with gimli's fixed-size scratch space on the stack (about 12 KiB in
    /// all), and unoptimized builds of them reserve much more (a thread's first walk makes its
    /// cache through some 128 KiB of temporaries, a walk about 40 KiB). An allocation made that
    /// close to the end of a thread's stack goes without a stack rather than overflow it.
    const HEADROOM: usize = if cfg!(debug_assertions) {
        256 * 1024
    } else {
        32 * 1024
    };

    /// A thread's unwinding state.
    struct ThreadState {
        rules: Rules,
        /// gimli's scratch space for reading a rule; allocated once, with the state.
        context: UnwindContext<usize>,
        /// framehop's rule cache and scratch space, for the frames [`Step::Framehop`] sends it.
        framehop: FramehopCache,
        /// Walks that met code in no module, counted to space out the loader checks they cause.
        misses: u32,
    }

    thread_local! {
        /// This thread's state, made by its first walk.
        static THREAD: RefCell<Option<ThreadState>> = const { RefCell::new(None) };
    }

    /// Walks from the given registers of [`super::walk`]'s own frame, writing return addresses to
    /// `out` from the one into `walk`'s caller on; with the rule cache, or with framehop alone
    /// (`RULES == false`, for tests that compare the two).
    #[inline]
    pub(super) fn unwind<const RULES: bool>(
        pc: usize,
        sp: usize,
        bp: usize,
        out: &mut [ReturnAddress],
        budget: Budget,
    ) -> usize {
        if out.is_empty() {
            return 0;
        }
        let (low, high) = fp::stack_bounds();
        if sp >= high || sp.saturating_sub(low) < HEADROOM {
            return 0;
        }
        let registry = current();
        THREAD
            .try_with(|slot| {
                // A walk interrupted by another walk on this thread (a signal handler that
                // allocates) finds the state borrowed and captures nothing.
                let Ok(mut slot) = slot.try_borrow_mut() else {
                    return 0;
                };
                let state = slot.get_or_insert_with(|| ThreadState {
                    rules: Rules::new(),
                    context: UnwindContext::new(),
                    framehop: FramehopCache::new_in(),
                    misses: 0,
                });
                let registers = Registers { pc, sp, bp };
                walk_frames::<RULES>(registry, state, registers, high, out, budget)
            })
            .unwrap_or(0)
    }

    /// The registers a walk starts from.
    #[derive(Clone, Copy)]
    struct Registers {
        pc: usize,
        sp: usize,
        bp: usize,
    }

    /// The frame loop. Stack reads are confined to `[sp, high)`: the frames of `walk`'s callers.
    /// `RULES == false` unwinds every frame with framehop (for tests that compare the two).
    fn walk_frames<const RULES: bool>(
        mut registry: &'static Registry,
        state: &mut ThreadState,
        start: Registers,
        high: usize,
        out: &mut [ReturnAddress],
        mut budget: Budget,
    ) -> usize {
        let low = start.sp;
        let Registers { pc, mut sp, mut bp } = start;
        state.rules.use_registry(registry);
        // The address whose rule applies: the walk's own instruction, then each call instruction
        // (a return address minus one), which is what the caller's tables describe.
        let mut lookup = pc;
        // The code range of the previous frame: consecutive frames are mostly in one module.
        let mut hint = 0;
        // Whether this walk has confirmed that `registry` matches the loaded modules.
        let mut confirmed = false;
        let mut n = 0;
        // Frames to capture: all of `out` until the budget says how many.
        let mut limit = out.len();
        while n < limit {
            let rule = match state.rules.find(lookup) {
                Some(rule) if RULES && (rule.permanent || confirmed) => rule,
                _ => {
                    let Some(rule) =
                        resolve::<RULES>(&mut registry, state, lookup, &mut hint, &mut confirmed)
                    else {
                        break;
                    };
                    rule
                }
            };
            let return_address = match rule.step {
                Step::FromSp | Step::FromBp => {
                    let base = if rule.step == Step::FromSp { sp } else { bp };
                    let cfa = base.wrapping_add_signed(rule.cfa_offset as isize);
                    // The return address lies between this frame's stack pointer and the CFA, so
                    // the caller's frame is above this one (a walk never loops); and below the
                    // top of the stack.
                    if cfa < sp + 8 || cfa > high || !cfa.is_multiple_of(8) {
                        break;
                    }
                    // SAFETY: `low <= sp <= cfa - 8` and `cfa <= high`, `cfa` 8-byte aligned:
                    // `[cfa - 8, cfa)` lies in the frames of the walk's callers, in this thread's
                    // stack, mapped and readable while they run.
                    let return_address = unsafe { read_word(cfa - 8) };
                    if rule.bp_offset != 0 {
                        let Ok(saved) = read_stack_word(
                            cfa.wrapping_add_signed(rule.bp_offset as isize) as u64,
                            low,
                            high,
                        ) else {
                            break;
                        };
                        bp = saved as usize;
                    }
                    sp = cfa;
                    return_address
                }
                Step::End => break,
                Step::Framehop => {
                    let (frame, ip) = if n == 0 {
                        (FrameAddress::from_instruction_pointer(pc as u64), pc)
                    } else {
                        let ip = lookup.wrapping_add(1);
                        let Some(frame) = FrameAddress::from_return_address(ip as u64) else {
                            break;
                        };
                        (frame, ip)
                    };
                    let mut regs = UnwindRegsX86_64::new(ip as u64, sp as u64, bp as u64);
                    let mut read_stack = |address: u64| read_stack_word(address, low, high);
                    let Ok(Some(return_address)) = registry.framehop.unwind_frame(
                        frame,
                        &mut regs,
                        &mut state.framehop,
                        &mut read_stack,
                    ) else {
                        break;
                    };
                    sp = regs.sp() as usize;
                    bp = regs.bp() as usize;
                    return_address as usize
                }
            };
            if return_address == 0 {
                break;
            }
            out[n] = ReturnAddress(return_address);
            n += 1;
            if let Some(end) = budget.end_after(n, return_address) {
                limit = limit.min(end);
            }
            lookup = return_address - 1;
        }
        n
    }

    /// The rule of `lookup` when the cache cannot vouch for it (first sight of the address, or code
    /// that may have been unloaded since its rule was read): checks the address against the loaded
    /// modules, confirming `registry` first when needed, then reads the rule and remembers it.
    /// `None` ends the walk: code without tables, or in no module.
    #[cold]
    #[inline(never)]
    fn resolve<const RULES: bool>(
        registry: &mut &'static Registry,
        state: &mut ThreadState,
        lookup: usize,
        hint: &mut usize,
        confirmed: &mut bool,
    ) -> Option<Rule> {
        let range = match registry.range_of(lookup, hint) {
            Some(range) if range.kind == Kind::Permanent => range,
            Some(range) if range.kind == Kind::Opaque => return None,
            found => {
                if !*confirmed {
                    *registry = confirm(registry, found.is_none(), &mut state.misses)?;
                    state.rules.use_registry(*registry);
                    *confirmed = true;
                }
                registry
                    .range_of(lookup, hint)
                    .filter(|range| range.kind != Kind::Opaque)?
            }
        };
        if !RULES {
            return Some(Rule::FRAMEHOP);
        }
        let rule = Rule {
            permanent: range.kind == Kind::Permanent,
            ..match registry.cfi.get(range.cfi) {
                Some(cfi) => cfi.rule(lookup, &mut state.context),
                None => Rule::FRAMEHOP,
            }
        };
        state.rules.insert(lookup, rule);
        Some(rule)
    }

    /// Reads the aligned word at `address` if it lies in `[low, high)`, a range of this thread's
    /// own stack.
    #[inline(always)]
    fn read_stack_word(address: u64, low: usize, high: usize) -> Result<u64, ()> {
        let address = usize::try_from(address).map_err(drop)?;
        let word = size_of::<u64>();
        if address < low || !address.is_multiple_of(word) || address > high.saturating_sub(word) {
            return Err(());
        }
        // SAFETY: `[address, address + 8)` lies between the walk's stack pointer and the top of
        // this thread's stack (checked just above): memory of the live frames of the walk's
        // callers, mapped and readable for as long as they run, which outlasts the walk. The read
        // is aligned. It is volatile because those frames belong to other functions: the value is
        // only used as data, never as a reference.
        Ok(unsafe { read_word(address) } as u64)
    }

    /// Reads the word at `address`, volatile: the frames the walk reads belong to other functions,
    /// so their values are only used as data, never as references.
    ///
    /// # Safety
    ///
    /// `[address, address + 8)` must be mapped, readable memory and `address` 8-byte aligned.
    #[inline(always)]
    unsafe fn read_word(address: usize) -> usize {
        // SAFETY: guaranteed by the caller.
        unsafe { std::ptr::read_volatile(address as *const usize) }
    }

    /// The current registry, built by the first call of the process.
    #[inline]
    fn current() -> &'static Registry {
        let registry = CURRENT.load(Ordering::Acquire);
        if registry.is_null() {
            return build_first();
        }
        // SAFETY: a non-null `CURRENT` always comes from `Box::into_raw` in `publish` and is never
        // freed, so it is valid and immutable for the rest of the process.
        unsafe { &*registry }
    }

    /// Builds the first registry, or waits for the thread building it: the one time a walk may
    /// wait, tens of microseconds at the process's first allocations. The builder allocates
    /// inside the reentrancy guard, so it never comes back here while holding the lock.
    #[cold]
    #[inline(never)]
    fn build_first() -> &'static Registry {
        let _lock = lock(BUILD.lock());
        let registry = CURRENT.load(Ordering::Acquire);
        if !registry.is_null() {
            // SAFETY: as in `current`: published by `publish`, never freed.
            return unsafe { &*registry };
        }
        publish(Registry::build())
    }

    /// Takes the build lock whatever a panicking builder left: the registry is replaced whole, so
    /// a poisoned lock guards nothing half-done.
    fn lock(result: std::sync::LockResult<MutexGuard<'static, ()>>) -> MutexGuard<'static, ()> {
        result.unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes `registry` current, leaking it: walks on other threads may still be reading the one
    /// it replaces, and will until they end, so neither is ever freed.
    fn publish(registry: Registry) -> &'static Registry {
        let registry = Box::into_raw(Box::new(registry));
        CURRENT.store(registry, Ordering::Release);
        // SAFETY: just made from a `Box`, and never freed.
        unsafe { &*registry }
    }

    /// A registry that matches the loaded modules now: `registry` itself if the loader's counters
    /// have not moved since it was built, else a rebuilt one. `None` when that cannot be known
    /// without waiting (a rebuild under way elsewhere, counters unavailable) or, for code outside
    /// every module (`unknown`), when this thread has checked too recently.
    #[cold]
    #[inline(never)]
    pub(super) fn confirm(
        registry: &'static Registry,
        unknown: bool,
        misses: &mut u32,
    ) -> Option<&'static Registry> {
        if unknown {
            *misses = misses.wrapping_add(1);
            if !misses.is_power_of_two() && !misses.is_multiple_of(4096) {
                return None;
            }
        }
        let now = loader_generation()?;
        if registry.generation == Some(now) {
            return Some(registry);
        }
        let _lock = match BUILD.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        // SAFETY: as in `current`: a non-null `CURRENT` is published by `publish`, never freed.
        let latest = unsafe { CURRENT.load(Ordering::Acquire).as_ref() }.unwrap_or(registry);
        if latest.generation == Some(now) {
            return Some(latest);
        }
        *misses = 0;
        Some(publish(Registry::build()))
    }

    impl Registry {
        /// Lists the loaded modules and registers the unwind tables of each. Allocates.
        pub(super) fn build() -> Registry {
            // Counters first: a module loaded in between makes the next check rebuild again,
            // never the other way round.
            let generation = loader_generation();
            let modules = modules::loaded();
            let permanent = PERMANENT.get_or_init(|| {
                modules
                    .iter()
                    .flat_map(|m| m.text.iter().cloned())
                    .collect()
            });
            let mut framehop = Framehop::new();
            let mut code = Vec::new();
            let mut cfi = Vec::new();
            for module in &modules {
                let tables = unwind_tables(module);
                let kind = if tables.is_none() {
                    Kind::Opaque
                } else if module.text.iter().all(|r| permanent.contains(r)) {
                    Kind::Permanent
                } else {
                    Kind::Unloadable
                };
                let index = match tables.as_ref().and_then(|t| cfi_of(t, module.bias)) {
                    Some(tables) => {
                        cfi.push(tables);
                        cfi.len() - 1
                    }
                    None => usize::MAX,
                };
                code.extend(module.text.iter().map(|r| CodeRange {
                    start: r.start,
                    end: r.end,
                    kind,
                    cfi: index,
                }));
                if let Some(tables) = tables {
                    let start = module.text.iter().map(|r| r.start).min().unwrap_or(0);
                    let end = module.text.iter().map(|r| r.end).max().unwrap_or(0);
                    framehop.add_module(framehop::Module::new(
                        module.path.to_string_lossy().into_owned(),
                        start as u64..end as u64,
                        module.bias as u64,
                        tables,
                    ));
                }
            }
            code.sort_by_key(|r| r.start);
            Registry {
                framehop,
                code,
                cfi,
                generation,
            }
        }

        /// What the code at `address` is.
        #[cfg(test)]
        pub(super) fn kind_of(&self, address: usize, hint: &mut usize) -> Option<Kind> {
            self.range_of(address, hint).map(|range| range.kind)
        }

        /// The code range that holds `address`, trying the one at `hint` first and leaving there
        /// the one found.
        #[inline]
        pub(super) fn range_of(&self, address: usize, hint: &mut usize) -> Option<&CodeRange> {
            if let Some(range) = self.code.get(*hint)
                && range.start <= address
                && address < range.end
            {
                return Some(range);
            }
            let index = self
                .code
                .partition_point(|r| r.start <= address)
                .checked_sub(1)?;
            let range = self.code.get(index)?;
            if address < range.end {
                *hint = index;
                Some(range)
            } else {
                None
            }
        }
    }

    /// gimli's view of the tables given to framehop, for a module loaded `bias` bytes away from
    /// its stated addresses.
    fn cfi_of(tables: &ExplicitModuleSectionInfo<Section>, bias: usize) -> Option<Cfi> {
        let loaded = |stated: &Option<Range<u64>>| {
            stated.as_ref().map(|r| r.start.wrapping_add(bias as u64))
        };
        Cfi::new(
            tables.eh_frame_hdr?,
            loaded(&tables.eh_frame_hdr_svma)?,
            tables.eh_frame?,
            loaded(&tables.eh_frame_svma)?,
        )
    }

    /// `.eh_frame_hdr` and `.eh_frame` of a loaded module, as framehop wants them; `None` if the
    /// module has no `.eh_frame_hdr` or it cannot be made sense of.
    fn unwind_tables(module: &Module) -> Option<ExplicitModuleSectionInfo<Section>> {
        let hdr = module.eh_frame_hdr.clone()?;
        if !module
            .segments
            .iter()
            .any(|s| s.start <= hdr.start && hdr.end <= s.end)
        {
            return None;
        }
        // SAFETY: `hdr` lies inside a `PT_LOAD` segment of a loaded module (checked above), which
        // the loader mapped readable (it holds `.eh_frame_hdr`) and which stays mapped while the
        // module is loaded. Modules that could be unloaded are read only after the walk confirms
        // they are still loaded (see `confirm`).
        let hdr_bytes = unsafe { mapped(hdr.start, hdr.end - hdr.start) };
        let frame_start = eh_frame_address(hdr_bytes, hdr.start, module.bias)?;
        // `.eh_frame` has no length of its own here: it runs at most to the end of its segment
        // (gimli reads only the entries the index points to, each of which has its length).
        let frame_segment = module.segments.iter().find(|s| s.contains(&frame_start))?;
        let frame = frame_start..frame_segment.end;
        // SAFETY: as for `hdr_bytes`: `frame` lies inside a `PT_LOAD` segment of the module.
        let frame_bytes = unsafe { mapped(frame.start, frame.end - frame.start) };
        let stated = |r: &Range<usize>| {
            r.start.wrapping_sub(module.bias) as u64..r.end.wrapping_sub(module.bias) as u64
        };
        Some(ExplicitModuleSectionInfo {
            base_svma: 0,
            eh_frame_hdr_svma: Some(stated(&hdr)),
            eh_frame_hdr: Some(hdr_bytes),
            eh_frame_svma: Some(stated(&frame)),
            eh_frame: Some(frame_bytes),
            ..Default::default()
        })
    }

    /// A slice of mapped module memory.
    ///
    /// # Safety
    ///
    /// `[start, start + len)` must lie in a segment of a loaded module, readable, and stay mapped
    /// for as long as the slice is used (for modules that may be unloaded, the walk confirms they
    /// are still there before it reads their tables).
    unsafe fn mapped(start: usize, len: usize) -> &'static [u8] {
        // SAFETY: the caller guarantees that the range is mapped and readable; it is never
        // written (loaded segments holding unwind tables are read-only).
        unsafe { std::slice::from_raw_parts(start as *const u8, len) }
    }

    /// The address of `.eh_frame`, from the header of `.eh_frame_hdr` (`hdr`, loaded at
    /// `hdr_address`): version 1, then the encoding of the `eh_frame_ptr` field, two more encoding
    /// bytes, and the field itself.
    pub(super) fn eh_frame_address(hdr: &[u8], hdr_address: usize, bias: usize) -> Option<usize> {
        const PCREL: u8 = 0x10;
        const DATAREL: u8 = 0x30;
        let [1, encoding, _, _, field @ ..] = hdr else {
            return None;
        };
        let value = read_encoded(field, encoding & 0x0f)?;
        let base = match encoding & 0x70 {
            // A stated address: where the file says, moved by the load bias.
            0 => bias,
            PCREL => hdr_address.wrapping_add(4),
            DATAREL => hdr_address,
            _ => return None,
        };
        // Indirect (0x80) and omitted (0xff) pointers are not used for this field in practice.
        if encoding & 0x80 != 0 {
            return None;
        }
        Some(base.wrapping_add(value as usize))
    }

    /// Reads a fixed-size DWARF EH pointer of format `format` (low nibble of its encoding byte),
    /// sign-extending the signed ones.
    fn read_encoded(bytes: &[u8], format: u8) -> Option<u64> {
        fn take<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
            bytes.get(..N)?.try_into().ok()
        }
        Some(match format {
            0x00 | 0x04 => u64::from_le_bytes(take(bytes)?),
            0x0c => i64::from_le_bytes(take(bytes)?) as u64,
            0x02 => u64::from(u16::from_le_bytes(take(bytes)?)),
            0x0a => i16::from_le_bytes(take(bytes)?) as u64,
            0x03 => u64::from(u32::from_le_bytes(take(bytes)?)),
            0x0b => i32::from_le_bytes(take(bytes)?) as u64,
            _ => return None,
        })
    }

    /// The dynamic loader's load and unload counters now (`dl_iterate_phdr`'s `dlpi_adds` and
    /// `dlpi_subs`). Takes the loader's lock briefly; never allocates.
    pub(super) fn loader_generation() -> Option<Generation> {
        let mut generation: Option<Generation> = None;
        // SAFETY: `first_object` only reads the `dl_phdr_info` that `dl_iterate_phdr` keeps valid
        // during the call, and writes `data`, which is `&mut generation`, alive and borrowed by
        // nobody else meanwhile.
        unsafe {
            libc::dl_iterate_phdr(
                Some(first_object),
                (&mut generation as *mut Option<Generation>).cast(),
            );
        }
        generation
    }

    /// `dl_iterate_phdr` callback: copies the counters from the first object, then stops.
    ///
    /// # Safety
    ///
    /// `info` must point to a `dl_phdr_info` of at least `size` bytes, valid for the call, and
    /// `data` to an `Option<Generation>` that nothing else uses during the call.
    unsafe extern "C" fn first_object(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        let needed = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + size_of::<u64>();
        if info.is_null() || data.is_null() || size < needed {
            return 1;
        }
        // SAFETY: `info` is valid for `size` bytes, enough for both counters (checked above);
        // `data` is the caller's `Option<Generation>`, exclusively ours for the call.
        unsafe {
            let info = &*info;
            *data.cast::<Option<Generation>>() = Some(Generation {
                adds: info.dlpi_adds,
                subs: info.dlpi_subs,
            });
        }
        1
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::imp::{self, Kind, Registry};
    use super::*;
    use crate::modules;
    use std::hint::black_box;

    /// Function names of each address (innermost inlined first), symbolized from the test binary.
    fn names(addresses: &[ReturnAddress]) -> Vec<Vec<String>> {
        let exe = std::env::current_exe().unwrap();
        let loader = addr2line::Loader::new(&exe).unwrap();
        let modules = modules::loaded();
        let main = modules.iter().find(|m| m.path == exe).unwrap();
        addresses
            .iter()
            .map(|a| {
                let mut out = Vec::new();
                if !main.contains(a.lookup_address()) {
                    return out;
                }
                let probe = (a.lookup_address() - main.bias) as u64;
                if let Ok(mut frames) = loader.find_frames(probe) {
                    while let Ok(Some(frame)) = frames.next() {
                        if let Some(function) = frame.function {
                            out.push(function.demangle().unwrap().into_owned());
                        }
                    }
                }
                if out.is_empty()
                    && let Some(symbol) = loader.find_symbol(probe)
                {
                    out.push(format!("{:#}", rustc_demangle::demangle(symbol)));
                }
                out
            })
            .collect()
    }

    /// Where the first frame whose names include `needle` sits.
    fn position(names: &[Vec<String>], needle: &str) -> Option<usize> {
        names
            .iter()
            .position(|frame| frame.iter().any(|name| name.ends_with(needle)))
    }

    #[inline(never)]
    fn chain_outer(out: &mut [ReturnAddress]) -> usize {
        black_box(chain_middle(black_box(out)))
    }

    #[inline(never)]
    fn chain_middle(out: &mut [ReturnAddress]) -> usize {
        black_box(chain_inner(black_box(out)))
    }

    #[inline(never)]
    fn chain_inner(out: &mut [ReturnAddress]) -> usize {
        black_box(walk(black_box(out), Budget::unlimited()))
    }

    /// Calls `f` from `depth` extra frames down.
    #[inline(never)]
    fn nest<R>(depth: usize, f: &mut dyn FnMut() -> R) -> R {
        if depth == 0 {
            black_box(f())
        } else {
            black_box(nest(black_box(depth - 1), f))
        }
    }

    #[test]
    fn finds_three_callers_in_order() {
        let mut out = [ReturnAddress(0); 64];
        let n = chain_outer(&mut out);
        let names = names(&out[..n]);
        let inner = position(&names, "chain_inner").expect("chain_inner");
        let middle = position(&names, "chain_middle").expect("chain_middle");
        let outer = position(&names, "chain_outer").expect("chain_outer");
        let test = position(&names, "finds_three_callers_in_order").expect("the test");
        assert!(
            inner < middle && middle < outer && outer < test,
            "{names:#?}"
        );
        assert!(inner <= 1, "walk's caller comes first: {names:#?}");
    }

    #[test]
    fn the_rule_cache_agrees_with_framehop() {
        // From several depths and twice each (the second walk runs on cached rules), through
        // this test's frames, the harness's and the C library's, up to the thread's start.
        for depth in [0, 3, 17, 40] {
            for _ in 0..2 {
                let mut cached = [ReturnAddress(0); 128];
                let mut reference = [ReturnAddress(0); 128];
                let (n, m) = nest(depth, &mut || {
                    (
                        walk(&mut cached, Budget::unlimited()),
                        walk_with_framehop(&mut reference),
                    )
                });
                assert!(n > depth + 3, "{n} frames at depth {depth}");
                assert_eq!(n, m, "depth {depth}");
                // The first frame returns to the closure, from two different calls.
                assert_eq!(cached[1..n], reference[1..m], "depth {depth}");
            }
        }
    }

    #[test]
    fn deeper_calls_add_exactly_their_frames() {
        let mut walks = [[ReturnAddress(0); 128]; 2];
        let mut lengths = [0; 2];
        // From one call site, so that only the nesting differs.
        for ((depth, out), n) in [3, 8].into_iter().zip(&mut walks).zip(&mut lengths) {
            *n = nest(depth, &mut || walk(out, Budget::unlimited()));
        }
        let ([a, b], [shallow, deep]) = (lengths, &walks);
        assert!(a > 5 && b < deep.len(), "{a} {b}");
        assert_eq!(b, a + 5);
        // The closure and `nest`'s call of it, then 4 or 9 identical recursive calls of `nest`,
        // then the same frames from this test out.
        assert_eq!(shallow[..2], deep[..2]);
        assert_eq!(shallow[2..a], deep[7..b]);
        assert!(shallow[..a].iter().chain(&deep[..b]).all(|r| r.0 != 0));
    }

    #[test]
    fn every_frame_is_in_a_module_and_the_walk_ends_at_the_thread_start() {
        let mut out = [ReturnAddress(0); 256];
        let n = walk(&mut out, Budget::unlimited());
        assert!(n > 3 && n < out.len(), "{n}");
        let modules = modules::loaded();
        for address in &out[..n] {
            assert!(
                modules.iter().any(|m| m.contains(address.lookup_address())),
                "{address:x?} in no module"
            );
        }
    }

    #[test]
    fn agrees_with_frame_pointers_where_they_are_kept() {
        // std and the test harness keep frame pointers, this crate's code in a default build need
        // not: the frame-pointer walk skips or stops early, but the return addresses it does
        // find in code are real ones, so they are among the DWARF walk's, in the same order.
        let mut dwarf = [ReturnAddress(0); 256];
        let mut fp = [ReturnAddress(0); 256];
        let n = walk(&mut dwarf, Budget::unlimited());
        let m = super::super::fp::walk(&mut fp, Budget::unlimited());
        let dwarf = &dwarf[..n];
        let modules = modules::loaded();
        let in_code: Vec<_> = fp[..m]
            .iter()
            .filter(|a| {
                modules
                    .iter()
                    .any(|module| module.contains(a.lookup_address()))
            })
            .collect();
        let shared: Vec<_> = in_code.iter().filter(|a| dwarf.contains(a)).collect();
        assert!(
            in_code.is_empty() || !shared.is_empty(),
            "{dwarf:x?} vs {in_code:x?}"
        );
        let positions: Vec<_> = shared
            .iter()
            .filter_map(|a| dwarf.iter().position(|d| d == **a))
            .collect();
        assert!(positions.is_sorted(), "{dwarf:x?} vs {in_code:x?}");
    }

    thread_local! {
        /// The stack captured by the first call of `compare` on this thread.
        static FROM_C: std::cell::RefCell<Vec<ReturnAddress>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    extern "C" fn compare(a: *const libc::c_void, b: *const libc::c_void) -> libc::c_int {
        FROM_C.with_borrow_mut(|seen| {
            if seen.is_empty() {
                let mut out = [ReturnAddress(0); 64];
                let n = walk(&mut out, Budget::unlimited());
                seen.extend_from_slice(&out[..n]);
            }
        });
        // SAFETY: qsort passes pointers to elements of the `u32` array being sorted.
        unsafe { (*a.cast::<u32>()).cmp(&*b.cast::<u32>()) as libc::c_int }
    }

    #[test]
    fn walks_through_c_code() {
        let mut values = [5u32, 3, 9, 1, 7, 2, 8];
        // SAFETY: `values` is a valid array of `len` elements of the given size, and `compare`
        // compares two of them.
        unsafe {
            libc::qsort(
                values.as_mut_ptr().cast(),
                values.len(),
                size_of::<u32>(),
                Some(compare),
            );
        }
        assert_eq!(values, [1, 2, 3, 5, 7, 8, 9]);
        let names = names(&FROM_C.take());
        let compare = position(&names, "compare");
        let test = position(&names, "walks_through_c_code");
        assert!(compare.is_none() || compare < test, "{names:#?}");
        // qsort's own frames (in libc, no names from the test binary) sit between.
        assert!(test.is_some_and(|t| t >= 2), "{names:#?}");
    }

    #[test]
    fn works_on_other_threads_and_during_thread_exit() {
        struct WalkOnDrop;
        impl Drop for WalkOnDrop {
            fn drop(&mut self) {
                let mut out = [ReturnAddress(0); 16];
                // Whatever state the thread's locals are in, this must not panic.
                let _ = black_box(walk(&mut out, Budget::unlimited()));
            }
        }
        thread_local! {
            static ON_EXIT: std::cell::RefCell<Option<WalkOnDrop>> =
                const { std::cell::RefCell::new(None) };
        }
        let names = std::thread::spawn(|| {
            let mut out = [ReturnAddress(0); 64];
            let n = chain_outer(&mut out);
            ON_EXIT.with(|s| *s.borrow_mut() = Some(WalkOnDrop));
            names(&out[..n])
        })
        .join()
        .unwrap();
        assert!(position(&names, "chain_inner") < position(&names, "chain_outer"));
        assert!(position(&names, "chain_outer").is_some(), "{names:#?}");
    }

    #[test]
    fn a_small_thread_stack_does_not_overflow() {
        // A thread's first walk makes its cache and evaluates call-frame programs for every frame
        // (its rule cache is empty), with gimli's fixed-size scratch space on the stack: optimized,
        // that fits in 128 KiB; unoptimized, the walk declines rather than overflow.
        let n = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(|| {
                let mut out = [ReturnAddress(0); 64];
                nest(5, &mut || walk(&mut out, Budget::unlimited()))
            })
            .unwrap()
            .join()
            .unwrap();
        if cfg!(debug_assertions) {
            assert_eq!(n, 0);
        } else {
            assert!(n > 5, "{n}");
        }
    }

    #[test]
    fn an_empty_buffer_gets_nothing() {
        assert_eq!(walk(&mut [], Budget::unlimited()), 0);
    }

    #[test]
    fn eh_frame_pointer_encodings() {
        let hdr = |enc: u8, field: &[u8]| [&[1, enc, 0x03, 0x3b][..], field].concat();
        // pcrel | sdata4: relative to the field, 4 bytes into the header.
        let h = hdr(0x1b, &(-0x40i32).to_le_bytes());
        assert_eq!(imp::eh_frame_address(&h, 0x1000, 0), Some(0x1004 - 0x40));
        // datarel | udata4: relative to the header.
        let h = hdr(0x33, &0x80u32.to_le_bytes());
        assert_eq!(imp::eh_frame_address(&h, 0x1000, 0), Some(0x1080));
        // absptr: a stated address, moved by the bias.
        let h = hdr(0x00, &0x2000u64.to_le_bytes());
        assert_eq!(imp::eh_frame_address(&h, 0x1000, 0x5000), Some(0x7000));
        // Unsupported: omitted, indirect, uleb128, wrong version, truncated.
        assert_eq!(imp::eh_frame_address(&hdr(0xff, &[0; 8]), 0, 0), None);
        assert_eq!(imp::eh_frame_address(&hdr(0x9b, &[0; 8]), 0, 0), None);
        assert_eq!(imp::eh_frame_address(&hdr(0x01, &[0; 8]), 0, 0), None);
        assert_eq!(
            imp::eh_frame_address(&[2, 0x1b, 3, 0x3b, 0, 0, 0, 0], 0, 0),
            None
        );
        assert_eq!(imp::eh_frame_address(&hdr(0x1b, &[0; 2]), 0, 0), None);
    }

    #[test]
    fn every_module_of_the_test_binary_has_tables() {
        let registry = Registry::build();
        let mut hint = 0;
        let here = every_module_of_the_test_binary_has_tables as *const () as usize;
        assert_eq!(registry.kind_of(here, &mut hint), Some(Kind::Permanent));
        assert_eq!(registry.kind_of(1, &mut hint), None);
        for module in modules::loaded() {
            for range in &module.text {
                assert_ne!(
                    registry.kind_of(range.start, &mut hint),
                    Some(Kind::Opaque),
                    "{module:?}"
                );
            }
        }
    }

    #[test]
    fn a_library_loaded_later_is_picked_up() {
        let before = Registry::build();
        assert!(
            imp::loader_generation().is_some(),
            "glibc and musl keep the counters"
        );
        let name = c"libresolv.so.2";
        // SAFETY: loading a C library from the system with no constructors of note.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null());
        let module = modules::loaded()
            .into_iter()
            .find(|m| m.path.to_string_lossy().contains("libresolv"))
            .expect("libresolv is loaded");
        let inside = module.text[0].start;
        let mut hint = 0;
        let already_loaded = before.kind_of(inside, &mut hint).is_some();
        let mut misses = 0;
        let before: &'static Registry = Box::leak(Box::new(before));
        let after = imp::confirm(before, true, &mut misses).expect("rebuilt");
        if already_loaded {
            // Another test loaded it first: nothing to learn here but that it is known.
            assert!(after.kind_of(inside, &mut hint).is_some());
        } else {
            assert_eq!(after.kind_of(inside, &mut hint), Some(Kind::Unloadable));
        }
        // A current registry is confirmed as is; a third miss in a row is not even checked.
        assert!(std::ptr::eq(
            imp::confirm(after, false, &mut misses).unwrap(),
            after
        ));
        let mut misses = 2;
        assert!(imp::confirm(after, true, &mut misses).is_none());
    }

    /// `cargo test --release -- --ignored --nocapture bench`: nanoseconds per walk.
    #[test]
    #[ignore]
    fn bench_walk() {
        let start = std::time::Instant::now();
        drop(black_box(Registry::build()));
        println!("registry build: {:?}", start.elapsed());
        let (n, elapsed) = std::thread::spawn(|| {
            let mut out = [ReturnAddress(0); 64];
            let start = std::time::Instant::now();
            let n = walk(&mut out, Budget::unlimited());
            (n, start.elapsed())
        })
        .join()
        .unwrap();
        println!("first walk of a thread: {n} frames in {elapsed:?}");
        // The best of several rounds: the machine may be busy with other work.
        let per_walk = |iterations: u32, f: &mut dyn FnMut() -> usize| {
            let mut best = f64::INFINITY;
            let mut n = 0;
            for _ in 0..20 {
                let start = std::time::Instant::now();
                for _ in 0..iterations {
                    n = f();
                }
                best = best.min(start.elapsed().as_nanos() as f64 / f64::from(iterations));
            }
            (n, best)
        };
        for (depth, frames) in [(0, 10), (30, 30), (60, 64)] {
            let mut out = vec![ReturnAddress(0); frames];
            let (n, dwarf) = nest(depth, &mut || {
                per_walk(10_000, &mut || {
                    black_box(walk(black_box(&mut out), Budget::unlimited()))
                })
            });
            let (m, fp) = nest(depth, &mut || {
                per_walk(10_000, &mut || {
                    black_box(super::super::fp::walk(
                        black_box(&mut out),
                        Budget::unlimited(),
                    ))
                })
            });
            println!(
                "dwarf: {n:>3} frames {dwarf:>6.1} ns/walk   (fp: {m:>3} frames {fp:>5.1} ns/walk)"
            );
        }
    }
}
