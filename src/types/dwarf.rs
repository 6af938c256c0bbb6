//! Generic arguments from DWARF, for builds whose symbols are legacy-mangled.
//!
//! A legacy symbol names a generic function by its source path (`alloc::boxed::Box<T>::new`), but
//! the DWARF entry of each instance is named with its arguments (`DW_AT_name` = `new<app::Foo>`),
//! also when the instance is inlined. [`DwarfNames`] reads those names for the frames of a return
//! address, innermost first, in the order the symbolizer lists them, so the two can be paired.
//!
//! Only the debug sections are kept in memory, copied once per module when first needed (copied,
//! not mapped, so that this module needs no `unsafe`), and only builds that need them load them:
//! with v0 mangling the symbols carry the arguments already.

#![forbid(unsafe_code)]

use crate::address::ReturnAddress;
use crate::modules::{self, Module};
use addr2line::gimli;
use object::{Object, ObjectSection};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// A section's bytes, kept for the life of the process like the symbolizer's own.
type Slice = gimli::EndianSlice<'static, gimli::RunTimeEndian>;

/// The DWARF of one module.
struct ModuleDwarf {
    /// The sections.
    dwarf: Arc<gimli::Dwarf<Slice>>,
    /// Finds the frames of an address.
    context: addr2line::Context<Slice>,
    /// Unit headers by offset in `.debug_info`, for references that cross units.
    headers: Vec<gimli::UnitHeader<Slice>>,
    /// Parsed units, by their offset in `.debug_info`.
    units: HashMap<usize, Option<Arc<gimli::Unit<Slice>>>>,
}

/// Copies a section out of the file and keeps it for the life of the process.
fn keep(bytes: std::borrow::Cow<'_, [u8]>) -> &'static [u8] {
    Box::leak(bytes.into_owned().into_boxed_slice())
}

impl ModuleDwarf {
    fn load(path: &PathBuf) -> Option<ModuleDwarf> {
        let file = std::fs::read(path).ok()?;
        let object = object::File::parse(&*file).ok()?;
        object.section_by_name(".debug_info")?;
        let endian = if object.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let dwarf = gimli::Dwarf::load(|id| -> Result<Slice, gimli::Error> {
            let data: &'static [u8] = match object.section_by_name(id.name()) {
                Some(section) => section.uncompressed_data().map(keep).unwrap_or(&[]),
                None => &[],
            };
            Ok(gimli::EndianSlice::new(data, endian))
        })
        .ok()?;
        let mut headers = Vec::new();
        let mut iter = dwarf.units();
        while let Ok(Some(header)) = iter.next() {
            headers.push(header);
        }
        let dwarf = Arc::new(dwarf);
        let context = addr2line::Context::from_arc_dwarf(dwarf.clone()).ok()?;
        Some(ModuleDwarf {
            dwarf,
            context,
            headers,
            units: HashMap::new(),
        })
    }

    /// The parsed unit that holds `.debug_info` offset `offset`.
    fn unit_at(&mut self, offset: usize) -> Option<Arc<gimli::Unit<Slice>>> {
        let index = self
            .headers
            .partition_point(|h| unit_start(h) <= offset)
            .checked_sub(1)?;
        let header = self.headers[index];
        let start = unit_start(&header);
        let dwarf = &self.dwarf;
        self.units
            .entry(start)
            .or_insert_with(|| dwarf.unit(header).ok().map(Arc::new))
            .clone()
    }

    /// The `DW_AT_name` of the entry at `offset` in `unit`, following `DW_AT_abstract_origin` and
    /// `DW_AT_specification` to the entry that has one.
    fn name_of(
        &mut self,
        unit: Arc<gimli::Unit<Slice>>,
        offset: gimli::UnitOffset,
        depth: u32,
    ) -> Option<String> {
        if depth == 0 {
            return None;
        }
        let entry = unit.entry(offset).ok()?;
        if let Some(value) = entry.attr_value(gimli::DW_AT_name) {
            let name = self.dwarf.attr_string(&unit, value).ok()?;
            return Some(name.to_string_lossy().into_owned());
        }
        for attribute in [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification] {
            match entry.attr_value(attribute) {
                Some(gimli::AttributeValue::UnitRef(target)) => {
                    return self.name_of(unit, target, depth - 1);
                }
                Some(gimli::AttributeValue::DebugInfoRef(target)) => {
                    let other = self.unit_at(target.0)?;
                    let local = target.to_unit_offset(&other.header)?;
                    return self.name_of(other, local, depth - 1);
                }
                _ => {}
            }
        }
        None
    }

    /// The DWARF names of the frames at `probe`, innermost first.
    fn frame_names(&mut self, probe: u64) -> Option<Vec<Option<String>>> {
        let offsets: Vec<Option<gimli::UnitOffset>> = {
            let mut frames = self.context.find_frames(probe).skip_all_loads().ok()?;
            let mut offsets = Vec::new();
            while let Ok(Some(frame)) = frames.next() {
                offsets.push(frame.dw_die_offset);
            }
            offsets
        };
        if offsets.is_empty() {
            return None;
        }
        let unit_start = {
            let unit = self.context.find_dwarf_and_unit(probe).skip_all_loads()?;
            unit.unit.header.offset().0
        };
        let unit = self.unit_at(unit_start)?;
        Some(
            offsets
                .into_iter()
                .map(|offset| offset.and_then(|o| self.name_of(unit.clone(), o, 8)))
                .collect(),
        )
    }
}

/// Where a unit starts in `.debug_info`.
fn unit_start(header: &gimli::UnitHeader<Slice>) -> usize {
    header.offset().0
}

/// DWARF instance names of this process's code, cached per address.
#[derive(Default)]
pub(crate) struct DwarfNames {
    /// Loaded modules, re-read when an address falls in none of them.
    modules: Vec<Module>,
    /// DWARF per module file; `None` when it has none or could not be read.
    dwarf: HashMap<PathBuf, Option<ModuleDwarf>>,
    /// Answers by address.
    cache: HashMap<ReturnAddress, Option<Arc<[Option<String>]>>>,
}

impl DwarfNames {
    /// An empty cache; modules are listed and read on first use.
    pub(crate) fn new() -> DwarfNames {
        DwarfNames::default()
    }

    /// The `DW_AT_name` of each frame of `address` (`new<app::Foo>`), innermost first, or `None`
    /// when the module has no DWARF for it.
    pub(crate) fn frame_names(&mut self, address: ReturnAddress) -> Option<Arc<[Option<String>]>> {
        if let Some(answer) = self.cache.get(&address) {
            return answer.clone();
        }
        let answer = self.lookup(address);
        self.cache.insert(address, answer.clone());
        answer
    }

    fn lookup(&mut self, address: ReturnAddress) -> Option<Arc<[Option<String>]>> {
        let pc = address.lookup_address();
        let index = modules::find_or_reload(&mut self.modules, pc)?;
        let module = &self.modules[index];
        let probe = (pc - module.bias) as u64;
        let path = module.path.clone();
        let dwarf = self
            .dwarf
            .entry(path.clone())
            .or_insert_with(|| ModuleDwarf::load(&path))
            .as_mut()?;
        dwarf.frame_names(probe).map(Arc::from)
    }
}
