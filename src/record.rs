//! The allocation path: what happens to every allocation, reallocation and free the doors
//! (`hooks`) report, between them and the live table.
//!
//! There is one path for each event, [`alloc`], [`free`] and [`realloc`], over one block
//! reference ([`BlockRef`]): a block of the global allocator with its header, or a block without
//! one (the C ABI's, a large or very aligned one, or any under sampling). The table matches on it
//! once, where the two kinds are stored differently. On the way the path checks the sampling
//! countdown, captures the stack ([`capture`]), and feeds its taps: the thread's trace buffer
//! ([`trace_tap`], [`buffer`]) and the thread's open test scopes ([`scope_tap`]).
//!
//! The first event that arrives starts the profiler ([`Start`]): the doors' part of it (the
//! table's settings, the toggle signal, the at-exit report, the `fork` handlers, the trace) is
//! theirs to say, and this module calls it without naming them, so that it never imports the
//! doors. Events that arrive while another thread is starting it are not recorded.
//!
//! Beside the three events, the one other change a recorded block sees is its explicit type tag
//! (`types::tags`), given here too ([`set_tag`]), so that no stage after the table changes it.
//!
//! Recording can be paused and resumed at run time ([`pause`], [`resume`], or the toggle signal):
//! while paused, new blocks are not recorded, and frees are still applied, so a block allocated
//! while paused and freed later, or recorded before and freed while paused, causes no error.
//!
//! The path allocates nothing outside the reentrancy guard, takes no lock that allocates, and
//! never panics, prints or reads the environment. Once in the process, after its first walks, one
//! walking thread reads the symbol table that tells where walks may stop (`capture::trim`), inside
//! the guard and without making any other thread wait, as the first walk builds the DWARF
//! unwinder's registry. In unoptimized builds every real frame between
//! the program's allocating function and the stack walk costs the walk's margin
//! (`tests/stack_trim.rs`), so the functions on the way are inlined even there
//! (`#[inline(always)]`), and the realloc path records its new block through [`alloc`] itself, not
//! through a closure or another layer.

#![forbid(unsafe_code)]

#[cfg(feature = "trace")]
pub(crate) mod buffer;
#[cfg(feature = "preload")]
pub(crate) mod mappings;
pub(crate) mod scope_tap;
pub(crate) mod trace_tap;

use crate::address::{ReturnAddress, StackId};
use crate::calls;
use crate::capture;
use crate::config::{self, Config, MAX_FRAMES};
use crate::guard::{self, Guard};
use crate::header::{BlockRef, Headed, Settings};
use crate::labels;
use crate::native::MallocBlock;
use crate::sampling;
use crate::table::{self, Block, Stranger, TABLE};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Not started yet.
const IDLE: u8 = 0;
/// One thread is reading the configuration.
const STARTING: u8 = 1;
/// Recording.
const RECORDING: u8 = 2;
/// Turned off by `MEMPROF_ENABLED=0`.
const OFF: u8 = 3;

/// The profiler's life-cycle state.
static STATE: AtomicU8 = AtomicU8::new(IDLE);

/// Frees are not looked at (not recording).
const FREES_IGNORED: u8 = 0;
/// Every free is looked up in the table.
const FREES_ALL: u8 = 1;
/// A free is looked up only when the sampled-block filter says it may be in the table.
const FREES_FILTERED: u8 = 2;

/// What the free path does: [`STATE`] and the table's sampling folded into one load.
static FREES: AtomicU8 = AtomicU8::new(FREES_IGNORED);

/// Whether recording of new blocks is paused.
static PAUSED: AtomicBool = AtomicBool::new(false);

/// Stops recording new blocks (frees are still applied) until [`resume`].
pub fn pause() {
    PAUSED.store(true, Ordering::Relaxed);
}

/// Records new blocks again after [`pause`].
pub fn resume() {
    PAUSED.store(false, Ordering::Relaxed);
}

/// Whether recording is paused.
pub fn is_paused() -> bool {
    PAUSED.load(Ordering::Relaxed)
}

/// Whether any block was ever recorded: false when memprof is not the global allocator (or is
/// turned off). One relaxed load.
#[inline]
pub(crate) fn has_recorded() -> bool {
    TABLE.has_recorded()
}

/// Gives the explicit type tag `tag` to the live block that starts at `address`, a headless one
/// or one whose header names its slot; returns the block's stack and its previous tag, or `None`
/// when no live block starts there. Not on the allocation path: called inside the reentrancy
/// guard (the tag maps may allocate).
pub(crate) fn set_tag(address: usize, tag: u32) -> Option<(StackId, u32)> {
    TABLE.set_tag(address, tag).or_else(|| {
        let slot = crate::header::header_slot(address)?;
        TABLE.set_slot_tag(slot, address, tag)
    })
}

/// The doors' part of starting the profiler, which the first recorded event starts: the path is
/// generic over it, so that it calls the doors without importing them, at no cost.
pub(crate) trait Start {
    /// Sets up recording from `config`, read once, and the allocator's own `settings`, used where
    /// the environment does not say otherwise: the table's sampling interval and peak tracking
    /// first, then whatever else runs beside recording. Called once, inside the reentrancy guard,
    /// when recording is enabled.
    fn start(config: &'static Config, settings: Settings);
}

/// The configuration when recording, starting the profiler on first use with the allocator's
/// settings.
#[inline]
fn recording<S: Start>(_guard: &Guard, settings: Settings) -> Option<&'static Config> {
    match STATE.load(Ordering::Acquire) {
        RECORDING => Some(config::get()),
        IDLE => start::<S>(settings),
        _ => None,
    }
}

/// Starts the profiler now, rather than at the first event: the preloaded library starts it from
/// its constructor, while the process has one thread and holds no lock, not inside whatever C
/// library call allocates first.
#[cfg(feature = "preload")]
pub(crate) fn start_now<S: Start>(settings: Settings) {
    if let Some(_guard) = Guard::enter()
        && STATE.load(Ordering::Acquire) == IDLE
    {
        let _ = start::<S>(settings);
    }
}

#[cold]
fn start<S: Start>(settings: Settings) -> Option<&'static Config> {
    if STATE
        .compare_exchange(IDLE, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return None;
    }
    let config = config::get();
    if config.enabled {
        S::start(config, settings);
        let frees = match TABLE.sample_interval() {
            0 => FREES_ALL,
            _ => FREES_FILTERED,
        };
        FREES.store(frees, Ordering::Release);
    }
    let state = if config.enabled { RECORDING } else { OFF };
    STATE.store(state, Ordering::Release);
    (state == RECORDING).then_some(config)
}

/// Records a block the wrapped allocator just returned at `address`: `block` says its kind
/// ([`BlockRef::Headless`], or [`BlockRef::NEW_HEADED`] for a block with a header); returns the
/// block as the table recorded it, whose header, if any, must hold what it says. `settings` are
/// the allocator's own, used where the environment does not say otherwise. `malloc` is the block
/// as the C library's allocator returned it, when it did ([`MallocBlock::NONE`] otherwise): the
/// trace reads its chunk flags.
///
/// Inlined, with the allocator's entry, into the program's function that allocated, so the call
/// into the recording path is that function's last call whenever the allocation is the last thing
/// it does: [`capture::stay_in_frame`] keeps it a call, so that the function's frame is still on the stack
/// when the walk starts.
#[inline(always)]
pub(crate) fn alloc<S: Start>(
    address: usize,
    size: usize,
    block: BlockRef,
    settings: Settings,
    malloc: MallocBlock,
) -> BlockRef {
    if skip_alloc(size) {
        return block.unrecorded();
    }
    // One instance of the checked path per kind of block, so that the table's match on the kind
    // is decided when it is compiled.
    match block {
        BlockRef::Headless => {
            alloc_checked::<S, false>(address, size, settings, malloc);
            capture::stay_in_frame();
            BlockRef::Headless
        }
        BlockRef::Headed(_) => {
            let headed = alloc_checked::<S, true>(address, size, settings, malloc);
            capture::stay_in_frame();
            BlockRef::Headed(headed)
        }
    }
}

/// Whether an allocation of `size` bytes is left out before anything else: under sampling most
/// are not sampled, which the countdown tells. memprof's own allocations leave it alone, so they
/// never take a sample from the program. Without sampling, one load of the table's mode and no
/// thread-local (each costs a call into the dynamic loader in the preloaded library).
#[inline(always)]
fn skip_alloc(size: usize) -> bool {
    TABLE.sample_interval() != 0
        && !guard::inside()
        && sampling::count_down_unsampled(size)
        && !scope_tap::any_open()
}

/// [`alloc`] past the fast check: the allocation may be recorded. Returns what the header of a
/// block with one (`HEADED`) must hold ([`Headed::UNRECORDED`] for a block without one).
#[inline(never)]
fn alloc_checked<S: Start, const HEADED: bool>(
    address: usize,
    size: usize,
    settings: Settings,
    malloc: MallocBlock,
) -> Headed {
    // This function's own frame, never inlined away: a frame-pointer walk starts from it, with
    // the return address into the allocator's entry (which may be inlined into the program's
    // code, so the walk cannot start any higher).
    let entry = capture::fp::frame_pointer();
    let mut headed = Headed::UNRECORDED;
    if let Some(guard) = Guard::enter()
        && let Some(config) = recording::<S>(&guard, settings)
    {
        let interval = TABLE.sample_interval();
        let stack = if !PAUSED.load(Ordering::Relaxed)
            && (interval == 0 || sampling::sample(size, interval))
        {
            new_block::<HEADED>(&guard, config, address, size, entry)
        } else {
            None
        };
        if let Some((stack, recorded)) = stack {
            headed = recorded;
            // A block without a header is always in the side tables once recorded.
            if !HEADED || recorded.is_recorded() {
                trace_tap::alloc(address, size, stack, malloc);
            }
        }
        if scope_tap::any_open() {
            scope_tap::on_alloc(&guard, address, size, stack.map(|(stack, _)| stack));
        }
    }
    headed
}

thread_local! {
    /// Where a thread's stack is captured: thread-local, so the allocation path needs neither a
    /// large zeroed array on its own stack nor an allocation.
    static FRAMES: RefCell<[ReturnAddress; MAX_FRAMES]> =
        const { RefCell::new([ReturnAddress(0); MAX_FRAMES]) };
}

/// Records a new block in the table (`HEADED`: one with a header), capturing the current stack;
/// returns its stack (labelled with the thread's current labels) and what its header must hold
/// ([`Headed::UNRECORDED`] for a block without one). `entry` is the frame pointer of one of the
/// callers, where a frame-pointer walk starts (see [`capture::capture`]).
#[inline]
fn new_block<const HEADED: bool>(
    _guard: &Guard,
    config: &Config,
    address: usize,
    size: usize,
    entry: usize,
) -> Option<(StackId, Headed)> {
    let labels = labels::current();
    let store = |frames: &[ReturnAddress]| {
        let stack = TABLE.stacks.intern_labelled(frames, labels);
        // The kind, a constant here, so the table's match on it is decided before anything is
        // inlined into this closure.
        let block = match HEADED {
            true => BlockRef::NEW_HEADED,
            false => BlockRef::Headless,
        };
        (
            stack,
            TABLE
                .insert_any(address, size as u64, stack, block)
                .header(),
        )
    };
    let recorded = FRAMES.try_with(|frames| {
        let mut frames = frames.try_borrow_mut().ok()?;
        let n = walk(config, &mut frames, entry);
        Some(store(&frames[..n]))
    });
    // The thread is tearing down its locals: record the block without a stack rather than lose it,
    // so totals stay balanced when it is freed.
    recorded.unwrap_or_else(|_| Some(store(&[])))
}

/// Captures the current stack into the start of `frames`, at most `config`'s capture depth;
/// returns how many frames it holds. `entry` as for [`new_block`]. A walk that reached its margin
/// before the symbol table that tells where a walk may stop was read, and made it due, is made
/// again with it.
#[inline(always)]
fn walk(config: &Config, frames: &mut [ReturnAddress; MAX_FRAMES], entry: usize) -> usize {
    let calling = calls::current();
    if calling != 0 {
        return walk_calling(config, frames, entry, calling);
    }
    let depth = config.capture_depth();
    let frames = &mut frames[..depth];
    let budget = capture::Budget::new(config.shown_depth());
    let n = capture::capture(config.unwinder, frames, budget, entry);
    if capture::trim::read_when_due(n == depth) && n == depth {
        let budget = capture::Budget::new(config.shown_depth());
        return capture::capture(config.unwinder, frames, budget, entry);
    }
    n
}

/// [`walk`] while `calling` of memprof's functions call the program's code on this thread (an
/// attached future's body: [`calls`]): their frames stand between the program's, so the walk
/// goes one frame further for each, and leaves their frames out
/// ([`capture::trim::drop_calling`]), keeping the frames a report shows. The first such walk
/// makes the symbol table that tells those frames due.
#[inline(never)]
fn walk_calling(
    config: &Config,
    frames: &mut [ReturnAddress; MAX_FRAMES],
    entry: usize,
    calling: usize,
) -> usize {
    let want = config.shown_depth();
    let depth = config
        .capture_depth()
        .saturating_add(calling)
        .min(MAX_FRAMES);
    let frames = &mut frames[..depth];
    let budget = capture::Budget::new(want.saturating_add(calling));
    let mut n = capture::capture(config.unwinder, frames, budget, entry);
    if capture::trim::read_when_due(true) {
        let budget = capture::Budget::new(want.saturating_add(calling));
        n = capture::capture(config.unwinder, frames, budget, entry);
    }
    capture::trim::drop_calling(&mut frames[..n], want)
}

/// The stack of a mapping the program makes (the preloaded library's `mmap` and `mremap`),
/// captured and interned as [`new_block`] does, when recording and not paused; `entry` as there.
#[cfg(feature = "preload")]
#[inline]
fn mapping_stack<S: Start>(guard: &Guard, entry: usize) -> Option<StackId> {
    let config = recording::<S>(guard, Settings::default())?;
    if PAUSED.load(Ordering::Relaxed) {
        return None;
    }
    let captured = FRAMES.try_with(|frames| {
        let mut frames = frames.try_borrow_mut().ok()?;
        let n = walk(config, &mut frames, entry);
        Some(
            TABLE
                .stacks
                .intern_labelled(&frames[..n], labels::current()),
        )
    });
    // The thread is tearing down its locals: the mapping without a stack rather than lost.
    captured.unwrap_or_else(|_| Some(TABLE.stacks.intern_labelled(&[], 0)))
}

/// Whether the table may hold `block` at `address`, before looking it up: a header says so; for
/// a block without one, `frees` (a value of [`FREES`]) and the sampled-block filter tell.
#[inline(always)]
fn may_hold(frees: u8, address: usize, block: BlockRef) -> bool {
    match block {
        BlockRef::Headless => {
            frees == FREES_ALL || (frees == FREES_FILTERED && TABLE.may_hold_sampled(address))
        }
        BlockRef::Headed(headed) => headed.is_recorded(),
    }
}

/// Forgets a block that is about to be freed, as `block` tells it (for a block with a header, what
/// the header holds); `false`, with nothing done, when the slot the header names does not hold the
/// block: then the header was not this allocator's (see [`Stranger`]).
///
/// Frees are applied even inside the reentrancy guard: a block of the program freed while memprof
/// works (a report writing into the program's own buffer, code run `untracked`) must leave the
/// table, or the table would name freed memory. So are frees from a signal handler that
/// interrupted this thread inside the table: the table makes them part of the interrupted change.
/// Only the table's own memory, freed while this thread holds the table still, is never looked
/// up.
#[inline]
#[must_use]
pub(crate) fn free(address: usize, block: BlockRef) -> bool {
    let frees = FREES.load(Ordering::Acquire);
    if frees == FREES_IGNORED && matches!(block, BlockRef::Headless) {
        return true;
    }
    // Under sampling most frees leave at the filter.
    if may_hold(frees, address, block) {
        match TABLE.remove_any(address, block) {
            Ok(true) => trace_tap::free(address),
            Ok(false) => {}
            Err(Stranger) => return false,
        }
    }
    if scope_tap::any_open() && !table::holding_table() {
        scope_tap::on_free(address);
    }
    true
}

/// Reallocates the block at `old_address`, of the kind and with the header `block` tells, through
/// `realloc` (which returns the new block, or null on failure, and the new block as the C
/// library's allocator returned it, [`MallocBlock::NONE`] when it did not): untracks the old block first and
/// tracks the new one, of the kind `new_kind` says ([`BlockRef::Headless`], or
/// [`BlockRef::NEW_HEADED`]: a realloc across 64 KiB changes it), with the realloc's stack.
/// Returns the new block and the block the program holds now as the table recorded it (the new
/// block, or the old one again when the realloc failed); `None`, without calling `realloc`, when
/// the slot a header names does not hold the block (see [`free`]). An explicit type tag belongs
/// to the value and follows it either way, and the kind does not matter to it.
///
/// The old block is untracked *before* the wrapped allocator may free it: once freed, its address
/// can be handed to another thread at once, and that thread's record must not be the one removed.
#[inline]
pub(crate) fn realloc<S: Start>(
    old_address: usize,
    block: BlockRef,
    new_kind: BlockRef,
    new_size: usize,
    settings: Settings,
    realloc: impl FnOnce() -> (*mut u8, MallocBlock),
) -> Option<(*mut u8, BlockRef)> {
    let taken: Option<Block> = if may_hold(FREES.load(Ordering::Acquire), old_address, block) {
        match TABLE.take_any(old_address, block) {
            Ok(taken) => taken,
            Err(Stranger) => return None,
        }
    } else {
        None
    };
    trace_tap::realloc_start(old_address, taken.is_some());
    let (new_block, malloc) = realloc();
    let tag = match &taken {
        Some(old) => old.tag,
        None => 0,
    };
    let kept = if !new_block.is_null() {
        if scope_tap::any_open() {
            scope_tap::on_free(old_address);
        }
        let kept = alloc::<S>(new_block as usize, new_size, new_kind, settings, malloc);
        if tag != 0 {
            // Inside the guard: the tag map may grow.
            guard::untracked(|| TABLE.retag_any(new_block as usize, kept, tag));
        }
        kept
    } else if let Some(old) = taken
        && let Some(_guard) = Guard::enter()
    {
        // The realloc failed, so the old block is still the program's: put it back.
        TABLE.restore_any(old_address, old, block)
    } else {
        block.unrecorded()
    };
    trace_tap::realloc_end(new_block.is_null());
    Some((new_block, kept))
}
