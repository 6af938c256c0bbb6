//! The allocation path as the allocator's entries call it.
//!
//! In release builds, the path's own instances for this allocator ([`MemProf`](super::MemProf)
//! is its [`record::Start`]): the program's crate compiles them with its code, where
//! thread-local accesses are the cheapest and the table's functions are inlined into the path.
//!
//! In builds with debug assertions (Cargo's `dev` profile), the library's own instances, out of
//! line: the program's crate compiles whatever it instantiates with its own optimization, none in
//! a debug build, so the path's instances there stayed unoptimized even with
//! `[profile.dev.package.memprof] opt-level = 3`, and each allocation cost ten times its release
//! figure (`python3 scripts/compare.py --only debug`). Called out of line, the path is compiled
//! where the library is, with the library's optimization.

#[cfg(debug_assertions)]
use super::Doors;
use crate::header::{BlockRef, Settings};
use crate::native::MallocBlock;
use crate::record;

/// [`record::alloc`] for the allocator over `A`.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(super) fn alloc<A>(
    address: usize,
    size: usize,
    block: BlockRef,
    settings: Settings,
    malloc: MallocBlock,
) -> BlockRef {
    record::alloc::<super::MemProf<A>>(address, size, block, settings, malloc)
}

/// [`record::free`].
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(super) fn free(address: usize, block: BlockRef) -> bool {
    record::free(address, block)
}

/// [`record::realloc`] for the allocator over `A`.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(super) fn realloc<A>(
    old_address: usize,
    block: BlockRef,
    new_kind: BlockRef,
    new_size: usize,
    settings: Settings,
    realloc: impl FnOnce() -> (*mut u8, MallocBlock),
) -> Option<(*mut u8, BlockRef)> {
    record::realloc::<super::MemProf<A>>(old_address, block, new_kind, new_size, settings, realloc)
}

/// [`record::alloc`], the library's instance.
#[cfg(debug_assertions)]
#[inline(always)]
#[expect(
    clippy::extra_unused_type_parameters,
    reason = "the signature of the release builds' function"
)]
pub(super) fn alloc<A>(
    address: usize,
    size: usize,
    block: BlockRef,
    settings: Settings,
    malloc: MallocBlock,
) -> BlockRef {
    alloc_outlined(address, size, block, settings, malloc)
}

#[cfg(debug_assertions)]
#[inline(never)]
fn alloc_outlined(
    address: usize,
    size: usize,
    block: BlockRef,
    settings: Settings,
    malloc: MallocBlock,
) -> BlockRef {
    record::alloc::<Doors>(address, size, block, settings, malloc)
}

/// [`record::free`], the library's instance.
#[cfg(debug_assertions)]
#[inline(never)]
pub(super) fn free(address: usize, block: BlockRef) -> bool {
    record::free(address, block)
}

/// [`record::realloc`], the library's instance.
#[cfg(debug_assertions)]
#[inline(always)]
#[expect(
    clippy::extra_unused_type_parameters,
    reason = "the signature of the release builds' function"
)]
pub(super) fn realloc<A>(
    old_address: usize,
    block: BlockRef,
    new_kind: BlockRef,
    new_size: usize,
    settings: Settings,
    realloc: impl FnOnce() -> (*mut u8, MallocBlock),
) -> Option<(*mut u8, BlockRef)> {
    let mut realloc = Some(realloc);
    let mut call = || {
        realloc
            .take()
            .map_or((std::ptr::null_mut(), MallocBlock::NONE), |realloc| {
                realloc()
            })
    };
    realloc_outlined(old_address, block, new_kind, new_size, settings, &mut call)
}

#[cfg(debug_assertions)]
#[inline(never)]
fn realloc_outlined(
    old_address: usize,
    block: BlockRef,
    new_kind: BlockRef,
    new_size: usize,
    settings: Settings,
    realloc: &mut dyn FnMut() -> (*mut u8, MallocBlock),
) -> Option<(*mut u8, BlockRef)> {
    record::realloc::<Doors>(old_address, block, new_kind, new_size, settings, realloc)
}
