//! Which frames a report hides at the top of a stack, known by address, so that a walk stops as
//! soon as it holds the frames a report shows.
//!
//! A report trims memprof's own frames and the allocator's from the top of each stack, collapses
//! the standard-library frames that follow into one, and then shows `MEMPROF_STACK_DEPTH` frames
//! ([`symbolize::context`]). Not knowing which frames those are, a walk would have to go a fixed
//! margin deeper ([`TRIMMED_FRAMES`](crate::config::TRIMMED_FRAMES)) on every allocation, though
//! most stacks need only a few of them, and every frame walked costs time and table memory.
//!
//! So when the profiler starts, the symbol table of memprof's own module (the program, for a
//! crate linked in) gives each of its functions a [`NameClass`], kept as two bits per 16 bytes of
//! code. A [`Budget`] counts the frames of a walk the way `context` does: none before the first
//! shown one, then every frame, and none of those above a frame of memprof's own. The walk ends
//! once it has counted `depth + skip` of them, or at the margin.
//!
//! Every frame counted stands for at least one frame of the report (its own function, with any
//! inlined into it), so a report shows as many frames as with the full margin. Where the table
//! cannot tell (code outside the module, no symbol, a stripped binary) a frame is taken as one a
//! report may hide, and the walk goes as deep as it did without the table.

use crate::capture::modules;
use crate::symbolize::{self, NameClass};
use std::ops::Range;
use std::sync::OnceLock;

/// Bytes of code per class, as a power of two: functions start 16-byte aligned on x86-64 and
/// AArch64, so a granule rarely holds two of them (and then takes the more hidden class).
const GRANULE_BITS: u32 = 4;

/// Class of code the table says nothing of.
const UNKNOWN: u8 = 0;
/// [`NameClass::Shown`].
const SHOWN: u8 = 1;
/// [`NameClass::HiddenAtTop`].
const HIDDEN: u8 = 2;
/// [`NameClass::Profiler`].
const PROFILER: u8 = 3;

/// The classes of one module's code.
pub struct Classes {
    /// First granule of the code, as an address shifted by [`GRANULE_BITS`].
    first: usize,
    /// Two bits per granule, four granules a byte, lowest bits first.
    bits: Vec<u8>,
}

/// The classes read when the profiler started; unset until then, or when they could not be read.
static CLASSES: OnceLock<Classes> = OnceLock::new();

/// No classes: every frame is one a report may hide.
static NONE: Classes = Classes {
    first: 0,
    bits: Vec::new(),
};

impl Classes {
    /// The classes of the functions of `symbols` (address ranges and classes) that lie in `code`.
    pub fn from_symbols(
        code: Range<usize>,
        symbols: impl IntoIterator<Item = (Range<usize>, NameClass)>,
    ) -> Classes {
        let first = code.start >> GRANULE_BITS;
        let granules = match code.is_empty() {
            true => 0,
            false => ((code.end - 1) >> GRANULE_BITS) + 1 - first,
        };
        let mut classes = Classes {
            first,
            bits: vec![0; granules.div_ceil(4)],
        };
        for (range, class) in symbols {
            let start = range.start.max(code.start);
            let end = range.end.min(code.end);
            if start >= end {
                continue;
            }
            let class = match class {
                NameClass::Shown => SHOWN,
                NameClass::HiddenAtTop => HIDDEN,
                NameClass::Profiler => PROFILER,
            };
            for granule in (start >> GRANULE_BITS)..=((end - 1) >> GRANULE_BITS) {
                let (byte, shift) = classes.slot(granule);
                let old = (classes.bits[byte] >> shift) & 3;
                // Two functions in one granule: the more hidden class wins, so a walk goes deeper
                // rather than stop short.
                if class > old {
                    classes.bits[byte] = (classes.bits[byte] & !(3 << shift)) | (class << shift);
                }
            }
        }
        classes
    }

    /// The byte of `granule` and the shift of its two bits in it; the byte may be out of range.
    #[inline(always)]
    fn slot(&self, granule: usize) -> (usize, u32) {
        let index = granule.wrapping_sub(self.first);
        (index / 4, (index % 4) as u32 * 2)
    }

    /// The class of the code at `address`.
    #[inline(always)]
    fn class(&self, address: usize) -> u8 {
        let (byte, shift) = self.slot(address >> GRANULE_BITS);
        self.bits.get(byte).map_or(UNKNOWN, |b| (b >> shift) & 3)
    }
}

/// Reads the classes of memprof's own module from its symbol table, once; later calls do
/// nothing. Allocates and reads a file: call it where the profiler starts, inside the reentrancy
/// guard.
pub fn load() {
    CLASSES.get_or_init(|| {
        read().unwrap_or(Classes {
            first: 0,
            bits: Vec::new(),
        })
    });
}

/// The classes of the module holding this function, from the symbol table of its file.
fn read() -> Option<Classes> {
    use object::read::elf::{FileHeader, SectionHeader, Sym};
    let own = read as fn() -> Option<Classes> as usize;
    let module = modules::loaded().into_iter().find(|m| m.contains(own))?;
    let code =
        module.text.iter().map(|r| r.start).min()?..module.text.iter().map(|r| r.end).max()?;
    let file = std::fs::File::open(&module.path).ok()?;
    // Only the headers, the symbol table and its strings are read, each in one piece.
    let cache = object::ReadCache::new(file);
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&cache).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, &cache).ok()?;
    let symbols = sections
        .symbols(endian, &cache, object::elf::SHT_SYMTAB)
        .ok()?;
    let strings = sections
        .section(symbols.string_section())
        .ok()?
        .data(endian, &cache)
        .ok()?;
    let strings = object::StringTable::new(strings, 0, strings.len() as u64);
    let mut classes: Vec<(Range<usize>, NameClass)> = Vec::new();
    let mut demangled = Prefix::default();
    for symbol in symbols.iter() {
        let size = symbol.st_size(endian) as usize;
        if symbol.st_type() != object::elf::STT_FUNC || size == 0 {
            continue;
        }
        let Some(name) = symbol
            .name(endian, strings)
            .ok()
            .and_then(|n| std::str::from_utf8(n).ok())
        else {
            continue;
        };
        let start = (symbol.st_value(endian) as usize).wrapping_add(module.bias);
        let class = match rustc_demangle::try_demangle(name) {
            Ok(name) => demangled.class_of(name),
            Err(_) => symbolize::class_of_function(name),
        };
        classes.push((start..start.saturating_add(size), class));
    }
    if classes.is_empty() {
        return None;
    }
    Some(Classes::from_symbols(code, classes))
}

/// The start of a demangled name, written into a buffer used again for every name: reading a
/// large program's symbols is mostly demangling, and the class shows in the start of a name.
#[derive(Default)]
struct Prefix {
    text: String,
}

impl Prefix {
    /// Bytes of a name looked at; past them, demangling stops.
    const LIMIT: usize = 256;

    /// The class of `name`; a name too long to see whole may hide its class past the limit, so
    /// it takes the class that makes a walk go deeper.
    fn class_of(&mut self, name: rustc_demangle::Demangle<'_>) -> NameClass {
        use std::fmt::Write;
        self.text.clear();
        let whole = write!(self, "{name:#}").is_ok();
        match symbolize::class_of_function(&self.text) {
            NameClass::Shown if !whole => NameClass::HiddenAtTop,
            class => class,
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

/// Counts the frames of a walk as a report does, to tell when the walk has enough.
pub struct Budget {
    classes: &'static Classes,
    /// Frames wanted: the report's depth and skip.
    want: usize,
    /// Frames counted so far.
    have: usize,
    /// Whether a shown frame came since the top (or since memprof's last frame).
    counting: bool,
}

impl Budget {
    /// A budget of `want` frames, with the classes read when the profiler started; with none
    /// read, it is never met and a walk goes to its end.
    #[inline]
    pub fn new(want: usize) -> Budget {
        match CLASSES.get() {
            Some(classes) => Budget::with(classes, want),
            None => Budget::unlimited(),
        }
    }

    /// A budget never met.
    pub fn unlimited() -> Budget {
        Budget::with(&NONE, usize::MAX)
    }

    fn with(classes: &'static Classes, want: usize) -> Budget {
        Budget {
            classes,
            want,
            have: 0,
            counting: false,
        }
    }

    /// Counts the frame that returns to `return_address`; whether the walk now has enough.
    #[inline(always)]
    pub fn is_met_after(&mut self, return_address: usize) -> bool {
        // The call instruction, not the next one: a call that ends a function returns past it.
        match self.classes.class(return_address.wrapping_sub(1)) {
            PROFILER => {
                self.have = 0;
                self.counting = false;
            }
            SHOWN => {
                self.counting = true;
                self.have += 1;
            }
            _ => self.have += self.counting as usize,
        }
        self.have >= self.want
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leak(classes: Classes) -> &'static Classes {
        Box::leak(Box::new(classes))
    }

    /// Code at 0x1000..0x1100: an allocator shim, two std functions, two of the program's, one of
    /// memprof's, and a gap no symbol covers.
    fn sample() -> &'static Classes {
        let symbols = [
            (0x1000..0x1010, "__rustc::__rust_alloc"),
            (
                0x1010..0x1030,
                "alloc::raw_vec::RawVecInner<A>::finish_grow",
            ),
            (0x1030..0x1040, "alloc::vec::Vec<T,A>::push"),
            (0x1040..0x1060, "app::build"),
            (0x1060..0x1080, "<app::Index as app::Load>::load"),
            (0x1080..0x1090, "memprof::types::tagged"),
            // Shares a granule with `app::main` (0x10a0..0x10b0): the hidden class wins.
            (0x10a0..0x10a8, "core::ptr::drop_in_place<app::Index>"),
            (0x10a8..0x10c0, "app::main"),
            (0x10f0..0x1200, "app::beyond_the_code"),
        ];
        leak(Classes::from_symbols(
            0x1000..0x1100,
            symbols.map(|(range, name)| (range, symbolize::class_of_function(name))),
        ))
    }

    #[test]
    fn classes_follow_the_report_names() {
        let c = sample();
        let at = |a: usize| c.class(a);
        assert_eq!(at(0x1005), HIDDEN);
        assert_eq!(at(0x101f), HIDDEN);
        assert_eq!(at(0x1035), HIDDEN);
        assert_eq!(at(0x1040), SHOWN);
        assert_eq!(at(0x107f), SHOWN);
        assert_eq!(at(0x1088), PROFILER);
        assert_eq!(at(0x1095), UNKNOWN);
        assert_eq!(at(0x10a9), HIDDEN);
        assert_eq!(at(0x10b5), SHOWN);
        assert_eq!(at(0x10f5), SHOWN);
        assert_eq!(at(0x1100), UNKNOWN);
        assert_eq!(at(0xfff), UNKNOWN);
        assert_eq!(at(0), UNKNOWN);
        assert_eq!(at(usize::MAX), UNKNOWN);
    }

    /// How many of `returns` a walk with a budget of `want` takes.
    fn taken(want: usize, returns: &[usize]) -> usize {
        let mut budget = Budget::with(sample(), want);
        returns
            .iter()
            .position(|&r| budget.is_met_after(r))
            .map_or(returns.len(), |i| i + 1)
    }

    #[test]
    fn budget_counts_from_the_first_shown_frame() {
        // Return addresses point one past the call: 0x1010 is a call at the end of the shim.
        let shim = 0x1010;
        let grow = 0x1020;
        let push = 0x1038;
        let build = 0x1050;
        let load = 0x1070;
        let unknown = 0x1098;
        assert_eq!(taken(2, &[shim, grow, push, build, load, 0x10b0]), 5);
        assert_eq!(taken(1, &[shim, grow, push, build, load]), 4);
        // After the first shown frame, every frame counts, std and unknown ones too.
        assert_eq!(taken(3, &[shim, build, push, unknown, load]), 4);
        // Before it, unknown frames do not.
        assert_eq!(taken(1, &[unknown, unknown, shim, load]), 4);
        // A frame of memprof's starts the count again: the report trims all above it.
        assert_eq!(taken(2, &[shim, build, 0x1088, push, load, build]), 6);
        assert_eq!(taken(2, &[shim, grow]), 2);
    }

    #[test]
    fn without_classes_the_budget_is_never_met() {
        let mut budget = Budget::unlimited();
        assert!((0..1000).all(|r| !budget.is_met_after(r * 8)));
        let mut budget = Budget::with(&NONE, 1);
        assert!((0..1000).all(|r| !budget.is_met_after(r * 8)));
    }

    #[test]
    fn this_module_reads_its_own_classes() {
        let classes = read().expect("the test binary has a symbol table");
        let own = read as fn() -> Option<Classes> as usize;
        assert_eq!(classes.class(own), PROFILER);
        let program = this_module_reads_its_own_classes as fn() as usize;
        // The test's own function is memprof's too: it lives in the crate under test.
        assert_eq!(classes.class(program), PROFILER);
        let std_fn = std::thread::current as fn() -> std::thread::Thread as usize;
        assert_eq!(classes.class(std_fn), HIDDEN);
    }
}
