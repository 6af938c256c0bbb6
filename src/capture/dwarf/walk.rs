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
//! A thread's state is made by its first walk; after that a walk neither allocates nor locks,
//! except when code loaded or unloaded since the registry was built makes it confirm the registry.

use super::registry::{Kind, Registry, confirm, current};
use super::rules::{Rule, Rules, Step};
use crate::address::ReturnAddress;
use crate::capture::{Budget, fp};
use addr2line::gimli::UnwindContext;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, MustNotAllocateDuringUnwind, Unwinder};
use std::cell::RefCell;

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
