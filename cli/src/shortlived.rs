//! Short-lived allocations: blocks freed within a bound of their allocation (1 ms unless the
//! command line says otherwise), whichever allocations or frees of their thread came between.
//! Heaptrack's temporary allocations (freed before their thread allocated or freed anything
//! else) miss a block that lives a few microseconds while its thread allocates others, the
//! churn of a map's entries made and dropped in a loop; this figure counts it. The bound's
//! parsing and printing, and `memprof report --sort short-lived`: the call sites of the
//! short-lived allocations made up to a moment.

use crate::Failure;
use memprof::{Group, Report, ReportOptions};
use memprof_trace::{Accumulated, Block, Moment, Timed, Trace, Visitor, weight};
use std::collections::HashMap;
use std::ops::ControlFlow;

/// The bound when none is given: 1 ms.
pub const DEFAULT_NS: u64 = 1_000_000;

/// The units a bound may be given in, and their nanoseconds.
const UNITS: [(&str, u64); 5] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
];

/// A bound from the command line: a number (a fraction allowed) and its unit, `ns`, `us` (or
/// `µs`), `ms` or `s`: `1ms`, `5us`, `0.5 s`. `0` alone (no unit) means 0.
pub fn parse(raw: &str) -> Result<u64, String> {
    let text = raw.trim();
    if text == "0" {
        return Ok(0);
    }
    for &(unit, ns) in &UNITS {
        let Some(number) = text.strip_suffix(unit) else {
            continue;
        };
        let number = number.trim_end();
        // `5ms` ends in `s` too: the number must be one.
        if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
            continue;
        }
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{raw:?}: {number:?} is not a number"))?;
        let total = value * ns as f64;
        if !total.is_finite() || total >= u64::MAX as f64 {
            return Err(format!("{raw:?}: too long"));
        }
        return Ok(total.round() as u64);
    }
    Err(format!(
        "{raw:?}: a duration with its unit, ns, us (or µs), ms or s: 1ms, 5us, 0.5s"
    ))
}

/// A bound as the outputs print it: in the largest unit that holds it whole (`1 ms`, `5 µs`,
/// `8400 ns`).
pub fn show(ns: u64) -> String {
    for (unit, size) in [("s", 1_000_000_000), ("ms", 1_000_000), ("µs", 1_000)] {
        if ns >= size && ns.is_multiple_of(size) {
            return format!("{} {unit}", ns / size);
        }
    }
    format!("{ns} ns")
}

/// Whether a block allocated at `allocated` and freed at `freed` was short-lived under `bound`.
pub fn within(allocated: u64, freed: u64, bound: u64) -> bool {
    freed.saturating_sub(allocated) <= bound
}

/// Per stack, the short-lived blocks and bytes freed within the first `events` events of a
/// replay, weighted under sampling; and how many were recorded.
struct Counting {
    bound: u64,
    interval: u64,
    events: u64,
    per_stack: Vec<(f64, f64)>,
    recorded: u64,
}

impl Visitor for Counting {
    fn before(&mut self, _: &Timed, state: &Accumulated) -> ControlFlow<()> {
        if state.events >= self.events {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn free(&mut self, timed: &Timed, _: u64, freed: Option<&Block>, _: bool) {
        let Some(block) = freed else { return };
        if !within(block.time, timed.time, self.bound) {
            return;
        }
        let (blocks, bytes) = weight(block.size, self.interval);
        if let Some(entry) = self.per_stack.get_mut(block.stack as usize) {
            entry.0 += blocks;
            entry.1 += bytes;
            self.recorded += 1;
        }
    }
}

/// The report of the short-lived allocations (freed within `bound` ns) made and freed up to
/// `at`, grouped by context as the live heap's report groups its blocks: per group the
/// allocations and their bytes, the most allocations first. Groups below the options'
/// `min_bytes` are left out, as in every report.
pub fn report(
    trace: &Trace,
    at: &Moment,
    bound: u64,
    options: &ReportOptions,
) -> Result<Report, Failure> {
    let (_, position) = crate::common::replay(trace, at)?;
    let interval = trace.header().sample_interval;
    let mut counting = Counting {
        bound,
        interval,
        events: position.events,
        per_stack: vec![(0.0, 0.0); trace.stacks().len()],
        recorded: 0,
    };
    let progress = crate::common::bar(position.events, "counting");
    trace.visit(&mut counting, &mut |done| progress.set_position(done))?;
    progress.finish_and_clear();
    let labels = trace.stack_label_sets();
    let mut resolver = crate::moment::resolver(trace);
    let mut groups: HashMap<Vec<String>, (f64, f64)> = HashMap::new();
    for (id, frames) in trace.stacks().iter().enumerate() {
        let (blocks, bytes) = counting.per_stack[id];
        if blocks == 0.0 {
            continue;
        }
        if let Some((key, value)) = &options.label
            && !labels
                .get(id)
                .is_some_and(|set| set.iter().any(|(k, v)| k == key && v == value))
        {
            continue;
        }
        let addresses: Vec<memprof::ReturnAddress> = frames
            .iter()
            .map(|&a| memprof::ReturnAddress(a as usize))
            .collect();
        let entry = groups
            .entry(memprof::context_of(&addresses, &mut resolver, options))
            .or_default();
        entry.0 += blocks;
        entry.1 += bytes;
    }
    let groups = groups
        .into_iter()
        .map(|(context, (blocks, bytes))| Group {
            blocks: blocks.round() as u64,
            bytes: bytes.round() as u64,
            context,
        })
        .collect();
    let mut report = Report::from_groups(groups, options.min_bytes);
    // The most allocations first, then the most bytes, then by context.
    report.groups.sort_by(|a, b| {
        b.blocks
            .cmp(&a.blocks)
            .then(b.bytes.cmp(&a.bytes))
            .then_with(|| a.context.cmp(&b.context))
    });
    report.sample_interval = interval;
    report.samples = counting.recorded;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::{parse, show};

    #[test]
    fn bounds_parse_with_their_units() {
        assert_eq!(parse("1ms"), Ok(1_000_000));
        assert_eq!(parse("5us"), Ok(5_000));
        assert_eq!(parse("5µs"), Ok(5_000));
        assert_eq!(parse("8400ns"), Ok(8_400));
        assert_eq!(parse("0.5s"), Ok(500_000_000));
        assert_eq!(parse("2 s"), Ok(2_000_000_000));
        assert_eq!(parse("0"), Ok(0));
        assert!(parse("5").is_err());
        assert!(parse("ms").is_err());
        assert!(parse("-1ms").is_err());
        assert!(parse("1h").is_err());
        assert_eq!(show(1_000_000), "1 ms");
        assert_eq!(show(5_000), "5 µs");
        assert_eq!(show(8_400), "8400 ns");
        assert_eq!(show(0), "0 ns");
    }
}
