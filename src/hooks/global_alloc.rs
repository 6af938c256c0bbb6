//! [`MemProf`]: a `GlobalAlloc` that forwards to another allocator and records what passes.
//!
//! This file carries the contract: the allocator's entries, the header in front of the blocks
//! under 64 KiB, and reallocations within one kind of block. Beside it, `path` is how the entries
//! call the allocation path (the program's instances in release builds, the library's out of
//! line with debug assertions), and `cross` the reallocations across 64 KiB and the blocks of
//! strangers.

mod cross;
mod path;

use super::Doors;
use crate::config::Config;
use crate::header::{BlockRef, HEADER, Settings, is_headed, outer, read_header, write_header};
use crate::native::MallocBlock;
use crate::record;
use std::alloc::{GlobalAlloc, Layout, System};

/// The profiling allocator. Install it once, as the global allocator:
///
/// ```rust,no_run
/// #[global_allocator]
/// static GLOBAL: memprof::MemProf = memprof::MemProf::new();
/// # fn main() {}
/// ```
///
/// It wraps [`System`] by default and any other [`GlobalAlloc`] through [`MemProf::wrap`]. For
/// programs that must run in production, record a sample instead of every allocation:
///
/// ```rust,no_run
/// #[global_allocator]
/// static GLOBAL: memprof::MemProf = memprof::MemProf::new().sample_interval(512 * 1024);
/// # fn main() {}
/// ```
#[derive(Debug, Default)]
pub struct MemProf<A = System> {
    /// The allocator that does the work.
    inner: A,
    /// What the program chose; the environment may override it when the profiler starts.
    settings: Settings,
}

impl MemProf<System> {
    /// A profiler over the system allocator.
    pub const fn new() -> Self {
        let mut memprof = MemProf::wrap(System);
        // Known here, once, rather than asked of the type on every allocation.
        memprof.settings.system_malloc = cfg!(all(target_os = "linux", target_env = "gnu"));
        memprof
    }
}

impl<A> MemProf<A> {
    /// A profiler over `inner` (jemalloc, mimalloc, or any other `GlobalAlloc`).
    pub const fn wrap(inner: A) -> Self {
        MemProf {
            inner,
            settings: Settings {
                sample_interval: 0,
                track_peak: false,
                trace: None,
                dump_on_growth: 0,
                system_malloc: false,
            },
        }
    }

    /// Records on average one allocation per `bytes` allocated, chosen by a Poisson process, and
    /// makes every report an unbiased estimate; 0 records every allocation (the default).
    /// `MEMPROF_SAMPLE_INTERVAL` overrides it.
    pub const fn sample_interval(mut self, bytes: u64) -> Self {
        self.settings.sample_interval = bytes;
        self
    }

    /// Keeps, per stack, what was live when the heap was at its peak (DHAT's "at t-gmax"), and
    /// makes the peak exact, at the cost of three more atomic counters per allocation and free.
    /// `MEMPROF_PEAK` overrides it; a `.dhat.json` output turns it on.
    pub const fn track_peak(mut self, track: bool) -> Self {
        self.settings.track_peak = track;
        self
    }

    /// Records every allocation, reallocation and free into a trace at `path` (cargo feature
    /// `trace`; `%p`, `%t`, `%e` and `tcp://HOST:PORT` as for `MEMPROF_TRACE`, which overrides
    /// it). See [`crate::trace`] and `docs/trace-format.md`.
    pub const fn trace(mut self, path: &'static str) -> Self {
        self.settings.trace = Some(path);
        self
    }

    /// Writes the `MEMPROF_OUTPUT` files each time the live heap passes the previous dump's
    /// high-water mark by `bytes` (`%n` in their names numbers the dumps); 0 writes none (the
    /// default). `MEMPROF_DUMP_ON_GROWTH` overrides it; see `docs/dumps.md`.
    pub const fn dump_on_growth(mut self, bytes: u64) -> Self {
        self.settings.dump_on_growth = bytes;
        self
    }

    /// The wrapped allocator.
    pub const fn inner(&self) -> &A {
        &self.inner
    }
}

// SAFETY: a headed block (see [`is_headed`]) is the wrapped allocator's block of [`outer`] (the
// caller's alignment, `HEADER` bytes more), of which the caller gets the part past the header: a
// block of its size and alignment, which nothing else uses. The header lies in front of it, so
// only this allocator writes it. Any other block is the wrapped allocator's, unchanged. `dealloc`
// and `realloc` tell the two apart by the caller's layout, as `alloc` did, and give `inner` back
// the address and layout it handed out. So `MemProf<A>` upholds `GlobalAlloc`'s contract exactly
// when `A` does. The recording calls around them never touch the blocks' memory, never unwind
// (they do not panic) and never allocate outside the reentrancy guard.
unsafe impl<A: GlobalAlloc> GlobalAlloc for MemProf<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `allocate` asks for valid layouts of a non-zero size.
        let ptr = unsafe { self.allocate(layout, |layout| self.inner.alloc(layout)) };
        count_own(ptr, layout.size() as i64);
        ptr
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `allocate` asks for valid layouts of a non-zero size.
        let ptr = unsafe { self.allocate(layout, |layout| self.inner.alloc_zeroed(layout)) };
        count_own(ptr, layout.size() as i64);
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count_own(ptr, -(layout.size() as i64));
        if !is_headed(layout, &self.settings) {
            let _ = path::free(ptr as usize, BlockRef::Headless);
            // SAFETY: the caller gives the block up: nothing reads it again before `inner` has it.
            unsafe { release_table_memory(ptr, layout.size()) };
            // SAFETY: `ptr` was allocated by `inner` with `layout`, as `alloc` forwarded it.
            return unsafe { self.inner.dealloc(ptr, layout) };
        }
        // SAFETY: `ptr` is a live headed block of `layout` the caller gives up (or a stranger).
        let headed = unsafe { read_header(ptr, layout) };
        if !headed.is_some_and(|headed| path::free(ptr as usize, BlockRef::Headed(headed))) {
            // SAFETY: as for `dealloc`: not this allocator's block, but the wrapped one's.
            return unsafe { self.free_stranger(ptr, layout) };
        }
        // SAFETY: as above; the header, before `ptr`, is left alone.
        unsafe { release_table_memory(ptr, layout.size()) };
        // SAFETY: `ptr` is `HEADER` bytes past the block `inner` handed out for `outer`.
        unsafe {
            let outer = outer(layout.size(), layout.align());
            self.inner.dealloc(ptr.sub(HEADER), outer)
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `realloc`'s contract: the new size, rounded up to the alignment, fits `isize`.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new_ptr = match (
            is_headed(layout, &self.settings),
            is_headed(new_layout, &self.settings),
        ) {
            (false, false) => {
                let reallocated = path::realloc::<A>(
                    ptr as usize,
                    BlockRef::Headless,
                    BlockRef::Headless,
                    new_size,
                    self.settings,
                    || {
                        // SAFETY: the caller's arguments meet `realloc`'s requirements and `ptr`
                        // came from `inner` through this allocator; the new block is `inner`'s,
                        // the caller's once this returns.
                        unsafe {
                            let new = self.inner.realloc(ptr, layout, new_size);
                            (new, self.malloc_block(new))
                        }
                    },
                );
                // A block without a header is never taken for a stranger's.
                match reallocated {
                    Some((new_ptr, _)) => new_ptr,
                    None => std::ptr::null_mut(),
                }
            }
            // SAFETY: a live headed block of `layout`, and the new layout.
            (true, true) => unsafe { self.realloc_headed(ptr, layout, new_size) },
            // SAFETY: a live headed block of `layout` (or a stranger), and the new layout.
            (true, false) => unsafe { self.realloc_to_headless(ptr, layout, new_layout) },
            // SAFETY: a live headless block of `layout`, and the new layout.
            (false, true) => unsafe { self.realloc_to_headed(ptr, layout, new_layout) },
        };
        count_own(new_ptr, new_size as i64 - layout.size() as i64);
        new_ptr
    }
}

/// Counts a change of memprof's own memory (`MemoryBreakdown::memprof_own`): what is allocated
/// and freed inside the reentrancy guard. One thread-local read for the program's blocks.
#[inline(always)]
fn count_own(ptr: *mut u8, bytes: i64) {
    if !ptr.is_null() && crate::guard::inside() {
        crate::memory::own_changed(bytes);
    }
}

/// The doors' start ([`Doors`]), under the allocator's own type: the allocation path is generic
/// over it, so its instances for this allocator are compiled with the program's own code, as
/// `MemProf<A>`'s are. There the thread-local accesses on the path are the cheapest the program
/// can make, and the table's functions the path calls are inlined into it; instances over
/// [`Doors`], in the library's code, cost the path several percent more instructions.
impl<A> record::Start for MemProf<A> {
    #[inline]
    fn start(config: &'static Config, settings: Settings) {
        <Doors as record::Start>::start(config, settings);
    }
}

impl<A: GlobalAlloc> MemProf<A> {
    /// A new block of `layout`, which `get` takes from the wrapped allocator: as it comes for a
    /// headless one, with room for the header in front for a headed one.
    ///
    /// # Safety
    ///
    /// `layout` has a non-zero size; `get` returns null or a live block of the layout it is
    /// given, from `inner`.
    #[inline(always)]
    unsafe fn allocate(&self, layout: Layout, get: impl FnOnce(Layout) -> *mut u8) -> *mut u8 {
        if !is_headed(layout, &self.settings) {
            let ptr = get(layout);
            if !ptr.is_null() {
                // SAFETY: `inner`'s new block, the program's only once this returns.
                let malloc = unsafe { self.malloc_block(ptr) };
                let _ = path::alloc::<A>(
                    ptr as usize,
                    layout.size(),
                    BlockRef::Headless,
                    self.settings,
                    malloc,
                );
            }
            return ptr;
        }
        let base = get(outer(layout.size(), layout.align()));
        // SAFETY: `base` is null or a block of the outer layout from `inner`.
        unsafe { self.headed(base, layout) }
    }

    /// `realloc` of a headed block into a headed block.
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of `layout` (headed, or a stranger), and both `layout` and `new_size`
    /// are headed.
    #[inline(always)]
    unsafe fn realloc_headed(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` is a live block of `layout`.
        let old = unsafe { read_header(ptr, layout) };
        // A `match`, not a closure: one frame fewer for a walk to pass in unoptimized builds.
        let reallocated = match old {
            None => None,
            Some(old) => {
                path::realloc::<A>(
                    ptr as usize,
                    BlockRef::Headed(old),
                    BlockRef::NEW_HEADED,
                    new_size,
                    self.settings,
                    || {
                        // SAFETY: `ptr` is `HEADER` bytes past the block `inner` handed out for
                        // the outer layout of `layout`; the new outer size is valid (see
                        // `outer`). The header moves with the block's contents.
                        unsafe {
                            let outer = outer(layout.size(), layout.align());
                            let base =
                                self.inner
                                    .realloc(ptr.sub(HEADER), outer, new_size + HEADER);
                            if base.is_null() {
                                (base, MallocBlock::NONE)
                            } else {
                                (base.add(HEADER), self.malloc_block(base))
                            }
                        }
                    },
                )
            }
        };
        let Some((new_ptr, kept)) = reallocated else {
            // SAFETY: not this allocator's block but the wrapped one's, moved into a headed one.
            return unsafe {
                let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
                self.moved(ptr, layout, new_layout, |ptr| {
                    self.free_stranger(ptr, layout)
                })
            };
        };
        if new_ptr.is_null() {
            // SAFETY: the old block is still the caller's, its header in front of it.
            unsafe { write_header(ptr, kept.header(), layout.size()) };
        } else {
            // SAFETY: the new block, its header's room in front of it.
            unsafe { write_header(new_ptr, kept.header(), new_size) };
        }
        new_ptr
    }

    /// `block`, a new block of `inner` (null, or live), as the C library's allocator returned it
    /// when `inner` is `System` on Linux with glibc ([`Settings::system_malloc`], set by
    /// [`MemProf::new`]), else [`MallocBlock::NONE`]: nothing is read here.
    ///
    /// # Safety
    ///
    /// `block` is null or a live block of `inner`, not handed to the program yet, and the value
    /// is given to the allocation path before it is.
    #[inline(always)]
    unsafe fn malloc_block(&self, block: *mut u8) -> MallocBlock {
        if self.settings.system_malloc {
            // SAFETY: `System` on Linux with glibc hands out the C library's `malloc`,
            // `calloc`, `realloc` and `posix_memalign` blocks as they come; live, the caller says.
            unsafe { MallocBlock::new(block) }
        } else {
            MallocBlock::NONE
        }
    }

    /// The block the caller gets from `base`, a block of the outer layout of `layout` from the
    /// wrapped allocator, or null: past the room for the header, which holds what recording it
    /// gave.
    ///
    /// # Safety
    ///
    /// `base` is null or a live block of `outer(layout.size(), layout.align())` from `inner`.
    #[inline(always)]
    unsafe fn headed(&self, base: *mut u8, layout: Layout) -> *mut u8 {
        if base.is_null() {
            return base;
        }
        // SAFETY: the block is `HEADER` bytes larger than the caller's size.
        let ptr = unsafe { base.add(HEADER) };
        // SAFETY: `base` is `inner`'s new block, the caller's only once this returns.
        let malloc = unsafe { self.malloc_block(base) };
        let recorded = path::alloc::<A>(
            ptr as usize,
            layout.size(),
            BlockRef::NEW_HEADED,
            self.settings,
            malloc,
        );
        // SAFETY: the header's room lies inside the block, before `ptr`.
        unsafe { write_header(ptr, recorded.header(), layout.size()) };
        ptr
    }
}

/// The smallest block of the table's own memory whose pages are given back to the system when
/// it is freed: three pages of 4 KiB, so that at least one whole page lies inside.
const RELEASE_MIN: usize = 3 << 12;

/// Gives the whole pages inside a block of the table's own memory back to the system, when the
/// block being freed is the table's (the old array of a side table that grew or shrank, with a
/// header when under 64 KiB, which stays: only whole pages after it go back).
///
/// The wrapped allocator keeps a freed block for later, and the table's old arrays are of sizes
/// the program's own blocks may never ask for again: held resident, they would double the table's
/// memory. The pages read as zeros if the allocator hands them out again; an allocator keeps its
/// own bookkeeping in the block only from the moment it is freed, after this.
///
/// # Safety
///
/// `ptr` must be a live block of `size` bytes from this allocator that the caller is about to
/// free, and nothing may read its contents in between.
#[inline(always)]
unsafe fn release_table_memory(ptr: *mut u8, size: usize) {
    if size < RELEASE_MIN || !crate::table::holding_table() {
        return;
    }
    let page = 1usize << 12;
    let start = (ptr as usize).next_multiple_of(page);
    let end = (ptr as usize + size) & !(page - 1);
    if end > start {
        // SAFETY: `[start, end)` lies inside the block, which is the caller's to give up; on a
        // private anonymous mapping the pages come back as zeros, on any other the call fails or
        // leaves contents that nothing reads. An error (pages larger than 4 KiB, say) only means
        // the memory stays resident.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// Bytes the test allocator keeps in front of its blocks, which a test may write.
    const PAD: usize = 32;

    /// An allocator with room of its own in front of every block, which remembers the last block
    /// it freed.
    #[derive(Default)]
    struct Padded {
        freed: AtomicUsize,
    }

    fn padded(layout: Layout) -> Layout {
        Layout::from_size_align(layout.size() + PAD, layout.align().max(PAD)).unwrap()
    }

    // SAFETY: every block is `System`'s block of the padded layout, handed out `PAD` bytes in and
    // taken back from there with the same layout.
    unsafe impl GlobalAlloc for Padded {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: a valid layout of a non-zero size; the block is `PAD` bytes longer.
            unsafe {
                let base = System.alloc(padded(layout));
                if base.is_null() { base } else { base.add(PAD) }
            }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            self.freed.store(ptr as usize, SeqCst);
            // SAFETY: `ptr` came from `alloc` with `layout`.
            unsafe { System.dealloc(ptr.sub(PAD), padded(layout)) }
        }

        /// Fails, leaving the block as it was, for sizes of [`FAILS`] and more.
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            if new_size >= FAILS {
                return std::ptr::null_mut();
            }
            // SAFETY: the caller's arguments, as `GlobalAlloc::realloc` requires them.
            unsafe {
                let new = self.alloc(Layout::from_size_align_unchecked(new_size, layout.align()));
                if !new.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                new
            }
        }
    }

    /// Sizes the test allocator's `realloc` fails for (still under the headed blocks' limit).
    const FAILS: usize = 1000;

    #[test]
    fn a_failed_realloc_leaves_the_block_recorded_with_its_tag() {
        let memprof = MemProf::wrap(Padded::default());
        let layout = Layout::from_size_align(40, 8).unwrap();
        let table = &crate::table::TABLE;
        // SAFETY: the block is memprof's, freed once with its layout; the failed realloc leaves
        // it the caller's, as it was.
        unsafe {
            let ptr = memprof.alloc(layout);
            let header = read_header(ptr, layout).expect("a block of memprof's has its header");
            assert!(header.is_recorded(), "this test needs recording on");
            let tagged =
                crate::guard::untracked(|| table.set_slot_tag(header.slot, ptr as usize, 7));
            assert_eq!(tagged, Some((header.stack, 0)));
            assert!(memprof.realloc(ptr, layout, FAILS).is_null());
            let back = read_header(ptr, layout).expect("the header is written again");
            assert!(back.is_recorded());
            let snapshot = crate::snapshot::Snapshot::of(table, crate::snapshot::Which::Live);
            let block = snapshot.blocks.iter().find(|b| b.address == ptr as usize);
            assert_eq!(block.map(|b| (b.size, b.tag)), Some((40, 7)));
            memprof.dealloc(ptr, layout);
        }
    }

    #[test]
    fn a_stranger_whose_header_looks_like_ours_goes_back_as_it_came() {
        let memprof = MemProf::wrap(Padded::default());
        let layout = Layout::from_size_align(40, 8).unwrap();
        // SAFETY: every block is freed once, with its layout, by the allocator that made it or by
        // `memprof`, which must hand a stranger to its wrapped allocator; the bytes written in
        // front of the stranger are the wrapped allocator's padding.
        unsafe {
            let ours = memprof.alloc(layout);
            let header = read_header(ours, layout).expect("a block of memprof's has its header");
            assert!(header.is_recorded(), "this test needs recording on");
            // Blocks of the wrapped allocator, in front of which lies exactly what memprof would
            // write for a block at their address, naming the slot of a live block.
            let strangers = [memprof.inner().alloc(layout), memprof.inner().alloc(layout)];
            for stranger in strangers {
                write_header(stranger, header, layout.size());
            }
            memprof.dealloc(strangers[0], layout);
            assert_eq!(memprof.inner().freed.load(SeqCst), strangers[0] as usize);
            let moved = memprof.realloc(strangers[1], layout, 80);
            assert_eq!(memprof.inner().freed.load(SeqCst), strangers[1] as usize);
            assert_ne!(moved, strangers[1]);
            // The live block kept its slot, and leaves it as usual.
            assert_eq!(read_header(ours, layout), Some(header));
            memprof.dealloc(ours, layout);
            assert_eq!(memprof.inner().freed.load(SeqCst), ours as usize - HEADER);
            let moved_layout = Layout::from_size_align(80, 8).unwrap();
            assert!(read_header(moved, moved_layout).is_some());
            memprof.dealloc(moved, moved_layout);
        }
    }
}
