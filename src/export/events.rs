//! Every allocation and free in the order they happened, with their times: what a trace holds
//! and the live table does not. Given to [`write_with_events`](super::write_with_events), it
//! makes exact the figures an export can only estimate from a snapshot: DHAT's lifetimes, per-site
//! maxima and time of the peak, heaptrack's order of events (its temporary allocations) and its
//! time lines (its consumed-over-time chart).

#![forbid(unsafe_code)]

use super::CallSites;
use crate::address::StackId;
use std::collections::HashMap;
use std::io;

/// One allocation or free. A reallocation is the free of its old block then the allocation of
/// its new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A block allocated.
    Alloc {
        /// Nanoseconds since the run started.
        time: u64,
        /// The block's address.
        address: u64,
        /// Its size in bytes.
        size: u64,
        /// Its stack, an index into the snapshot's stacks.
        stack: StackId,
    },
    /// A block freed (a free of an address no earlier event allocated is ignored).
    Free {
        /// Nanoseconds since the run started.
        time: u64,
        /// The block's address.
        address: u64,
    },
}

/// A source of [`Event`]s: the events up to the moment of the snapshot they go with, from the
/// start of the run, in order of time.
pub trait Events {
    /// Calls `f` with each event, in order.
    fn for_each(&mut self, f: &mut dyn FnMut(Event)) -> io::Result<()>;

    /// The markers placed over the same events (nanoseconds since the run started, label), in
    /// order of time, when the source knows them: asked for after [`Events::for_each`], so that
    /// a source may note them as it goes. The HTML report draws them on its timeline. None by
    /// default.
    fn markers(&mut self) -> Vec<(u64, String)> {
        Vec::new()
    }
}

/// The site each stack of a snapshot belongs to, by stack index.
pub(crate) fn site_of_stacks(sites: &CallSites, stacks: usize) -> Vec<Option<usize>> {
    let mut site_of = vec![None; stacks];
    for (index, site) in sites.sites.iter().enumerate() {
        for stack in &site.stacks {
            if let Some(slot) = site_of.get_mut(stack.0 as usize) {
                *slot = Some(index);
            }
        }
    }
    site_of
}

/// What the events say of each call site and of the whole heap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Measured {
    /// Per site: the lifetimes of its blocks added up, in ns (a block live at `end` counts up to
    /// `end`).
    pub lifetimes: Vec<u64>,
    /// Per site: its most live bytes at once, and its live blocks then.
    pub max: Vec<(u64, u64)>,
    /// When the live bytes first reached their maximum, in ns.
    pub peak_time: u64,
}

/// Replays `events` over `sites` (`site_of` from [`site_of_stacks`]), up to `end` ns.
pub(crate) fn measure(
    sites: &CallSites,
    site_of: &[Option<usize>],
    events: &mut dyn Events,
    end: u64,
) -> io::Result<Measured> {
    let mut measured = Measured {
        lifetimes: vec![0; sites.sites.len()],
        max: vec![(0, 0); sites.sites.len()],
        peak_time: 0,
    };
    let mut live_per_site = vec![(0u64, 0u64); sites.sites.len()];
    // Live blocks: size, site, time allocated.
    let mut live: HashMap<u64, (u64, Option<usize>, u64)> = HashMap::new();
    let (mut live_bytes, mut peak) = (0u64, 0u64);
    events.for_each(&mut |event| match event {
        Event::Alloc {
            time,
            address,
            size,
            stack,
        } => {
            let site = site_of.get(stack.0 as usize).copied().flatten();
            if let Some((old_size, old_site, old_time)) = live.insert(address, (size, site, time)) {
                // Two allocations at one address without a free between: the first is gone.
                retire(
                    &mut measured,
                    &mut live_per_site,
                    old_site,
                    old_size,
                    time.saturating_sub(old_time),
                );
                live_bytes -= old_size;
            }
            live_bytes += size;
            if live_bytes > peak {
                (peak, measured.peak_time) = (live_bytes, time);
            }
            if let Some(site) = site {
                let now = &mut live_per_site[site];
                (now.0, now.1) = (now.0 + size, now.1 + 1);
                if now.0 > measured.max[site].0 {
                    measured.max[site] = *now;
                }
            }
        }
        Event::Free { time, address } => {
            if let Some((size, site, allocated)) = live.remove(&address) {
                retire(
                    &mut measured,
                    &mut live_per_site,
                    site,
                    size,
                    time.saturating_sub(allocated),
                );
                live_bytes -= size;
            }
        }
    })?;
    for (_, (size, site, allocated)) in live {
        retire(
            &mut measured,
            &mut live_per_site,
            site,
            size,
            end.saturating_sub(allocated),
        );
    }
    Ok(measured)
}

/// A block of `site` gone after living `lifetime` ns.
fn retire(
    measured: &mut Measured,
    live_per_site: &mut [(u64, u64)],
    site: Option<usize>,
    size: u64,
    lifetime: u64,
) {
    if let Some(site) = site {
        measured.lifetimes[site] += lifetime;
        let now = &mut live_per_site[site];
        (now.0, now.1) = (now.0 - size, now.1 - 1);
    }
}
