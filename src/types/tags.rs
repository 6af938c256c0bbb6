//! Explicit tags: the user names a block's type where inference cannot see it.
//!
//! [`tag`], [`tagged`], [`tag_block`] and [`tag_block_as`] record the type of a live block in the
//! table, under a small numbered registry of names; the registry also counts, per tag and
//! allocating stack, the blocks tagged over the whole run, for the reports that tally types.

#![forbid(unsafe_code)]

use crate::address::StackId;
use crate::guard::untracked;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};

/// Type names given to [`tag`], by tag; tag `i` is `names[i - 1]` (0 means unknown).
#[derive(Default)]
struct Registry {
    /// Names by tag − 1.
    names: Vec<&'static str>,
    /// Tags by name.
    tags: HashMap<&'static str, u32>,
    /// Blocks tagged, by tag and by the stack that allocated them, over the whole run.
    tagged: HashMap<(u32, StackId), u64>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The registry's lock, for the forking thread to hold across `fork` (dropping the result lets it
/// go).
pub(crate) fn lock_for_fork() -> impl Sized + 'static {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut slot = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
    f(slot.get_or_insert_with(Registry::default))
}

/// A value that owns one heap block whose type it can name.
pub trait HeapValue {
    /// Where the block holding the value's data starts, when it has one.
    fn heap_block(&self) -> Option<usize>;
    /// The type its block is reported under, as inference would name it.
    fn heap_type_name(&self) -> &'static str;
}

impl<T: ?Sized> HeapValue for Box<T> {
    fn heap_block(&self) -> Option<usize> {
        (std::mem::size_of_val::<T>(self) != 0).then(|| (&**self as *const T).cast::<u8>() as usize)
    }
    fn heap_type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }
}

impl<T> HeapValue for Vec<T> {
    fn heap_block(&self) -> Option<usize> {
        (self.capacity() != 0 && std::mem::size_of::<T>() != 0).then_some(self.as_ptr() as usize)
    }
    fn heap_type_name(&self) -> &'static str {
        std::any::type_name::<[T]>()
    }
}

impl HeapValue for String {
    fn heap_block(&self) -> Option<usize> {
        (self.capacity() != 0).then_some(self.as_ptr() as usize)
    }
    fn heap_type_name(&self) -> &'static str {
        std::any::type_name::<String>()
    }
}

/// Where the shared allocation of an `Rc`/`Arc` starts, given the address of its value: both keep
/// two counters (`usize`s) before the value, in a `#[repr(C)]` block.
fn shared_block(value: usize, align: usize) -> usize {
    let header = 2 * std::mem::size_of::<usize>();
    value - header.next_multiple_of(align)
}

impl<T: ?Sized> HeapValue for Rc<T> {
    fn heap_block(&self) -> Option<usize> {
        let value = Rc::as_ptr(self).cast::<u8>() as usize;
        Some(shared_block(value, std::mem::align_of_val::<T>(self)))
    }
    fn heap_type_name(&self) -> &'static str {
        std::any::type_name::<Rc<T>>()
    }
}

impl<T: ?Sized> HeapValue for Arc<T> {
    fn heap_block(&self) -> Option<usize> {
        let value = Arc::as_ptr(self).cast::<u8>() as usize;
        Some(shared_block(value, std::mem::align_of_val::<T>(self)))
    }
    fn heap_type_name(&self) -> &'static str {
        std::any::type_name::<Arc<T>>()
    }
}

/// Whether memprof has recorded anything: false when it is not the global allocator (or is
/// turned off), and then tagging does nothing.
#[inline]
fn recording() -> bool {
    crate::record::has_recorded()
}

/// Reports the block that starts at `address` under the type `name` from now on. Does nothing
/// when memprof is not recording or no live block starts there.
pub fn tag_block_as(address: usize, name: &'static str) {
    if !recording() {
        return;
    }
    untracked(|| {
        with_registry(|registry| {
            let next = registry.names.len() as u32 + 1;
            let tag = *registry.tags.entry(name).or_insert(next);
            if tag == next {
                registry.names.push(name);
            }
            let set = crate::record::set_tag(address, tag);
            if let Some((stack, previous)) = set
                && previous != tag
            {
                *registry.tagged.entry((tag, stack)).or_default() += 1;
                if previous != 0
                    && let Some(count) = registry.tagged.get_mut(&(previous, stack))
                {
                    *count = count.saturating_sub(1);
                }
            }
        })
    })
}

/// Reports the block of `value` (its `Box`, `Vec` buffer, `String` buffer, `Rc`/`Arc` shared
/// allocation) under the value's type from now on; see the [module docs](super).
#[inline]
pub fn tag<V: HeapValue + ?Sized>(value: &V) {
    if !recording() {
        return;
    }
    if let Some(address) = value.heap_block() {
        tag_block_as(address, value.heap_type_name());
    }
}

/// Tags `value` (see [`tag`]) and returns it: `let foo = memprof::tagged(Box::new(Foo::new()));`.
#[inline]
pub fn tagged<V: HeapValue>(value: V) -> V {
    tag(&value);
    value
}

/// Reports the block that starts at `ptr` as a `T` from now on (for blocks of your own
/// allocators or collections).
#[inline]
pub fn tag_block<T: ?Sized>(ptr: *const T) {
    if recording() {
        tag_block_as(ptr.cast::<u8>() as usize, std::any::type_name::<T>());
    }
}

/// The names given to explicit tags so far ([`tag`], [`tag_block_as`]): tag `i` is element
/// `i - 1`.
pub fn tag_names() -> Vec<&'static str> {
    untracked(|| with_registry(|registry| registry.names.clone()))
}

/// Blocks tagged over the whole run, by tag and allocating stack.
pub(crate) fn tag_counts() -> Vec<(u32, StackId, u64)> {
    untracked(|| {
        with_registry(|registry| {
            let mut counts: Vec<_> = registry
                .tagged
                .iter()
                .map(|(&(tag, stack), &n)| (tag, stack, n))
                .collect();
            counts.sort_unstable();
            counts
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_blocks_start_before_their_value() {
        assert_eq!(shared_block(0x1010, 8), 0x1000);
        assert_eq!(shared_block(0x1020, 32), 0x1000);
    }
}
