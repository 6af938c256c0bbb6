//! The type of each block: inferred from its allocation stack, or set explicitly.
//!
//! Rust's allocator is told a size and an alignment, never a type. memprof finds the type two
//! ways.
//!
//! # Inferred, with no code change
//!
//! The stack that allocated a block runs through the generic code of the collection that owns it,
//! and the name of that code carries the element type: `<alloc::boxed::Box<app::Foo>>::new`
//! allocates an `app::Foo`. For each stack (once, when a report asks, never on the allocation
//! path) memprof reads the frames from the allocator outwards, through the standard library's
//! own frames, and takes the first one it recognizes:
//!
//! | frames | the block is reported as |
//! |---|---|
//! | `Box<T>::new`, `Box<T>::new_uninit`, … | `T` (`app::Foo`) |
//! | `RawVec<T>`, `Vec<T>`, `VecDeque<T>` | `[T]`, the element buffer (`[app::Bar]`) |
//! | `RawVec<u8>` under a `String` method | `alloc::string::String`, its byte buffer |
//! | `Box<RcInner<T>>`, `Rc<T>` / `Box<ArcInner<T>>`, `Arc<T>` | `alloc::rc::Rc<T>` / `alloc::sync::Arc<T>`, the shared allocation |
//! | hashbrown's `RawTable<(K, V)>` under `HashMap<K, V>` | `std::collections::hash::map::HashMap<K, V>`, its table (`HashSet` alike) |
//! | `LeafNode<K, V>`, `InternalNode<K, V>` | `alloc::collections::btree::node::LeafNode<K, V>`, … (a `BTreeMap`'s nodes) |
//!
//! The names read as [`std::any::type_name`] prints them, so that
//! [`pretty_log_object_graph::<T>`](crate::pretty_log_object_graph) finds the blocks of `T`.
//! A block no rule recognizes is reported by size, like MemProf's unknown classes:
//! `(unknown, 96 B)`; it is never left out.
//!
//! ## Which builds give types
//!
//! The element type must be in a function name memprof can read:
//!
//! | build | types |
//! |---|---|
//! | `-C symbol-mangling-version=v0`, with debug info | all of the above: every inlined frame is named with its generic arguments |
//! | default (legacy) mangling, with debug info (`debug = "limited"` or more) | all of the above: legacy symbols say `Box<T>::new`, but the DWARF name of each instance says `new<app::Foo>`, and memprof reads it |
//! | v0 mangling, no debug info | partly: only functions that were not inlined (`RawVec<T>::grow_one`, `RawTable<T>::reserve_rehash`); a `Box::new` inlined into its caller is gone |
//! | legacy mangling, no debug info | none but std's own precompiled code: blocks are `(unknown, N B)` |
//!
//! Stacks must reach the collection's frames, so frame pointers or the DWARF unwinder must work
//! (both do in the builds above). The recommended setup, in `.cargo/config.toml`:
//!
//! ```toml
//! [build]
//! rustflags = ["-C", "symbol-mangling-version=v0", "-C", "force-frame-pointers=yes"]
//!
//! [profile.release]
//! debug = "limited"
//! ```
//!
//! # Explicit, where inference cannot see
//!
//! [`tag`] names the block of a value by the value's type, and [`tagged`] does it at
//! construction: `let foo = memprof::tagged(Box::new(Foo::new()));`. It works for [`Box`],
//! [`Vec`], [`String`], [`Rc`] and [`Arc`] (the [`HeapValue`] trait; implement it for your own
//! owners), and [`tag_block`] tags a raw block. An explicit tag wins over inference. Without
//! memprof as the global allocator a tag costs one relaxed atomic load; with it, a lookup in a
//! small registry and in the live table. A tag follows its value when a `realloc` moves it (a
//! growing `Vec`), but not into a block allocated anew.
//!
//! # Reports
//!
//! [`log_object_counts`] (live objects per type), [`log_object_tallies`] (objects created over the
//! whole run, per type) and [`log_trace_target`] (the stacks that allocated `MEMPROF_TRACE_TARGET`
//! objects, most first) are here; the reports that follow pointers are in
//! [`object_graph`](crate::object_graph).

#![forbid(unsafe_code)]

pub mod dwarf;
pub mod names;

use crate::address::ReturnAddress;
use crate::frames::{self, Frame};
use crate::guard::untracked;
use crate::snapshot::{Snapshot, StackSummary};
use crate::symbolize::{self, Resolve};
use crate::table::{StackId, TABLE};
use dwarf::DwarfNames;
use names::SelfType;
use std::collections::HashMap;

use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};

// ---------------------------------------------------------------------------------------------
// Explicit tags

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
    TABLE.has_recorded()
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
            if let Some((stack, previous)) = TABLE.set_tag(address, tag)
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
/// allocation) under the value's type from now on; see the [module docs](self).
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

/// The names of the explicit tags so far: tag `i` is element `i - 1`.
pub fn tag_names() -> Vec<&'static str> {
    untracked(|| with_registry(|registry| registry.names.clone()))
}

/// Blocks tagged over the whole run, by tag and allocating stack.
pub fn tag_counts() -> Vec<(u32, StackId, u64)> {
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

// ---------------------------------------------------------------------------------------------
// Inference

/// Types of the standard library whose functions name the type of the block they allocate, and
/// those that refine it; a frame of these with unknown parameters asks for DWARF names.
const KNOWN_PATHS: &[&str] = &[
    "alloc::boxed::Box",
    "alloc::raw_vec::RawVec",
    "alloc::vec::Vec",
    "alloc::collections::vec_deque::VecDeque",
    "alloc::rc::Rc",
    "alloc::sync::Arc",
    "alloc::collections::btree::node::LeafNode",
    "alloc::collections::btree::node::InternalNode",
    "hashbrown::raw::RawTable",
    "hashbrown::map::HashMap",
    "hashbrown::set::HashSet",
    "std::collections::hash::map::HashMap",
    "std::collections::hash::set::HashSet",
];

/// The default hasher of std's maps, left out of their names as `type_name` does.
const RANDOM_STATE: &str = "std::hash::random::RandomState";

/// What the frames seen so far say about the block.
enum Found {
    /// The block holds one value of this type.
    Named(String),
    /// The block is the element buffer of a `Vec` of this element type.
    Buffer(String),
    /// The block is hashbrown's table of these elements; the map type when seen.
    Table(String, Option<String>),
}

fn function(frame: &Frame) -> &str {
    frame.function.as_deref().unwrap_or("")
}

/// Frames of the standard library or of hashbrown, through which the search goes on.
fn is_library(frame: &Frame) -> bool {
    frames::is_std_frame(frame)
        || function(frame)
            .trim_start_matches('<')
            .starts_with("hashbrown::")
}

/// What one frame says about the block it allocates, on its own.
fn classify(self_type: &SelfType<'_>) -> Option<Found> {
    let first = self_type.args.first().copied();
    let named = |path: &str| Found::Named(names::type_with_args(path, &self_type.args, &[]));
    if self_type.is("alloc::boxed::Box") {
        let value = first?;
        let inner = names::self_type(value)?;
        return Some(
            if inner.is("alloc::rc::RcInner") && !inner.args.is_empty() {
                Found::Named(names::type_with_args("alloc::rc::Rc", &inner.args, &[]))
            } else if inner.is("alloc::sync::ArcInner") && !inner.args.is_empty() {
                Found::Named(names::type_with_args("alloc::sync::Arc", &inner.args, &[]))
            } else {
                Found::Named(value.to_owned())
            },
        );
    }
    if self_type.is("alloc::raw_vec::RawVec")
        || self_type.is("alloc::vec::Vec")
        || self_type.is("alloc::collections::vec_deque::VecDeque")
    {
        return Some(Found::Buffer(first?.to_owned()));
    }
    if self_type.is("hashbrown::raw::RawTable") {
        return Some(Found::Table(first?.to_owned(), None));
    }
    for path in [
        "alloc::rc::Rc",
        "alloc::sync::Arc",
        "alloc::collections::btree::node::LeafNode",
        "alloc::collections::btree::node::InternalNode",
    ] {
        if self_type.is(path) && !self_type.args.is_empty() {
            return Some(named(path));
        }
    }
    None
}

/// The type of the block allocated by a stack, from its frames (innermost first, inlined frames
/// expanded); `None` when no frame tells. See the [module docs](self) for the rules.
pub fn infer(frames: &[&Frame]) -> Option<String> {
    let start = frames
        .iter()
        .rposition(|f| frames::is_profiler_frame(f))
        .map_or(0, |last| last + 1);
    let mut found: Option<Found> = None;
    for frame in &frames[start..] {
        let name = function(frame);
        if !is_library(frame) && !frames::is_allocator_frame(name) {
            break;
        }
        // `<[T]>::to_vec_in`: a slice copied into a new buffer.
        if found.is_none()
            && let Some(slice) = name.strip_prefix("<[")
            && let Some(end) = slice.find("]>::")
        {
            found = Some(Found::Buffer(slice[..end].to_owned()));
            continue;
        }
        let Some(self_type) = names::self_type(name) else {
            continue;
        };
        if self_type.has_parameters() {
            continue;
        }
        match &mut found {
            None => found = classify(&self_type),
            Some(Found::Buffer(element)) if element == "u8" => {
                if self_type.is("alloc::string::String")
                    || self_type.path == "str"
                    || self_type.is("alloc::str")
                {
                    found = Some(Found::Named("alloc::string::String".to_owned()));
                }
            }
            Some(Found::Table(_, map)) => {
                for path in [
                    "std::collections::hash::map::HashMap",
                    "std::collections::hash::set::HashSet",
                ] {
                    if self_type.is(path) && !self_type.args.is_empty() {
                        *map = Some(names::type_with_args(
                            path,
                            &self_type.args,
                            &[RANDOM_STATE],
                        ));
                    }
                }
                for path in ["hashbrown::map::HashMap", "hashbrown::set::HashSet"] {
                    if map.is_none() && self_type.is(path) && !self_type.args.is_empty() {
                        *map = Some(names::type_with_args(path, &self_type.args, &[]));
                    }
                }
            }
            Some(_) => {}
        }
    }
    let name = match found? {
        Found::Named(name) => name,
        Found::Buffer(element) => format!("[{element}]"),
        Found::Table(element, map) => {
            map.unwrap_or_else(|| format!("hashbrown::raw::RawTable<{element}>"))
        }
    };
    Some(names::normalize(&name))
}

/// Whether a frame's name has generic parameters that the DWARF name of its instance can fill.
fn needs_arguments(frame: &Frame) -> bool {
    names::self_type(function(frame))
        .is_some_and(|st| st.has_parameters() && KNOWN_PATHS.iter().any(|path| st.is(path)))
}

/// A resolver whose frames carry generic arguments also in legacy-mangled builds: frames of
/// `inner` named `alloc::boxed::Box<T>::new` take the arguments of their DWARF instance
/// (`alloc::boxed::Box<app::Foo>::new`).
pub struct GenericResolver<'a> {
    /// Resolves addresses to frames.
    pub inner: &'a mut dyn Resolve,
    /// Instance names of this process's code, when the frames are this process's.
    pub dwarf: Option<&'a mut DwarfNames>,
}

impl Resolve for GenericResolver<'_> {
    fn resolve(&mut self, address: ReturnAddress) -> Arc<[Frame]> {
        let frames = self.inner.resolve(address);
        if !frames.iter().any(needs_arguments) {
            return frames;
        }
        let Some(dwarf) = self.dwarf.as_deref_mut() else {
            return frames;
        };
        let Some(names) = dwarf.frame_names(address) else {
            return frames;
        };
        if names.len() != frames.len() {
            return frames;
        }
        frames
            .iter()
            .zip(names.iter())
            .map(|(frame, dwarf_name)| {
                let mut frame = frame.clone();
                if needs_arguments(&frame)
                    && let Some(dwarf_name) = dwarf_name
                    && let Some(typed) = names::substitute(function(&frame), dwarf_name)
                {
                    frame.function = Some(typed);
                }
                frame
            })
            .collect()
    }
}

/// Infers the type of one stack's blocks.
pub fn infer_stack(frames: &[ReturnAddress], resolver: &mut dyn Resolve) -> Option<String> {
    let resolved: Vec<Arc<[Frame]>> = frames.iter().map(|&a| resolver.resolve(a)).collect();
    let expanded: Vec<&Frame> = resolved.iter().flat_map(|f| f.iter()).collect();
    infer(&expanded)
}

/// Inferred types of the stacks of `snapshot` for which `wanted` holds, indexed by stack id
/// (`None` for the others and for stacks no rule recognizes).
pub fn infer_stacks(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    wanted: impl Fn(&StackSummary) -> bool,
) -> Vec<Option<Arc<str>>> {
    snapshot
        .stacks
        .iter()
        .map(|stack| {
            if wanted(stack) {
                infer_stack(&stack.frames, resolver).map(Arc::from)
            } else {
                None
            }
        })
        .collect()
}

/// The process's inferred stack types, by stack id: stack ids of the live table are never
/// reused, so an answer holds for the life of the process.
static STACK_TYPES: Mutex<Vec<Option<Option<Arc<str>>>>> = Mutex::new(Vec::new());

/// DWARF instance names of this process.
static DWARF_NAMES: Mutex<Option<DwarfNames>> = Mutex::new(None);

/// [`infer_stacks`] for a snapshot of this process, with its symbolizer, its DWARF instance names
/// and a cache per stack id.
pub fn process_stack_types(
    snapshot: &Snapshot,
    wanted: impl Fn(&StackSummary) -> bool,
) -> Vec<Option<Arc<str>>> {
    symbolize::with_symbolizer(|symbolizer| {
        let mut dwarf = DWARF_NAMES.lock().unwrap_or_else(PoisonError::into_inner);
        let dwarf = dwarf.get_or_insert_with(DwarfNames::new);
        let mut cache = STACK_TYPES.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() < snapshot.stacks.len() {
            cache.resize(snapshot.stacks.len(), None);
        }
        let mut resolver = GenericResolver {
            inner: symbolizer,
            dwarf: Some(dwarf),
        };
        snapshot
            .stacks
            .iter()
            .enumerate()
            .map(|(id, stack)| {
                if !wanted(stack) {
                    return None;
                }
                cache[id]
                    .get_or_insert_with(|| infer_stack(&stack.frames, &mut resolver).map(Arc::from))
                    .clone()
            })
            .collect()
    })
}

// ---------------------------------------------------------------------------------------------
// Typing a snapshot

/// One line of a per-type log: a number and the type it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeRow {
    /// Objects or bytes.
    pub value: u64,
    /// The type's name (`app::Foo`, `[app::Bar]`, `(unknown, 96 B)`).
    pub name: String,
}

/// One allocation context of a traced type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRow {
    /// Objects of the type allocated from this context over the run.
    pub count: u64,
    /// The frames, innermost first, as MemProf prints them.
    pub context: Vec<String>,
}

/// The name of a block whose type is unknown: `(unknown, 96 B)`.
pub fn unknown_name(size: u64) -> String {
    format!("(unknown, {size} B)")
}

/// The type of every block of a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Typing {
    /// The distinct type names; a type's index is its position.
    pub names: Vec<String>,
    /// The type index of each block, in the snapshot's block order.
    pub of_block: Vec<u32>,
}

impl Typing {
    /// Types the blocks of `snapshot`: a block's explicit tag (`tag_names[tag - 1]`) first, else
    /// its stack's inferred type (`stack_types[stack]`), else `(unknown, <size> B)`.
    pub fn new(
        snapshot: &Snapshot,
        stack_types: &[Option<Arc<str>>],
        tag_names: &[&str],
    ) -> Typing {
        let mut index: HashMap<String, u32> = HashMap::new();
        let mut names = Vec::new();
        let mut intern = |name: &str| -> u32 {
            if let Some(&i) = index.get(name) {
                return i;
            }
            let i = names.len() as u32;
            names.push(name.to_owned());
            index.insert(name.to_owned(), i);
            i
        };
        let of_block = snapshot
            .blocks
            .iter()
            .map(|block| {
                let tagged = (block.tag != 0)
                    .then(|| tag_names.get(block.tag as usize - 1))
                    .flatten();
                match tagged {
                    Some(name) => intern(name),
                    None => match stack_types.get(block.stack.0 as usize) {
                        Some(Some(name)) => intern(name),
                        _ => intern(&unknown_name(block.size)),
                    },
                }
            })
            .collect();
        Typing { names, of_block }
    }

    /// Types a snapshot of this process (symbolizing what it must).
    pub fn of_process(snapshot: &Snapshot) -> Typing {
        let stack_types = process_stack_types(snapshot, |s| s.live_blocks > 0);
        Typing::new(snapshot, &stack_types, &tag_names())
    }

    /// The type name of block `index` of the snapshot.
    pub fn name_of(&self, index: usize) -> &str {
        &self.names[self.of_block[index] as usize]
    }

    /// The index of the type called `name`, if any block has it.
    pub fn type_index(&self, name: &str) -> Option<u32> {
        self.names.iter().position(|n| n == name).map(|i| i as u32)
    }

    /// Live objects per type: `count \t name` rows, most first.
    pub fn counts(&self) -> Vec<TypeRow> {
        let mut counts = vec![0u64; self.names.len()];
        for &t in &self.of_block {
            counts[t as usize] += 1;
        }
        sorted_rows(
            self.names
                .iter()
                .zip(counts)
                .map(|(name, value)| TypeRow {
                    value,
                    name: name.clone(),
                })
                .collect(),
        )
    }
}

/// Rows by value, largest first, then by name; rows of value 0 left out.
pub fn sorted_rows(mut rows: Vec<TypeRow>) -> Vec<TypeRow> {
    rows.retain(|r| r.value > 0);
    rows.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
    rows
}

// ---------------------------------------------------------------------------------------------
// Over the whole run

/// The name under which blocks of unknown type are tallied over the run (their sizes are not
/// kept per block once freed).
pub const UNKNOWN: &str = "(unknown)";

/// How many blocks each stack allocated under each type over the whole run: a stack's blocks go
/// to its inferred type (or [`UNKNOWN`]), except those tagged explicitly, which go to their tag.
pub fn per_stack_counts<'a>(
    snapshot: &Snapshot,
    stack_types: &'a [Option<Arc<str>>],
    tag_names: &'a [&'a str],
    tag_counts: &[(u32, StackId, u64)],
) -> Vec<(&'a str, StackId, u64)> {
    let mut tagged = vec![0u64; snapshot.stacks.len()];
    let mut out = Vec::new();
    for &(tag, stack, n) in tag_counts {
        if let Some(slot) = tagged.get_mut(stack.0 as usize) {
            *slot += n;
        }
        if let Some(name) = tag_names.get((tag as usize).wrapping_sub(1)) {
            out.push((*name, stack, n));
        }
    }
    for (id, stack) in snapshot.stacks.iter().enumerate() {
        let rest = stack.allocated_blocks.saturating_sub(tagged[id]);
        if rest == 0 {
            continue;
        }
        let name = match stack_types.get(id) {
            Some(Some(name)) => name,
            _ => UNKNOWN,
        };
        out.push((name, StackId(id as u32), rest));
    }
    out
}

/// Objects created over the whole run (freed or not), per type, most first.
pub fn tallies(
    snapshot: &Snapshot,
    stack_types: &[Option<Arc<str>>],
    tag_names: &[&str],
    tag_counts: &[(u32, StackId, u64)],
) -> Vec<TypeRow> {
    let mut totals: HashMap<&str, u64> = HashMap::new();
    for (name, _, n) in per_stack_counts(snapshot, stack_types, tag_names, tag_counts) {
        *totals.entry(name).or_default() += n;
    }
    sorted_rows(
        totals
            .into_iter()
            .map(|(name, value)| TypeRow {
                value,
                name: name.to_owned(),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: &str) -> Frame {
        Frame {
            function: Some(function.to_owned()),
            file: Some(file.to_owned()),
            line: 1,
            column: 1,
        }
    }

    fn std_frame(function: &str) -> Frame {
        frame(function, "/rustc/0/library/alloc/src/x.rs")
    }

    fn stack(inner: &[&str]) -> Vec<Frame> {
        let mut frames = vec![
            frame("memprof::capture::alloc", "/work/src/capture.rs"),
            frame(
                "<memprof::hooks::global_alloc::MemProf<A> as core::alloc::global::GlobalAlloc>::alloc",
                "/work/src/hooks/global_alloc.rs",
            ),
            frame("__rustc::__rust_alloc", "src/main.rs"),
            std_frame("alloc::alloc::alloc"),
        ];
        frames.extend(inner.iter().map(|f| std_frame(f)));
        frames.push(frame("app::make", "src/main.rs"));
        frames.push(std_frame("<alloc::boxed::Box<app::Outer>>::new"));
        frames
    }

    fn infer_names(inner: &[&str]) -> Option<String> {
        let frames = stack(inner);
        let refs: Vec<&Frame> = frames.iter().collect();
        infer(&refs)
    }

    #[test]
    fn rules_name_the_block() {
        let cases: &[(&[&str], &str)] = &[
            (
                &[
                    "alloc::boxed::box_new_uninit",
                    "<alloc::boxed::Box<app::Foo>>::new",
                ],
                "app::Foo",
            ),
            (
                &[
                    "<alloc::raw_vec::RawVecInner>::finish_grow",
                    "<alloc::raw_vec::RawVec<app::Bar>>::grow_one",
                    "<alloc::vec::Vec<app::Bar>>::push",
                ],
                "[app::Bar]",
            ),
            (
                &[
                    "<alloc::raw_vec::RawVec<u8>>::reserve",
                    "<alloc::string::String>::push_str",
                ],
                "alloc::string::String",
            ),
            (&["<alloc::raw_vec::RawVec<u8>>::reserve"], "[u8]"),
            (
                &[
                    "<alloc::boxed::Box<alloc::rc::RcInner<app::Baz>>>::new",
                    "<alloc::rc::Rc<app::Baz>>::new",
                ],
                "alloc::rc::Rc<app::Baz>",
            ),
            (
                &["<alloc::boxed::Box<alloc::sync::ArcInner<app::Baz>>>::new"],
                "alloc::sync::Arc<app::Baz>",
            ),
            (
                &["<alloc::sync::Arc<[u8]>>::allocate_for_layout::<fn>"],
                "alloc::sync::Arc<[u8]>",
            ),
            (
                &[
                    "<hashbrown::raw::RawTableInner>::new_uninitialized::<alloc::alloc::Global>",
                    "<hashbrown::raw::RawTable<(u64, app::Foo)>>::reserve_rehash::<x>",
                    "<hashbrown::map::HashMap<u64, app::Foo, std::hash::random::RandomState>>::insert",
                    "<std::collections::hash::map::HashMap<u64, app::Foo>>::insert",
                ],
                "std::collections::hash::map::HashMap<u64, app::Foo>",
            ),
            (
                &[
                    "<hashbrown::raw::RawTable<(u64, app::Foo)>>::reserve_rehash::<x>",
                    "<hashbrown::map::HashMap<u64, app::Foo, foldhash::fast::RandomState>>::insert",
                ],
                "hashbrown::map::HashMap<u64, app::Foo, foldhash::fast::RandomState>",
            ),
            (
                &["<hashbrown::raw::RawTable<u64>>::reserve_rehash::<x>"],
                "hashbrown::raw::RawTable<u64>",
            ),
            (
                &[
                    "<alloc::boxed::Box<alloc::collections::btree::node::LeafNode<u32, app::Baz>>>::try_new_uninit_in",
                    "<alloc::collections::btree::node::LeafNode<u32, app::Baz>>::new::<alloc::alloc::Global>",
                ],
                "alloc::collections::btree::node::LeafNode<u32, app::Baz>",
            ),
            // Legacy names whose arguments were filled in from DWARF.
            (
                &["alloc::boxed::Box<app::Foo, alloc::alloc::Global>::new"],
                "app::Foo",
            ),
            (
                &["alloc::raw_vec::RawVec<app::Bar, alloc::alloc::Global>::grow_one"],
                "[app::Bar]",
            ),
            (
                &[
                    "hashbrown::raw::RawTable<(u64, app::Foo), alloc::alloc::Global>::reserve_rehash",
                    "std::collections::hash::map::HashMap<u64, app::Foo, std::hash::random::RandomState>::insert",
                ],
                "std::collections::hash::map::HashMap<u64, app::Foo>",
            ),
            (
                &["<[app::Foo]>::to_vec_in::<alloc::alloc::Global>"],
                "[app::Foo]",
            ),
        ];
        for (inner, expected) in cases {
            assert_eq!(infer_names(inner).as_deref(), Some(*expected), "{inner:?}");
        }
    }

    #[test]
    fn unknown_parameters_and_user_frames_stop_the_search() {
        // Legacy names without DWARF: nothing to read; the user's frame ends the search before the
        // outer `Box<app::Outer>::new`.
        assert_eq!(infer_names(&["alloc::boxed::Box<T>::new"]), None);
        assert_eq!(infer_names(&[]), None);
    }

    #[test]
    fn typing_prefers_tags_then_inference_then_size() {
        use crate::snapshot::LiveBlock;
        let block = |address, size, stack, tag| LiveBlock {
            address,
            size,
            stack: StackId(stack),
            tag,
        };
        let stacks = vec![StackSummary::default(), StackSummary::default()];
        let snapshot = Snapshot::from_parts(
            vec![
                block(0x1000, 16, 0, 0),
                block(0x2000, 16, 0, 1),
                block(0x3000, 96, 1, 0),
                block(0x4000, 96, 1, 0),
                block(0x5000, 32, 1, 0),
            ],
            stacks,
            0,
        );
        let stack_types = vec![Some(Arc::from("app::Foo")), None];
        let typing = Typing::new(&snapshot, &stack_types, &["app::Tagged"]);
        let names: Vec<&str> = (0..5).map(|i| typing.name_of(i)).collect();
        assert_eq!(
            names,
            [
                "app::Foo",
                "app::Tagged",
                "(unknown, 96 B)",
                "(unknown, 96 B)",
                "(unknown, 32 B)"
            ]
        );
        let rows = typing.counts();
        let counts: Vec<(u64, &str)> = rows.iter().map(|r| (r.value, r.name.as_str())).collect();
        assert_eq!(
            counts,
            [
                (2, "(unknown, 96 B)"),
                (1, "(unknown, 32 B)"),
                (1, "app::Foo"),
                (1, "app::Tagged")
            ]
        );
    }

    #[test]
    fn shared_blocks_start_before_their_value() {
        assert_eq!(shared_block(0x1010, 8), 0x1000);
        assert_eq!(shared_block(0x1020, 32), 0x1000);
    }
}
