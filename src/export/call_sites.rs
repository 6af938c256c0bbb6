//! The call-site model every format writes: each stack of a snapshot symbolized, inlined calls
//! expanded, trimmed, and merged with the stacks that trim to the same frames. Built once per
//! export, so that every format shows the same sites with the same counters.

#![forbid(unsafe_code)]

use super::ExportOptions;
use crate::address::ReturnAddress;
use crate::address::StackId;
use crate::frames::{self, Frame};
use crate::snapshot::Snapshot;
use crate::symbolize::Resolve;
use std::collections::HashMap;
use std::sync::Arc;

/// The frames one return address contributes to a call site, after trimming.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The return address.
    pub address: ReturnAddress,
    /// Its frames that were kept, innermost (most inlined) first; never empty.
    pub frames: Vec<Frame>,
    /// The path of the loaded module (executable or shared library) the address falls in; `None`
    /// when it falls in none of this process's modules (synthetic snapshots).
    pub module: Option<String>,
}

/// Stacks that trim to the same frames, with their counters summed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallSite {
    /// Indices into [`CallSites::locations`], innermost first; empty when no frame is known.
    pub locations: Vec<usize>,
    /// The snapshot's stacks that trim to this site, in stack order.
    pub stacks: Vec<StackId>,
    /// Blocks allocated over the run.
    pub allocated_blocks: u64,
    /// Bytes allocated over the run.
    pub allocated_bytes: u64,
    /// Blocks live in the snapshot.
    pub live_blocks: u64,
    /// Bytes live in the snapshot.
    pub live_bytes: u64,
    /// The size of each live block, in address order.
    pub live_sizes: Vec<u64>,
    /// Blocks live at the heap's peak; the live values when the snapshot does not know the peak.
    pub peak_blocks: u64,
    /// Bytes live at the heap's peak; the live values when the snapshot does not know the peak.
    pub peak_bytes: u64,
    /// The label set of its stacks ([`Snapshot::label_sets`]) when the sites were built by
    /// labels ([`CallSites::build_by_labels`]); 0 otherwise, and for blocks without labels.
    pub labels: u32,
}

impl CallSite {
    /// Blocks allocated and freed since (allocated minus live; 0 if the counters disagree).
    pub fn freed_blocks(&self) -> u64 {
        self.allocated_blocks.saturating_sub(self.live_blocks)
    }

    /// Bytes allocated and freed since (allocated minus live; 0 if the counters disagree).
    pub fn freed_bytes(&self) -> u64 {
        self.allocated_bytes.saturating_sub(self.live_bytes)
    }
}

/// The call sites of a snapshot, symbolized and trimmed: what every export writes.
///
/// Sites are ordered by live bytes, then allocated bytes (both descending), then by the first
/// stack id they hold, so a snapshot always gives the same order. Locations are in the order the
/// sites first use them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallSites {
    /// Every location any site uses.
    pub locations: Vec<Location>,
    /// The call sites.
    pub sites: Vec<CallSite>,
}

impl CallSites {
    /// Symbolizes and trims every stack of `snapshot` that allocated anything.
    pub fn build(
        snapshot: &Snapshot,
        resolver: &mut dyn Resolve,
        options: &ExportOptions,
    ) -> CallSites {
        CallSites::build_with(snapshot, resolver, options, false)
    }

    /// [`CallSites::build`], with the stacks of each label set in sites of their own: stacks
    /// that trim to the same frames are one site only when they have the same labels.
    pub fn build_by_labels(
        snapshot: &Snapshot,
        resolver: &mut dyn Resolve,
        options: &ExportOptions,
    ) -> CallSites {
        CallSites::build_with(snapshot, resolver, options, true)
    }

    fn build_with(
        snapshot: &Snapshot,
        resolver: &mut dyn Resolve,
        options: &ExportOptions,
        by_labels: bool,
    ) -> CallSites {
        let modules = crate::modules::loaded();
        let mut locations: Vec<Location> = Vec::new();
        // By address, the number of frames it resolved to (more when a frame was recovered from
        // the call before it: see `symbolize`), and the run of them taken.
        let mut location_ids: HashMap<(ReturnAddress, usize, usize, usize), usize> = HashMap::new();
        let mut site_ids: HashMap<(u32, Vec<usize>), usize> = HashMap::new();
        let mut sites: Vec<(CallSite, usize)> = Vec::new();
        let mut site_of_stack: Vec<Option<usize>> = vec![None; snapshot.stacks.len()];
        for (stack_index, stack) in snapshot.stacks.iter().enumerate() {
            if stack.allocated_blocks == 0 && stack.live_blocks == 0 {
                continue;
            }
            let resolved: Vec<Arc<[Frame]>> = resolver.resolve_stack(&stack.frames);
            // Every frame with the return address it belongs to and its index among its frames.
            let mut owners = Vec::new();
            let mut expanded: Vec<&Frame> = Vec::new();
            for (index, frames) in resolved.iter().enumerate() {
                for (inner, frame) in frames.iter().enumerate() {
                    owners.push((index, inner));
                    expanded.push(frame);
                }
            }
            // The frames a report's context is made of (a contiguous run), cut by skip and depth.
            let program = frames::program_frames(&expanded);
            let start = program.start.saturating_add(options.skip);
            let end = start.saturating_add(options.depth).min(program.end);
            let mut key = Vec::new();
            let mut position = start;
            while position < end {
                let (index, first) = owners[position];
                let mut last = first;
                while position + 1 < end && owners[position + 1].0 == index {
                    position += 1;
                    last = owners[position].1;
                }
                position += 1;
                let address = stack.frames[index];
                let id = *location_ids
                    .entry((address, resolved[index].len(), first, last))
                    .or_insert_with(|| {
                        let pc = address.lookup_address();
                        locations.push(Location {
                            address,
                            frames: resolved[index][first..=last].to_vec(),
                            module: modules
                                .iter()
                                .find(|m| m.contains(pc))
                                .map(|m| m.path.to_string_lossy().into_owned()),
                        });
                        locations.len() - 1
                    });
                key.push(id);
            }
            let labels = if by_labels { stack.labels } else { 0 };
            let site = *site_ids
                .entry((labels, key))
                .or_insert_with_key(|(labels, key)| {
                    sites.push((
                        CallSite {
                            locations: key.clone(),
                            labels: *labels,
                            ..CallSite::default()
                        },
                        stack_index,
                    ));
                    sites.len() - 1
                });
            let entry = &mut sites[site].0;
            entry.stacks.push(StackId(stack_index as u32));
            entry.allocated_blocks = entry
                .allocated_blocks
                .saturating_add(stack.allocated_blocks);
            entry.allocated_bytes = entry.allocated_bytes.saturating_add(stack.allocated_bytes);
            entry.live_blocks = entry.live_blocks.saturating_add(stack.live_blocks);
            entry.live_bytes = entry.live_bytes.saturating_add(stack.live_bytes);
            let (peak_blocks, peak_bytes) = if snapshot.peak_known {
                (stack.peak_blocks, stack.peak_bytes)
            } else {
                (stack.live_blocks, stack.live_bytes)
            };
            entry.peak_blocks = entry.peak_blocks.saturating_add(peak_blocks);
            entry.peak_bytes = entry.peak_bytes.saturating_add(peak_bytes);
            site_of_stack[stack_index] = Some(site);
        }
        for block in &snapshot.blocks {
            if let Some(Some(site)) = site_of_stack.get(block.stack.0 as usize) {
                sites[*site].0.live_sizes.push(block.size);
            }
        }
        sites.sort_by(|(a, a_first), (b, b_first)| {
            b.live_bytes
                .cmp(&a.live_bytes)
                .then(b.allocated_bytes.cmp(&a.allocated_bytes))
                .then(a_first.cmp(b_first))
        });
        CallSites {
            locations,
            sites: sites.into_iter().map(|(site, _)| site).collect(),
        }
    }

    /// The frames of `site`, innermost first, each with the location it belongs to.
    pub fn frames<'a>(
        &'a self,
        site: &'a CallSite,
    ) -> impl DoubleEndedIterator<Item = (&'a Location, &'a Frame)> + 'a {
        site.locations.iter().flat_map(move |&id| {
            let location = &self.locations[id];
            location.frames.iter().map(move |f| (location, f))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{LiveBlock, StackSummary};

    fn frame(function: &str) -> Frame {
        Frame {
            function: Some(function.into()),
            file: Some("src/lib.rs".into()),
            line: 1,
            column: 0,
        }
    }

    #[test]
    fn sites_merge_stacks_that_trim_alike_and_keep_every_frame() {
        let mut symbols: HashMap<ReturnAddress, Vec<Frame>> = HashMap::new();
        symbols.insert(
            ReturnAddress(1),
            vec![frame("memprof::hooks::record_alloc")],
        );
        symbols.insert(ReturnAddress(2), vec![frame("__rustc::__rust_alloc")]);
        symbols.insert(
            ReturnAddress(3),
            vec![frame("alloc::alloc::alloc"), frame("app::inlined_into_f")],
        );
        symbols.insert(ReturnAddress(4), vec![frame("app::f")]);
        for (i, a) in (10..20).enumerate() {
            symbols.insert(ReturnAddress(a), vec![frame(&format!("app::caller{i}"))]);
        }
        let deep: Vec<ReturnAddress> = [1, 3, 4]
            .into_iter()
            .chain(10..20)
            .map(ReturnAddress)
            .collect();
        let mut other = deep.clone();
        other.insert(1, ReturnAddress(2));
        let stacks = vec![
            StackSummary {
                frames: deep,
                allocated_blocks: 3,
                allocated_bytes: 30,
                ..Default::default()
            },
            StackSummary {
                frames: other,
                allocated_blocks: 1,
                allocated_bytes: 100,
                ..Default::default()
            },
            StackSummary::default(),
        ];
        let blocks = vec![LiveBlock {
            address: 0x100,
            size: 10,
            stack: StackId(0),
            tag: 0,
        }];
        let snapshot = Snapshot::from_parts(blocks, stacks, 0);
        let sites = CallSites::build(&snapshot, &mut symbols, &ExportOptions::default());
        assert_eq!(sites.sites.len(), 1);
        let site = &sites.sites[0];
        assert_eq!(
            (
                site.allocated_blocks,
                site.allocated_bytes,
                site.live_blocks,
                site.live_bytes
            ),
            (4, 130, 1, 10)
        );
        assert_eq!(site.live_sizes, [10]);
        assert_eq!(site.stacks, [StackId(0), StackId(1)]);
        let names: Vec<&str> = sites
            .frames(site)
            .map(|(_, f)| f.function.as_deref().unwrap())
            .collect();
        assert_eq!(names.len(), 12, "{names:?}");
        assert_eq!(
            &names[..3],
            ["app::inlined_into_f", "app::f", "app::caller0"]
        );
        // The partly trimmed address keeps only its kept frame.
        assert_eq!(sites.locations[site.locations[0]].frames.len(), 1);
        let cut = CallSites::build(
            &snapshot,
            &mut symbols,
            &ExportOptions::default().skip(1).depth(2),
        );
        let names: Vec<&str> = cut
            .frames(&cut.sites[0])
            .map(|(_, f)| f.function.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["app::f", "app::caller0"]);
    }
}
