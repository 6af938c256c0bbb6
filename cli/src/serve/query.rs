//! Query strings of the viewer's API: decoding, the shared moment, filter and group filter
//! parameters, and the errors a bad value gets (status 400 with a message naming the parameter
//! and the value). The moments resolve against the trace's index and markers.

use super::index::{BinFilter, ChunkFilter, Classes, Selection, Totals};
use super::state::{FrameInfo, State};
use regex_lite::{Regex, RegexBuilder};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// An API error: its status and message.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// What went wrong, naming the parameter and its value.
    pub message: String,
}

impl ApiError {
    /// A 400.
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
        }
    }

    /// A 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 404,
            message: message.into(),
        }
    }

    /// A 500.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 500,
            message: message.into(),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Decoded `name=value` pairs, in order.
#[derive(Debug, Default)]
pub struct Params(pub Vec<(String, String)>);

/// Percent-decoding (`+` as a space).
fn decode(text: &str) -> Result<String, ApiError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| ApiError::bad(format!("bad percent escape in {text:?}")))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| ApiError::bad(format!("{text:?} is not UTF-8")))
}

impl Params {
    /// Parses a query string.
    pub fn parse(query: &str) -> Result<Params, ApiError> {
        let mut pairs = Vec::new();
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            pairs.push((decode(name)?, decode(value)?));
        }
        Ok(Params(pairs))
    }

    /// The last value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`.
    pub fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// An unsigned integer parameter.
    pub fn number(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.get(name)
            .map(|v| {
                v.trim().parse::<u64>().map_err(|_| {
                    ApiError::bad(format!("{name}={v:?}: not a whole number of 0 or more"))
                })
            })
            .transpose()
    }
}

/// A moment of the run, resolved against the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum At {
    /// After every event at or before this time.
    Time(u64),
    /// Just after the peak's event.
    Peak { events: u64, time: u64 },
    /// Just after the first marker with this label.
    Marker { label: u32, events: u64, time: u64 },
    /// After the last event.
    End,
}

impl At {
    /// Its time, for a range.
    pub fn time(&self, totals: &Totals) -> u64 {
        match *self {
            At::Time(t) => t,
            At::Peak { time, .. } | At::Marker { time, .. } => time,
            At::End => totals.last_time,
        }
    }
}

/// Parses the moment `text` of parameter `name` of a query about `state`'s trace: seconds,
/// `start`, `peak`, `end`, `marker:LABEL`, or a percentage of the run (`25%`: a quarter of the
/// time from the start to the last event).
pub fn moment(state: &State, name: &str, text: &str) -> Result<At, ApiError> {
    let totals = &state.index.totals;
    match text {
        "start" => return Ok(At::Time(0)),
        "end" => return Ok(At::End),
        "peak" => {
            return Ok(At::Peak {
                events: totals.peak_events,
                time: totals.peak_time,
            });
        }
        _ => {}
    }
    if let Some(label) = text.strip_prefix("marker:") {
        return marker(state, name, label);
    }
    if let Some(percent) = text.trim().strip_suffix('%') {
        return match percent.trim().parse::<f64>() {
            Ok(p) if p >= 100.0 => Ok(At::End),
            Ok(p) if p >= 0.0 => Ok(At::Time(
                (totals.last_time as f64 * p / 100.0).round() as u64
            )),
            _ => Err(ApiError::bad(format!(
                "{name}={text:?}: not a percentage of the run (0% to 100%)"
            ))),
        };
    }
    match text.trim().parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => {
            let ns = seconds * 1e9;
            if ns >= u64::MAX as f64 {
                Ok(At::End)
            } else {
                Ok(At::Time(ns.round() as u64))
            }
        }
        _ => Err(ApiError::bad(format!(
            "{name}={text:?}: not a moment (SECONDS, PERCENT%, start, peak, end or marker:LABEL)"
        ))),
    }
}

/// The first marker labelled `label` in `state`'s trace, for parameter `name`.
pub fn marker(state: &State, name: &str, label: &str) -> Result<At, ApiError> {
    let unknown = || {
        ApiError::bad(format!(
            "{name}={label:?}: no marker with this label (markers: {})",
            state.marker_names()
        ))
    };
    let id = state.label(label).ok_or_else(unknown)?;
    let &(time, events, _) = state
        .index
        .totals
        .markers
        .iter()
        .find(|(_, _, l)| *l == id)
        .ok_or_else(unknown)?;
    Ok(At::Marker {
        label: id,
        events,
        time,
    })
}

/// The filters of a query, compiled.
#[derive(Debug, Default)]
pub struct Filters {
    /// Threads asked for (the trace's numbers); empty: all.
    pub threads: Vec<u32>,
    /// Any frame's function matches.
    pub func: Option<Regex>,
    /// No frame's function matches.
    pub nofunc: Option<Regex>,
    /// Any frame's file matches.
    pub file: Option<Regex>,
    /// No frame's file matches.
    pub nofile: Option<Regex>,
    /// Inclusive range of the stack's depth (its return addresses).
    pub depth: (u64, u64),
    /// Inclusive size range.
    pub size: (u64, u64),
    /// Inclusive range of the block's address (`address_min`, `address_max`), when given.
    pub address: Option<(u64, u64)>,
    /// Inclusive lifetime range.
    pub life: Option<(u64, u64)>,
    /// `life=never`.
    pub never: bool,
    /// `life=temporary`.
    pub temporary: bool,
    /// `label=KEY=VALUE`: only stacks whose label set has that label.
    pub label: Option<(String, String)>,
    /// `crate=NAME`: only stacks whose crate (the crate table's rule) is NAME.
    pub krate: Option<String>,
    /// `life=freed_in_range` (true) or `life=kept_in_range` (false): blocks freed, or not
    /// freed, within [`Filters::range`].
    pub in_range: Option<bool>,
    /// The query's range, for `in_range`: events after the first (none: from the first) up to
    /// and with the second. Set by the query once its moments are known.
    pub range: (Option<u64>, u64),
    /// `mmapped=true|false`, `arena=main|other`: glibc's chunk flags.
    pub chunk: ChunkFilter,
}

/// An address parameter: decimal, or hexadecimal after `0x` (as the API writes addresses).
fn address(params: &Params, name: &str) -> Result<Option<u64>, ApiError> {
    let Some(text) = params.get(name).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    let trimmed = text.trim();
    let parsed = match trimmed
        .strip_prefix("0x")
        .or_else(|| trimmed.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => trimmed.parse::<u64>().ok(),
    };
    parsed.map(Some).ok_or_else(|| {
        ApiError::bad(format!(
            "{name}={text:?}: not an address (decimal, or hexadecimal after 0x)"
        ))
    })
}

fn regex(params: &Params, name: &str) -> Result<Option<Regex>, ApiError> {
    params
        .get(name)
        .filter(|v| !v.is_empty())
        .map(|v| {
            RegexBuilder::new(v)
                .size_limit(1 << 20)
                .nest_limit(64)
                .build()
                .map_err(|e| ApiError::bad(format!("{name}={v:?}: not a regular expression: {e}")))
        })
        .transpose()
}

impl Filters {
    /// Reads the filter parameters.
    pub fn parse(params: &Params) -> Result<Filters, ApiError> {
        let mut threads = Vec::new();
        for value in params.all("thread") {
            threads.push(
                value
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| ApiError::bad(format!("thread={value:?}: not a thread number")))?,
            );
        }
        let size = (
            params.number("size_min")?.unwrap_or(0),
            params.number("size_max")?.unwrap_or(u64::MAX),
        );
        if size.0 > size.1 {
            return Err(ApiError::bad(format!(
                "size_min={} is above size_max={}",
                size.0, size.1
            )));
        }
        let depth = (
            params.number("depth_min")?.unwrap_or(0),
            params.number("depth_max")?.unwrap_or(u64::MAX),
        );
        if depth.0 > depth.1 {
            return Err(ApiError::bad(format!(
                "depth_min={} is above depth_max={}",
                depth.0, depth.1
            )));
        }
        let address = match (
            address(params, "address_min")?,
            address(params, "address_max")?,
        ) {
            (None, None) => None,
            (lo, hi) => Some((lo.unwrap_or(0), hi.unwrap_or(u64::MAX))),
        };
        if let Some((lo, hi)) = address
            && lo > hi
        {
            return Err(ApiError::bad(format!(
                "address_min={lo:#x} is above address_max={hi:#x}"
            )));
        }
        let (life_min, life_max) = (params.number("life_min")?, params.number("life_max")?);
        let life = match (life_min, life_max) {
            (None, None) => None,
            (lo, hi) => Some((lo.unwrap_or(0), hi.unwrap_or(u64::MAX))),
        };
        if let Some((lo, hi)) = life
            && lo > hi
        {
            return Err(ApiError::bad(format!(
                "life_min={lo} is above life_max={hi}"
            )));
        }
        let (mut never, mut temporary, mut in_range) = (false, false, None);
        match params.get("life") {
            None | Some("") => {}
            Some("never") => never = true,
            Some("temporary") => temporary = true,
            Some("freed_in_range") => in_range = Some(true),
            Some("kept_in_range") => in_range = Some(false),
            Some(other) => {
                return Err(ApiError::bad(format!(
                    "life={other:?}: use never, temporary, freed_in_range or kept_in_range"
                )));
            }
        }
        let label = match params.get("label") {
            None | Some("") => None,
            Some(text) => match text.split_once('=') {
                Some((key, value)) if !key.is_empty() && !value.is_empty() => {
                    Some((key.to_owned(), value.to_owned()))
                }
                // No label has an empty key or value (`memprof::Labels::new` refuses them).
                _ => {
                    return Err(ApiError::bad(format!(
                        "label={text:?}: not KEY=VALUE with a key and a value"
                    )));
                }
            },
        };
        let mmapped = match params.get("mmapped") {
            None | Some("") => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(other) => {
                return Err(ApiError::bad(format!(
                    "mmapped={other:?}: true (blocks glibc mapped by themselves) or false"
                )));
            }
        };
        let main_arena = match params.get("arena") {
            None | Some("") => None,
            Some("main") => Some(true),
            Some("other") => Some(false),
            Some(other) => {
                return Err(ApiError::bad(format!(
                    "arena={other:?}: main (glibc's main arena) or other"
                )));
            }
        };
        let krate = params
            .get("crate")
            .filter(|name| !name.is_empty())
            .map(str::to_owned);
        Ok(Filters {
            krate,
            chunk: ChunkFilter {
                mmapped,
                main_arena,
            },
            label,
            threads,
            func: regex(params, "func")?,
            nofunc: regex(params, "nofunc")?,
            file: regex(params, "file")?,
            nofile: regex(params, "nofile")?,
            depth,
            size,
            address,
            life,
            never,
            temporary,
            in_range,
            range: (None, u64::MAX),
        })
    }

    /// Whether only whole classes are selected (the index answers).
    pub fn by_class_only(&self) -> bool {
        self.size == (0, u64::MAX)
            && self.address.is_none()
            && self.life.is_none()
            && !self.never
            && !self.temporary
            && self.in_range.is_none()
            && !self.chunk.is_set()
    }

    /// A 400 for a filter on glibc's chunk flags of a trace that holds none (`flagged`: whether
    /// it holds any), naming the parameter.
    pub fn check_chunk_flags(&self, params: &Params, flagged: bool) -> Result<(), ApiError> {
        if flagged || !self.chunk.is_set() {
            return Ok(());
        }
        let name = if self.chunk.mmapped.is_some() {
            "mmapped"
        } else {
            "arena"
        };
        Err(ApiError::bad(format!(
            "{name}={:?}: this trace does not hold glibc's chunk flags of its blocks (trace mode \
             records them, from format 1.3 on, where the allocator is glibc's malloc: the \
             preloaded library, or MemProf::new() on Linux with glibc)",
            params.get(name).unwrap_or_default()
        )))
    }

    /// The filters on blocks as the index's bins answer them: when the size and lifetime bounds
    /// fall on the bins' edges and no filter depends on the range.
    pub fn bins(&self) -> Option<BinFilter> {
        if self.in_range.is_some() || self.address.is_some() || self.chunk.is_set() {
            return None;
        }
        BinFilter::aligned(self.size, self.life, self.never, self.temporary)
    }

    /// Whether any frame filter (or the stack's depth) is set.
    fn by_frames(&self) -> bool {
        self.func.is_some()
            || self.nofunc.is_some()
            || self.file.is_some()
            || self.nofile.is_some()
            || self.depth != (0, u64::MAX)
    }

    /// The classes selected, given each stack's return addresses, each address's frames, each
    /// stack's label set (called only with a `label` filter) and each stack's crate (called
    /// only with a `crate` filter). The regular expressions run once per address.
    pub fn classes<'a>(
        &self,
        classes: &Classes,
        stacks: &[Vec<u64>],
        frames: &HashMap<u64, Arc<[FrameInfo]>>,
        labels: impl FnOnce() -> Vec<&'a [(String, String)]>,
        crates: impl FnOnce() -> Vec<Arc<str>>,
    ) -> Option<Vec<bool>> {
        if self.threads.is_empty()
            && !self.by_frames()
            && self.label.is_none()
            && self.krate.is_none()
        {
            return None;
        }
        let crates = match &self.krate {
            Some(_) => crates(),
            None => Vec::new(),
        };
        let in_crate = |stack: u32| match &self.krate {
            None => true,
            Some(name) => crates.get(stack as usize).is_some_and(|c| **c == **name),
        };
        let labels = match &self.label {
            Some(_) => labels(),
            None => Vec::new(),
        };
        let labelled = |stack: u32| match &self.label {
            None => true,
            Some((key, value)) => labels
                .get(stack as usize)
                .is_some_and(|set| set.iter().any(|(k, v)| k == key && v == value)),
        };
        let regexes = [&self.func, &self.nofunc, &self.file, &self.nofile];
        let mut by_address: HashMap<u64, [bool; 4]> = HashMap::new();
        let mut by_stack: HashMap<u32, bool> = HashMap::new();
        let mut passes = |stack: u32| -> bool {
            let depth = stacks.get(stack as usize).map_or(0, Vec::len) as u64;
            if !(self.depth.0..=self.depth.1).contains(&depth) {
                return false;
            }
            let mut any = [false; 4];
            for address in stacks.get(stack as usize).into_iter().flatten() {
                let matched = by_address.entry(*address).or_insert_with(|| {
                    let frames = frames.get(address).map_or(&[][..], |f| &f[..]);
                    let mut matched = [false; 4];
                    for (i, re) in regexes.iter().enumerate() {
                        if let Some(re) = re {
                            matched[i] = frames
                                .iter()
                                .any(|f| re.is_match(if i < 2 { &f.function } else { &f.file }));
                        }
                    }
                    matched
                });
                for i in 0..4 {
                    any[i] |= matched[i];
                }
            }
            (self.func.is_none() || any[0])
                && !any[1]
                && (self.file.is_none() || any[2])
                && !any[3]
                && labelled(stack)
                && in_crate(stack)
        };
        Some(
            classes
                .list
                .iter()
                .map(|&(stack, thread)| {
                    (self.threads.is_empty() || self.threads.contains(&thread))
                        && *by_stack.entry(stack).or_insert_with(|| passes(stack))
                })
                .collect(),
        )
    }

    /// The scan's selection.
    pub fn selection(&self, classes: Option<Vec<bool>>) -> Selection {
        Selection {
            classes,
            size: self.size,
            address: self.address,
            life: self.life,
            never: self.never,
            temporary: self.temporary,
            freed_in: self
                .in_range
                .map(|freed| (freed, self.range.0, self.range.1)),
            chunk: self.chunk,
        }
    }
}

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

/// The group filters of a query (bytehound's): keep the sites whose blocks that pass the filters
/// number so many allocations over the run, of which so many are live at the end, and whose
/// first and last allocation lie so far apart. Every endpoint that takes filters applies them,
/// as a selection of the classes of the sites that pass.
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
    pub fn pass(&self, allocations: u64, leaked: u64, first_last: Option<(u64, u64)>) -> bool {
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
}
