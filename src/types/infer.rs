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
use super::shared::{SharedCode, Sharing};
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
#[derive(Clone, Debug, PartialEq, Eq)]
enum Found {
    /// The block holds one value of this type.
    Named(String),
    /// The block is the element buffer of a `Vec` of this element type.
    Buffer(String),
    /// The block is hashbrown's table of these elements; the map type when seen.
    Table(String, Option<String>),
}

impl Found {
    /// Whether `other` is a claim of the same kind (both buffers, both values, both tables).
    fn same_kind(&self, other: &Found) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }

    /// The type name reported for the block.
    fn name(&self) -> String {
        let name = match self {
            Found::Named(name) => name.clone(),
            Found::Buffer(element) => format!("[{element}]"),
            Found::Table(element, map) => map
                .clone()
                .unwrap_or_else(|| format!("hashbrown::raw::RawTable<{element}>")),
        };
        names::normalize(&name)
    }
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
        // Arrays, slices and tuples have no path: `Box<[u8; 4096]>` holds a `[u8; 4096]`.
        let inner = names::self_type(value).filter(|inner| !inner.args.is_empty());
        return Some(match inner {
            Some(inner) if inner.is("alloc::rc::RcInner") => {
                Found::Named(names::type_with_args("alloc::rc::Rc", &inner.args, &[]))
            }
            Some(inner) if inner.is("alloc::sync::ArcInner") => {
                Found::Named(names::type_with_args("alloc::sync::Arc", &inner.args, &[]))
            }
            _ => Found::Named(value.to_owned()),
        });
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

/// What one frame's name says about the block, on its own.
enum Says {
    /// Nothing: allocator internals, iterator adapters, code with unknown parameters.
    Nothing,
    /// It names the block.
    Block(Found),
    /// A method of `String` or `str`: a byte buffer below it is a `String`'s.
    StringBytes,
    /// A method of a map or set over a hashbrown table: its type, and whether it is std's.
    Map(String, bool),
}

fn says(name: &str) -> Says {
    // `<[T]>::to_vec_in`: a slice copied into a new buffer.
    if let Some(slice) = name.strip_prefix("<[")
        && let Some(end) = slice.find("]>::")
    {
        return Says::Block(Found::Buffer(slice[..end].to_owned()));
    }
    let Some(self_type) = names::self_type(name) else {
        return Says::Nothing;
    };
    if self_type.has_parameters() {
        return Says::Nothing;
    }
    if self_type.is("alloc::string::String")
        || self_type.path == "str"
        || self_type.is("alloc::str")
    {
        return Says::StringBytes;
    }
    if !self_type.args.is_empty() {
        for path in [
            "std::collections::hash::map::HashMap",
            "std::collections::hash::set::HashSet",
        ] {
            if self_type.is(path) {
                let map = names::type_with_args(path, &self_type.args, &[RANDOM_STATE]);
                return Says::Map(map, true);
            }
        }
        for path in ["hashbrown::map::HashMap", "hashbrown::set::HashSet"] {
            if self_type.is(path) {
                return Says::Map(names::type_with_args(path, &self_type.args, &[]), false);
            }
        }
    }
    classify(&self_type).map_or(Says::Nothing, Says::Block)
}

/// A frame of a stack, with what is known of the code it is in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen<'a> {
    /// The frame.
    pub frame: &'a Frame,
    /// The names of the functions whose code holds this frame's return address, when several
    /// instances share that code (folded by the compiler or the linker): the frame's generic
    /// arguments are then one instance's, not necessarily those of the code that ran.
    pub shared: Option<&'a [String]>,
    /// Whether the frame is the function its return address is in (the outermost frame of the
    /// address) rather than one inlined into it: only then are the shared names its own.
    pub outermost: bool,
}

/// How far a frame's claim about the block can be trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Trust {
    /// The frame's code is its own.
    Sure,
    /// The frame's code is shared: the type names its instances would give (sorted, without
    /// duplicates), and whether that list is complete (every instance's name says its type).
    Shared(Vec<String>, bool),
}

/// How far the claim `found` of frame `seen` can be trusted.
fn trust(seen: &Seen<'_>, found: &Found) -> Trust {
    let Some(instances) = seen.shared else {
        return Trust::Sure;
    };
    if !seen.outermost {
        // The instances are those of the function this frame was inlined into.
        return Trust::Shared(Vec::new(), false);
    }
    let mut names: Vec<String> = instances
        .iter()
        .filter_map(|instance| match says(instance) {
            Says::Block(other) if other.same_kind(found) => Some(other.name()),
            _ => None,
        })
        .collect();
    let complete = names.len() == instances.len();
    names.sort_unstable();
    names.dedup();
    match names.as_slice() {
        [only] if complete && *only == found.name() => Trust::Sure,
        _ => Trust::Shared(names, complete),
    }
}

/// Whether `caller`, calling `callee` directly, owns the block `callee` allocates: `callee` only
/// manages a block (a `RawVec`'s buffer, a `Box`'s allocation) and runs no code of the values,
/// so its caller (`Vec<T>::push`, `Rc<T>::new`) allocates through it a block of its own type. A
/// `Box` made for another `Box` is a conversion (`Box<StringError>` into `Box<dyn Error>`): the
/// inner type is the more precise one.
fn owns_callee_block(callee: &str, caller: &str) -> bool {
    let is = |name: &str, path: &str| names::self_type(name).is_some_and(|st| st.is(path));
    is(callee, "alloc::raw_vec::RawVec")
        || (is(callee, "alloc::boxed::Box") && !is(caller, "alloc::boxed::Box"))
}

/// The name reported for a block whose frames leave several types possible: `(one of A, B or 3
/// more)`. It names no single type, so nothing takes it for one.
fn one_of(names: &[String]) -> String {
    const SHOWN: usize = 3;
    let shown = names[..names.len().min(SHOWN)].join(", ");
    match names.len().saturating_sub(SHOWN) {
        0 => format!("(one of {shown})"),
        more => format!("(one of {shown} or {more} more)"),
    }
}

/// The type of the block allocated by a stack, from its frames (innermost first, inlined frames
/// expanded); `None` when no frame tells. See the [module docs](super) for the rules.
///
/// The innermost frame that names the block decides, unless its code is shared by several
/// instances or its direct caller names another type of the same kind: a `RawVec<T>` or a `Box<T>`
/// frame only manages the block for its caller, so `Vec<String>::push` calling a
/// `RawVec<Vec<u8>>::grow_one` that the compiler merged with `RawVec<String>::grow_one` allocates
/// a `[String]`. A claim from shared code that no other frame confirms gives `(one of ...)` with
/// the types its instances would give, or `None` when those are unknown: never one type the
/// program may not have.
pub(crate) fn infer(frames: &[Seen<'_>]) -> Option<String> {
    let start = frames
        .iter()
        .rposition(|s| frames::is_profiler_frame(s.frame) && !frames::calls_program(s.frame))
        .map_or(0, |last| last + 1);
    let run: Vec<&Seen<'_>> = frames[start..]
        .iter()
        .take_while(|s| is_library(s.frame) || frames::is_allocator_frame(function(s.frame)))
        .collect();
    let (first, mut found) =
        run.iter()
            .enumerate()
            .find_map(|(i, s)| match says(function(s.frame)) {
                Says::Block(found) => Some((i, found)),
                _ => None,
            })?;
    let mut trusted = trust(run[first], &found);
    // The direct caller of a raw frame owns the same block.
    let mut at = first;
    while let Some(caller) = run.get(at + 1)
        && owns_callee_block(function(run[at].frame), function(caller.frame))
        && let Says::Block(claim) = says(function(caller.frame))
        && claim.same_kind(&found)
    {
        let caller_trust = trust(caller, &claim);
        if caller_trust == Trust::Sure || trusted != Trust::Sure {
            found = claim;
            trusted = caller_trust;
        }
        at += 1;
    }
    // Shared code whose instances are known: a sure frame further out that names one of them.
    if let Trust::Shared(candidates, _) = &trusted {
        let confirmed = run[at + 1..]
            .iter()
            .find_map(|s| match says(function(s.frame)) {
                Says::Block(claim)
                    if claim.same_kind(&found)
                        && candidates.contains(&claim.name())
                        && trust(s, &claim) == Trust::Sure =>
                {
                    Some(claim)
                }
                _ => None,
            });
        if let Some(claim) = confirmed {
            found = claim;
            trusted = Trust::Sure;
        }
    }
    // What callers further out add: a `String` owns a byte buffer, a map owns its table.
    for seen in &run[first + 1..] {
        match (says(function(seen.frame)), &mut found) {
            (Says::StringBytes, Found::Buffer(element)) if element == "u8" => {
                found = Found::Named("alloc::string::String".to_owned());
                trusted = Trust::Sure;
            }
            (Says::Map(name, from_std), Found::Table(_, map)) if from_std || map.is_none() => {
                *map = Some(name);
                trusted = match seen.shared {
                    None => Trust::Sure,
                    Some(_) => Trust::Shared(Vec::new(), false),
                };
            }
            _ => {}
        }
    }
    match trusted {
        Trust::Sure => Some(found.name()),
        Trust::Shared(candidates, true) => Some(one_of(&candidates)),
        Trust::Shared(_, false) => None,
    }
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

/// The names of the functions that share one piece of code.
type SharedNames = Arc<[String]>;

/// Infers the type of one stack's blocks.
pub(crate) fn infer_stack(
    frames: &[ReturnAddress],
    resolver: &mut dyn Resolve,
    sharing: &mut dyn Sharing,
) -> Option<String> {
    // Only frames that may name the block need to know whether their code is shared.
    let resolved: Vec<(Arc<[Frame]>, Option<SharedNames>)> = frames
        .iter()
        .map(|&address| {
            let frames = resolver.resolve(address);
            let names_a_type = frames
                .iter()
                .any(|f| matches!(says(function(f)), Says::Block(_) | Says::Map(..)));
            let shared = names_a_type.then(|| sharing.instances(address)).flatten();
            (frames, shared)
        })
        .collect();
    let seen: Vec<Seen<'_>> = resolved
        .iter()
        .flat_map(|(frames, shared)| {
            let last = frames.len() - 1;
            frames.iter().enumerate().map(move |(i, frame)| Seen {
                frame,
                shared: shared.as_deref(),
                outermost: i == last,
            })
        })
        .collect();
    infer(&seen)
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
    let mut no_sharing = std::collections::HashMap::<ReturnAddress, Vec<String>>::new();
    snapshot
        .stacks
        .iter()
        .map(|stack| {
            if wanted(stack) {
                infer_stack(&stack.frames, resolver, &mut no_sharing).map(Arc::from)
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

/// The code of this process that several instances share.
static SHARED_CODE: Mutex<Option<SharedCode>> = Mutex::new(None);

/// The locks of the DWARF names, the shared code and the stack types, in the order they are
/// taken, for the forking thread to hold across `fork` (dropping the result lets them go).
pub(crate) fn lock_for_fork() -> impl Sized + 'static {
    let dwarf = DWARF_NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    let shared = SHARED_CODE.lock().unwrap_or_else(PoisonError::into_inner);
    (
        dwarf,
        shared,
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
        let mut shared = SHARED_CODE.lock().unwrap_or_else(PoisonError::into_inner);
        let shared = shared.get_or_insert_with(SharedCode::new);
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
                    .get_or_insert_with(|| {
                        infer_stack(&stack.frames, &mut resolver, shared).map(Arc::from)
                    })
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
        let seen: Vec<Seen<'_>> = frames
            .iter()
            .map(|frame| Seen {
                frame,
                shared: None,
                outermost: true,
            })
            .collect();
        infer(&seen)
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

    /// Infers from `inner` frames (innermost first) each with the instances that share its code
    /// (the frame taken as the function its return address is in), between the allocator and the
    /// user's `app::make`.
    fn infer_shared(inner: &[(&str, &[&str])]) -> Option<String> {
        let shared: Vec<Vec<String>> = inner
            .iter()
            .map(|(_, names)| names.iter().map(|n| n.to_string()).collect())
            .collect();
        let frames = stack(&inner.iter().map(|(f, _)| *f).collect::<Vec<_>>());
        let first_inner = 4;
        let seen: Vec<Seen<'_>> = frames
            .iter()
            .enumerate()
            .map(|(i, frame)| {
                let shared = i
                    .checked_sub(first_inner)
                    .and_then(|i| shared.get(i))
                    .filter(|names| !names.is_empty());
                Seen {
                    frame,
                    shared: shared.map(Vec::as_slice),
                    outermost: true,
                }
            })
            .collect();
        infer(&seen)
    }

    const FOLDED_GROW_ONE: &[&str] = &[
        "<alloc::raw_vec::RawVec<alloc::string::String>>::grow_one",
        "<alloc::raw_vec::RawVec<alloc::vec::Vec<u8>>>::grow_one",
        "<alloc::raw_vec::RawVec<std::ffi::os_str::OsString>>::grow_one",
    ];

    #[test]
    fn boxed_arrays_slices_and_tuples_are_named() {
        let cases: &[(&[&str], &str)] = &[
            (
                &[
                    "alloc::boxed::box_new_uninit",
                    "alloc::boxed::Box<[u8; 4096]>::new",
                ],
                "[u8; 4096]",
            ),
            (
                &["<alloc::boxed::Box<(u8, app::Foo)>>::new"],
                "(u8, app::Foo)",
            ),
            (
                &[
                    "<alloc::raw_vec::RawVecInner>::with_capacity_zeroed_in",
                    "alloc::raw_vec::RawVec<u8, alloc::alloc::Global>::with_capacity_zeroed_in",
                    "<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
                    "alloc::vec::from_elem",
                ],
                "[u8]",
            ),
            (
                &[
                    "alloc::vec::Vec<u32>::with_capacity",
                    "core::iter::traits::iterator::Iterator::collect",
                    "alloc::boxed::iter::<impl core::iter::traits::collect::FromIterator<I> for alloc::boxed::Box<[I]>>::from_iter",
                ],
                "[u32]",
            ),
        ];
        for (inner, expected) in cases {
            assert_eq!(infer_names(inner).as_deref(), Some(*expected), "{inner:?}");
        }
    }

    #[test]
    fn the_direct_caller_of_a_raw_frame_names_its_block() {
        // `Vec<String>::push` calling a `grow_one` the compiler merged with another instance's:
        // the caller's type, whether the sharing is known or not.
        let push = [
            "alloc::vec::Vec<alloc::string::String, alloc::alloc::Global>::push_mut",
            "alloc::vec::Vec<alloc::string::String, alloc::alloc::Global>::push",
        ];
        for shared in [FOLDED_GROW_ONE, &[]] {
            let inner = [
                ("<alloc::raw_vec::RawVecInner>::grow_one", &[][..]),
                (
                    "<alloc::raw_vec::RawVec<alloc::vec::Vec<u8>>>::grow_one",
                    shared,
                ),
                (push[0], &[]),
                (push[1], &[]),
            ];
            assert_eq!(
                infer_shared(&inner).as_deref(),
                Some("[alloc::string::String]"),
                "{shared:?}"
            );
        }
        // A `Box` converted into another `Box` keeps its own type.
        assert_eq!(
            infer_shared(&[
                ("<alloc::boxed::Box<app::StringError>>::new", &[]),
                (
                    "<alloc::boxed::Box<dyn core::error::Error> as core::convert::From<alloc::string::String>>::from",
                    &[]
                ),
            ])
            .as_deref(),
            Some("app::StringError")
        );
        // An `Rc<T>::new` whose `Box<RcInner<T>>::new` is another type's code.
        assert_eq!(
            infer_shared(&[
                (
                    "<alloc::boxed::Box<alloc::rc::RcInner<app::Other>>>::new",
                    &[]
                ),
                ("<alloc::rc::Rc<app::Doc>>::new", &[]),
            ])
            .as_deref(),
            Some("alloc::rc::Rc<app::Doc>")
        );
    }

    #[test]
    fn callers_that_own_other_blocks_do_not_rename_the_block() {
        // `vec![vec![0u8; 3]; 5]` clones each element: the clone's buffer is a `[u8]`, though the
        // frames of the outer `Vec<Vec<u8>>` follow it.
        assert_eq!(
            infer_names(&[
                "<alloc::raw_vec::RawVec<u8>>::with_capacity_in",
                "<[u8]>::to_vec_in::<alloc::alloc::Global>",
                "<alloc::vec::Vec<u8> as core::clone::Clone>::clone",
                "<alloc::vec::Vec<alloc::vec::Vec<u8>>>::extend_with",
            ])
            .as_deref(),
            Some("[u8]")
        );
    }

    #[test]
    fn shared_code_is_decided_by_other_frames_or_said() {
        // A frame further out names one of the instances.
        assert_eq!(
            infer_shared(&[
                (
                    "<alloc::raw_vec::RawVec<alloc::vec::Vec<u8>>>::reserve",
                    FOLDED_GROW_ONE
                ),
                ("alloc::vec::Vec<T,A>::extend_desugared", &[]),
                ("<alloc::vec::Vec<alloc::string::String>>::extend", &[]),
            ])
            .as_deref(),
            Some("[alloc::string::String]")
        );
        // Nothing decides: every instance's type is given, none alone.
        assert_eq!(
            infer_shared(&[(
                "<alloc::raw_vec::RawVec<alloc::vec::Vec<u8>>>::grow_one",
                FOLDED_GROW_ONE
            )])
            .as_deref(),
            Some(
                "(one of [alloc::string::String], [alloc::vec::Vec<u8>], [std::ffi::os_str::OsString])"
            )
        );
        // The instances do not say their types (legacy names): the type is unknown.
        assert_eq!(
            infer_shared(&[(
                "alloc::raw_vec::RawVec<alloc::vec::Vec<u8>, alloc::alloc::Global>::grow_one",
                &[
                    "alloc::raw_vec::RawVec<T,A>::grow_one",
                    "alloc::raw_vec::RawVec<T,A>::grow_one"
                ]
            )])
            .as_deref(),
            None
        );
        // Some instances do not say their types: the list would be incomplete.
        assert_eq!(
            infer_shared(&[(
                "<alloc::raw_vec::RawVec<alloc::string::String>>::grow_one",
                &[
                    "<alloc::raw_vec::RawVec<alloc::string::String>>::grow_one",
                    "alloc::raw_vec::RawVec<T,A>::grow_one"
                ]
            )])
            .as_deref(),
            None
        );
        // Instances that all give the block one name leave no doubt.
        assert_eq!(
            infer_shared(&[(
                "<alloc::raw_vec::RawVec<u64>>::grow_one",
                &[
                    "<alloc::raw_vec::RawVec<u64>>::grow_one",
                    "<alloc::raw_vec::RawVec<u64>>::grow_amortized"
                ]
            )])
            .as_deref(),
            Some("[u64]")
        );
        // A map frame names its table even when the table's code is shared.
        assert_eq!(
            infer_shared(&[
                (
                    "<hashbrown::raw::RawTable<(u64, app::Foo)>>::reserve_rehash",
                    &[
                        "<hashbrown::raw::RawTable<(u64, app::Foo)>>::reserve_rehash",
                        "<hashbrown::raw::RawTable<(u64, app::Bar)>>::reserve_rehash"
                    ]
                ),
                (
                    "<std::collections::hash::map::HashMap<u64, app::Bar>>::insert",
                    &[]
                ),
            ])
            .as_deref(),
            Some("std::collections::hash::map::HashMap<u64, app::Bar>")
        );
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
