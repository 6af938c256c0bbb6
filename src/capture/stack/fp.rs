//! The frame-pointer walk.
//!
//! Every function built with frame pointers starts by pushing the caller's frame pointer and
//! pointing the frame-pointer register at it, so `[fp]` is the caller's frame pointer and
//! `[fp + word]` the return address into the caller (x86-64 `rbp`, AArch64 `x29`). Each step is
//! checked before it is read: the frame must lie inside this thread's stack, be word-aligned, and
//! sit above the previous one; a chain that fails a check simply ends there.

use super::ReturnAddress;
use std::cell::Cell;

thread_local! {
    /// This thread's stack as `[low, high)`, looked up once per thread (`(0, 0)` until then).
    static STACK_BOUNDS: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The current thread's stack range, cached. Must run inside the reentrancy guard: the first call
/// of a thread asks the C library, which may allocate.
pub(super) fn stack_bounds() -> (usize, usize) {
    let cached = STACK_BOUNDS.try_with(Cell::get).unwrap_or((0, 0));
    if cached.1 != 0 {
        return cached;
    }
    let bounds = query_stack_bounds().unwrap_or((0, 0));
    let _ = STACK_BOUNDS.try_with(|b| b.set(bounds));
    bounds
}

fn query_stack_bounds() -> Option<(usize, usize)> {
    // SAFETY: `attr` is initialized by `pthread_getattr_np` before it is read and destroyed once;
    // `pthread_self` is always valid for the calling thread; the out-pointers are valid locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        ok.then(|| (addr as usize, addr as usize + size))
    }
}

/// Reads the frame-pointer register of the calling function.
#[inline(always)]
fn frame_pointer() -> usize {
    let fp: usize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: copies a register into a local; touches no memory.
    unsafe {
        std::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: copies a register into a local; touches no memory.
    unsafe {
        std::arch::asm!("mov {}, x29", out(reg) fp, options(nomem, nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        fp = 0;
    }
    fp
}

/// Walks the frame-pointer chain from the caller of this function; returns how many return
/// addresses were written to `out`, innermost first.
///
/// The first frame pointer must lie in this thread's stack; every next one must be aligned and
/// strictly above the last (so it stays above the stack's low end) and leave room for its two
/// words below the stack's high end.
#[inline(never)]
pub fn walk(out: &mut [ReturnAddress]) -> usize {
    let (low, high) = stack_bounds();
    let word = size_of::<usize>();
    let last = high.saturating_sub(2 * word);
    let mut fp = frame_pointer();
    if fp < low || fp > last || !fp.is_multiple_of(word) {
        return 0;
    }
    let mut n = 0;
    while n < out.len() {
        // SAFETY: `low <= fp <= high - 2 words` and `fp` is word-aligned (checked for the first
        // frame pointer above and for each next one below, which is also above the last): both
        // words lie inside this thread's own stack, which is mapped and readable for the thread's
        // whole life, and both reads are aligned.
        let (next, ret) = unsafe { (*(fp as *const usize), *((fp + word) as *const usize)) };
        if ret == 0 {
            break;
        }
        out[n] = ReturnAddress(ret);
        n += 1;
        if next <= fp || next > last || !next.is_multiple_of(word) {
            break;
        }
        fp = next;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_contain_a_local() {
        let local = 0u8;
        let (low, high) = stack_bounds();
        let at = &local as *const u8 as usize;
        assert!(low < at && at < high, "{low:#x} < {at:#x} < {high:#x}");
    }

    #[test]
    fn walk_stays_bounded() {
        let mut out = [ReturnAddress(0); 4];
        let n = walk(&mut out);
        assert!(n <= 4);
        assert!(out[..n].iter().all(|a| a.0 != 0));
    }
}
