//! The front doors: the [`MemProf`] global allocator and the C ABI.
//!
//! Both report to the same three functions, [`record_alloc`], [`record_free`] and
//! [`record_realloc`]. The first event that arrives starts the profiler: it reads the configuration
//! (inside the reentrancy guard, so that reading allocates unrecorded), sets the sampling interval,
//! installs the toggle signal, registers the at-exit report and the [`fork`] handlers. Events that
//! arrive while another thread is starting it are not recorded.
//!
//! Recording can be paused and resumed at run time ([`pause`], [`resume`], or the toggle signal):
//! while paused, new blocks are not recorded, and frees are still applied, so a block allocated
//! while paused and freed later, or recorded before and freed while paused, causes no error.

pub mod c_abi;
mod fork;
pub mod global_alloc;
mod triggers;

pub use global_alloc::{MemProf, Settings};

use crate::address::ReturnAddress;
use crate::capture;
use crate::config::{self, Config, MAX_FRAMES};
use crate::guard::{self, Guard};
use crate::sampling;
use crate::scope;
use crate::table::{self, Block, Headed, StackId, TABLE};
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

/// The configuration when recording, starting the profiler on first use with the allocator
/// builder's sampling interval.
#[inline]
fn recording(_guard: &Guard, builder: Settings) -> Option<&'static Config> {
    match STATE.load(Ordering::Acquire) {
        RECORDING => Some(config::get()),
        IDLE => start(builder),
        _ => None,
    }
}

#[cold]
fn start(builder: Settings) -> Option<&'static Config> {
    if STATE
        .compare_exchange(IDLE, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return None;
    }
    let config = config::get();
    if config.enabled {
        TABLE.set_sample_interval(config.sample_interval.unwrap_or(builder.sample_interval));
        let peak_wanted = config
            .output
            .as_deref()
            .is_some_and(|o| o.contains(".dhat.json") || o.contains(".heaptrack.gz"));
        TABLE.set_track_peak(config.peak.unwrap_or(builder.track_peak) || peak_wanted);
        capture::trim::load();
        triggers::install(config);
        fork::install();
        if let Some(spec) = config.trace.as_deref().or(builder.trace) {
            crate::trace::start(spec, TABLE.sample_interval());
        }
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

/// Records a block the wrapped allocator just returned, in the side tables (a block without a
/// header: the C ABI's, a large or very aligned one, or any under sampling); `builder` holds the
/// allocator's own settings, used where the environment does not say otherwise.
///
/// Inlined, with the allocator's entry, into the program's function that allocated, so the call
/// into the recording path is that function's last call whenever the allocation is the last thing
/// it does: [`stay_in_frame`] keeps it a call, so that the function's frame is still on the stack
/// when the walk starts.
#[inline(always)]
pub fn record_alloc(address: usize, size: usize, builder: Settings) {
    if skip_alloc(size) {
        return;
    }
    record_alloc_checked::<false>(address, size, builder);
    stay_in_frame();
}

/// Records a block of the global allocator, which carries a header; returns what the header
/// must hold. As [`record_alloc`] otherwise.
#[inline(always)]
pub fn record_alloc_headed(address: usize, size: usize, builder: Settings) -> Headed {
    if skip_alloc(size) {
        return Headed::UNRECORDED;
    }
    let headed = record_alloc_checked::<true>(address, size, builder);
    stay_in_frame();
    headed
}

/// Whether an allocation of `size` bytes is left out before anything else: under sampling most
/// are not sampled, which the countdown tells. memprof's own allocations leave it alone, so they
/// never take a sample from the program.
#[inline(always)]
fn skip_alloc(size: usize) -> bool {
    !guard::inside() && sampling::count_down_unsampled(size) && !scope::any_open()
}

/// Keeps the call just before it from becoming a tail call: a jump that would leave the current
/// function before the call runs, taking its frame (and so the function that allocated) off the
/// stack that the call walks. An empty instruction the optimizer must keep, after the call: it
/// costs nothing but the return into this function.
#[inline(always)]
fn stay_in_frame() {
    // SAFETY: an empty instruction sequence: it reads and writes no register, memory or flag and
    // leaves the stack as it was. Without `pure`, the compiler keeps it, after the call before it.
    unsafe { std::arch::asm!("", options(nomem, nostack, preserves_flags)) }
}

/// [`record_alloc`] (or, `HEADED`, [`record_alloc_headed`]) past the fast check: the allocation
/// may be recorded.
#[inline(never)]
fn record_alloc_checked<const HEADED: bool>(
    address: usize,
    size: usize,
    builder: Settings,
) -> Headed {
    // This function's own frame, never inlined away: a frame-pointer walk starts from it, with
    // the return address into the allocator's entry (which may be inlined into the program's
    // code, so the walk cannot start any higher).
    let entry = capture::fp::frame_pointer();
    let mut headed = Headed::UNRECORDED;
    if let Some(guard) = Guard::enter()
        && let Some(config) = recording(&guard, builder)
    {
        let interval = TABLE.sample_interval();
        let stack = if !PAUSED.load(Ordering::Relaxed)
            && (interval == 0 || sampling::sample(size, interval))
        {
            record_new_block::<HEADED>(&guard, config, address, size, entry)
        } else {
            None
        };
        if let Some((stack, recorded)) = stack {
            headed = recorded;
            if !HEADED || recorded.is_recorded() {
                crate::trace::alloc(address, size, stack);
            }
        }
        if scope::any_open() {
            scope::on_alloc(&guard, address, size, stack.map(|(stack, _)| stack));
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

/// Records a new block in the table (`HEADED`: in a slot), capturing the current stack; returns
/// its stack, and for a slot what the header must hold. `entry` is the frame pointer of one of
/// the callers, where a frame-pointer walk starts (see [`capture::capture`]).
#[inline]
fn record_new_block<const HEADED: bool>(
    _guard: &Guard,
    config: &Config,
    address: usize,
    size: usize,
    entry: usize,
) -> Option<(StackId, Headed)> {
    let depth = config.capture_depth();
    let store = |frames: &[ReturnAddress]| {
        let stack = TABLE.stacks.intern(frames);
        let headed = if HEADED {
            TABLE.insert_headed(address, size as u64, stack)
        } else {
            TABLE.insert_block(address, size as u64, stack);
            Headed::UNRECORDED
        };
        (stack, headed)
    };
    let recorded = FRAMES.try_with(|frames| {
        let mut frames = frames.try_borrow_mut().ok()?;
        let budget = capture::Budget::new(config.shown_depth());
        let n = capture::capture(config.unwinder, &mut frames[..depth], budget, entry);
        Some(store(&frames[..n]))
    });
    // The thread is tearing down its locals: record the block without a stack rather than lose it,
    // so totals stay balanced when it is freed.
    recorded.unwrap_or_else(|_| Some(store(&[])))
}

/// Forgets a block that is about to be freed.
///
/// Frees are applied even inside the reentrancy guard: a block of the program freed while memprof
/// works (a report writing into the program's own buffer, code run `untracked`) must leave the
/// table, or the table would name freed memory. So are frees from a signal handler that
/// interrupted this thread inside the table: the table makes them part of the interrupted change.
/// Only the table's own memory, freed while this thread holds the table still, is never looked
/// up.
#[inline]
pub fn record_free(address: usize) {
    let frees = FREES.load(Ordering::Acquire);
    if frees == FREES_IGNORED {
        return;
    }
    // Under sampling most frees leave at the filter.
    if may_be_recorded(frees, address) && TABLE.remove(address) {
        crate::trace::free(address);
    }
    if scope::any_open() && !table::holding_table() {
        scope::on_free(address);
    }
}

/// Forgets a block of the global allocator that is about to be freed, as its header tells
/// (see [`record_free`]); `false`, with nothing done, when the slot the header names does not
/// hold the block: then the header was not this allocator's (see [`Table::remove_headed`]).
#[inline]
#[must_use]
pub fn record_free_headed(address: usize, headed: Headed) -> bool {
    if headed.is_recorded() {
        if TABLE.remove_headed(address, headed).is_none() {
            return false;
        }
        crate::trace::free(address);
    }
    if scope::any_open() && !table::holding_table() {
        scope::on_free(address);
    }
    true
}

/// [`record_realloc`] for a block of the global allocator, whose header says `old`: returns the
/// new block and what the header of the block the program holds now must say (the new block's,
/// or the old one's again when the realloc failed); `None`, without calling `realloc`, when the
/// slot the header names does not hold the block (see [`record_free_headed`]).
#[inline]
pub fn record_realloc_headed(
    old_address: usize,
    old: Headed,
    new_size: usize,
    builder: Settings,
    realloc: impl FnOnce() -> *mut u8,
) -> Option<(*mut u8, Headed)> {
    let taken = match old.is_recorded() {
        true => Some((old, TABLE.remove_headed(old_address, old)?)),
        false => None,
    };
    let kind = HeadedBlock {
        old_address,
        new_size,
        builder,
    };
    Some(reallocate(&kind, taken, realloc))
}

/// How a `realloc` records the block it leaves, for one kind of block. The methods are inlined
/// even in unoptimized builds, so that they add no frame for a walk to pass.
trait Reallocated {
    /// What the table gave of the old block when it took it out.
    type Old;
    /// What the block's kind keeps of a recorded block (a header's contents, or nothing).
    type Kept;
    /// The address of the block reallocated.
    fn old_address(&self) -> usize;
    /// Records the new block at `new`, with the realloc's stack.
    fn record(&self, new: usize) -> Self::Kept;
    /// Puts back the old block with its `tag`, when the realloc failed.
    fn restore(&self, old: Self::Old, tag: u32) -> Self::Kept;
    /// Gives `tag` to the new block at `address` that `kept` stands for.
    fn retag(&self, kept: &Self::Kept, address: usize, tag: u32);
    /// What stands for a block that is not recorded.
    fn unrecorded(&self) -> Self::Kept;
}

/// A `realloc` of a block of the global allocator, which carries a header.
struct HeadedBlock {
    old_address: usize,
    new_size: usize,
    builder: Settings,
}

impl Reallocated for HeadedBlock {
    type Old = Headed;
    type Kept = Headed;

    #[inline(always)]
    fn old_address(&self) -> usize {
        self.old_address
    }

    #[inline(always)]
    fn record(&self, new: usize) -> Headed {
        record_alloc_headed(new, self.new_size, self.builder)
    }

    #[inline(always)]
    fn restore(&self, old: Headed, tag: u32) -> Headed {
        let kept = TABLE.restore_headed(self.old_address, old.size, old.stack);
        if tag != 0 {
            self.retag(&kept, self.old_address, tag);
        }
        kept
    }

    #[inline(always)]
    fn retag(&self, kept: &Headed, address: usize, tag: u32) {
        if kept.is_recorded() {
            TABLE.set_slot_tag(kept.slot, address, tag);
        }
    }

    #[inline(always)]
    fn unrecorded(&self) -> Headed {
        Headed::UNRECORDED
    }
}

/// A `realloc` of a block without a header, which the side tables hold.
struct HeadlessBlock {
    old_address: usize,
    new_size: usize,
    builder: Settings,
}

impl Reallocated for HeadlessBlock {
    type Old = Block;
    type Kept = ();

    #[inline(always)]
    fn old_address(&self) -> usize {
        self.old_address
    }

    #[inline(always)]
    fn record(&self, new: usize) {
        record_alloc(new, self.new_size, self.builder);
    }

    /// The block taken out holds its tag already.
    #[inline(always)]
    fn restore(&self, old: Block, _: u32) {
        TABLE.restore(self.old_address, old);
    }

    #[inline(always)]
    fn retag(&self, _: &(), address: usize, tag: u32) {
        TABLE.set_tag(address, tag);
    }

    #[inline(always)]
    fn unrecorded(&self) {}
}

/// What [`record_realloc`] and [`record_realloc_headed`] share, once the old block's record and
/// its tag were taken out of the table (`taken`; `None` when it was not recorded): the realloc,
/// then the new block recorded with the realloc's stack, or the old one put back when the realloc
/// failed; an explicit type tag belongs to the value and follows it either way.
#[inline(always)]
fn reallocate<K: Reallocated>(
    kind: &K,
    taken: Option<(K::Old, u32)>,
    realloc: impl FnOnce() -> *mut u8,
) -> (*mut u8, K::Kept) {
    let old_address = kind.old_address();
    crate::trace::realloc_start(old_address, taken.is_some());
    let new_block = realloc();
    let tag = taken.as_ref().map_or(0, |&(_, tag)| tag);
    let kept = if !new_block.is_null() {
        if scope::any_open() {
            scope::on_free(old_address);
        }
        let kept = kind.record(new_block as usize);
        if tag != 0 {
            // Inside the guard: the tag map may grow.
            guard::untracked(|| kind.retag(&kept, new_block as usize, tag));
        }
        kept
    } else if let Some((old, _)) = taken
        && let Some(_guard) = Guard::enter()
    {
        // The realloc failed, so the old block is still the program's: put it back.
        kind.restore(old, tag)
    } else {
        kind.unrecorded()
    };
    crate::trace::realloc_end(new_block.is_null());
    (new_block, kept)
}

/// Whether the block at `address` may be in the table, as far as `frees` (a value of [`FREES`])
/// and the sampled-block filter tell.
#[inline(always)]
fn may_be_recorded(frees: u8, address: usize) -> bool {
    frees == FREES_ALL || (frees == FREES_FILTERED && TABLE.may_hold_sampled(address))
}

/// Reallocates through `realloc` (which returns the new block, or null on failure), untracking the
/// old block first and tracking the new one with the realloc's stack.
///
/// The old block is untracked *before* the wrapped allocator may free it: once freed, its address
/// can be handed to another thread at once, and that thread's record must not be the one removed.
#[inline]
pub fn record_realloc(
    old_address: usize,
    new_size: usize,
    builder: Settings,
    realloc: impl FnOnce() -> *mut u8,
) -> *mut u8 {
    let taken = may_be_recorded(FREES.load(Ordering::Acquire), old_address)
        .then(|| TABLE.take(old_address))
        .flatten()
        .map(|block| (block, block.tag));
    let kind = HeadlessBlock {
        old_address,
        new_size,
        builder,
    };
    let (new_block, ()) = reallocate(&kind, taken, realloc);
    new_block
}
