//! The front doors: the [`MemProf`] global allocator and the C ABI.
//!
//! Both report to the same three functions, [`record_alloc`], [`record_free`] and
//! [`record_realloc`]. The first event that arrives starts the profiler: it reads the configuration
//! (inside the reentrancy guard, so that reading allocates unrecorded) and registers the at-exit
//! report. Events that arrive while another thread is starting it are not recorded.

pub mod c_abi;
pub mod global_alloc;

pub use global_alloc::MemProf;

use crate::capture::{self, Guard};
use crate::config::{self, Config};
use std::sync::atomic::{AtomicU8, Ordering};

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

/// The configuration when recording, starting the profiler on first use.
#[inline]
fn recording(_guard: &Guard) -> Option<&'static Config> {
    match STATE.load(Ordering::Acquire) {
        RECORDING => Some(config::get()),
        IDLE => start(),
        _ => None,
    }
}

#[cold]
fn start() -> Option<&'static Config> {
    if STATE
        .compare_exchange(IDLE, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return None;
    }
    let config = config::get();
    if config.enabled && config.print_at_exit {
        // SAFETY: `print_at_exit` is an `extern "C" fn()` that never unwinds.
        unsafe {
            libc::atexit(print_at_exit);
        }
    }
    let state = if config.enabled { RECORDING } else { OFF };
    STATE.store(state, Ordering::Release);
    (state == RECORDING).then_some(config)
}

extern "C" fn print_at_exit() {
    let mut stderr = std::io::stderr().lock();
    if let Err(error) = crate::report::log_allocations(&mut stderr) {
        let _ = std::io::Write::write_fmt(
            &mut stderr,
            format_args!("memprof: writing the report at exit failed: {error}\n"),
        );
    }
}

/// Records a block the wrapped allocator just returned.
#[inline]
pub fn record_alloc(address: usize, size: usize) {
    if let Some(guard) = Guard::enter()
        && let Some(config) = recording(&guard)
    {
        capture::alloc(&guard, config, address, size);
    }
}

/// Forgets a block that is about to be freed.
#[inline]
pub fn record_free(address: usize) {
    if let Some(guard) = Guard::enter()
        && STATE.load(Ordering::Acquire) == RECORDING
    {
        capture::free(&guard, address);
    }
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
    realloc: impl FnOnce() -> *mut u8,
) -> *mut u8 {
    let old = Guard::enter().and_then(|guard| {
        (STATE.load(Ordering::Acquire) == RECORDING)
            .then(|| capture::free(&guard, old_address))
            .flatten()
    });
    let new_block = realloc();
    if !new_block.is_null() {
        record_alloc(new_block as usize, new_size);
    } else if let Some(block) = old
        && let Some(guard) = Guard::enter()
    {
        capture::restore(&guard, old_address, block);
    }
    new_block
}
