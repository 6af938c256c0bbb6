//! glibc's chunk flags of a block its `malloc` returned: the size word glibc keeps just before the
//! block holds, in its low bits, whether the block has a mapping of its own (`IS_MMAPPED`, 0x2)
//! and whether it came from an arena other than the main one (`NON_MAIN_ARENA`, 0x4). Trace mode
//! records them (`docs/trace-format.md`, `BLOCK_FLAGS`), where the blocks are glibc's.
//!
//! Whether they are is decided once, when the trace opens, off the allocation path
//! ([`note_malloc`]): the `malloc` the blocks come from must be defined by glibc's `libc.so.6`.
//! Another allocator (jemalloc linked under the name `malloc`, a program's own), or another C
//! library, keeps its own words there, and nothing is read.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

/// The blocks the doors give as [`MallocBlock`]s come from glibc's `malloc`.
static GLIBC: AtomicBool = AtomicBool::new(false);

/// `IS_MMAPPED | NON_MAIN_ARENA`.
const FLAGS: usize = 0x2 | 0x4;

/// Notes whether `malloc`, the function the doors' [`MallocBlock`]s come from, is glibc's: the
/// module that defines it is `libc.so.6` (or another `libc.so` of glibc's). `None` asks for the
/// `malloc` the program's calls resolve to. Not on the allocation path: `dladdr` may take the
/// loader's lock.
pub(crate) fn note_malloc(malloc: Option<*const c_void>) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let malloc = match malloc {
            Some(function) => function,
            // SAFETY: `dlsym` with the default handle and a NUL-terminated name only looks the
            // name up.
            None => unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()) }.cast_const(),
        };
        GLIBC.store(defined_by_glibc(malloc), Ordering::Release);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = malloc;
}

/// Whether `function` lies in glibc's C library.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn defined_by_glibc(function: *const c_void) -> bool {
    if function.is_null() {
        return false;
    }
    // SAFETY: `dladdr` only reads the loader's tables and writes `info`, a plain structure;
    // `dli_fname`, when not null, is a NUL-terminated string the loader keeps while the module
    // is loaded (the C library is never unloaded).
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(function, &mut info) == 0 || info.dli_fname.is_null() {
            return false;
        }
        let path = std::ffi::CStr::from_ptr(info.dli_fname).to_bytes();
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        name.starts_with(b"libc.so")
    }
}

/// A block the C library's `malloc` family (`malloc`, `calloc`, `realloc`, `memalign`, ...)
/// has just returned, on its way down the allocation path: whose chunk flags
/// [`MallocBlock::flags`] reads, when the trace records them and the allocator is glibc's.
/// Neither `Copy` nor `Clone`: the path takes it once, while the block is the allocator's answer
/// not yet handed to the program.
#[derive(Debug)]
pub(crate) struct MallocBlock(usize);

impl MallocBlock {
    /// No block of the C library's (another allocator's, or one whose flags are not asked for).
    pub(crate) const NONE: MallocBlock = MallocBlock(0);

    /// The block at `block`.
    ///
    /// # Safety
    ///
    /// `block` is null, or a block the C library's `malloc` family returned that stays live (not
    /// freed, not reallocated) as long as the value exists.
    #[inline(always)]
    pub(crate) unsafe fn new(block: *const u8) -> MallocBlock {
        MallocBlock(block as usize)
    }

    /// The block's flags as trace mode records them: 0 unknown (not a block of glibc's
    /// `malloc`), else 1, with `IS_MMAPPED` (2) and `NON_MAIN_ARENA` (4) as glibc set them. One
    /// load of the word before the block; nothing else.
    #[inline(always)]
    pub(crate) fn flags(self) -> u64 {
        if self.0 == 0 || !GLIBC.load(Ordering::Relaxed) {
            return 0;
        }
        // SAFETY: `new`'s caller vouched that the block is a live one of the C library's
        // allocator, and `GLIBC` that the allocator is glibc's. glibc puts every block 16 bytes
        // into its chunk (an arena's, or a mapping of its own), behind the chunk's header, whose
        // second word, `mchunk_size`, is the aligned `usize` just before the block: readable,
        // and written by glibc only while it hands the chunk out or takes it back, never while
        // the block is live. Read once, as a plain load.
        let word = unsafe { (self.0 as *const usize).sub(1).read() };
        1 | (word & FLAGS) as u64
    }
}
