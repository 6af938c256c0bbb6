//! The group filters (bytehound's): keep the sites whose blocks that pass the filters number so
//! many allocations over the run, of which so many are live at the end, and whose first and last
//! allocation lie so far apart. Every endpoint that takes filters applies them, as a selection of
//! the classes of the sites that pass.

use super::view::{Query, view};
use crate::serve::index::Cell;
use crate::serve::query::{ApiError, At, Params};
use crate::serve::state::State;

/// A bound of a group filter: a count, or a percentage of the group's allocations.
#[derive(Clone, Copy, Debug)]
enum Bound {
    Count(u64),
    Percent(f64),
}

impl Bound {
    fn parse(params: &Params, name: &str) -> Result<Option<Bound>, ApiError> {
        let Some(text) = params.get(name).filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        let bad = || ApiError::bad(format!("{name}={text:?}: a count, or a percentage (N%)"));
        match text.trim().strip_suffix('%') {
            Some(p) => match p.trim().parse::<f64>() {
                Ok(p) if (0.0..=100.0).contains(&p) => Ok(Some(Bound::Percent(p))),
                _ => Err(bad()),
            },
            None => text
                .trim()
                .parse()
                .map(|n| Some(Bound::Count(n)))
                .map_err(|_| bad()),
        }
    }

    /// The bound as a count, for a group of `of` allocations.
    fn of(self, of: u64) -> f64 {
        match self {
            Bound::Count(n) => n as f64,
            Bound::Percent(p) => of as f64 * p / 100.0,
        }
    }
}

/// The group filters of a query.
#[derive(Debug, Default)]
pub struct Groups {
    allocations: (Option<u64>, Option<u64>),
    leaked: (Option<Bound>, Option<Bound>),
    /// Bounds on the time between the group's first and last allocation, ns.
    interval: (Option<u64>, Option<u64>),
}

impl Groups {
    pub fn parse(params: &Params) -> Result<Groups, ApiError> {
        Ok(Groups {
            allocations: (
                params.number("group_allocations_min")?,
                params.number("group_allocations_max")?,
            ),
            leaked: (
                Bound::parse(params, "group_leaked_min")?,
                Bound::parse(params, "group_leaked_max")?,
            ),
            interval: (
                params.number("group_interval_min")?,
                params.number("group_interval_max")?,
            ),
        })
    }

    pub fn any(&self) -> bool {
        self.allocations != (None, None)
            || self.leaked.0.is_some()
            || self.leaked.1.is_some()
            || self.interval != (None, None)
    }

    /// Whether a site passes: `allocations` over the run, `leaked` of them live at the end, its
    /// first and last allocation at `first_last` (`None`: no allocation).
    fn pass(&self, allocations: u64, leaked: u64, first_last: Option<(u64, u64)>) -> bool {
        let interval = first_last.map(|(first, last)| last.saturating_sub(first));
        self.allocations.0.is_none_or(|n| allocations >= n)
            && self.allocations.1.is_none_or(|n| allocations <= n)
            && self
                .leaked
                .0
                .is_none_or(|b| leaked as f64 >= b.of(allocations))
            && self
                .leaked
                .1
                .is_none_or(|b| leaked as f64 <= b.of(allocations))
            && self
                .interval
                .0
                .is_none_or(|n| interval.is_some_and(|i| i >= n))
            && self
                .interval
                .1
                .is_none_or(|n| interval.is_some_and(|i| i <= n))
    }

    /// The classes of the query's selection (`q.classes`, and its filters on blocks) whose site
    /// passes, from the figures over the whole run.
    pub fn mask(&self, state: &State, q: &mut Query) -> Result<Vec<bool>, ApiError> {
        let classes = state.classes.list.len();
        let whole = Query {
            filters: std::mem::take(&mut q.filters),
            classes: q.classes.clone(),
            at: At::End,
            lo: None,
            hi: u64::MAX,
        };
        let answer = (|| {
            let v = view(state, &whole, &[], None)?;
            let range = v.range(None, u64::MAX, classes);
            let leaked = v.live(&At::End, classes);
            let first_last = &v.agg().first_last;
            let sites = state.sites.len();
            let mut cells = vec![Cell::default(); sites];
            let mut live = vec![0u64; sites];
            let mut span: Vec<Option<(u64, u64)>> = vec![None; sites];
            for class in 0..classes {
                let site = state.site_of_class(class) as usize;
                cells[site].add(&range[class]);
                live[site] += leaked[class].1;
                if range[class].allocs > 0
                    && let Some(&(first, last)) = first_last.get(class)
                    && first <= last
                {
                    span[site] = Some(match span[site] {
                        None => (first, last),
                        Some((f, l)) => (f.min(first), l.max(last)),
                    });
                }
            }
            let passing: Vec<bool> = (0..sites)
                .map(|s| self.pass(cells[s].allocs, live[s], span[s]))
                .collect();
            Ok((0..classes)
                .map(|class| {
                    passing[state.site_of_class(class) as usize]
                        && q.classes.as_ref().is_none_or(|m| m[class])
                })
                .collect())
        })();
        q.filters = whole.filters;
        answer
    }
}
