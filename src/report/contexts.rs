//! Contexts as ids: the grouping under every report, in memory bounded by what is distinct.
//!
//! A report over a million stacks must not hold a million lists of strings. Each return address
//! is resolved once per report with the address younger than it in the stack (the frames of an
//! address may depend on it: a function the caller tail-called is recovered when the younger
//! frame lies outside it, [`Resolve::resolve_stack`]); each distinct frame string is made once and numbered; a stack's
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
    /// Per return address and the address younger than it in the stack (none for the innermost):
    /// what it resolved to.
    addresses: HashMap<(ReturnAddress, Option<ReturnAddress>), Resolved>,
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
        let pairs = || {
            let younger = std::iter::once(None).chain(stack.iter().copied().map(Some));
            stack.iter().copied().zip(younger)
        };
        for pair in pairs() {
            if !self.addresses.contains_key(&pair) {
                let resolved = match pair {
                    (address, None) => self.resolver.resolve(address),
                    (address, Some(younger)) => self
                        .resolver
                        .resolve_stack(&[younger, address])
                        .pop()
                        .unwrap_or_else(|| self.resolver.resolve(address)),
                };
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
                self.addresses.insert(pair, (resolved, numbers));
            }
        }
        let mut expanded: Vec<&Frame> = Vec::new();
        self.expanded.clear();
        for pair in pairs() {
            let (resolved, numbers) = &self.addresses[&pair];
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
