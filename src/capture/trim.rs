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
//! So when the profiler starts, the symbol table of memprof's own module (the program, for a
//! crate linked in) tells which of its functions a report shows wherever they are
//! ([`frames::is_shown_by_name`]), kept as a bit per 16 bytes of code. From the first such
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

#![forbid(unsafe_code)]

use crate::frames;
use crate::modules;
use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes of code per bit, as a power of two: functions start 16-byte aligned on x86-64 and
/// AArch64, so a granule rarely holds two of them (and is then shown only if both are).
const GRANULE_BITS: u32 = 4;

/// The code of one module that reports show wherever it stands.
pub(crate) struct Shown {
    /// First granule of the code, as an address shifted by [`GRANULE_BITS`].
    first: usize,
    /// A bit per granule, set where a report shows the code.
    bits: Vec<u64>,
    /// Whether code outside the module counts as shown ([`count_outside`]).
    outside: bool,
}

/// Set by [`count_outside`] before [`load`].
static OUTSIDE: AtomicBool = AtomicBool::new(false);

/// Frames a walk takes beyond the report's when code outside memprof's module counts as shown:
/// what a report may still trim of it (C++'s `operator new`, the run of its standard library's
/// frames it collapses to one).
const OUTSIDE_MARGIN: usize = 3;

/// What was read when the profiler started; unset until then.
static SHOWN: OnceLock<Shown> = OnceLock::new();

/// Nothing known: every frame is one a report may hide.
static NONE: Shown = Shown::nothing();

impl Shown {
    /// Nothing shown: what a walk knows without a symbol table.
    const fn nothing() -> Shown {
        Shown {
            first: 0,
            bits: Vec::new(),
            outside: false,
        }
    }

    /// From `functions` (address ranges, and whether reports show them) that lie in `code`.
    pub(crate) fn from_functions(
        code: Range<usize>,
        functions: impl IntoIterator<Item = (Range<usize>, bool)>,
    ) -> Shown {
        let first = code.start >> GRANULE_BITS;
        let granules = match code.is_empty() {
            true => 0,
            false => ((code.end - 1) >> GRANULE_BITS) + 1 - first,
        };
        // 0: no function, 1: shown, 2: hidden; two functions in one granule leave it hidden, so
        // that a walk goes deeper rather than stop short.
        let mut ranks = vec![0u8; granules];
        for (range, shown) in functions {
            let start = range.start.max(code.start);
            let end = range.end.min(code.end);
            if start >= end {
                continue;
            }
            let rank = if shown { 1 } else { 2 };
            for granule in (start >> GRANULE_BITS)..=((end - 1) >> GRANULE_BITS) {
                let r = &mut ranks[granule - first];
                *r = (*r).max(rank);
            }
        }
        let mut bits = vec![0u64; granules.div_ceil(64)];
        for (index, _) in ranks.iter().enumerate().filter(|(_, r)| **r == 1) {
            bits[index / 64] |= 1 << (index % 64);
        }
        Shown {
            first,
            bits,
            outside: false,
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
}

/// Makes code outside memprof's own module count as shown, for the preloaded library: its module
/// holds memprof alone, and reports show nearly all the rest (the program's code, the C
/// library's), so a walk starts counting at the first frame out of it, with a margin
/// ([`OUTSIDE_MARGIN`]). Without it, no frame of a program that is not memprof's module would
/// ever count, and every walk would go its full length. Call it before [`load`].
#[cfg(feature = "preload")]
pub(crate) fn count_outside() {
    OUTSIDE.store(true, Ordering::Relaxed);
}

/// Reads which code of memprof's own module reports show, from its symbol table, once; later
/// calls do nothing. Allocates and reads a file: call it where the profiler starts, inside the
/// reentrancy guard.
pub(crate) fn load() {
    SHOWN.get_or_init(|| read().unwrap_or(Shown::nothing()));
}

/// The code of the module holding this function that reports show, from the symbol table of its
/// file.
fn read() -> Option<Shown> {
    let own = read as fn() -> Option<Shown> as usize;
    let module = modules::loaded().into_iter().find(|m| m.contains(own))?;
    let code =
        module.text.iter().map(|r| r.start).min()?..module.text.iter().map(|r| r.end).max()?;
    let mut functions: Vec<(Range<usize>, bool)> = Vec::new();
    let mut demangled = Prefix::default();
    modules::for_each_function(&module.path, false, |value, size, name| {
        let Ok(name) = std::str::from_utf8(name) else {
            return;
        };
        let start = (value as usize).wrapping_add(module.bias);
        let shown = match rustc_demangle::try_demangle(name) {
            Ok(name) => demangled.is_shown(name),
            Err(_) => frames::is_shown_by_name(name),
        };
        functions.push((start..start.saturating_add(size as usize), shown));
    })?;
    if functions.is_empty() {
        return None;
    }
    let mut shown = Shown::from_functions(code, functions);
    shown.outside = OUTSIDE.load(Ordering::Relaxed);
    Some(shown)
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

    /// Whether reports show `name` (see [`frames::is_shown_by_name`]); not for a name too long
    /// to see whole, which may mention a standard-library path past the limit.
    fn is_shown(&mut self, name: rustc_demangle::Demangle<'_>) -> bool {
        use std::fmt::Write;
        self.text.clear();
        write!(self, "{name:#}").is_ok() && frames::is_shown_by_name(&self.text)
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
    /// A budget of `want` frames, with what was read when the profiler started; with nothing
    /// read, it never starts counting and a walk goes to its end.
    #[inline]
    pub(crate) fn new(want: usize) -> Budget {
        let shown = SHOWN.get().unwrap_or(&NONE);
        Budget {
            shown,
            want: match shown.outside {
                true => want.saturating_add(OUTSIDE_MARGIN),
                false => want,
            },
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
        if self.want == 0 || !self.shown.contains(return_address.wrapping_sub(1)) {
            return None;
        }
        let end = n.saturating_add(self.want - 1);
        self.want = 0;
        Some(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Code at 0x1000..0x1100: an allocator shim, two std functions, two of the program's, one of
    /// memprof's, and a gap no symbol covers.
    fn sample() -> &'static Shown {
        let functions = [
            (0x1000..0x1010, "__rustc::__rust_alloc"),
            (
                0x1010..0x1030,
                "alloc::raw_vec::RawVecInner<A>::finish_grow",
            ),
            (0x1030..0x1040, "alloc::vec::Vec<T,A>::push"),
            (0x1040..0x1060, "app::build"),
            (0x1060..0x1080, "<app::Index as app::Load>::load"),
            (0x1080..0x1090, "memprof::types::tag"),
            // Shares a granule with `app::main` (0x10a0..0x10b0), which is then not shown.
            (0x10a0..0x10a8, "core::ptr::drop_in_place<app::Index>"),
            (0x10a8..0x10c0, "app::main"),
            (0x10f0..0x1200, "app::beyond_the_code"),
        ];
        Box::leak(Box::new(Shown::from_functions(
            0x1000..0x1100,
            functions.map(|(range, name)| (range, frames::is_shown_by_name(name))),
        )))
    }

    #[test]
    fn shown_code_follows_the_report_names() {
        let shown = sample();
        let shown_at = [0x1040, 0x107f, 0x10b5, 0x10f5];
        let hidden_at = [
            0x1005,
            0x101f,
            0x1035,
            0x1088,
            0x1095,
            0x10a9,
            0x1100,
            0xfff,
            0,
            usize::MAX,
        ];
        for address in shown_at {
            assert!(shown.contains(address), "{address:#x}");
        }
        for address in hidden_at {
            assert!(!shown.contains(address), "{address:#x}");
        }
    }

    /// How many of `returns` a walk with a budget of `want` takes.
    fn taken(want: usize, returns: &[usize]) -> usize {
        let mut budget = Budget {
            shown: sample(),
            want,
        };
        let mut limit = returns.len();
        for (n, &r) in returns.iter().enumerate() {
            if let Some(end) = budget.end_after(n + 1, r) {
                limit = limit.min(end);
            }
        }
        limit
    }

    #[test]
    fn the_count_starts_at_the_first_shown_frame() {
        // Return addresses point one past the call: 0x1010 is a call at the end of the shim.
        let shim = 0x1010;
        let grow = 0x1020;
        let push = 0x1038;
        let build = 0x1050;
        let load = 0x1070;
        let own = 0x1088;
        let unknown = 0x1098;
        assert_eq!(taken(2, &[shim, grow, push, build, load, 0x10b0]), 5);
        assert_eq!(taken(1, &[shim, grow, push, build, load]), 4);
        // Before it, frames of memprof's and unknown ones do not count.
        assert_eq!(taken(1, &[own, unknown, shim, load, build]), 4);
        // After it, every frame counts, std, unknown and memprof's own too.
        assert_eq!(taken(3, &[shim, build, push, unknown, own, load]), 4);
        // A stack that ends first is taken whole.
        assert_eq!(taken(5, &[shim, grow, build]), 3);
        assert_eq!(taken(2, &[shim, grow]), 2);
    }

    #[test]
    fn without_symbols_the_count_never_starts() {
        let mut budget = Budget::unlimited();
        assert!((1..1000).all(|r| budget.end_after(r, r * 8).is_none()));
        let mut budget = Budget {
            shown: &NONE,
            want: 1,
        };
        assert!((1..1000).all(|r| budget.end_after(r, r * 8).is_none()));
    }

    #[test]
    fn this_module_reads_its_own_symbols() {
        let shown = read().expect("the test binary has a symbol table");
        // memprof's own functions (the test's too: it lives in the crate under test) and std's
        // are not shown.
        let own = read as fn() -> Option<Shown> as usize;
        let test = this_module_reads_its_own_symbols as fn() as usize;
        let std_fn = std::thread::current as fn() -> std::thread::Thread as usize;
        for address in [own, test, std_fn] {
            assert!(!shown.contains(address), "{address:#x}");
        }
        assert!(shown.bits.iter().any(|word| *word != 0));
    }
}
