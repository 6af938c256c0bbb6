//! A trace's replay in the library's terms, for the reports and exports at a moment: the trace's
//! symbols as a resolver, and the heap replayed to a moment as a [`Snapshot`] of the same shape
//! as the live table's, so that every report and export works on it unchanged.

use memprof::{Frame, LiveBlock, Resolve, ReturnAddress, Snapshot, StackId, StackSummary};
use memprof_trace::{Heap, Trace};
use std::collections::HashMap;
use std::sync::Arc;

/// The trace's symbols as a resolver ([`resolver`]): each address's frames, and, when a stack is
/// resolved as a whole, the frame of a function a tail call left off the stack, from the trace's
/// `CALLEE` records, by the rule the recording process's own reports follow.
pub struct TraceResolver<'a> {
    /// The frames of each return address.
    pub frames: HashMap<ReturnAddress, Vec<Frame>>,
    trace: &'a Trace,
}

impl Resolve for TraceResolver<'_> {
    fn resolve(&mut self, address: ReturnAddress) -> Arc<[Frame]> {
        self.frames.resolve(address)
    }

    fn resolve_stack(&mut self, stack: &[ReturnAddress]) -> Vec<Arc<[Frame]>> {
        stack
            .iter()
            .enumerate()
            .map(|(index, &address)| {
                let frames = self.frames.resolve(address);
                let younger = index.checked_sub(1).map(|i| stack[i].0 as u64);
                match self.trace.recovered_callee(address.0 as u64, younger) {
                    Some(callee) => std::iter::once(Frame::from(callee.clone()))
                        .chain(frames.iter().cloned())
                        .collect(),
                    None => frames,
                }
            })
            .collect()
    }

    /// The file name of the module whose code holds `address`, from the trace's `MODULES`
    /// records (the latest list first): what names C and C++ frames in the crate table.
    fn module_name(&mut self, address: ReturnAddress) -> Option<Arc<str>> {
        let pc = (address.0 as u64).wrapping_sub(1);
        let module = self.trace.modules().iter().rev().flatten().find(|m| {
            m.text
                .iter()
                .any(|&(start, end)| (start..end).contains(&pc))
        })?;
        let name = module.path.rsplit('/').next().unwrap_or(&module.path);
        Some(Arc::from(name))
    }
}

/// The trace's symbols as a resolver for reports and exports. An address without a symbol (a
/// trace cut short and not symbolized since) resolves to its module's path when a `MODULES`
/// record holds it, as the process's own symbolizer names code it cannot read (so the C
/// library's start below `main` is trimmed as in the process's reports), else to an unknown
/// frame.
pub fn resolver(trace: &Trace) -> TraceResolver<'_> {
    resolver_for(trace, trace.stacks())
}

/// [`resolver`] for the addresses of `stacks` only (a live trace's new stacks).
pub fn resolver_for<'a>(trace: &'a Trace, stacks: &[Vec<u64>]) -> TraceResolver<'a> {
    // The latest list first: a module loaded later where an unloaded one was ran the later code.
    let modules: Vec<_> = trace.modules().iter().rev().flatten().collect();
    let mut resolver: HashMap<ReturnAddress, Vec<Frame>> = HashMap::new();
    for &address in stacks.iter().flatten() {
        let key = ReturnAddress(address as usize);
        if resolver.contains_key(&key) {
            continue;
        }
        if let Some(frames) = trace.symbols().get(&address) {
            resolver.insert(key, frames.iter().cloned().map(Frame::from).collect());
            continue;
        }
        let pc = address.wrapping_sub(1);
        let module = modules.iter().find(|m| {
            m.text
                .iter()
                .any(|&(start, end)| (start..end).contains(&pc))
        });
        if let Some(module) = module {
            let frame = Frame {
                file: Some(module.path.clone()),
                ..Frame::default()
            };
            resolver.insert(key, vec![frame]);
        }
    }
    TraceResolver {
        frames: resolver,
        trace,
    }
}

/// How many distinct return addresses of `trace`'s stacks have no symbol.
pub fn unsymbolized(trace: &Trace) -> usize {
    let symbols = trace.symbols();
    let mut missing = std::collections::HashSet::new();
    for &address in trace.stacks().iter().flatten() {
        if !symbols.contains_key(&address) {
            missing.insert(address);
        }
    }
    missing.len()
}

/// The snapshot of `heap`: live blocks, and every stack of the trace with its allocated totals
/// (so snapshots of one trace at two moments diff stack by stack). `peak_bytes` is the heap's
/// peak to state, when known.
pub fn snapshot(trace: &Trace, heap: &Heap, peak_bytes: u64) -> Snapshot {
    let interval = trace.header().sample_interval;
    // The trace's label sets, numbered densely from 1 in the order the stacks name them.
    let mut label_sets: Vec<Vec<(String, String)>> = vec![Vec::new()];
    let mut label_ids: HashMap<&[(String, String)], u32> = HashMap::new();
    let stack_labels: Vec<u32> = trace
        .stack_label_sets()
        .into_iter()
        .map(|pairs| match pairs {
            [] => 0,
            pairs => *label_ids.entry(pairs).or_insert_with(|| {
                label_sets.push(pairs.to_vec());
                label_sets.len() as u32 - 1
            }),
        })
        .collect();
    let mut stacks: Vec<StackSummary> = trace
        .stacks()
        .iter()
        .zip(&stack_labels)
        .map(|(frames, &labels)| StackSummary {
            frames: frames.iter().map(|&a| ReturnAddress(a as usize)).collect(),
            labels,
            ..StackSummary::default()
        })
        .collect();
    if interval == 0 {
        for (stack, &(blocks, bytes)) in stacks.iter_mut().zip(&heap.allocated) {
            (stack.allocated_blocks, stack.allocated_bytes) = (blocks, bytes);
        }
    } else {
        for (stack, &(blocks, bytes)) in stacks.iter_mut().zip(&heap.estimated) {
            stack.allocated_blocks = blocks.round() as u64;
            stack.allocated_bytes = bytes.round() as u64;
        }
    }
    let blocks: Vec<LiveBlock> = heap
        .live
        .iter()
        .map(|(&address, block)| LiveBlock {
            address: address as usize,
            size: block.size,
            stack: StackId(block.stack),
            tag: 0,
        })
        .collect();
    let mut snapshot = Snapshot::sampled(blocks, stacks, peak_bytes, interval);
    if label_sets.len() > 1 {
        snapshot.label_sets = label_sets;
    }
    snapshot
}

/// `snapshot` with only the blocks and stacks allocated with the label `key` = `value`: the
/// other stacks keep their place (stack ids stay) with every count at 0.
pub fn keep_label(snapshot: Snapshot, key: &str, value: &str) -> Snapshot {
    let keep: Vec<bool> = snapshot
        .stacks
        .iter()
        .map(|stack| snapshot.has_label(stack, key, value))
        .collect();
    let Snapshot {
        blocks,
        mut stacks,
        sample_interval,
        peak_known,
        label_sets,
        ..
    } = snapshot;
    let blocks: Vec<LiveBlock> = blocks
        .into_iter()
        .filter(|b| keep.get(b.stack.0 as usize).copied().unwrap_or(false))
        .collect();
    for (stack, &keep) in stacks.iter_mut().zip(&keep) {
        if !keep {
            stack.allocated_blocks = 0;
            stack.allocated_bytes = 0;
            stack.peak_blocks = 0;
            stack.peak_bytes = 0;
        }
    }
    let peaks: Vec<(u64, u64)> = stacks
        .iter()
        .map(|s| (s.peak_blocks, s.peak_bytes))
        .collect();
    let peak_bytes = match peak_known {
        true => peaks.iter().map(|p| p.1).sum(),
        false => 0,
    };
    let mut kept = Snapshot::sampled(blocks, stacks, peak_bytes, sample_interval);
    for (stack, (blocks, bytes)) in kept.stacks.iter_mut().zip(peaks) {
        (stack.peak_blocks, stack.peak_bytes) = (blocks, bytes);
    }
    kept.peak_known = peak_known;
    kept.label_sets = label_sets;
    kept
}

/// [`snapshot`] of `heap` with each stack's blocks and bytes live at the heap's peak, `peak` (a
/// replay to the peak within the events of `heap`): the exports' per-site peak figures, exact
/// from a trace.
pub fn snapshot_with_peak(trace: &Trace, heap: &Heap, peak: &Heap) -> Snapshot {
    let at_peak = snapshot(trace, peak, peak.live_bytes);
    let mut snapshot = snapshot(trace, heap, at_peak.stats.live_bytes);
    for (stack, at_peak) in snapshot.stacks.iter_mut().zip(&at_peak.stacks) {
        stack.peak_blocks = at_peak.live_blocks;
        stack.peak_bytes = at_peak.live_bytes;
    }
    snapshot.peak_known = true;
    snapshot
}
