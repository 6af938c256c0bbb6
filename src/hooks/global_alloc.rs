//! [`MemProf`]: a `GlobalAlloc` that forwards to another allocator and records what passes.

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

/// The settings a program gives its [`MemProf`] in code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Mean bytes between recorded allocations; 0 records every one (`MEMPROF_SAMPLE_INTERVAL`).
    pub sample_interval: u64,
    /// Whether the live heap per stack at the peak is kept (`MEMPROF_PEAK`).
    pub track_peak: bool,
    /// Where the trace of every event goes (`MEMPROF_TRACE`); `None` for no trace.
    pub trace: Option<&'static str>,
}

impl MemProf<System> {
    /// A profiler over the system allocator.
    pub const fn new() -> Self {
        MemProf::wrap(System)
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

    /// The wrapped allocator.
    pub const fn inner(&self) -> &A {
        &self.inner
    }
}

// SAFETY: every method forwards to the wrapped allocator with the caller's own arguments and
// returns its result unchanged, so `MemProf<A>` upholds `GlobalAlloc`'s contract exactly when `A`
// does. The recording calls around them never touch the blocks' memory, never unwind (they do not
// panic) and never allocate outside the reentrancy guard.
unsafe impl<A: GlobalAlloc> GlobalAlloc for MemProf<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout, which meets `alloc`'s requirements.
        let ptr = unsafe { self.inner.alloc(layout) };
        if !ptr.is_null() {
            super::record_alloc(ptr as usize, layout.size(), self.settings);
        }
        ptr
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout, which meets `alloc_zeroed`'s requirements.
        let ptr = unsafe { self.inner.alloc_zeroed(layout) };
        if !ptr.is_null() {
            super::record_alloc(ptr as usize, layout.size(), self.settings);
        }
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        super::record_free(ptr as usize);
        if layout.size() >= RELEASE_MIN {
            // SAFETY: the caller gives the block up: nothing reads it again before `inner` has it.
            unsafe { release_table_memory(ptr, layout.size()) };
        }
        // SAFETY: `ptr` was allocated by this allocator, hence by `inner`, with `layout`.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        super::record_realloc(ptr as usize, new_size, self.settings, || {
            // SAFETY: the caller's arguments meet `realloc`'s requirements and `ptr` came from
            // `inner` through this allocator.
            unsafe { self.inner.realloc(ptr, layout, new_size) }
        })
    }
}

/// The smallest block of the table's own memory whose pages are given back to the system when
/// it is freed: three pages of 4 KiB, so that at least one whole page lies inside.
const RELEASE_MIN: usize = 3 << 12;

/// Gives the whole pages inside a block of the table's own memory back to the system, when the
/// block being freed is the table's (the old array of a side table that grew or shrank).
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
#[inline]
unsafe fn release_table_memory(ptr: *mut u8, size: usize) {
    if !crate::table::holding_table() {
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
