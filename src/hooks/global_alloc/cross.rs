//! The allocator's rarer paths, beside the `GlobalAlloc` contract its parent module carries: the
//! reallocations across 64 KiB, from a block with a header into one without and back, each one
//! reallocation for the table carried out by a new block, the contents copied and the old block
//! freed; and the strangers, blocks of the wrapped allocator that the program hands to this one
//! (which `GlobalAlloc` forbids but programs do): a stranger freed goes back to the wrapped
//! allocator as it came, and a stranger reallocated moves into a new block of this one.
//!
//! Generic over the wrapped allocator and inlined as the entries are (`#[inline(always)]`), but
//! for the strangers' paths, which are cold and out of line (`#[cold]`, `#[inline(never)]`).

use super::{MemProf, path, release_table_memory};
use crate::header::{BlockRef, HEADER, outer, read_header, write_header};
use crate::native::MallocBlock;
use std::alloc::{GlobalAlloc, Layout};

impl<A: GlobalAlloc> MemProf<A> {
    /// `realloc` of a headed block into a headless one (across 64 KiB): one reallocation, as
    /// for blocks of one kind, carried out by a new headless block, the contents copied and the
    /// old block freed.
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of `layout` (headed, or a stranger); `layout` is headed and
    /// `new_layout` valid and headless.
    #[inline(always)]
    pub(super) unsafe fn realloc_to_headless(
        &self,
        ptr: *mut u8,
        layout: Layout,
        new_layout: Layout,
    ) -> *mut u8 {
        // SAFETY: `ptr` is a live block of `layout`.
        let old = unsafe { read_header(ptr, layout) };
        // A `match`, not a closure: one frame fewer for a walk to pass in unoptimized builds.
        let reallocated = match old {
            None => None,
            Some(old) => path::realloc::<A>(
                ptr as usize,
                BlockRef::Headed(old),
                BlockRef::Headless,
                new_layout.size(),
                self.settings,
                || {
                    // SAFETY: `new_layout` is valid and not empty; `ptr` is `HEADER` bytes past
                    // the block `inner` handed out for the outer layout of `layout`, freed once
                    // its contents are copied into the new block.
                    unsafe {
                        let new = self.inner.alloc(new_layout);
                        if !new.is_null() {
                            std::ptr::copy_nonoverlapping(ptr, new, layout.size());
                            release_table_memory(ptr, layout.size());
                            let outer = outer(layout.size(), layout.align());
                            self.inner.dealloc(ptr.sub(HEADER), outer);
                        }
                        (new, self.malloc_block(new))
                    }
                },
            ),
        };
        match reallocated {
            Some((new_ptr, kept)) => {
                if new_ptr.is_null() {
                    // SAFETY: the old block is still the caller's, its header in front of it.
                    unsafe { write_header(ptr, kept.header(), layout.size()) };
                }
                new_ptr
            }
            // SAFETY: not this allocator's block but the wrapped one's, moved into a new block.
            None => unsafe {
                self.moved(ptr, layout, new_layout, |ptr| {
                    self.free_stranger(ptr, layout)
                })
            },
        }
    }

    /// `realloc` of a headless block into a headed one (across 64 KiB): one reallocation, as for
    /// blocks of one kind, carried out by a new headed block, the contents copied and the old
    /// block freed.
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of `layout` from `inner`; `layout` is headless and `new_layout`
    /// valid and headed.
    #[inline(always)]
    pub(super) unsafe fn realloc_to_headed(
        &self,
        ptr: *mut u8,
        layout: Layout,
        new_layout: Layout,
    ) -> *mut u8 {
        let new_size = new_layout.size();
        let reallocated = path::realloc::<A>(
            ptr as usize,
            BlockRef::Headless,
            BlockRef::NEW_HEADED,
            new_size,
            self.settings,
            || {
                // SAFETY: the outer layout of `new_layout` is valid (see `outer`); the caller
                // gets the block past the header's room; `ptr`, a block of `layout` from
                // `inner`, is freed once its contents are copied into the new block.
                unsafe {
                    let base = self.inner.alloc(outer(new_size, new_layout.align()));
                    if base.is_null() {
                        return (base, MallocBlock::NONE);
                    }
                    let new = base.add(HEADER);
                    std::ptr::copy_nonoverlapping(ptr, new, new_size);
                    release_table_memory(ptr, layout.size());
                    self.inner.dealloc(ptr, layout);
                    (new, self.malloc_block(base))
                }
            },
        );
        // A block without a header is never taken for a stranger's.
        let Some((new_ptr, kept)) = reallocated else {
            return std::ptr::null_mut();
        };
        if !new_ptr.is_null() {
            // SAFETY: the new block, its header's room in front of it.
            unsafe { write_header(new_ptr, kept.header(), new_size) };
        }
        new_ptr
    }

    /// Reallocates through a new block of `new_layout`: the contents copied, then the old block
    /// freed with `free`: a `realloc` that moves another allocator's block into this one's.
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of `layout` that `free` frees; `new_layout` is valid.
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn moved(
        &self,
        ptr: *mut u8,
        layout: Layout,
        new_layout: Layout,
        free: impl FnOnce(*mut u8),
    ) -> *mut u8 {
        // SAFETY: a valid layout of a non-zero size (a `realloc` to 0 bytes is not allowed).
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live, distinct, and at least this long.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_layout.size()))
            };
            free(ptr);
        }
        new
    }

    /// Frees a block without this allocator's header: one the program got from the wrapped
    /// allocator directly (or from C's `malloc`, when that is the wrapped allocator) and hands to
    /// this one, which `GlobalAlloc` forbids but programs do. It goes back to the wrapped
    /// allocator as it came, after the side tables forget it (the C ABI may have reported it).
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of `layout` from the wrapped allocator.
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn free_stranger(&self, ptr: *mut u8, layout: Layout) {
        let _ = path::free(ptr as usize, BlockRef::Headless);
        // SAFETY: the caller's block, from `inner`, with its layout.
        unsafe { self.inner.dealloc(ptr, layout) }
    }
}
