//! Which code a report shows wherever it stands on a stack, known by address, so that a walk
//! stops as soon as it holds the frames a report shows.
//!
//! A report trims memprof's own frames and the allocator's from the top of each stack, collapses
//! the standard-library frames that follow into one, trims the runtime below the program's entry
//! (`main`, a thread's closure) from the bottom, and then shows `MEMPROF_STACK_DEPTH` frames
//! ([`frames::context`]). Not knowing which frames those are, a walk would have to go a fixed
//! margin deeper ([`TRIMMED_FRAMES`](crate::config::TRIMMED_FRAMES)) on every allocation, though
//! most stacks need only a few of them, and every frame walked costs time and table memory.
//!
//! So the symbol table of memprof's own module (the program, for a crate linked in) tells which
//! of its functions a report shows wherever they are ([`frames::is_shown_by_name`]), kept as a
//! bit per 16 bytes of code. It is read once the program has made [`WALKS_BEFORE_READING`] walks,
//! or at the first walk that reaches the margin, whichever comes first ([`read_when_due`]), not
//! when the profiler starts: a short-lived program (one that makes a few allocations, or none
//! after its runtime's) never pays for it, and in an unoptimized build reading and demangling a
//! large table takes much longer than the walks it shortens. Walks before it go their full
//! length (to the end of the stack or the margin), as they do without a table, and a walk that
//! reached the margin before it is walked again with it. Under the preloaded library, the
//! allocation path may run inside the C library while it holds a lock (the loader's, during
//! `dlopen`), where reading could deadlock: there the walk that makes the read due only asks for
//! it, and a thread started with the profiler ([`start`]), which waits for that and nothing else,
//! reads it; walks go their full length until it is read, and none is walked again. A program
//! that never makes the read due never pays for it. From the first such
//! frame on, a walk counts down the frames it still wants (`depth + skip`, that one included),
//! without looking at any more bits: a frame's cost on the way down stays what it was without the
//! table. It ends there, or at the margin.
//!
//! Every frame counted stands for at least one frame of the report (its own function, with any
//! inlined into it), or lies below the program's entry, where a report shows nothing more, so a
//! report shows as many frames as with the full margin. No name of the runtime below the entry
//! counts as shown (std's, the C library's start of the process and its threads, and the `main`
//! that calls std's), so a walk never starts its count there. Where the table
//! cannot tell (code outside the module, no symbol, a stripped binary) a frame is taken as one a
//! report may hide, and the walk goes as deep as it did without the table. One case shows fewer:
//! a block allocated by the program's code that memprof itself calls below the program's first
//! frame (a closure given to `symbolize::with_symbolizer`), where the report trims everything
//! above memprof's frame but the walk counted it.
//!
//! The same table marks the code of memprof's functions that call the program's code back
//! ([`crate::calls`]: `with_labels`, the future `Labels::attach` returns), those alone in their
//! granules. Their frames stand between the program's, where no report shows them: a walk made
//! while such calls are on the thread's stack wants one frame more for each, and then leaves
//! their frames out ([`drop_calling`]), a bounds check and a bit per frame walked; other walks
//! never look. Such a walk makes the read due at once, so that from the first call on, their
//! frames are known.

#![forbid(unsafe_code)]

use crate::address::ReturnAddress;
use crate::frames;
use crate::modules;
use std::ops::Range;
use std::sync::OnceLock;
#[cfg(feature = "preload")]
use std::sync::atomic::AtomicU32;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Bytes of code per bit, as a power of two: functions start 16-byte aligned on x86-64 and
/// AArch64, so a granule rarely holds two of them (and is then shown only if both are).
const GRANULE_BITS: u32 = 4;

/// The code of one module that reports show wherever it stands, and that of memprof's functions
/// that call the program's code back.
pub(crate) struct Shown {
    /// First granule of the code, as an address shifted by [`GRANULE_BITS`].
    first: usize,
    /// A bit per granule, set where a report shows the code.
    bits: Vec<u64>,
    /// Whether code outside the module counts as shown ([`count_outside`]).
    outside: bool,
    /// Code outside the module in which a report hides nothing (modules of C alone: no C++ or
    /// Rust symbol), sorted by start: a walk whose first frame shown lies there takes no margin
    /// ([`OUTSIDE_MARGIN`]). Empty for the crate, and until the preloaded library reads it.
    plain: Vec<Range<usize>>,
    /// First granule of [`Shown::calling`]'s bits.
    calling_first: usize,
    /// A bit per granule from `calling_first` on, set where the code is memprof's own that calls
    /// the program's back ([`crate::calls`]), and nothing else; as far as the last such granule.
    calling: Vec<u64>,
}

/// What the symbol table tells of a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    /// A report shows it wherever it stands.
    Shown,
    /// A report may trim it.
    Hidden,
    /// memprof's own, calling the program's code back: a walk leaves its frames out.
    CallsProgram,
}

/// Set by [`count_outside`] before [`load`].
static OUTSIDE: AtomicBool = AtomicBool::new(false);

/// Frames a walk takes beyond the report's when code outside memprof's module counts as shown:
/// what a report may still trim of it (C++'s `operator new`, the run of its standard library's
/// frames it collapses to one).
const OUTSIDE_MARGIN: usize = 3;

/// What was read from the symbol table; unset until then (and for good when there is none).
static SHOWN: OnceLock<Shown> = OnceLock::new();

/// Walks made before the symbol table is read, unless one reaches the margin first: a few
/// hundred microseconds of longer walks at most in an optimized build, against the few
/// milliseconds (more in a large program, a hundred times more unoptimized) that reading costs.
pub(crate) const WALKS_BEFORE_READING: usize = 256;

/// Whether the symbol table is still to be read: cleared by the one thread that reads it.
static PENDING: AtomicBool = AtomicBool::new(true);

/// Walks made while [`PENDING`].
static WALKS: AtomicUsize = AtomicUsize::new(0);

/// Nothing known: every frame is one a report may hide.
static NONE: Shown = Shown::nothing();

impl Shown {
    /// Nothing shown: what a walk knows without a symbol table.
    const fn nothing() -> Shown {
        Shown {
            first: 0,
            bits: Vec::new(),
            outside: false,
            plain: Vec::new(),
            calling_first: 0,
            calling: Vec::new(),
        }
    }

    /// From `functions` (address ranges, and what reports make of them) that lie in `code`.
    pub(crate) fn from_functions(
        code: Range<usize>,
        functions: impl IntoIterator<Item = (Range<usize>, Code)>,
    ) -> Shown {
        let first = code.start >> GRANULE_BITS;
        let granules = match code.is_empty() {
            true => 0,
            false => ((code.end - 1) >> GRANULE_BITS) + 1 - first,
        };
        // The kinds of the functions in each granule, a bit each. A granule is shown, or calls
        // the program, only when every function in it does: otherwise a walk goes deeper rather
        // than stop short, and keeps a frame rather than leave out one of the program's.
        const SHOWN: u8 = 1;
        const HIDDEN: u8 = 2;
        const CALLING: u8 = 4;
        let mut kinds = vec![0u8; granules];
        // The granules from the first function that calls the program to the last.
        let mut span: Option<Range<usize>> = None;
        for (range, code_kind) in functions {
            let start = range.start.max(code.start);
            let end = range.end.min(code.end);
            if start >= end {
                continue;
            }
            let kind = match code_kind {
                Code::Shown => SHOWN,
                Code::Hidden => HIDDEN,
                Code::CallsProgram => CALLING,
            };
            let (low, high) = (
                (start >> GRANULE_BITS) - first,
                ((end - 1) >> GRANULE_BITS) - first,
            );
            for k in &mut kinds[low..=high] {
                *k |= kind;
            }
            if code_kind == Code::CallsProgram {
                span = Some(match span {
                    Some(span) => span.start.min(low)..span.end.max(high + 1),
                    None => low..high + 1,
                });
            }
        }
        let set = |bits: &mut Vec<u64>, index: usize| bits[index / 64] |= 1 << (index % 64);
        let mut bits = vec![0u64; granules.div_ceil(64)];
        for (index, _) in kinds.iter().enumerate().filter(|(_, k)| **k == SHOWN) {
            set(&mut bits, index);
        }
        // Bits for the granules of `span` alone.
        let (calling_first, calling) = match span {
            Some(span) => {
                let mut calling = vec![0u64; span.len().div_ceil(64)];
                let only_calling = kinds[span.clone()].iter().enumerate();
                for (index, _) in only_calling.filter(|(_, k)| **k == CALLING) {
                    set(&mut calling, index);
                }
                (first + span.start, calling)
            }
            None => (0, Vec::new()),
        };
        Shown {
            first,
            bits,
            outside: false,
            plain: Vec::new(),
            calling_first,
            calling,
        }
    }

    /// Whether the code at `address` is memprof's own that calls the program's back, and
    /// nothing else: a bounds check and a bit, for the walks made while such a call is on the
    /// stack.
    #[inline(always)]
    fn calls_program(&self, address: usize) -> bool {
        let index = (address >> GRANULE_BITS).wrapping_sub(self.calling_first);
        match self.calling.get(index / 64) {
            Some(word) => word >> (index % 64) & 1 != 0,
            None => false,
        }
    }

    /// Whether a report shows the code at `address` wherever it stands.
    #[inline(always)]
    fn contains(&self, address: usize) -> bool {
        let index = (address >> GRANULE_BITS).wrapping_sub(self.first);
        match self.bits.get(index / 64) {
            Some(word) => word >> (index % 64) & 1 != 0,
            None => self.outside,
        }
    }

    /// Frames a walk takes beyond the report's when the first frame a report shows is the call at
    /// `address`: when code outside the module counts as shown, [`OUTSIDE_MARGIN`], unless
    /// `address` is in code where a report hides nothing ([`Shown::plain`]).
    #[inline(always)]
    fn margin_after(&self, address: usize) -> usize {
        if !self.outside {
            return 0;
        }
        let at = self.plain.partition_point(|r| r.end <= address);
        match self.plain.get(at) {
            Some(r) if r.start <= address => 0,
            _ => OUTSIDE_MARGIN,
        }
    }
}

/// Makes code outside memprof's own module count as shown, for the preloaded library: its module
/// holds memprof alone, and reports show nearly all the rest (the program's code, the C
/// library's), so a walk starts counting at the first frame out of it, with a margin
/// ([`OUTSIDE_MARGIN`]). Without it, no frame of a program that is not memprof's module would
/// ever count, and every walk would go its full length. Call it before [`start`].
#[cfg(feature = "preload")]
pub(crate) fn count_outside() {
    OUTSIDE.store(true, Ordering::Relaxed);
}

/// Whether code outside memprof's own module counts as shown ([`count_outside`]): memprof runs as
/// the preloaded library, a module of its own.
pub(crate) fn counts_outside() -> bool {
    OUTSIDE.load(Ordering::Relaxed)
}

/// What the profiler's start does here: under the preloaded library ([`count_outside`]), starts
/// the thread that reads the symbol table once a walk asks for it ([`reader_thread`]), or reads
/// it now when that thread cannot start (the library starts from its constructor, where no lock
/// of the C library is held); a Rust program leaves it to [`read_when_due`]. Call it inside the
/// reentrancy guard.
pub(crate) fn start() {
    #[cfg(feature = "preload")]
    if OUTSIDE.load(Ordering::Relaxed)
        && crate::native::spawn(c"memprof-symbols", READER_STACK, reader_thread).is_err()
    {
        read_once();
    }
}

/// Stack of [`reader_thread`]: reading and demangling the table needs little of it.
#[cfg(feature = "preload")]
const READER_STACK: usize = 512 << 10;

/// Set to 1 by the first walk that makes the read due under the preloaded library ([`ask`]); a
/// futex [`reader_thread`] sleeps on.
#[cfg(feature = "preload")]
static ASKED: AtomicU32 = AtomicU32::new(0);

/// Under the preloaded library: waits until a walk asks for the symbol table ([`ask`]), reads
/// it, and ends. Runs inside the reentrancy guard, so what it allocates is not recorded; waiting
/// allocates nothing, so a program that never asks leaves nothing of memprof's live.
#[cfg(feature = "preload")]
fn reader_thread() {
    let _guard = crate::guard::Guard::enter();
    while ASKED.load(Ordering::Acquire) == 0 {
        crate::native::wait_while(&ASKED, 0);
    }
    read_once();
}

/// Asks [`reader_thread`] for the symbol table, from the allocation path: a store and, the
/// first time, a wake of a futex (a system call); it never allocates, locks or waits.
#[cfg(feature = "preload")]
fn ask() {
    if ASKED.load(Ordering::Relaxed) == 0 && ASKED.swap(1, Ordering::AcqRel) == 0 {
        crate::native::wake(&ASKED);
    }
}

/// Called after each walk of the allocation path, inside the reentrancy guard, with whether the
/// walk filled its buffer (reached the margin): reads the symbol table when it is due (see the
/// module's documentation). Returns whether it was read by this call and tells something, so
/// that a walk that reached the margin is made again with it. Never waits for another thread:
/// walks on other threads while one reads go their full length. Under the preloaded library it
/// only asks for the read ([`ask`]), and returns `false`.
#[inline(always)]
pub(crate) fn read_when_due(reached_margin: bool) -> bool {
    PENDING.load(Ordering::Relaxed) && count_walk(reached_margin)
}

/// [`read_when_due`] while the table is still to be read.
#[cold]
#[inline(never)]
fn count_walk(reached_margin: bool) -> bool {
    let walks = WALKS.fetch_add(1, Ordering::Relaxed) + 1;
    if !(reached_margin || walks >= WALKS_BEFORE_READING) {
        return false;
    }
    #[cfg(feature = "preload")]
    if OUTSIDE.load(Ordering::Relaxed) {
        ask();
        return false;
    }
    read_once()
}

/// Reads which code of memprof's own module reports show, from its symbol table, unless another
/// thread did or is doing it; returns whether this call read it and it tells something.
/// Allocates and reads a file: call it inside the reentrancy guard.
fn read_once() -> bool {
    if PENDING
        .compare_exchange(true, false, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    // Only the thread that cleared `PENDING` sets it, so this never waits.
    read().is_some_and(|shown| SHOWN.set(shown).is_ok())
}

/// The code of the module holding this function that reports show, from the symbol table of its
/// file.
fn read() -> Option<Shown> {
    let own = read as fn() -> Option<Shown> as usize;
    let module = modules::loaded().into_iter().find(|m| m.contains(own))?;
    let code =
        module.text.iter().map(|r| r.start).min()?..module.text.iter().map(|r| r.end).max()?;
    let mut functions: Vec<(Range<usize>, Code)> = Vec::new();
    let mut demangled = Prefix::default();
    modules::for_each_function(&module.path, false, |value, size, name| {
        let Ok(name) = std::str::from_utf8(name) else {
            return;
        };
        let start = (value as usize).wrapping_add(module.bias);
        let kind = match in_hidden_crate(name) && !may_call_program(name) {
            true => Code::Hidden,
            false => demangled.kind(name),
        };
        functions.push((start..start.saturating_add(size as usize), kind));
    })?;
    if functions.is_empty() {
        return None;
    }
    let mut shown = Shown::from_functions(code, functions);
    shown.outside = OUTSIDE.load(Ordering::Relaxed);
    if shown.outside {
        shown.plain = plain_code(own);
    }
    Some(shown)
}

/// The code of the modules loaded now, other than the one holding `own`, whose functions a report
/// never hides (see [`Shown::margin_after`]): modules whose symbol table (else dynamic symbols)
/// names no C++ or Rust function (no `_Z` or `_R` name), so that neither C++'s `operator new` nor
/// a standard library's frame can be among them; a module without symbols, whose frames a report
/// cannot name either, is one. Modules loaded later are not: walks whose first shown frame is in
/// one take the margin. Sorted by start. Reads each module's symbols: off the allocation path.
fn plain_code(own: usize) -> Vec<Range<usize>> {
    let mut plain = Vec::new();
    for module in modules::loaded() {
        if module.contains(own) || module.path.as_os_str().is_empty() {
            continue;
        }
        let mut mangled = false;
        let read = modules::for_each_function(&module.path, true, |_, _, name| {
            mangled |= name.starts_with(b"_Z") || name.starts_with(b"_R");
        });
        // An unreadable file (the vDSO, a deleted one) says nothing: not counted plain.
        if read.is_none() && std::fs::metadata(&module.path).is_err() {
            continue;
        }
        if !mangled {
            plain.extend(module.text.iter().cloned());
        }
    }
    plain.sort_unstable_by_key(|r| r.start);
    plain
}

/// Whether the mangled `name` may be that of one of memprof's functions that call the program's
/// code back ([`frames::calls_program_by_name`]), told without demangling it: those few are
/// demangled whatever their crate.
fn may_call_program(name: &str) -> bool {
    if let Some(rest) = name.strip_prefix("_ZN") {
        // `memprof::labels::...`, or `<memprof::labels::Attached<F> as ...>::poll`.
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        rest.starts_with("memprof6labels") || rest.starts_with("_$LT$memprof..labels..")
    } else {
        // v0: the crate's root, then the module.
        name.starts_with("_R") && name.contains("7memprof6labels")
    }
}

/// The crates whose functions a report never shows ([`frames::is_shown_by_name`]): a name in
/// one of them demangles to one that starts with its path.
const HIDDEN_CRATES: [&[u8]; 6] = [
    b"core",
    b"alloc",
    b"std",
    b"hashbrown",
    b"memprof",
    b"memprof_preload",
];

/// Whether the mangled `name` is that of a function in one of [`HIDDEN_CRATES`], told from its
/// first path segment without demangling it: most of a program's symbols are the standard
/// library's, and demangling them all was most of the time spent reading the table. `false`
/// where the name does not settle it (another crate, a name that starts with an `impl` or a
/// generic, a name of one segment), and the name is then demangled.
fn in_hidden_crate(name: &str) -> bool {
    let name = name.as_bytes();
    if let Some(rest) = name.strip_prefix(b"_ZN") {
        legacy_crate(rest).is_some_and(|c| HIDDEN_CRATES.contains(&c) || mentions_std_legacy(c))
    } else if let Some(rest) = name.strip_prefix(b"_R") {
        v0_crate(rest).is_some_and(|c| HIDDEN_CRATES.contains(&c))
    } else {
        false
    }
}

/// Whether a legacy-mangled path segment (such as `_$LT$$RF$T$u20$as$u20$core..fmt..Debug$GT$`,
/// an `impl`'s) names a path of the standard library after a character that cannot end an
/// identifier (`..`, or one of the escapes of `<`, `>`, `&`, `*`, `(`, `)`, `,`, `@`, a space, a
/// bracket, a brace or `;`): what [`frames::is_shown_by_name`] finds in it once demangled.
fn mentions_std_legacy(segment: &[u8]) -> bool {
    const BEFORE: [&[u8]; 16] = [
        b"..", b"$LT$", b"$GT$", b"$RF$", b"$BP$", b"$LP$", b"$RP$", b"$C$", b"$SP$", b"$u20$",
        b"$u5b$", b"$u5d$", b"$u7b$", b"$u7d$", b"$u3b$", b"$u7e$",
    ];
    const PATHS: [&[u8]; 4] = [b"core..", b"alloc..", b"std..", b"hashbrown.."];
    (1..segment.len()).any(|at| {
        let (head, tail) = segment.split_at(at);
        PATHS.iter().any(|p| tail.starts_with(p)) && BEFORE.iter().any(|b| head.ends_with(b))
    })
}

/// A decimal number at the start of `s`, and what follows it.
fn decimal(s: &[u8]) -> Option<(usize, &[u8])> {
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 9 || (digits > 1 && s[0] == b'0') {
        return None;
    }
    let n = s[..digits]
        .iter()
        .fold(0, |n, d| n * 10 + usize::from(d - b'0'));
    Some((n, &s[digits..]))
}

/// The first segment of a legacy-mangled path (`_ZN` taken off), when the whole name is one
/// (`<len><ident>`... `E`, then nothing or a `.` suffix) of at least two segments besides the
/// hash, so that it demangles to `crate::...`.
fn legacy_crate(mut rest: &[u8]) -> Option<&[u8]> {
    let mut segments: Vec<&[u8]> = Vec::new();
    while rest.first()?.is_ascii_digit() {
        let (len, after) = decimal(rest)?;
        segments.push(after.get(..len)?);
        rest = &after[len..];
        if segments.len() == 3 {
            // Enough to know the name has two segments besides the hash; the rest is checked
            // for its end only.
            break;
        }
    }
    while let Some(&b) = rest.first() {
        if b == b'E' {
            break;
        }
        let (len, after) = decimal(rest)?;
        rest = after.get(len..)?;
    }
    let end = rest.strip_prefix(b"E")?;
    if !(end.is_empty() || end.starts_with(b".")) {
        return None;
    }
    let is_hash =
        |s: &[u8]| s.len() == 17 && s[0] == b'h' && s[1..].iter().all(u8::is_ascii_hexdigit);
    let named = segments.iter().filter(|s| !is_hash(s)).count();
    (named >= 2).then_some(segments[0])
}

/// The crate of a v0-mangled path (`_R` taken off) that is nested paths (`N`) around a crate
/// root (`C`), perhaps with generic arguments after it (`I`), so that it demangles to
/// `crate::...`.
fn v0_crate(rest: &[u8]) -> Option<&[u8]> {
    let rest = rest.strip_prefix(b"I").unwrap_or(rest);
    let nested = rest
        .chunks(2)
        .take_while(|c| c[0] == b'N' && c.len() == 2)
        .count();
    if nested == 0 {
        return None;
    }
    let mut rest = rest[2 * nested..].strip_prefix(b"C")?;
    if let Some(after) = rest.strip_prefix(b"s") {
        let digits = after
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric())
            .count();
        rest = after[digits..].strip_prefix(b"_")?;
    }
    let (len, after) = decimal(rest)?;
    let after = after.strip_prefix(b"_").unwrap_or(after);
    after.get(..len)
}

/// The start of a demangled name, written into a buffer used again for every name: reading a
/// large program's symbols is mostly demangling, and what tells shows in the start of a name.
#[derive(Default)]
struct Prefix {
    text: String,
}

impl Prefix {
    /// Bytes of a name looked at; past them, demangling stops.
    const LIMIT: usize = 256;

    /// What reports make of the function of the mangled (or plain) `name`: memprof's that calls
    /// the program back, by the start of its name; shown or not by [`frames::is_shown_by_name`],
    /// and not shown when the name is too long to see whole, as it may mention a
    /// standard-library path past the limit.
    fn kind(&mut self, name: &str) -> Code {
        use std::fmt::Write;
        let Ok(demangled) = rustc_demangle::try_demangle(name) else {
            return match frames::is_shown_by_name(name) {
                true => Code::Shown,
                false => Code::Hidden,
            };
        };
        self.text.clear();
        let whole = write!(self, "{demangled:#}").is_ok();
        // The start of the name tells, even past the limit; whether it is shown, only the
        // whole name (see `is_shown`).
        if frames::calls_program_by_name(&self.text) {
            Code::CallsProgram
        } else if whole && frames::is_shown_by_name(&self.text) {
            Code::Shown
        } else {
            Code::Hidden
        }
    }
}

impl std::fmt::Write for Prefix {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.text.len() + s.len() > Self::LIMIT {
            return Err(std::fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// How many frames a walk wants, counted as a report counts them.
pub(crate) struct Budget {
    shown: &'static Shown,
    /// Frames wanted: the report's depth and skip; 0 once the first shown frame came and the
    /// walk knows where to end.
    want: usize,
}

impl Budget {
    /// A budget of `want` frames, with what was read from the symbol table; with nothing read
    /// (yet), it never starts counting and a walk goes to its end.
    #[inline]
    pub(crate) fn new(want: usize) -> Budget {
        Budget {
            shown: SHOWN.get().unwrap_or(&NONE),
            want,
        }
    }

    /// A budget that never starts counting.
    #[cfg(test)]
    pub(crate) fn unlimited() -> Budget {
        Budget {
            shown: &NONE,
            want: usize::MAX,
        }
    }

    /// Looks at the walk's `n`-th frame (from 1), which returns to `return_address`: when it is
    /// the first a report shows, how many frames the walk wants in all; `None` for the others,
    /// and without a look at the code once the count has started.
    #[inline(always)]
    pub(crate) fn end_after(&mut self, n: usize, return_address: usize) -> Option<usize> {
        // The call instruction, not the next one: a call that ends a function returns past it.
        let call = return_address.wrapping_sub(1);
        if self.want == 0 || !self.shown.contains(call) {
            return None;
        }
        let want = self.want.saturating_add(self.shown.margin_after(call));
        let end = n.saturating_add(want - 1);
        self.want = 0;
        Some(end)
    }
}

/// Takes out of `frames` (a walk's return addresses, innermost first) those in the code of
/// memprof's functions that call the program's code back ([`crate::calls`]), which stand
/// between the program's frames; and of the frames left after the first one a report shows,
/// keeps as many as a walk with a budget of `want` frames would. Returns how many are left at
/// the start of `frames`. For a walk made while such calls were on the stack, with a budget
/// larger by their number: each may have left a frame. Without a symbol table read, leaves
/// `frames` as they are.
pub(crate) fn drop_calling(frames: &mut [ReturnAddress], want: usize) -> usize {
    let Some(shown) = SHOWN.get() else {
        return frames.len();
    };
    leave_out_calling(shown, frames, want)
}

/// [`drop_calling`] with what was read from the symbol table.
fn leave_out_calling(shown: &Shown, frames: &mut [ReturnAddress], want: usize) -> usize {
    let mut kept = 0;
    // Frames wanted in all, once the first shown frame came.
    let mut end = usize::MAX;
    for at in 0..frames.len() {
        let address = frames[at];
        // The call instruction, as for the budget.
        let code = address.0.wrapping_sub(1);
        if shown.calls_program(code) {
            continue;
        }
        frames[kept] = address;
        kept += 1;
        if end == usize::MAX && shown.contains(code) {
            end = (kept - 1).saturating_add(want.saturating_add(shown.margin_after(code)));
        }
        if kept >= end {
            break;
        }
    }
    kept
}

#[cfg(test)]
mod tests;
