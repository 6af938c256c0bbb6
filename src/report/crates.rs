//! The crate table: live and allocated blocks and bytes per crate ([`super::log_crates`]), as
//! cargo-bloat gives a binary's size per crate.
//!
//! # The rule
//!
//! A stack's frames (innermost first, inlined calls expanded) are searched from the allocation
//! outwards, within the frames a report's context is taken from (memprof's own frames above, the
//! runtime that calls `main` or a thread below are never searched). Passed over are:
//!
//! - memprof's own frames, and the allocator's entry points that are nobody's crate
//!   (`__rust_alloc`, the global allocator's shim, the C library's `malloc`);
//! - the standard library's frames: those whose source file is under the toolchain's sources
//!   (`/rustc/<commit>/library/...`, where `std`, `core`, `alloc` live) or under the crates std
//!   vendors (`/rust/deps/hashbrown-0.15.2/...`, std's `HashMap`), or C++'s headers; a frame
//!   without a line (no debug information) by its function's path (`std::`, `core::`, `alloc::`,
//!   `hashbrown::`). A `hashbrown` from the Cargo registry is a crate like any other: its files
//!   are under `~/.cargo/registry/src/`, std's are not;
//! - frames nothing is known of (`???`).
//!
//! The first frame left names the crate. A frame is named by its source file when that file is
//! in the Cargo registry (`.../registry/src/<index>/serde_json-1.0.140/src/de.rs` → `serde_json`,
//! `-` read as `_`), else by its function's path: the first segment (`serde_json::de::from_str`,
//! its closures and generic instances → `serde_json`); for a trait method, `<T as Trait>::f`, the
//! type's crate, or the trait's when the type is the standard library's or a primitive
//! (`<alloc::vec::Vec<T> as serde::Deserialize>::deserialize` → `serde`). Each frame is named by
//! its own function and file, so a generic function of `serde_json` inlined into the program's
//! code is `serde_json`'s frame (the debug information keeps the inlined call as a frame of its
//! own), and the program's function that called it is not looked at. A frame that is not Rust's
//! (a source file that is not `.rs`, or no file and a name that is not a Rust path) is named by
//! its shared object's file name (`libsqlite3.so.0`).
//!
//! A stack with only the standard library's frames is `std`'s (what std's runtime allocates
//! itself); one where no frame could be named, `(unknown)`. So every stack has one row, and the
//! rows sum exactly to the snapshot's totals.
//!
//! By caller crate, the row also names the first frame (from the allocation outwards) in the
//! program's own crates, `my_cache ← serde_json`: a Rust frame with a source file outside the
//! Cargo registry, Cargo's git checkouts and the toolchain (the main crate and the workspace's
//! members, path dependencies). A crate of the program's own is its own caller and reads alone.
//! A stack is recorded only as deep as reports show (`MEMPROF_STACK_DEPTH` frames past the
//! allocator's): where a dependency's own frames fill it, the program's frame is not on it, and
//! the row reads `(no own frame) ← serde_json`; a deeper `MEMPROF_STACK_DEPTH` gives it.

use super::markdown::{code_span, thousands};
use crate::address::ReturnAddress;
use crate::frames::{self, Frame};
use crate::snapshot::Snapshot;
use crate::symbolize::Resolve;
use std::collections::HashMap;
use std::io::{self, Write};
use std::ops::Range;
use std::sync::Arc;

/// The name of the row of stacks where no frame could be named, or none was recorded.
pub(crate) const UNKNOWN: &str = "(unknown)";

/// The name of the row of stacks with only the standard library's frames.
pub(crate) const STD: &str = "std";

/// The caller of a crate's row when the stack holds no frame of the program's own crates: a
/// dependency's own thread, or a stack cut at its depth before it reached the program's code.
pub(crate) const NO_OWN_FRAME: &str = "(no own frame)";

/// What the blocks of one crate (or caller crate and crate) add up to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CrateRow {
    /// The crate, or `caller ← crate`.
    pub name: String,
    /// Bytes live in the snapshot.
    pub live_bytes: u64,
    /// Blocks live in the snapshot.
    pub live_blocks: u64,
    /// Bytes allocated over the run.
    pub allocated_bytes: u64,
    /// Blocks allocated over the run.
    pub allocated_blocks: u64,
}

impl CrateRow {
    fn add(&mut self, other: &CrateRow) {
        self.live_bytes = self.live_bytes.saturating_add(other.live_bytes);
        self.live_blocks = self.live_blocks.saturating_add(other.live_blocks);
        self.allocated_bytes = self.allocated_bytes.saturating_add(other.allocated_bytes);
        self.allocated_blocks = self.allocated_blocks.saturating_add(other.allocated_blocks);
    }

    /// The figures as `[live bytes, live blocks, allocated bytes, allocated blocks]`.
    pub(crate) fn figures(&self) -> [u64; 4] {
        [
            self.live_bytes,
            self.live_blocks,
            self.allocated_bytes,
            self.allocated_blocks,
        ]
    }
}

/// The crate of a stack (return addresses, innermost first) by [the rule](self); with `caller`,
/// `caller ← crate`.
pub(crate) fn crate_of_stack(
    stack: &[ReturnAddress],
    resolver: &mut dyn Resolve,
    caller: bool,
) -> String {
    let resolved = resolver.resolve_stack(stack);
    let mut frames: Vec<&Frame> = Vec::new();
    let mut modules: Vec<Option<Arc<str>>> = Vec::new();
    for (&address, address_frames) in stack.iter().zip(&resolved) {
        // Only a frame of C or C++ with a source file needs its module: the others are named
        // by their path or their module's file.
        let needs_module = address_frames
            .iter()
            .any(|f| f.line != 0 && f.file.as_deref().is_some_and(|f| !f.ends_with(".rs")));
        let module = if needs_module {
            resolver.module_name(address)
        } else {
            None
        };
        for frame in address_frames.iter() {
            frames.push(frame);
            modules.push(module.clone());
        }
    }
    let modules: Vec<Option<&str>> = modules.iter().map(|m| m.as_deref()).collect();
    crate_of(&frames, &modules, caller)
}

/// The crate of a stack's frames (innermost first, inlined calls expanded), each with its
/// module's file name when known, by [the rule](self).
pub(crate) fn crate_of(frames: &[&Frame], modules: &[Option<&str>], caller: bool) -> String {
    let range = searched(frames);
    let mut unknown = false;
    let found = range
        .clone()
        .find_map(|i| match frame_crate(frames[i], modules[i]) {
            // The `main` rustc makes, which calls std's runtime: no crate's code.
            _ if i > 0 && is_generated_main(frames[i], frames[i - 1]) => None,
            Named::Crate(name) => Some((i, name)),
            Named::Unknown => {
                unknown = true;
                None
            }
            Named::Passed => None,
        });
    let Some((at, name)) = found else {
        // A stack without any frame (a walk that captured nothing) is no more std's than
        // anyone's.
        return if unknown || frames.is_empty() {
            UNKNOWN
        } else {
            STD
        }
        .to_owned();
    };
    if !caller {
        return name;
    }
    let own = (at..range.end).find_map(|i| own_crate(frames[i]));
    match own {
        Some(own) if own == name => name,
        Some(own) => format!("{own} ← {name}"),
        None => format!("{NO_OWN_FRAME} ← {name}"),
    }
}

/// The frames searched: below memprof's own (those that call the program back aside) and
/// above the runtime that calls the program.
fn searched(frames: &[&Frame]) -> Range<usize> {
    let start = frames
        .iter()
        .rposition(|f| frames::is_profiler_frame(f) && !frames::calls_program(f))
        .map_or(0, |last| last + 1);
    let end = frames::program_frames(frames).end.max(start);
    start..end
}

/// Whether `frame` is the C `main` rustc makes for a Rust program (it calls std's
/// `lang_start`, the frame `inner` to it).
fn is_generated_main(frame: &Frame, inner: &Frame) -> bool {
    frame.function.as_deref() == Some("main")
        && inner
            .function
            .as_deref()
            .is_some_and(|f| f.starts_with("std::rt::lang_start"))
}

/// What a frame tells of its crate.
#[derive(Debug, PartialEq, Eq)]
enum Named {
    /// Its crate.
    Crate(String),
    /// Nothing: memprof's, the allocator's entry or the standard library's.
    Passed,
    /// Nothing: nothing is known of it.
    Unknown,
}

/// The crate a frame names, by [the rule](self).
fn frame_crate(frame: &Frame, module: Option<&str>) -> Named {
    let function = frame.function.as_deref().unwrap_or("");
    if frame.function.is_none() && frame.file.is_none() {
        return Named::Unknown;
    }
    let registry = frame.file.as_deref().and_then(registry_crate);
    if frames::is_profiler_frame(frame)
        || frames::is_std_frame(frame)
        || (registry.is_none() && frames::is_allocator_frame(function))
    {
        return Named::Passed;
    }
    if let Some(name) = registry {
        return Named::Crate(name);
    }
    let file = frame.file.as_deref();
    let rust = match file {
        Some(file) if frame.line != 0 => file.ends_with(".rs"),
        // No debug information: Rust's if the name is a Rust path (C++'s names carry their
        // parameters' types in parentheses).
        _ => function.contains("::") && !function.contains('('),
    };
    if rust && let Some(name) = path_crate(function) {
        return if is_std_crate(name) {
            Named::Passed
        } else {
            Named::Crate(name.to_owned())
        };
    }
    // Not Rust: its shared object; the file is the module's when there is no line.
    let object = match (file, frame.line) {
        (Some(file), 0) => Some(file),
        _ => module,
    };
    match object {
        Some(path) => Named::Crate(path.rsplit('/').next().unwrap_or(path).to_owned()),
        None => Named::Unknown,
    }
}

/// The crate of a frame of the program's own crates: a Rust frame with a source file outside the
/// Cargo registry, Cargo's git checkouts and the toolchain; `None` for any other.
fn own_crate(frame: &Frame) -> Option<String> {
    let file = frame.file.as_deref()?;
    if frame.line == 0
        || !file.ends_with(".rs")
        || registry_crate(file).is_some()
        || file.contains("/.cargo/git/checkouts/")
        || file.contains("/.rustup/toolchains/")
        || frames::is_profiler_frame(frame)
        || frames::is_std_frame(frame)
    {
        return None;
    }
    let name = path_crate(frame.function.as_deref()?)?;
    (!is_std_crate(name)).then(|| name.to_owned())
}

/// The crates of Rust's toolchain.
fn is_std_crate(name: &str) -> bool {
    matches!(
        name,
        "std" | "core" | "alloc" | "proc_macro" | "test" | "panic_unwind" | "panic_abort"
    )
}

/// The crate of a file in a Cargo registry's sources,
/// `.../registry/src/<host>-<hash>/<name>-<version>/...`, with `-` read as `_` (as its paths
/// name it).
fn registry_crate(file: &str) -> Option<String> {
    const REGISTRY: &str = "/registry/src/";
    let at = file.find(REGISTRY)?;
    let (_index, rest) = file[at + REGISTRY.len()..].split_once('/')?;
    let (directory, _) = rest.split_once('/')?;
    // The version starts at the first `-` followed by `digits.`.
    let split = directory.match_indices('-').map(|(i, _)| i).find(|&i| {
        let version = &directory[i + 1..];
        let digits = version.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && version.as_bytes().get(digits) == Some(&b'.')
    })?;
    Some(directory[..split].replace('-', "_"))
}

/// The crate a demangled function's path names: its first segment (`serde_json::de::from_str`
/// → `serde_json`); for `<T as Trait>::f`, `T`'s crate, or `Trait`'s when `T` is the standard
/// library's or has no path (a primitive, a reference to one); for `<T>::f`, `T`'s.
pub(crate) fn path_crate(function: &str) -> Option<&str> {
    let function = function.trim();
    let Some(inner) = function.strip_prefix('<') else {
        return first_segment(function);
    };
    // The qualified type, up to its `>`, and ` as Trait` within it.
    let mut depth = 0usize;
    let mut end = inner.len();
    let mut as_at = None;
    for (i, c) in inner.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            // `->` of a function type.
            '>' if inner[..i].ends_with('-') => {}
            '>' if depth == 0 => {
                end = i;
                break;
            }
            '>' => depth -= 1,
            ' ' if depth == 0 && inner[i..].starts_with(" as ") && as_at.is_none() => {
                as_at = Some(i)
            }
            _ => {}
        }
    }
    let inner = &inner[..end];
    let (ty, tr) = match as_at {
        Some(at) => (&inner[..at], Some(&inner[at + 4..])),
        None => (inner, None),
    };
    let ty_crate = type_crate(ty);
    match (ty_crate, tr) {
        (Some(name), _) if !is_std_crate(name) => Some(name),
        (_, Some(tr)) => path_crate(tr).or(ty_crate),
        (name, None) => name,
    }
}

/// The crate of a type as a demangled name writes it: past references, pointers, `dyn`,
/// slices, arrays and tuples (their first element), the first segment of its path.
fn type_crate(ty: &str) -> Option<&str> {
    let mut ty = ty.trim();
    loop {
        let before = ty;
        for prefix in [
            "&mut ", "&", "*const ", "*mut ", "dyn ", "impl ", "[", "(", "mut ",
        ] {
            ty = ty.strip_prefix(prefix).unwrap_or(ty).trim_start();
        }
        if ty.starts_with('<') {
            return path_crate(ty);
        }
        if ty == before {
            break;
        }
    }
    first_segment(ty)
}

/// The first segment of a path, when it has more than one (`u64` is no crate); a v0 name's
/// disambiguator (`serde_json[1a2b]`) left out.
fn first_segment(path: &str) -> Option<&str> {
    let end = path
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(path.len());
    let name = &path[..end];
    let rest = &path[end..];
    let rest = match rest.strip_prefix('[') {
        Some(after) => after.split_once(']').map_or("", |(_, r)| r),
        None => rest,
    };
    (!name.is_empty() && rest.starts_with("::") && !name.starts_with(|c: char| c.is_ascii_digit()))
        .then_some(name)
}

/// One row per crate (or caller crate and crate) of the stacks of `snapshot` that allocated
/// anything, most live bytes first, then most allocated bytes, then by name.
pub(crate) fn rows(snapshot: &Snapshot, resolver: &mut dyn Resolve, caller: bool) -> Vec<CrateRow> {
    let mut by_crate: HashMap<String, CrateRow> = HashMap::new();
    for stack in &snapshot.stacks {
        if stack.allocated_blocks == 0 && stack.live_blocks == 0 {
            continue;
        }
        let name = crate_of_stack(&stack.frames, resolver, caller);
        by_crate.entry(name).or_default().add(&CrateRow {
            name: String::new(),
            live_bytes: stack.live_bytes,
            live_blocks: stack.live_blocks,
            allocated_bytes: stack.allocated_bytes,
            allocated_blocks: stack.allocated_blocks,
        });
    }
    sorted(
        by_crate
            .into_iter()
            .map(|(name, row)| CrateRow { name, ..row })
            .collect(),
    )
}

/// `rows` most live bytes first, then most allocated bytes, then by name.
pub(crate) fn sorted(mut rows: Vec<CrateRow>) -> Vec<CrateRow> {
    rows.sort_by(|a, b| {
        b.live_bytes
            .cmp(&a.live_bytes)
            .then(b.allocated_bytes.cmp(&a.allocated_bytes))
            .then_with(|| a.name.cmp(&b.name))
    });
    rows
}

/// The sum of `rows`, named `total`.
pub(crate) fn total(rows: &[CrateRow]) -> CrateRow {
    let mut total = CrateRow {
        name: "(total)".to_owned(),
        ..CrateRow::default()
    };
    for row in rows {
        total.add(row);
    }
    total
}

/// Writes `rows` as a Markdown table, `| Crate | Live bytes | Live blocks | Allocated bytes |
/// Allocated blocks |`, then the total row; estimates from a sampled profile are followed by a
/// line that says so.
pub(crate) fn write_markdown<W: Write + ?Sized>(
    rows: &[CrateRow],
    sample_interval: u64,
    out: &mut W,
) -> io::Result<()> {
    let total = total(rows);
    let cells: Vec<(String, [String; 4])> = rows
        .iter()
        .map(|r| (code_span(&r.name), r.figures().map(thousands)))
        .chain([("**total**".to_owned(), total.figures().map(thousands))])
        .collect();
    const HEADS: [&str; 4] = [
        "Live bytes",
        "Live blocks",
        "Allocated bytes",
        "Allocated blocks",
    ];
    let name_width = cells.iter().map(|c| c.0.len()).max().unwrap_or(0).max(5);
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            cells
                .iter()
                .map(|c| c.1[i].len())
                .max()
                .unwrap_or(0)
                .max(HEADS[i].len())
        })
        .collect();
    let mut buffer = format!("| {:<name_width$} |", "Crate");
    for (head, width) in HEADS.iter().zip(&widths) {
        buffer.push_str(&format!(" {head:>width$} |"));
    }
    buffer.push_str(&format!("\n|{}|", "-".repeat(name_width + 2)));
    for width in &widths {
        buffer.push_str(&format!("{}:|", "-".repeat(width + 1)));
    }
    buffer.push('\n');
    for (name, figures) in &cells {
        buffer.push_str(&format!("| {name:<name_width$} |"));
        for (figure, width) in figures.iter().zip(&widths) {
            buffer.push_str(&format!(" {figure:>width$} |"));
        }
        buffer.push('\n');
    }
    if sample_interval != 0 {
        buffer.push_str(&format!(
            "\nEstimates: one allocation in every {} bytes on average was recorded (`MEMPROF_SAMPLE_INTERVAL`).\n",
            thousands(sample_interval)
        ));
    }
    out.write_all(buffer.as_bytes())
}

/// Writes `rows` as TSV: the number of lines that follow, then `crate \t live_bytes \t
/// live_blocks \t allocated_bytes \t allocated_blocks` per crate, then the same for `(total)`.
pub(crate) fn write_tsv<W: Write + ?Sized>(rows: &[CrateRow], out: &mut W) -> io::Result<()> {
    let mut buffer = format!("{}\n", rows.len() + 1);
    for row in rows.iter().chain([&total(rows)]) {
        let mut name = String::new();
        super::tsv::escape_into(&mut name, &row.name, &[]);
        let [a, b, c, d] = row.figures();
        buffer.push_str(&format!("{name}\t{a}\t{b}\t{c}\t{d}\n"));
    }
    out.write_all(buffer.as_bytes())
}

#[cfg(test)]
mod tests;
