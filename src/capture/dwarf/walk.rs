//! The frame loop of the DWARF walk, and each thread's unwinding state.
//!
//! The loop starts from the registers [`walk()`](super::walk()) read in its own frame and goes frame
//! after frame, reading only aligned words between the walk's own stack pointer and the top of this
//! thread's stack, each canonical frame address (CFA) above the last, so it always ends. The rule
//! of each address (the walk's own instruction, then each call instruction, a return address minus
//! one) comes from the thread's rule cache: a cached frame costs a lookup and two stack reads; a
//! miss checks the address against the registry and reads its rule with gimli (a binary search of
//! the index and a short call-frame program). Frames the rules cannot describe go to framehop,
//! which keeps its own cache.
//!
//! A thread's state is made by its first walk; after that a walk neither allocates nor locks while
//! it is in the modules the program started with. From the first frame in a module loaded later,
//! the rest of the walk runs holding the dynamic loader's lock (so that no module can be unloaded
//! while its tables are read); code in no known module makes it refresh the registry.

use super::registry::{Kind, Registry, current, refresh};
use super::rules::{Rule, Rules, Step};
use crate::address::ReturnAddress;
use crate::capture::{Budget, fp};
use addr2line::gimli::UnwindContext;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, MustNotAllocateDuringUnwind, Unwinder};
use std::cell::{Cell, RefCell};
use std::sync::{Mutex, TryLockError};

/// framehop's per-thread rule cache and DWARF evaluation scratch space.
type FramehopCache = CacheX86_64<MustNotAllocateDuringUnwind>;

/// Stack the walk keeps free below its own frame, or it captures nothing: framehop evaluates
/// call-frame programs with gimli's fixed-size scratch space on the stack, and unoptimized
/// builds of them reserve much more (a thread's first walk also makes its cache through large
/// temporaries). An allocation made that close to the end of a thread's stack goes without a
/// stack rather than overflow it.
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

/// The state of threads whose own is gone (see [`unwind`]), made by the first that needs it.
static ENDED: Mutex<Option<ThreadState>> = Mutex::new(None);

thread_local! {
    /// Set while this thread walks with [`ENDED`]; without a destructor, so it outlives the
    /// thread's other locals.
    static ENDED_HELD: Cell<bool> = const { Cell::new(false) };
}

/// Walks from the given registers of [`super::walk()`]'s own frame, writing return addresses to
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
    // `None` while another thread builds the first registry, at the process's first allocations.
    let Some(registry) = current() else {
        return 0;
    };
    // Called once, on this thread's state or the ended threads'.
    let mut walk = Some(|slot: &mut Option<ThreadState>| {
        let state = slot.get_or_insert_with(|| ThreadState {
            rules: Rules::new(),
            context: UnwindContext::new(),
            framehop: FramehopCache::new_in(),
            misses: 0,
        });
        let mut cursor = Cursor {
            pc,
            lookup: pc,
            sp,
            bp,
            low: sp,
            high,
            n: 0,
            limit: out.len(),
            budget,
            hint: 0,
        };
        walk_frames::<RULES>(registry, state, &mut cursor, out);
        cursor.n
    });
    let own = THREAD.try_with(|slot| {
        // A walk interrupted by another walk on this thread (a signal handler that allocates)
        // finds the state borrowed and captures nothing.
        match (slot.try_borrow_mut(), walk.take()) {
            (Ok(mut slot), Some(walk)) => walk(&mut slot),
            _ => 0,
        }
    });
    match own {
        Ok(n) => n,
        // The thread's own state is gone: it is ending, and a destructor that runs after the
        // thread-locals' (a pthread key's) allocates.
        Err(_) => match (ended_state(), walk.take()) {
            (Some(mut slot), Some(walk)) => {
                let _ = ENDED_HELD.try_with(|held| held.set(true));
                let n = walk(&mut slot);
                let _ = ENDED_HELD.try_with(|held| held.set(false));
                n
            }
            _ => 0,
        },
    }
}

/// The state ending threads share ([`ENDED`]). Never waited for without end: another ending
/// thread holds it for one walk, so it is asked for again, yielding between tries, a bounded
/// number of times (a `fork` may have left it held in a child for good); a signal handler that
/// interrupted this thread's own walk with it gets `None` at once.
#[cold]
fn ended_state() -> Option<std::sync::MutexGuard<'static, Option<ThreadState>>> {
    if ENDED_HELD.try_with(Cell::get).unwrap_or(true) {
        return None;
    }
    for _ in 0..1000 {
        match ENDED.try_lock() {
            Ok(state) => return Some(state),
            Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => std::thread::yield_now(),
        }
    }
    None
}

/// Where a walk stands between two frames.
struct Cursor {
    /// The walk's own instruction, where the first frame is.
    pc: usize,
    /// The address whose rule applies next: the walk's own instruction, then each call
    /// instruction (a return address minus one), which is what the caller's tables describe.
    lookup: usize,
    /// The stack pointer and frame-pointer register of the frame at `lookup`.
    sp: usize,
    bp: usize,
    /// Stack reads are confined to `[low, high)`: the frames of `walk`'s callers.
    low: usize,
    high: usize,
    /// Return addresses written so far.
    n: usize,
    /// Frames to capture: all of `out` until the budget says how many.
    limit: usize,
    budget: Budget,
    /// The code range of the previous frame: consecutive frames are mostly in one module.
    hint: usize,
}

/// Why [`frames`] stopped.
enum Stop {
    /// The walk is over.
    Done,
    /// The next frame is in a module that may be unloaded: go on holding the loader's lock.
    Lock,
    /// The next frame is in no registered module, or in one no longer loaded.
    Unknown,
}

/// The walk: frames in the modules the program started with are unwound as they come; at the
/// first frame in another module, the rest of the walk runs holding the loader's lock
/// ([`Registry::locked`]), so that no module can be unloaded while its tables are read. Code in no
/// registered module makes it try a refreshed registry, once a walk.
fn walk_frames<const RULES: bool>(
    mut registry: &'static Registry,
    state: &mut ThreadState,
    cursor: &mut Cursor,
    out: &mut [ReturnAddress],
) {
    let mut refreshed = false;
    loop {
        state.rules.use_registry(registry, registry.epoch());
        let stop = match frames::<RULES>(registry, state, cursor, out, false) {
            Stop::Lock => registry
                .locked(|| {
                    // Validating may have marked modules gone since the line above.
                    state.rules.use_registry(registry, registry.epoch());
                    frames::<RULES>(registry, state, cursor, out, true)
                })
                .unwrap_or(Stop::Done),
            stop => stop,
        };
        match stop {
            Stop::Done | Stop::Lock => return,
            Stop::Unknown => {
                if refreshed {
                    return;
                }
                refreshed = true;
                let Some(newer) = refresh(registry, &mut state.misses) else {
                    return;
                };
                registry = newer;
                if registry.range_of(cursor.lookup, &mut cursor.hint).is_some() {
                    // The code was in a module loaded since: check again at the next miss.
                    state.misses = 0;
                }
            }
        }
    }
}

/// The frame loop, from `cursor` on. Unlocked (`locked == false`), it stops at the first frame
/// outside the modules the program started with; locked (inside [`Registry::locked`]), it also
/// reads and trusts the rules of the other registered modules. `RULES == false` unwinds every
/// frame with framehop (for tests that compare the two).
fn frames<const RULES: bool>(
    registry: &'static Registry,
    state: &mut ThreadState,
    cursor: &mut Cursor,
    out: &mut [ReturnAddress],
    locked: bool,
) -> Stop {
    let (low, high) = (cursor.low, cursor.high);
    while cursor.n < cursor.limit {
        let lookup = cursor.lookup;
        let rule = match state.rules.find(lookup) {
            Some(rule) if RULES && (rule.permanent || locked) => rule,
            _ => match resolve::<RULES>(registry, state, lookup, &mut cursor.hint, locked) {
                Ok(rule) => rule,
                Err(stop) => return stop,
            },
        };
        let (sp, bp) = (cursor.sp, cursor.bp);
        let return_address = match rule.step {
            Step::FromSp | Step::FromBp => {
                let base = if rule.step == Step::FromSp { sp } else { bp };
                let cfa = base.wrapping_add_signed(rule.cfa_offset as isize);
                // The return address lies between this frame's stack pointer and the CFA, so
                // the caller's frame is above this one (a walk never loops); and below the
                // top of the stack.
                if cfa < sp + 8 || cfa > high || !cfa.is_multiple_of(8) {
                    return Stop::Done;
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
                        return Stop::Done;
                    };
                    cursor.bp = saved as usize;
                }
                cursor.sp = cfa;
                return_address
            }
            Step::End => return Stop::Done,
            Step::Framehop => {
                let (frame, ip) = if cursor.n == 0 {
                    let pc = cursor.pc;
                    (FrameAddress::from_instruction_pointer(pc as u64), pc)
                } else {
                    let ip = lookup.wrapping_add(1);
                    let Some(frame) = FrameAddress::from_return_address(ip as u64) else {
                        return Stop::Done;
                    };
                    (frame, ip)
                };
                let mut regs = UnwindRegsX86_64::new(ip as u64, sp as u64, bp as u64);
                let mut read_stack = |address: u64| read_stack_word(address, low, high);
                // framehop reads the tables of the module holding `lookup`, which `resolve`
                // (or a rule cached under the same conditions) found readable now.
                let Ok(Some(return_address)) = registry.framehop.unwind_frame(
                    frame,
                    &mut regs,
                    &mut state.framehop,
                    &mut read_stack,
                ) else {
                    return Stop::Done;
                };
                cursor.sp = regs.sp() as usize;
                cursor.bp = regs.bp() as usize;
                return_address as usize
            }
        };
        if return_address == 0 {
            return Stop::Done;
        }
        out[cursor.n] = ReturnAddress(return_address);
        cursor.n += 1;
        if let Some(end) = cursor.budget.end_after(cursor.n, return_address) {
            cursor.limit = cursor.limit.min(end);
        }
        cursor.lookup = return_address - 1;
    }
    Stop::Done
}

/// The rule of `lookup` when the cache cannot vouch for it (first sight of the address, or code
/// that may be unloaded while the walk is not locked): checks the address against the registry,
/// then reads the rule and remembers it. Only code the program started with is read unlocked;
/// other code makes an unlocked walk stop for the lock ([`Stop::Lock`]), and code of a module no
/// longer loaded is unknown.
#[cold]
#[inline(never)]
fn resolve<const RULES: bool>(
    registry: &'static Registry,
    state: &mut ThreadState,
    lookup: usize,
    hint: &mut usize,
    locked: bool,
) -> Result<Rule, Stop> {
    let range = registry.range_of(lookup, hint).ok_or(Stop::Unknown)?;
    match range.kind {
        Kind::Opaque => return Err(Stop::Done),
        Kind::Unloadable if !locked => return Err(Stop::Lock),
        Kind::Unloadable if registry.is_gone(range) => return Err(Stop::Unknown),
        Kind::Permanent | Kind::Unloadable => {}
    }
    if !RULES {
        return Ok(Rule::FRAMEHOP);
    }
    let rule = Rule {
        permanent: range.kind == Kind::Permanent,
        ..match registry.cfi.get(range.cfi) {
            // Reads the module's tables: mapped, since it is permanent, or the walk holds the
            // loader's lock and the registry is valid.
            Some(cfi) => cfi.rule(lookup, &mut state.context),
            None => Rule::FRAMEHOP,
        }
    };
    state.rules.insert(lookup, rule);
    Ok(rule)
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
