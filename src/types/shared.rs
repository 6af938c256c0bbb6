//! Code that several instances of a generic function share.
//!
//! LLVM merges functions whose machine code is identical, and linkers may fold them:
//! `RawVec<String>::grow_one` and `RawVec<Vec<u8>>::grow_one` both move 24-byte elements, so they
//! are one piece of code. The debug information then describes that code under one instance's
//! name, and a frame in it may name a type the program never allocated there. The symbol table
//! keeps every instance: each one's symbol stays, at the one address. [`SharedCode`] reads it, once
//! per module, and tells for an address the names of all the instances whose code it is, when
//! there are several.

#![forbid(unsafe_code)]

use crate::address::ReturnAddress;
use crate::modules::{self, Module};
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Tells which code is shared by several functions.
pub(crate) trait Sharing {
    /// The demangled names of the functions whose code holds `address` (a return address, looked
    /// up inside its call instruction), when several functions share that code; `None` when it is
    /// one function's, or when nothing is known.
    fn instances(&mut self, address: ReturnAddress) -> Option<Arc<[String]>>;
}

/// Tables made up for tests: the instances by return address.
impl<S: std::hash::BuildHasher> Sharing for HashMap<ReturnAddress, Vec<String>, S> {
    fn instances(&mut self, address: ReturnAddress) -> Option<Arc<[String]>> {
        self.get(&address)
            .filter(|names| !names.is_empty())
            .map(|names| Arc::from(names.as_slice()))
    }
}

/// The shared code of one module: each piece of code that several function symbols start, with
/// their names, by start address relative to the module's load bias.
struct Groups {
    /// Code ranges, sorted by start, and the names of the functions that share each.
    groups: Vec<(Range<u64>, Arc<[String]>)>,
}

impl Groups {
    fn find(&self, probe: u64) -> Option<Arc<[String]>> {
        let index = self
            .groups
            .partition_point(|(range, _)| range.start <= probe)
            .checked_sub(1)?;
        let (range, names) = &self.groups[index];
        range.contains(&probe).then(|| names.clone())
    }

    /// Reads the function symbols of an ELF file and keeps those that start at the same address
    /// as another function of a different name.
    fn read(path: &Path) -> Option<Groups> {
        let mut functions: Vec<(u64, u64, Vec<u8>)> = Vec::new();
        modules::for_each_function(path, true, |value, size, name| {
            functions.push((value, size, name.to_vec()));
        })?;
        functions.sort_unstable();
        functions.dedup_by(|a, b| a.0 == b.0 && a.2 == b.2);
        let mut groups = Vec::new();
        for group in functions.chunk_by(|a, b| a.0 == b.0) {
            if group.len() < 2 {
                continue;
            }
            let start = group[0].0;
            let end = group.iter().map(|f| start + f.1).max().unwrap_or(start);
            let mut names: Vec<String> = group
                .iter()
                .map(|f| {
                    let name = String::from_utf8_lossy(&f.2);
                    format!("{:#}", rustc_demangle::demangle(&name))
                })
                .collect();
            names.sort_unstable();
            names.dedup();
            groups.push((start..end, Arc::from(names)));
        }
        Some(Groups { groups })
    }
}

/// The shared code of this process's modules, read from their symbol tables on first use.
#[derive(Default)]
pub(crate) struct SharedCode {
    /// Loaded modules, re-read when an address falls in none of them.
    modules: Vec<Module>,
    /// Shared code per module file; `None` when its symbols could not be read.
    groups: HashMap<PathBuf, Option<Groups>>,
}

impl SharedCode {
    /// Nothing read yet.
    pub(crate) fn new() -> SharedCode {
        SharedCode::default()
    }
}

impl Sharing for SharedCode {
    fn instances(&mut self, address: ReturnAddress) -> Option<Arc<[String]>> {
        let pc = address.lookup_address();
        let index = modules::find_or_reload(&mut self.modules, pc)?;
        let module = &self.modules[index];
        let probe = (pc - module.bias) as u64;
        let path = module.path.clone();
        self.groups
            .entry(path.clone())
            .or_insert_with(|| Groups::read(&path))
            .as_ref()?
            .find(probe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_found_by_any_address_inside() {
        let groups = Groups {
            groups: vec![
                (0x100..0x180, Arc::from(["a".to_owned(), "b".to_owned()])),
                (0x200..0x210, Arc::from(["c".to_owned(), "d".to_owned()])),
            ],
        };
        assert_eq!(groups.find(0x100).as_deref().map(|n| n.len()), Some(2));
        assert_eq!(groups.find(0x17f).as_deref().map(|n| &n[0][..]), Some("a"));
        assert!(groups.find(0x180).is_none());
        assert!(groups.find(0xff).is_none());
        assert_eq!(groups.find(0x20f).as_deref().map(|n| &n[1][..]), Some("d"));
    }

    /// The standard library's own `RawVec<T>::grow_one` instances for 24-byte elements are one
    /// piece of code, under several symbols: the symbol table of this test binary says so.
    #[test]
    fn folded_instances_of_this_binary_are_seen() {
        let own = folded_instances_of_this_binary_are_seen as fn() as usize;
        let module = modules::loaded()
            .into_iter()
            .find(|m| m.contains(own))
            .expect("this binary");
        let groups = Groups::read(&module.path).expect("a symbol table");
        let folded = groups.groups.iter().any(|(_, names)| {
            names
                .iter()
                .any(|n| n.contains("RawVec<alloc::string::String>>::grow_one"))
                && names
                    .iter()
                    .any(|n| n.contains("RawVec<alloc::vec::Vec<u8>>>::grow_one"))
        });
        assert!(folded, "no shared grow_one");
    }
}
