//! What `memprof summary` counts in its replay of a trace ([`Counting`], a visitor of the
//! replay), and what it makes of the counts at the end ([`Counted`], [`Mapped`]).

use super::{BUCKETS, Summary};
use indicatif::ProgressBar;
use memprof_trace::{Accumulated, Block, LiveBlocks, Mapping, Timed, Trace, Visitor, weight};
use std::ops::ControlFlow;

/// What the summary counts during a replay of the whole trace, each block weighted by what it
/// stands for (1 block and its size when every allocation is recorded): by [`Trace::visit`], or
/// by a replay that follows the trace while its program writes it (`memprof run`), whose stacks
/// grow as their definitions arrive.
pub(crate) struct Counting {
    summary: Summary,
    /// Per stack: allocations, bytes, temporary.
    per_stack: Vec<[f64; 3]>,
    /// Per stack: allocations freed within the short-lived bound.
    short_lived: Vec<f64>,
    /// Frees, and the freed blocks per lifetime bucket.
    frees: f64,
    lifetimes: [f64; BUCKETS.len() + 1],
    /// Blocks and bytes live, and their most (by bytes).
    live: (f64, f64),
    peak: (f64, f64),
    /// Events up to and with the peak.
    peak_events: u64,
    /// The blocks live per stack at the peak, when this replay can tell them ([`AtPeak`]).
    at_peak: Option<AtPeak>,
    progress: ProgressBar,
}

/// What one replay counted, ready for [`Summary::complete`].
pub(super) struct Counted {
    pub(super) summary: Summary,
    pub(super) per_stack: Vec<[u64; 3]>,
    pub(super) peak_events: u64,
    pub(super) at_peak: Option<AtPeak>,
}

/// The program's own mappings live at the end of a replay: bytes, mappings, and both per stack.
pub(super) struct Mapped {
    pub(super) bytes: u64,
    pub(super) mappings: u64,
    pub(super) per_stack: Vec<(u64, u64)>,
}

impl Mapped {
    /// The mappings live in `end`, over `stacks` stacks.
    pub(super) fn at_end(end: &Accumulated, stacks: usize) -> Mapped {
        let mut per_stack = vec![(0u64, 0u64); stacks];
        for (_, length, mapping) in end.heap.mappings.iter() {
            if let Some(entry) = per_stack.get_mut(mapping.stack as usize) {
                entry.0 += 1;
                entry.1 += length;
            }
        }
        Mapped {
            bytes: end.heap.mappings.bytes(),
            mappings: end.heap.mappings.len() as u64,
            per_stack,
        }
    }
}

/// The entry of `stack` in `per_stack`, which grows to hold it.
fn entry<T: Clone + Default>(per_stack: &mut Vec<T>, stack: u32) -> &mut T {
    let i = stack as usize;
    if per_stack.len() <= i {
        per_stack.resize(i + 1, T::default());
    }
    &mut per_stack[i]
}

/// Counts a block of `size` bytes allocated (`true`) or freed in a stack's blocks and bytes
/// (wrapping: a change since a peak may go below zero).
fn count(entry: &mut (u64, u64), size: u64, allocated: bool) {
    *entry = match allocated {
        true => (entry.0.wrapping_add(1), entry.1.wrapping_add(size)),
        false => (entry.0.wrapping_sub(1), entry.1.wrapping_sub(size)),
    };
}

/// The blocks and bytes live per stack at the peak, followed through the one replay rather than
/// found by a second replay to the peak: the counts per stack now, their copy as they were at the
/// latest peak, and per stack the change since that peak, applied to the copy at each new peak
/// (only for the stacks that changed: a heap that grows peaks at every allocation), or the copy
/// made again from the counts when most stacks changed. Its memory is a few words per stack,
/// however far the replay goes past the peak. For a trace recorded whole only, where the counts
/// are whole numbers.
pub(super) struct AtPeak {
    now: Vec<(u64, u64)>,
    pub(super) peak: Vec<(u64, u64)>,
    /// Per stack, blocks and bytes allocated less those freed since the latest peak (wrapping).
    since: Vec<(u64, u64)>,
    /// The stacks whose `since` may not be zero, each once ([`AtPeak::listed`]).
    changed: Vec<u32>,
    listed: Vec<bool>,
}

impl AtPeak {
    fn new(stacks: usize) -> AtPeak {
        AtPeak {
            now: vec![(0, 0); stacks],
            peak: vec![(0, 0); stacks],
            since: vec![(0, 0); stacks],
            changed: Vec::new(),
            listed: vec![false; stacks],
        }
    }

    /// A block of `stack` and `size` allocated (`true`) or freed.
    fn change(&mut self, stack: u32, size: u64, allocated: bool) {
        count(entry(&mut self.now, stack), size, allocated);
        count(entry(&mut self.since, stack), size, allocated);
        let listed = entry(&mut self.listed, stack);
        if !*listed {
            *listed = true;
            self.changed.push(stack);
        }
    }

    /// The heap is at a new peak.
    fn peaked(&mut self) {
        self.peak.resize(self.now.len(), (0, 0));
        let copy = self.changed.len() * 2 >= self.now.len();
        if copy {
            self.peak.copy_from_slice(&self.now);
        }
        for &stack in &self.changed {
            let (s, since) = (stack as usize, &mut self.since[stack as usize]);
            if !copy {
                let peak = &mut self.peak[s];
                *peak = (peak.0.wrapping_add(since.0), peak.1.wrapping_add(since.1));
            }
            *since = (0, 0);
            self.listed[s] = false;
        }
        self.changed.clear();
    }
}

impl Counting {
    fn weight(&self, block: &Block) -> (f64, f64) {
        weight(block.size, self.summary.sample_interval)
    }

    /// Follows a block allocated or freed in [`Counting::at_peak`].
    fn follow(&mut self, block: &Block, allocated: bool) {
        if let Some(at_peak) = &mut self.at_peak {
            at_peak.change(block.stack, block.size, allocated);
        }
    }
}

impl Visitor for Counting {
    fn alloc(&mut self, _: &Timed, _: u64, block: &Block, replaced: Option<&Block>) {
        self.summary.recorded += 1;
        let (blocks, bytes) = self.weight(block);
        let site = entry(&mut self.per_stack, block.stack);
        site[0] += blocks;
        site[1] += bytes;
        self.live.0 += blocks;
        self.live.1 += bytes;
        self.follow(block, true);
        if let Some(replaced) = replaced {
            let (blocks, bytes) = self.weight(replaced);
            self.live.0 -= blocks;
            self.live.1 -= bytes;
            self.follow(replaced, false);
        }
    }

    fn free(&mut self, timed: &Timed, _: u64, freed: Option<&Block>, temporary: bool) {
        let Some(block) = freed else {
            self.frees += 1.0;
            return;
        };
        let (blocks, bytes) = self.weight(block);
        self.frees += blocks;
        self.live.0 -= blocks;
        self.live.1 -= bytes;
        self.follow(block, false);
        let lifetime = timed.time.saturating_sub(block.time);
        let bucket = BUCKETS
            .iter()
            .position(|&(bound, _)| lifetime < bound)
            .unwrap_or(BUCKETS.len());
        self.lifetimes[bucket] += blocks;
        if temporary {
            entry(&mut self.per_stack, block.stack)[2] += blocks;
        }
        if crate::shortlived::within(block.time, timed.time, self.summary.short_lived_bound) {
            *entry(&mut self.short_lived, block.stack) += blocks;
        }
    }

    fn mark(&mut self, _: &Timed, _: u32) {
        self.summary.markers += 1;
    }

    fn map(&mut self, _: &Timed, _: u64, length: u64, _: &Mapping, _: &[(u64, u64, Mapping)]) {
        self.summary.maps += 1;
        self.summary.map_bytes += length;
    }

    fn unmap(&mut self, _: &Timed, _: u64, _: u64, removed: &[(u64, u64, Mapping)]) {
        if !removed.is_empty() {
            self.summary.unmaps += 1;
        }
    }

    fn after(&mut self, timed: &Timed, state: &Accumulated) -> ControlFlow<()> {
        let summary = &mut self.summary;
        summary.duration = timed.time;
        if state.heap.mappings.bytes() > summary.mapped_peak {
            summary.mapped_peak = state.heap.mappings.bytes();
            summary.mapped_peak_time = timed.time;
        }
        if self.live.1 > self.peak.1 {
            self.peak = self.live;
            summary.peak_time = timed.time;
            self.peak_events = state.events;
            if let Some(at_peak) = &mut self.at_peak {
                at_peak.peaked();
            }
        }
        if state.events.is_multiple_of(65536) {
            self.progress.set_position(state.events);
        }
        ControlFlow::Continue(())
    }
}

/// Per stack, the blocks and bytes of `live`, weighted under sampling and rounded per stack.
pub(super) fn live_per_stack(live: &LiveBlocks, stacks: usize, interval: u64) -> Vec<(u64, u64)> {
    let mut sums = vec![(0f64, 0f64); stacks];
    for block in live.values() {
        let (blocks, bytes) = weight(block.size, interval);
        let entry = &mut sums[block.stack as usize];
        entry.0 += blocks;
        entry.1 += bytes;
    }
    sums.into_iter()
        .map(|(blocks, bytes)| (blocks.round() as u64, bytes.round() as u64))
        .collect()
}

/// The sums of a list of per-stack pairs.
pub(super) fn totals(pairs: &[(u64, u64)]) -> (u64, u64) {
    pairs.iter().fold((0, 0), |(a, b), &(c, d)| {
        (a.saturating_add(c), b.saturating_add(d))
    })
}

impl Counting {
    /// Nothing counted yet, for the summary of `trace` (whose header is read, and which may
    /// still be growing); `top` sites of each kind shown, `short_lived_bound` ns.
    pub(crate) fn new(
        trace: &Trace,
        top: usize,
        short_lived_bound: u64,
        progress: ProgressBar,
    ) -> Counting {
        let header = trace.header();
        let stacks = trace.stacks().len();
        Counting {
            summary: Summary {
                path: trace.path().display().to_string(),
                sample_interval: header.sample_interval,
                pid: header.pid,
                executable: header.executable.clone(),
                top,
                short_lived_bound,
                ..Summary::default()
            },
            per_stack: vec![[0.0; 3]; stacks],
            short_lived: vec![0.0; stacks],
            frees: 0.0,
            lifetimes: [0.0; BUCKETS.len() + 1],
            live: (0.0, 0.0),
            peak: (0.0, 0.0),
            peak_events: 0,
            at_peak: (header.sample_interval == 0).then(|| AtPeak::new(stacks)),
            progress,
        }
    }

    /// The counts once every event of `trace` was applied, `end` what the replay accumulated:
    /// the totals, per stack the allocations, bytes and temporary allocations, the events up to
    /// the peak, and the blocks live at the peak per stack when the replay could follow them.
    pub(super) fn finish(self, trace: &Trace, end: &Accumulated) -> Counted {
        self.progress.finish_and_clear();
        let stacks = trace.stacks().len();
        let Counting {
            mut summary,
            mut per_stack,
            peak_events,
            at_peak,
            frees,
            lifetimes,
            mut short_lived,
            ..
        } = self;
        summary.closed = trace.end_record().is_some();
        summary.lost = trace.end_record().map_or(0, |(_, lost)| lost);
        summary.memory = trace.memory().copied();
        per_stack.resize(stacks.max(per_stack.len()), [0.0; 3]);
        short_lived.resize(per_stack.len(), 0.0);
        summary.short_lived_per_stack = short_lived.iter().map(|v| v.round() as u64).collect();
        summary.short_lived = summary
            .short_lived_per_stack
            .iter()
            .fold(0u64, |a, &b| a.saturating_add(b));
        let per_stack: Vec<[u64; 3]> = per_stack
            .iter()
            .map(|s| s.map(|v| v.round() as u64))
            .collect();
        for site in &per_stack {
            summary.allocations = summary.allocations.saturating_add(site[0]);
            summary.bytes = summary.bytes.saturating_add(site[1]);
            summary.temporary = summary.temporary.saturating_add(site[2]);
        }
        summary.frees = frees.round() as u64;
        summary.lifetimes = lifetimes.map(|v| v.round() as u64);
        let leaked = live_per_stack(&end.heap.live, per_stack.len(), summary.sample_interval);
        (summary.leaked_blocks, summary.leaked_bytes) = totals(&leaked);
        Counted {
            summary,
            per_stack,
            peak_events,
            at_peak,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{AtPeak, Counting};
    use crate::summary::Summary;
    use indicatif::ProgressBar;
    use memprof_trace::{ChunkEncoder, Follow, Header, Trace};
    use std::io::Write;

    const MS: u64 = 1_000_000;

    /// The summary counted by a replay that follows a trace as it is written, in several
    /// updates, is the one a replay of the finished trace gives: two threads (one freeing the
    /// other's blocks, some short-lived, some temporary), a stack defined midway, a peak in the
    /// middle and blocks left live at the end.
    #[test]
    fn a_trace_followed_as_it_grows_counts_as_its_replay() {
        let dir = std::env::temp_dir().join(format!("memprof-counting-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("followed.mptrace");
        let mut file = std::fs::File::create(&path).unwrap();
        Header::new(1, 0, "/bin/app".into())
            .write_to(&mut file)
            .unwrap();
        let append = |file: &mut std::fs::File, mut chunk: ChunkEncoder| {
            let mut bytes = Vec::new();
            chunk.finish(None, &mut bytes).unwrap();
            file.write_all(&bytes).unwrap();
        };
        let mut defs = ChunkEncoder::new(0);
        defs.stack(0, [0x10u64, 0x20].into_iter());
        defs.stack(1, [0x30u64, 0x20].into_iter());
        defs.thread(1, 11, "main");
        defs.thread(2, 12, "worker");
        append(&mut file, defs);
        let mut trace = Trace::open(&path).unwrap();
        let mut follow = Follow::with_slack(&trace, 20 * MS);
        let mut counting = Counting::new(&trace, 10, MS, ProgressBar::hidden());
        let mut applied_before_the_end = 0;
        for step in 0..10u64 {
            let t = step * 100 * MS;
            let mut main = ChunkEncoder::new(1);
            let mut worker = ChunkEncoder::new(2);
            // Kept until the last steps free them: the peak comes midway.
            main.alloc(t + 1, 0x1000 + step * 0x100, 100 + step, (step % 2) as u32);
            // Freed by the worker 10 ms later: cross-thread, longer than short-lived.
            main.alloc(t + 2, 0x9000 + step * 0x100, 32, 0);
            worker.free(t + 12 * MS, 0x9000 + step * 0x100);
            // Temporary and short-lived.
            worker.alloc(t + 13 * MS, 0x5000, 8, 1);
            worker.free(t + 13 * MS + 500, 0x5000);
            if step >= 7 {
                main.free(t + 50 * MS, 0x1000 + (step - 7) * 0x100);
            }
            if step == 4 {
                let mut defs = ChunkEncoder::new(0);
                defs.stack(2, [0x40u64].into_iter());
                append(&mut file, defs);
                main.realloc(t + 60 * MS, t + 60 * MS, 0x1000, 0x7000, 500, 2);
            }
            append(&mut file, main);
            append(&mut file, worker);
            let followed = follow.update(&mut trace, &mut counting, false).unwrap();
            applied_before_the_end += followed.applied_now;
        }
        let last = follow.update(&mut trace, &mut counting, true).unwrap();
        assert!(applied_before_the_end > 0 && last.applied_now > 0);
        assert_eq!((last.pending, last.out_of_order), (0, 0));

        let options = crate::common::report_options(&trace, &crate::ReportArgs::default());
        let hidden = |_: u64, _: &str| ProgressBar::hidden();
        let text = |summary: Summary| {
            let mut out = Vec::new();
            summary.write(&mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let Ok(followed) = Summary::of_counted(&trace, &options, counting, follow.accumulated())
        else {
            panic!("the followed trace's summary failed");
        };
        let Ok(replayed) = Summary::of(&Trace::open(&path).unwrap(), &options, 10, MS, &hidden)
        else {
            panic!("the replay's summary failed");
        };
        let (followed, replayed) = (text(followed), text(replayed));
        assert!(replayed.contains("peak: "), "{replayed}");
        assert_eq!(followed, replayed);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The counts per stack at each new peak by bytes are those of a naive copy made there,
    /// whether few stacks changed since the last peak (their changes applied to the copy) or
    /// most (the copy made again), with blocks freed far past the peak.
    #[test]
    fn counts_at_the_peak_follow_the_changes() {
        for stacks in [5, 64] {
            counts_at_the_peak_over(stacks);
        }
    }

    fn counts_at_the_peak_over(stacks: usize) {
        let mut at_peak = AtPeak::new(stacks);
        let mut naive = vec![(0u64, 0u64); stacks];
        let mut live: Vec<(u32, u64)> = Vec::new();
        let (mut bytes, mut peak_bytes) = (0u64, 0u64);
        let mut expected = naive.clone();
        let mut seed = 7u64;
        for step in 0..2000u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = seed >> 33;
            // Mostly allocations early, mostly frees late, so peaks come in runs and far apart.
            let allocate = live.is_empty() || r % 100 < if step < 1000 { 70 } else { 35 };
            if allocate {
                let block = ((r % stacks as u64) as u32, 1 + r % 97);
                live.push(block);
                naive[block.0 as usize].0 += 1;
                naive[block.0 as usize].1 += block.1;
                bytes += block.1;
                at_peak.change(block.0, block.1, true);
            } else {
                let block = live.swap_remove((r as usize) % live.len());
                naive[block.0 as usize].0 -= 1;
                naive[block.0 as usize].1 -= block.1;
                bytes -= block.1;
                at_peak.change(block.0, block.1, false);
            }
            if bytes > peak_bytes {
                peak_bytes = bytes;
                expected = naive.clone();
                at_peak.peaked();
            }
        }
        assert!(peak_bytes > 0);
        assert_eq!(at_peak.peak, expected);
        assert_eq!(at_peak.now, naive);
    }
}
