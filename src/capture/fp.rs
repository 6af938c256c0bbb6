//! The frame-pointer walk.
//!
//! Every function built with frame pointers starts by pushing the caller's frame pointer and
//! pointing the frame-pointer register at it, so `[fp]` is the caller's frame pointer and
//! `[fp + word]` the return address into the caller (x86-64 `rbp`, AArch64 `x29`). Each step is
//! checked before it is read: the frame must lie inside this thread's stack above the walk's own
//! stack pointer, be word-aligned, and sit above the previous one; a chain that fails a check
//! simply ends there. The stack's bounds come from `/proc/self/maps`, read once per thread
//! ([`stack_bounds`]).

use super::{Budget, ReturnAddress};
use std::cell::Cell;

thread_local! {
    /// This thread's stack as `[low, high)`, looked up once per thread (`(0, 0)` until then).
    static STACK_BOUNDS: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The current thread's stack range, cached. Runs inside the reentrancy guard; the first call of a
/// thread reads `/proc/self/maps` ([`query_stack_bounds`]), which allocates nothing and takes no
/// lock.
#[inline]
pub(super) fn stack_bounds() -> (usize, usize) {
    let cached = STACK_BOUNDS.try_with(Cell::get).unwrap_or((0, 0));
    if cached.1 != 0 {
        return cached;
    }
    cache_stack_bounds()
}

/// Looks the current thread's stack range up and caches it. A thread on its alternate signal
/// stack gets `(0, 0)` (its walk captures nothing) and caches nothing: the stack it runs on is not
/// the thread's.
#[cold]
#[inline(never)]
fn cache_stack_bounds() -> (usize, usize) {
    if crate::native::on_signal_stack() {
        return (0, 0);
    }
    let bounds = query_stack_bounds(stack_pointer()).unwrap_or((0, 0));
    let _ = STACK_BOUNDS.try_with(|b| b.set(bounds));
    bounds
}

/// The stack holding `sp` as `[low, high)`, from `/proc/self/maps`: `high` is the end of the
/// mapping that holds `sp`, `low` the end of the highest mapping below it, the furthest the stack
/// can reach. For a thread the C library started, that lower mapping is the stack's guard page,
/// so `low` is where its stack starts. The main thread's stack grows down on demand (the kernel
/// names it `[stack]`): `low` is where it can grow to, the lower mapping's end or its size limit
/// (`RLIMIT_STACK`) below `high`, whichever is higher, so that the bounds cached at the thread's
/// first walk still hold as its stack grows.
///
/// Not `pthread_getattr_np`: the C library calls it with the thread's own lock held and allocates
/// inside it (glibc reads `/proc/self/maps` with stdio for the main thread and sizes a CPU set with
/// `realloc` for every thread), and Rust's standard library calls it at the start of `main` and of
/// every thread it spawns: the allocation hook asking it again would wait on that lock forever.
/// The file is read with the bare system calls into a buffer on this stack ([`native::read_lines`]).
///
/// [`native::read_lines`]: crate::native::read_lines
fn query_stack_bounds(sp: usize) -> Option<(usize, usize)> {
    // Enough for a mapping's fields before its name; longer lines are cut, which only cuts names.
    let mut buffer = [0u8; 512];
    let mut below = 0;
    let mut found = None;
    crate::native::read_lines(c"/proc/self/maps", &mut buffer, |line| {
        // A name that is not UTF-8 ends the line for the parser, which needs the fields before it.
        let text = match std::str::from_utf8(line) {
            Ok(text) => text,
            Err(e) => std::str::from_utf8(&line[..e.valid_up_to()]).unwrap_or_default(),
        };
        let Some(mapping) = crate::memory::maps_line(text) else {
            return true;
        };
        if mapping.start > sp {
            return false;
        }
        if sp >= mapping.end {
            below = mapping.end;
            return true;
        }
        let mut low = below;
        if mapping.name == "[stack]"
            && let Some(limit) = crate::native::stack_limit()
        {
            low = low.max(mapping.end.saturating_sub(limit));
        }
        found = Some((low.min(mapping.start), mapping.end));
        false
    });
    found
}

/// Reads the stack-pointer register of the calling function.
#[inline(always)]
pub(crate) fn stack_pointer() -> usize {
    let sp: usize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: copies a register into a local; touches no memory.
    unsafe {
        std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: copies a register into a local; touches no memory.
    unsafe {
        std::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let local = 0u8;
        sp = std::hint::black_box(&local) as *const u8 as usize;
    }
    sp
}

/// Reads the frame-pointer register of the calling function (whatever it holds in code built
/// without frame pointers: [`walk_from`] checks it before use).
#[inline(always)]
pub(crate) fn frame_pointer() -> usize {
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

/// Walks the frame-pointer chain from the caller of this function until it holds the frames
/// `budget` wants; returns how many return addresses were written to `out`, innermost first.
///
/// The first frame pointer must lie in this thread's stack at or above the stack pointer; every next one must be aligned and
/// strictly above the last (so it stays above the stack's low end) and leave room for its two
/// words below the stack's high end.
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
pub(crate) fn walk(out: &mut [ReturnAddress], budget: Budget) -> usize {
    walk_from(0, out, budget)
}

/// `walk` from `entry`, the frame pointer of one of its callers, leaving out the frames below
/// it; from its own caller when `entry` is 0 or lies below the walk's own frame.
#[inline(never)]
pub(crate) fn walk_from(entry: usize, out: &mut [ReturnAddress], mut budget: Budget) -> usize {
    let (low, high) = stack_bounds();
    let word = size_of::<usize>();
    // The highest aligned frame pointer whose two words end at or below `high`.
    let last = high.saturating_sub(2 * word) & !(word - 1);
    let own = frame_pointer();
    let sp = stack_pointer();
    let mut fp = if entry > own { entry } else { own };
    // Everything read lies in `[sp, high)`: from this frame up to the top of the stack, which is
    // mapped. A walk on another stack (a signal handler's alternate stack) has its `sp` outside
    // `[low, high)` and captures nothing.
    if sp < low || sp >= high || fp < sp || fp > last || !fp.is_multiple_of(word) {
        return 0;
    }
    // Words from `fp` up to `last`.
    let mut room = (last - fp) / word;
    let mut n = 0;
    // Frames wanted in all: all of `out` until the budget knows.
    let mut wanted = out.len();
    // Until the first frame a report shows, each frame's code is looked up.
    while n < out.len() {
        // SAFETY: `low <= sp <= fp <= last` and `fp` is word-aligned (checked for the first frame
        // pointer above, and by `room_below` for each next one, which must also be above the
        // last), and `last + 2 words <= high`: both words lie in `[sp, high)`, the part of this
        // thread's own stack from the running frame up, which is mapped and readable.
        let (next, ret) = unsafe { read(fp) };
        if ret == 0 {
            return n;
        }
        out[n] = ReturnAddress(ret);
        n += 1;
        let end = budget.end_after(n, ret);
        let Some(next_room) = room_below(last, room, next) else {
            return n;
        };
        fp = next;
        room = next_room;
        if let Some(end) = end {
            wanted = end.min(out.len());
            break;
        }
    }
    // From there on the walk only counts: the loop most frames go through, kept to the least.
    let out = &mut out[..wanted];
    while n < out.len() {
        // SAFETY: as in the first loop.
        let (next, ret) = unsafe { read(fp) };
        if ret == 0 {
            break;
        }
        out[n] = ReturnAddress(ret);
        n += 1;
        let Some(next_room) = room_below(last, room, next) else {
            break;
        };
        fp = next;
        room = next_room;
    }
    n
}

/// Reads the frame at `fp`: the caller's frame pointer and the return address into the caller.
///
/// # Safety
///
/// `fp` must be word-aligned, and its two words must lie in memory that stays mapped and
/// readable while this runs (the current thread's own stack).
#[inline(always)]
unsafe fn read(fp: usize) -> (usize, usize) {
    let word = size_of::<usize>();
    // SAFETY: the caller's promise: both words are aligned, mapped and readable.
    unsafe { (*(fp as *const usize), *((fp + word) as *const usize)) }
}

/// The words from `next` up to `last` when `next` may follow a frame pointer that had `room`
/// words up to `last`: when it is aligned and `last - room words < next <= last`; `None`
/// otherwise. `last` must be aligned.
///
/// One compare checks all three conditions: `last - next` is a multiple of a word exactly when
/// `next` is aligned; rotated, it is then the number of words from `next` up to `last`, and
/// otherwise its low bits land on top and make it larger than any `room`. When `next > last` the
/// difference wraps around to at least `last + 1 word`, again more than `room` words.
#[inline(always)]
fn room_below(last: usize, room: usize, next: usize) -> Option<usize> {
    let word = size_of::<usize>();
    let next_room = last.wrapping_sub(next).rotate_right(word.trailing_zeros());
    (next_room < room).then_some(next_room)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the C library says of the calling thread's stack: `pthread_getattr_np`, which a test
    /// may call (off the allocation path).
    fn libc_bounds() -> (usize, usize) {
        // SAFETY: `attr` is initialized by `pthread_getattr_np` before it is read and destroyed
        // once; the out-pointers are valid locals.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
            let mut addr: *mut libc::c_void = std::ptr::null_mut();
            let mut size: libc::size_t = 0;
            assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
            libc::pthread_attr_destroy(&mut attr);
            (addr as usize, addr as usize + size)
        }
    }

    #[test]
    fn a_threads_bounds_are_its_stack_as_the_c_library_knows_it() {
        for stack in [64 << 10, 2 << 20] {
            let (ours, theirs) = std::thread::Builder::new()
                .stack_size(stack)
                .spawn(|| (stack_bounds(), libc_bounds()))
                .unwrap()
                .join()
                .unwrap();
            assert_eq!(ours, theirs, "stack of {stack} bytes");
        }
    }

    #[test]
    fn the_main_stack_reaches_down_to_its_limit() {
        // The main thread's stack (`[stack]` in the maps): the test threads run elsewhere, so
        // look up the mapping holding `environ`'s strings' pointer array, on the main stack.
        unsafe extern "C" {
            static environ: *const *const libc::c_char;
        }
        // SAFETY: `environ` is the C library's, set before `main`; only its address is used.
        let on_main = unsafe { environ } as usize;
        let (low, high) = query_stack_bounds(on_main).unwrap();
        assert!(
            low < on_main && on_main < high,
            "{low:#x} < {on_main:#x} < {high:#x}"
        );
        if let Some(limit) = crate::native::stack_limit() {
            assert!(
                high - low <= limit,
                "{low:#x}..{high:#x} is over {limit} bytes"
            );
            assert!(high - low >= limit.min(1 << 20), "{low:#x}..{high:#x}");
        }
    }

    #[test]
    fn no_bounds_for_an_address_outside_any_mapping() {
        assert_eq!(query_stack_bounds(8), None);
    }

    #[test]
    fn bounds_contain_a_local() {
        let local = 0u8;
        let (low, high) = stack_bounds();
        let at = &local as *const u8 as usize;
        assert!(low < at && at < high, "{low:#x} < {at:#x} < {high:#x}");
    }

    #[test]
    fn one_compare_checks_alignment_and_both_bounds() {
        let word = size_of::<usize>();
        let edges = [
            0,
            word,
            2 * word,
            0x7fff_0000,
            (usize::MAX & !(word - 1)) - 2 * word,
        ];
        for &last in &edges {
            for fp in (0..=4 * word).map(|d| last.wrapping_sub(d)) {
                if !fp.is_multiple_of(word) || fp > last {
                    continue;
                }
                let room = (last - fp) / word;
                let nexts = (0..=6 * word)
                    .flat_map(|d| [fp.wrapping_add(d), fp.wrapping_sub(d), last.wrapping_add(d)])
                    .chain([0, 1, usize::MAX, usize::MAX - word + 1]);
                for next in nexts {
                    let valid = next.is_multiple_of(word) && fp < next && next <= last;
                    let expected = valid.then(|| (last - next) / word);
                    assert_eq!(
                        room_below(last, room, next),
                        expected,
                        "{last:#x} {fp:#x} {next:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn walk_stays_bounded() {
        let mut out = [ReturnAddress(0); 4];
        let n = walk(&mut out, Budget::unlimited());
        assert!(n <= 4);
        assert!(out[..n].iter().all(|a| a.0 != 0));
    }
}
