//! Contexts as ids: the grouping under every report, in memory bounded by what is distinct.
//!
//! A report over a million stacks must not hold a million lists of strings. Each return address
//! is resolved once per report; each distinct frame string is made once and numbered; a stack's
//! context is the short list of those numbers (4 bytes a frame), and stacks whose lists are equal
//! are one group. Strings are made again only for the groups a report keeps, once the threshold
//! has left the others out.

#![forbid(unsafe_code)]

use super::ReportOptions;
use crate::address::ReturnAddress;
use crate::frames::{self, Frame};
use crate::symbolize::Resolve;
use std::collections::HashMap;
use std::sync::Arc;

/// A context in a [`Contexts`]: the numbers of its frame strings, innermost first.
pub(crate) type ContextKey = Box<[u32]>;

/// A return address's frames (kept alive for the report's length) and the number of each frame's
/// string.
type Resolved = (Arc<[Frame]>, Box<[u32]>);

/// The contexts of stacks, numbered, with the frame strings they are made of.
pub(crate) struct Contexts<'r> {
    resolver: &'r mut dyn Resolve,
    skip: usize,
    depth: usize,
    /// Per return address: what it resolved to.
    addresses: HashMap<ReturnAddress, Resolved>,
    /// Frame strings by number.
    names: Vec<Arc<str>>,
    /// Numbers by frame string.
    numbers: HashMap<Arc<str>, u32>,
    /// Scratch: the expanded frames of the stack at hand, and their numbers.
    expanded: Vec<u32>,
}

impl<'r> Contexts<'r> {
    pub(crate) fn new(resolver: &'r mut dyn Resolve, options: &ReportOptions) -> Contexts<'r> {
        Contexts {
            resolver,
            skip: options.skip,
            depth: options.depth,
            addresses: HashMap::new(),
            names: Vec::new(),
            numbers: HashMap::new(),
            expanded: Vec::new(),
        }
    }

    /// The context of a stack (return addresses, innermost first), as numbers: what
    /// [`super::context_of`] gives, each string replaced by its number.
    pub(crate) fn key(&mut self, stack: &[ReturnAddress]) -> ContextKey {
        for &address in stack {
            if !self.addresses.contains_key(&address) {
                let resolved = self.resolver.resolve(address);
                let numbers = resolved
                    .iter()
                    .map(|frame| {
                        let name: Arc<str> = Arc::from(frame.to_string());
                        let next = self.names.len() as u32;
                        *self.numbers.entry(name.clone()).or_insert_with(|| {
                            self.names.push(name);
                            next
                        })
                    })
                    .collect();
                self.addresses.insert(address, (resolved, numbers));
            }
        }
        let mut expanded: Vec<&Frame> = Vec::new();
        self.expanded.clear();
        for address in stack {
            let (resolved, numbers) = &self.addresses[address];
            expanded.extend(resolved.iter());
            self.expanded.extend_from_slice(numbers);
        }
        let range = frames::program_frames(&expanded);
        self.expanded[range]
            .iter()
            .copied()
            .skip(self.skip)
            .take(self.depth)
            .collect()
    }

    /// The frame strings of a context.
    pub(crate) fn strings(&self, key: &[u32]) -> Vec<String> {
        key.iter()
            .map(|&n| self.names[n as usize].to_string())
            .collect()
    }
}
