//! Inference: the type of a block from the frames of the stack that allocated it.
//!
//! The generic code of a collection names the element type (`<alloc::boxed::Box<app::Foo>>::new`
//! allocates an `app::Foo`); [`infer`] reads a stack's frames from the allocator outwards and takes
//! the first it recognizes. In legacy-mangled builds the frames name only the impl's parameters
//! (`Box<T>::new`), so [`GenericResolver`] fills them in from the DWARF name of each instance.
//! Inference runs per stack, when a report asks, never on the allocation path.

#![forbid(unsafe_code)]

use super::dwarf::DwarfNames;
use super::names::{self, SelfType};
use crate::address::ReturnAddress;
use crate::frames::{self, Frame};
use crate::snapshot::{Snapshot, StackSummary};
use crate::symbolize::{self, Resolve};
use std::sync::{Arc, Mutex, PoisonError};

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
/// expanded); `None` when no frame tells. See the [module docs](super) for the rules.
pub(crate) fn infer(frames: &[&Frame]) -> Option<String> {
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
pub(crate) struct GenericResolver<'a> {
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
pub(crate) fn infer_stack(frames: &[ReturnAddress], resolver: &mut dyn Resolve) -> Option<String> {
    let resolved: Vec<Arc<[Frame]>> = frames.iter().map(|&a| resolver.resolve(a)).collect();
    let expanded: Vec<&Frame> = resolved.iter().flat_map(|f| f.iter()).collect();
    infer(&expanded)
}

/// Inferred types of the stacks of `snapshot` for which `wanted` holds, indexed by stack id
/// (`None` for the others and for stacks no rule recognizes). With a resolver of made-up frames,
/// it types a synthetic snapshot; the process's own stacks go through [`process_stack_types`].
#[cfg(test)]
pub(crate) fn infer_stacks(
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

/// The locks of the DWARF names and the stack types, in the order they are taken, for the forking
/// thread to hold across `fork` (dropping the result lets them go).
pub(crate) fn lock_for_fork() -> impl Sized + 'static {
    let dwarf = DWARF_NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    (
        dwarf,
        STACK_TYPES.lock().unwrap_or_else(PoisonError::into_inner),
    )
}

/// [`infer_stacks`] for a snapshot of this process, with its symbolizer, its DWARF instance names
/// and a cache per stack id.
pub(crate) fn process_stack_types(
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
    fn stacks_are_inferred_where_wanted() {
        let mut resolver: std::collections::HashMap<ReturnAddress, Vec<Frame>> = [
            (0x1000, std_frame("<alloc::boxed::Box<app::Foo>>::new")),
            (0x2000, frame("app::main", "src/main.rs")),
        ]
        .into_iter()
        .map(|(address, frame)| (ReturnAddress(address), vec![frame]))
        .collect();
        let summary = |frames: &[usize], allocated_blocks| StackSummary {
            frames: frames.iter().map(|&a| ReturnAddress(a)).collect(),
            allocated_blocks,
            ..StackSummary::default()
        };
        let snapshot = Snapshot::from_parts(
            Vec::new(),
            vec![
                summary(&[0x1000, 0x2000], 1),
                summary(&[0x1000, 0x2000], 0),
                summary(&[0x2000], 1),
            ],
            0,
        );
        let types = infer_stacks(&snapshot, &mut resolver, |s| s.allocated_blocks > 0);
        assert_eq!(types, [Some(Arc::from("app::Foo")), None, None]);
    }
}
