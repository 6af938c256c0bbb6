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
//! | `Box<T>::new`, `Box<T>::new_uninit`, … | `T` (`app::Foo`, `[u8; 4096]`) |
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
//! ## Code that several types share
//!
//! The compiler and the linker fold generic functions whose machine code is identical:
//! `RawVec<String>::grow_one` and `RawVec<Vec<u8>>::grow_one` both move 24-byte elements and are
//! one piece of code, which the debug information names after one of them. So a frame's generic
//! arguments are trusted only when they agree with the frames around it: a `RawVec<T>` or
//! `Box<T>` frame only manages a block for its direct caller, whose type wins
//! (`Vec<String>::push` growing through that shared `grow_one` allocates a `[String]`), and a frame
//! whose code the symbol table shows under several names is taken only when another frame names
//! one of those types. When nothing decides, the block is reported as `(one of [A], [B] or 4
//! more)`, or by size when the instances' names do not tell their types: never as one type the
//! program may not have allocated there.
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
//! [`tag`] names the block of a value by the value's type, and [`tagged`] does it at construction:
//! `let foo = memprof::tagged(Box::new(Foo::new()));`. It works for [`Box`], [`Vec`], [`String`],
//! [`Rc`](std::rc::Rc) and [`Arc`](std::sync::Arc) (the [`HeapValue`] trait; implement it for your
//! own owners), and [`tag_block`] tags a raw block. An explicit tag wins over inference. Without
//! memprof as the global allocator a tag costs one relaxed atomic load; with it, a lookup in a
//! small registry and in the live table. A tag follows its value when a `realloc` moves it (a
//! growing `Vec`), but not into a block allocated anew.
//!
//! # Reports
//!
//! The reports by type are at the crate root: [`log_object_counts`](crate::log_object_counts)
//! (live objects per type), [`log_object_tallies`](crate::log_object_tallies) (objects created
//! over the whole run, per type), [`log_type_contexts`](crate::log_type_contexts) and
//! [`log_trace_target`](crate::log_trace_target) (the stacks that allocated objects of one type,
//! most first); those that follow pointers are [`log_object_sizes`](crate::log_object_sizes) and
//! [`pretty_log_object_graph`](crate::pretty_log_object_graph).

#![forbid(unsafe_code)]

mod dwarf;
mod infer;
mod shared;
pub(crate) mod names;
mod tags;
mod tallies;
mod typing;

pub use tags::{HeapValue, tag, tag_block, tag_block_as, tag_names, tagged};

#[cfg(test)]
pub(crate) use infer::infer_stacks;
pub(crate) use infer::lock_for_fork as lock_inference_for_fork;
pub(crate) use infer::process_stack_types;
pub(crate) use tags::lock_for_fork as lock_tags_for_fork;
pub(crate) use tags::tag_counts;
pub(crate) use tallies::{per_stack_counts, tallies};
pub(crate) use typing::{TraceRow, TypeRow, Typing, sorted_rows};
