//! The block header: 16 bytes in front of every block of the global allocator under 64 KiB,
//! which hold what its free needs (its size, stack and slot in the table), and the once-only
//! decision whether blocks carry one at all.
//!
//! A shared building block: the global allocator writes and reads headers, the allocation path
//! hands what they hold to the table and back ([`BlockRef`]), and the explicit type tags find a
//! block's slot through its header ([`header_slot`]). It imports no stage, so that none of them
//! has to reach up into the doors for it.
//!
//! Whether blocks carry a header is decided at the process's first allocation, from the
//! environment read without allocating (the one raw read of it on the allocation path, before the
//! configuration can be read) and the allocator's own [`Settings`]: only when every allocation is
//! recorded. Under sampling, or with recording off, few blocks or none are in the table, and the
//! side tables hold those cheaply.

use crate::address::StackId;
use std::alloc::Layout;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// The settings a program gives its [`MemProf`](crate::MemProf) in code: the header depends on
/// the sampling interval, the allocation path on all of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Mean bytes between recorded allocations; 0 records every one (`MEMPROF_SAMPLE_INTERVAL`).
    pub sample_interval: u64,
    /// Whether the live heap per stack at the peak is kept (`MEMPROF_PEAK`).
    pub track_peak: bool,
    /// Where the trace of every event goes (`MEMPROF_TRACE`); `None` for no trace.
    pub trace: Option<&'static str>,
    /// Live-heap growth between dumps; 0 for none (`MEMPROF_DUMP_ON_GROWTH`).
    pub dump_on_growth: u64,
    /// The wrapped allocator is `std::alloc::System` on Linux with glibc, where its blocks are
    /// the C library's `malloc`'s: trace mode reads their chunk flags when that `malloc` is
    /// glibc's (`native::note_malloc`).
    pub system_malloc: bool,
}

/// The slot number a header holds for a block that is not recorded: it has no slot. (A whole
/// header of such a block is [`Headed::UNRECORDED`].)
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// What a header holds: what the free of a recorded block needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Headed {
    /// The block's slot, or [`NO_SLOT`].
    pub slot: u32,
    /// The block's stack.
    pub stack: StackId,
    /// The block's size.
    pub size: u64,
}

impl Headed {
    /// A block that is not recorded.
    pub(crate) const UNRECORDED: Headed = Headed {
        slot: NO_SLOT,
        stack: StackId(0),
        size: 0,
    };

    /// Whether the block is recorded.
    #[inline]
    pub(crate) fn is_recorded(&self) -> bool {
        self.slot != NO_SLOT
    }
}

/// A block as the allocation path hands it to the table, and as the table hands it back: one
/// without a header, which the side tables find by its address, or one with a header and what it
/// holds. The table matches on it once, so that there is one alloc, one free and one realloc
/// path for both kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockRef {
    /// A block without a header: the C ABI's, a large or very aligned one, or any under sampling.
    Headless,
    /// A block of the global allocator with a header, and what the header holds
    /// ([`Headed::UNRECORDED`] for a block not recorded, or not recorded yet).
    Headed(Headed),
}

impl BlockRef {
    /// A new block with a header, before the table recorded it.
    pub(crate) const NEW_HEADED: BlockRef = BlockRef::Headed(Headed::UNRECORDED);

    /// The same kind of block, not recorded.
    #[inline(always)]
    pub(crate) fn unrecorded(self) -> BlockRef {
        match self {
            BlockRef::Headless => BlockRef::Headless,
            BlockRef::Headed(_) => BlockRef::NEW_HEADED,
        }
    }

    /// What the block's header must hold ([`Headed::UNRECORDED`] for a block without one).
    #[inline(always)]
    pub(crate) fn header(self) -> Headed {
        match self {
            BlockRef::Headless => Headed::UNRECORDED,
            BlockRef::Headed(headed) => headed,
        }
    }
}

/// Blocks of this size or more have no header: a few of them cost the side tables little time,
/// and a header could cost them a page (a block the size of a multiple of pages, mapped on its
/// own, would take one more page for it).
const HEADED_MAX: usize = 64 << 10;

/// Whether blocks of `layout` carry a header: when the profiler records every allocation (see
/// [`headers`]), blocks under [`HEADED_MAX`] whose alignment the header keeps (more would cost the
/// alignment in front of every block).
#[inline(always)]
pub(crate) fn is_headed(layout: Layout, settings: &Settings) -> bool {
    layout.size() < HEADED_MAX && layout.align() <= HEADER && headers(settings)
}

/// [`HEADERS`] before the first allocation decides it.
const UNDECIDED: u8 = 0;
/// Blocks carry headers.
const HEADED: u8 = 1;
/// No block carries a header.
const HEADLESS: u8 = 2;

/// Whether blocks carry headers, for the whole life of the process: decided at its first
/// allocation, before any block could need to know.
static HEADERS: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Whether blocks carry headers: only when every allocation is recorded. Under sampling, or with
/// recording off, few blocks or none are in the table: the side tables hold those cheaply, and a
/// header would only make every block larger (and glibc slower with it).
#[inline(always)]
fn headers(settings: &Settings) -> bool {
    match HEADERS.load(Relaxed) {
        HEADED => true,
        HEADLESS => false,
        _ => decide_headers(settings),
    }
}

/// Decides [`HEADERS`] from the environment, read without allocating (the configuration is read
/// later, when recording starts, and allocates), and the allocator's own settings. Every thread
/// that gets here decides the same; the first to store its answer sets it.
#[cold]
#[inline(never)]
fn decide_headers(settings: &Settings) -> bool {
    let every = with_raw_env(c"MEMPROF_SAMPLE_INTERVAL", |interval| {
        with_raw_env(c"MEMPROF_ENABLED", |enabled| {
            crate::config::records_every_block(interval, enabled, settings.sample_interval)
        })
    });
    let decided = if every { HEADED } else { HEADLESS };
    match HEADERS.compare_exchange(UNDECIDED, decided, Relaxed, Relaxed) {
        Ok(_) => every,
        Err(current) => current == HEADED,
    }
}

/// Calls `read` with the environment variable `name` as text, read without allocating; `None`
/// when unset or not UTF-8.
fn with_raw_env<R>(name: &std::ffi::CStr, read: impl FnOnce(Option<&str>) -> R) -> R {
    // SAFETY: `name` is NUL-terminated. The value stays as it is unless another thread changes
    // the environment meanwhile, which a program seldom does before its first allocation; it is
    // only lent to `read`, and never kept.
    let value = unsafe {
        let value = libc::getenv(name.as_ptr());
        (!value.is_null()).then(|| std::ffi::CStr::from_ptr(value))
    };
    read(value.and_then(|value| value.to_str().ok()))
}

/// The layout asked of the wrapped allocator for a headed block of `size` bytes aligned to
/// `align`: valid, since both are small (see [`is_headed`]).
#[inline(always)]
pub(crate) fn outer(size: usize, align: usize) -> Layout {
    debug_assert!(size < HEADED_MAX && align <= HEADER);
    // SAFETY: `align` is a power of two (the caller's layout's) and `size + HEADER` is far below
    // `isize::MAX`.
    unsafe { Layout::from_size_align_unchecked(size + HEADER, align) }
}

/// Bytes of the header, written just before the block the caller gets.
pub(crate) const HEADER: usize = std::mem::size_of::<Header>();

/// What the allocator keeps in front of every block: what freeing it needs.
#[repr(C)]
#[derive(Clone, Copy)]
struct Header {
    /// The block's size in the low [`SIZE_BITS`], a hash of its address above (see [`check`]).
    size: u64,
    stack: u32,
    slot: u32,
}

/// Bits of [`Header::size`] that hold the size: more than any block of a 64-bit address space.
const SIZE_BITS: u32 = 48;

/// The size field of the header of a block of `size` bytes at `ptr`. The bits above the size
/// hold a hash of the address, so that a free can tell a block with this allocator's header
/// (whose field holds exactly the size the caller gives again) from one without: the 8 bytes
/// before a block of another allocator hold that allocator's own data or the program's, which
/// match both the size and the hash by chance once in 2^16 times at worst, and the size alone
/// seldom. The slot number is checked next: a recorded block's slot holds its address
/// (the table checks it before it takes a block out); a block not recorded has no slot, and its
/// stack field holds a second check instead ([`unrecorded_check`]).
#[inline(always)]
fn check(ptr: *mut u8, size: usize) -> u64 {
    let hash = (ptr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> SIZE_BITS;
    (hash << SIZE_BITS) | (size as u64 & ((1 << SIZE_BITS) - 1))
}

/// What the header in front of `ptr`, a block of `layout`, holds; `None` when the block has no
/// header of this allocator's (see [`check`]).
///
/// # Safety
///
/// `ptr` is a live block of `layout`, from this allocator or the wrapped one, so that at least
/// `HEADER` readable bytes precede it (the allocator's own data, for the wrapped one's).
#[inline(always)]
pub(crate) unsafe fn read_header(ptr: *mut u8, layout: Layout) -> Option<Headed> {
    // SAFETY: the caller's block is preceded by its header, or by the wrapped allocator's data;
    // read unaligned, since a wrapped allocator may align a block only as asked.
    let header = unsafe { ptr.sub(HEADER).cast::<Header>().read_unaligned() };
    if header.size != check(ptr, layout.size()) {
        return None;
    }
    if header.slot == NO_SLOT {
        // Nothing in the table vouches for a block not recorded: its stack field must hold the
        // second check, which the "not recorded" mark next to it never matches by itself.
        return (header.stack == unrecorded_check(ptr)).then_some(Headed::UNRECORDED);
    }
    Some(Headed {
        slot: header.slot,
        stack: StackId(header.stack),
        size: layout.size() as u64,
    })
}

/// What the stack field of the header of a block not recorded holds: a second hash of its
/// address, independent of [`check`]'s, and never `u32::MAX` (it is even), so that bytes
/// `[size][u64::MAX]` in front of another allocator's block (a size and an in-use mark) never
/// pass for a header of a block not recorded, and other bytes pass both checks once in 2^47
/// times at worst. A recorded block is vouched for by its slot instead (see [`check`]).
#[inline(always)]
fn unrecorded_check(ptr: *mut u8) -> u32 {
    ((ptr as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F) >> 32) as u32 & !1
}

/// Writes the header in front of `ptr`, a block of `size` bytes.
///
/// # Safety
///
/// `ptr` is a live block this allocator handed out (or is handing out).
#[inline(always)]
pub(crate) unsafe fn write_header(ptr: *mut u8, headed: Headed, size: usize) {
    let stack = match headed.is_recorded() {
        true => headed.stack.0,
        false => unrecorded_check(ptr),
    };
    let header = Header {
        size: check(ptr, size),
        stack,
        slot: headed.slot,
    };
    // SAFETY: the header's room lies in the `HEADER` bytes before the block (unaligned when the
    // wrapped allocator aligns a block only as asked).
    unsafe { ptr.sub(HEADER).cast::<Header>().write_unaligned(header) }
}

/// The slot a block of the global allocator at `address` says it has, when `address` may be such
/// a block: a candidate the caller checks against the slot (which holds the address of its block
/// while it is live), since any memory may be passed here.
pub(crate) fn header_slot(address: usize) -> Option<u32> {
    const PAGE: usize = 4096;
    if HEADERS.load(Relaxed) != HEADED || !address.is_multiple_of(HEADER) || address < PAGE {
        return None;
    }
    let at = address - HEADER;
    let mut header = Header {
        size: 0,
        stack: 0,
        slot: 0,
    };
    if address % PAGE >= HEADER {
        // SAFETY: the header's place is on the same page as `address`, which the caller holds a
        // value at, so it is mapped and readable; a volatile read of plain integers, whatever
        // they hold, is checked against the slot before anything trusts it.
        header = unsafe { std::ptr::read_volatile(at as *const Header) };
    } else {
        // The place may lie on another page, which may not be mapped: the kernel reads it.
        let local = libc::iovec {
            iov_base: (&raw mut header).cast(),
            iov_len: HEADER,
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: HEADER,
        };
        // SAFETY: `local` is this function's own header, `remote` is only read by the kernel,
        // which fails the call rather than fault when it is not mapped.
        let read = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if read != HEADER as isize {
            return None;
        }
    }
    Some(header.slot)
}
