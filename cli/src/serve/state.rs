//! What the server knows of one trace: the opened trace, its index, its call sites (stacks
//! grouped by context as the reports group them) with their frames resolved once, and the
//! replays that answer what the index cannot ([`Replays`]: one at a time, their answers kept for
//! the queries that follow).

use super::index::{Agg, BinFilter, Classes, IndexBuilder};
use crate::Failure;
use indicatif::ProgressBar;
use memprof::{Frame, ReportOptions, Resolve, ReturnAddress};
use memprof_trace::Trace;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// The trace being served; replaced as a live trace grows.
pub type Shared = Arc<RwLock<Option<Arc<State>>>>;

/// Scans, and exports, kept for the queries that follow (a page asks for a view, then the same
/// view again).
const CACHED_SCANS: usize = 4;

/// The replays of the trace that answer what the index cannot (a query's scan, an export, the
/// lists of allocations, mappings and label sets), and the answers kept from recent ones. Every
/// replay runs through here, one at a time, so that memory stays that of one replay.
#[derive(Debug, Default)]
pub struct Replays {
    /// Held while a replay runs.
    running: Mutex<()>,
    /// Recent scans, and the index's figures under a filter on its bins, by their query.
    scans: Mutex<Vec<(String, Arc<Agg>)>>,
    /// Recent exports' bodies by their query.
    exports: Mutex<Vec<(String, Arc<Vec<u8>>)>>,
}

/// The answer kept under `key`.
fn kept<T: Clone>(answers: &Mutex<Vec<(String, T)>>, key: &str) -> Option<T> {
    answers
        .lock()
        .ok()
        .and_then(|a| a.iter().find(|(k, _)| k == key).map(|(_, a)| a.clone()))
}

/// Keeps `answer` under `key`, in place of the oldest when [`CACHED_SCANS`] are kept.
fn keep<T>(answers: &Mutex<Vec<(String, T)>>, key: String, answer: T) {
    if let Ok(mut answers) = answers.lock() {
        if answers.len() >= CACHED_SCANS {
            answers.remove(0);
        }
        answers.push((key, answer));
    }
}

impl Replays {
    /// Runs `replay` alone: after the one under way, if any.
    pub fn run<T>(&self, replay: impl FnOnce() -> T) -> T {
        let _one_at_a_time = self
            .running
            .lock()
            // A replay that failed (a 500) leaves nothing half-made behind the lock.
            .unwrap_or_else(PoisonError::into_inner);
        replay()
    }

    /// The scan kept for the query `key`, else the one `scan` makes, alone, then kept.
    pub fn scan<E>(
        &self,
        key: String,
        scan: impl FnOnce() -> Result<Agg, E>,
    ) -> Result<Arc<Agg>, E> {
        if let Some(agg) = kept(&self.scans, &key) {
            return Ok(agg);
        }
        self.run(|| {
            // Made meanwhile by the replay waited for.
            if let Some(agg) = kept(&self.scans, &key) {
                return Ok(agg);
            }
            let agg = Arc::new(scan()?);
            keep(&self.scans, key, agg.clone());
            Ok(agg)
        })
    }

    /// The index's figures of the blocks `bins` passes kept for an earlier query, else those
    /// `filter` makes from the index (no replay), then kept.
    pub fn filtered(&self, bins: &BinFilter, filter: impl FnOnce() -> Agg) -> Arc<Agg> {
        let key = format!("bins {bins:?}");
        if let Some(agg) = kept(&self.scans, &key) {
            return agg;
        }
        let agg = Arc::new(filter());
        if let Ok(mut scans) = self.scans.lock() {
            // Two at a time (a query's, and its short-lived figures'): each may be as large as
            // the index's cells.
            if let Some(older) = scans.iter().position(|(k, _)| k.starts_with("bins "))
                && scans.iter().filter(|(k, _)| k.starts_with("bins ")).count() >= 2
            {
                scans.remove(older);
            }
            if scans.len() >= CACHED_SCANS {
                scans.remove(0);
            }
            scans.push((key, agg.clone()));
        }
        agg
    }

    /// The export kept for the query `key`, else the body `export` writes, alone, then kept.
    pub fn export<E>(
        &self,
        key: String,
        export: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<Vec<u8>, E> {
        let body = |key: &str| kept(&self.exports, key).map(|body| body.as_ref().clone());
        if let Some(body) = body(&key) {
            return Ok(body);
        }
        self.run(|| {
            if let Some(body) = body(&key) {
                return Ok(body);
            }
            let body = export()?;
            keep(&self.exports, key, Arc::new(body.clone()));
            Ok(body)
        })
    }

    /// Forgets the answers kept: they were of the trace as it was.
    pub fn forget(&self) {
        if let Ok(mut scans) = self.scans.lock() {
            scans.clear();
        }
        if let Ok(mut exports) = self.exports.lock() {
            exports.clear();
        }
    }
}

/// A frame as the API writes it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FrameInfo {
    /// The function, `???` when unknown.
    pub function: String,
    /// The file, empty when unknown: the whole path, which the filters match.
    pub file: String,
    /// Where the file's name as the reports print it starts in `file` (`core/src/...` of
    /// `/rustc/<commit>/library/core/src/...`).
    pub short_from: usize,
    /// The line, 0 when unknown.
    pub line: u32,
    /// The return address it came from.
    pub address: u64,
    /// Whether it is the standard library's code ([`Frame::is_std`]).
    pub std: bool,
}

impl FrameInfo {
    /// The file as the reports print it.
    pub fn short_file(&self) -> &str {
        &self.file[self.short_from..]
    }

    /// The frame as JSON: `{"function","file","line","std"}`, the file as the reports print it.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({"function": self.function, "file": self.short_file(),
                           "line": self.line, "std": self.std})
    }
}

/// One stack of the trace.
#[derive(Debug, Serialize, Deserialize)]
pub struct StackInfo {
    /// Its call site.
    pub site: u32,
    /// The program's frames (the report's context with no depth limit), outermost first, as
    /// indices into [`State::names`]: the flame graph's path.
    pub path: Vec<u32>,
    /// Where those frames lie among the stack's frames (innermost first, inlined calls
    /// expanded): the frames before are memprof's, the allocator's and std's below the
    /// collection operation; those after, the runtime below the program.
    pub shown: std::ops::Range<u32>,
    /// How many frames the stack has in all.
    pub frames: u32,
}

/// A call site: stacks with one context.
#[derive(Debug, Serialize, Deserialize)]
pub struct SiteInfo {
    /// Its context's frames, innermost first (the report's context: the collection operation
    /// the program called, then the program's frames, up to the recording's depth).
    pub context: Vec<FrameInfo>,
    /// The index in `context` of the program's first frame: the first outside the standard
    /// library, else the first.
    pub program: usize,
    /// Its stacks.
    pub stacks: Vec<u32>,
}

impl SiteInfo {
    /// The frame that names the site: the program's first.
    pub fn frame(&self) -> &FrameInfo {
        &self.context[self.program]
    }

    /// The site's names as JSON members: `function`, `file`, `line` of its program's first
    /// frame, `context` (its frames) and `program` (that frame's index in them).
    pub fn names(&self, into: &mut serde_json::Map<String, serde_json::Value>) {
        let frame = self.frame();
        into.insert("function".into(), frame.function.clone().into());
        into.insert("file".into(), frame.short_file().into());
        into.insert("line".into(), frame.line.into());
        let context = self.context.iter().map(FrameInfo::json).collect();
        into.insert("context".into(), serde_json::Value::Array(context));
        into.insert("program".into(), self.program.into());
    }
}

/// A trace with its index.
#[derive(Debug)]
pub struct State {
    /// The trace.
    pub trace: Trace,
    /// Its index.
    pub index: Agg,
    /// Its classes.
    pub classes: Classes,
    /// Its stacks.
    pub stacks: Vec<StackInfo>,
    /// Each return address's frames (inlined ones expanded), resolved once.
    pub frames: HashMap<u64, Arc<[FrameInfo]>>,
    /// Frame names of the flame graphs' paths, and whether each is the standard library's.
    pub names: Vec<(String, bool)>,
    /// Its call sites, by id.
    pub sites: Vec<SiteInfo>,
    /// Markers: label id → text.
    pub labels: HashMap<u32, String>,
    /// Its replays, and their answers kept.
    pub replays: Replays,
    /// A live trace's progress, while it is received.
    pub live: Option<LiveFigures>,
    /// What resolving more stacks into call sites needs.
    resolving: Resolving,
    /// The crate of each stack resolved so far ([`State::stack_crates`]), and its caller crate
    /// and crate.
    crates: Mutex<[Vec<Arc<str>>; 2]>,
}

/// Where the index of a trace being received stands.
#[derive(Clone, Copy, Debug, Default)]
pub struct LiveFigures {
    /// Events that arrived but are not in the index yet: within the last seconds, while chunks
    /// of other threads may still arrive from before them.
    pub pending: u64,
    /// Events the index counted after later ones (their chunk arrived late).
    pub out_of_order: u64,
    /// The index has every event at or before this time (ns).
    pub through: u64,
}

/// The call sites resolved from a trace's stacks, as kept beside the trace: those of a trace
/// opened from a file, which is not extended (the tables that number sites and frame names for
/// new stacks are not kept).
#[derive(Deserialize)]
pub struct Resolved {
    depth: usize,
    skip: usize,
    stacks: Vec<StackInfo>,
    frames: HashMap<u64, Arc<[FrameInfo]>>,
    names: Vec<(String, bool)>,
    sites: Vec<KeptSite>,
}

/// [`Resolved`] by reference, for writing.
#[derive(Serialize)]
pub struct ResolvedRef<'a> {
    depth: usize,
    skip: usize,
    stacks: &'a Vec<StackInfo>,
    frames: &'a HashMap<u64, Arc<[FrameInfo]>>,
    names: &'a Vec<(String, bool)>,
    sites: Vec<KeptSite>,
}

/// A call site as kept: its context's frames by their return address and place among that
/// address's frames (a site of a deep stack would otherwise repeat the names of all of them).
#[derive(Serialize, Deserialize)]
pub struct KeptSite {
    context: Vec<(u64, u32)>,
    program: usize,
    stacks: Vec<u32>,
}

/// The place of a frame without a name, the one frame of a site with an empty context.
const UNKNOWN_FRAME: u32 = u32::MAX;

impl Resolved {
    /// Whether these are the call sites of `state`'s trace as it resolves them, every id in
    /// range and every frame's file sliceable where the API slices it.
    /// The call sites, their frames found again among the addresses' frames.
    fn sites(&self) -> Option<Vec<SiteInfo>> {
        self.sites
            .iter()
            .map(|kept| {
                let context = kept
                    .context
                    .iter()
                    .map(|&(address, at)| {
                        if at == UNKNOWN_FRAME {
                            return Some(frame_info(&Frame::default(), address));
                        }
                        self.frames.get(&address)?.get(at as usize).cloned()
                    })
                    .collect::<Option<Vec<FrameInfo>>>()?;
                Some(SiteInfo {
                    context,
                    program: kept.program,
                    stacks: kept.stacks.clone(),
                })
            })
            .collect()
    }

    fn fits(&self, state: &State, sites: &[SiteInfo]) -> bool {
        let options = &state.resolving.options;
        let stacks = state.trace.stacks();
        let frame_ok = |f: &FrameInfo| f.file.is_char_boundary(f.short_from);
        (self.depth, self.skip) == (options.depth, options.skip)
            && self.stacks.len() == stacks.len()
            && self.stacks.iter().all(|s| {
                (s.site as usize) < sites.len()
                    && s.path.iter().all(|&n| (n as usize) < self.names.len())
            })
            && sites.iter().all(|site| {
                site.program < site.context.len()
                    && site.context.iter().all(frame_ok)
                    && site.stacks.iter().all(|&s| (s as usize) < stacks.len())
            })
            && self
                .frames
                .values()
                .all(|frames| frames.iter().all(frame_ok))
    }
}

/// The tables that number call sites and frame names, kept to resolve a live trace's new
/// stacks.
#[derive(Debug)]
struct Resolving {
    options: ReportOptions,
    whole: ReportOptions,
    site_ids: HashMap<Vec<u32>, u32>,
    name_ids: HashMap<String, u32>,
}

fn frame_info(frame: &Frame, address: u64) -> FrameInfo {
    let file = frame.file.clone().unwrap_or_default();
    let short = frame.short_file().unwrap_or_default().len();
    FrameInfo {
        function: frame.function.clone().unwrap_or_else(|| "???".into()),
        short_from: file.len() - short,
        file,
        line: frame.line,
        address,
        std: frame.is_std(),
    }
}

impl State {
    /// Opens and indexes `trace` (`quiet`: no progress bar).
    pub fn build(trace: Trace, quiet: bool) -> Result<State, Failure> {
        let progress = if quiet {
            ProgressBar::hidden()
        } else {
            crate::common::bar(trace.events(), "indexing")
        };
        let mut builder = IndexBuilder::new(trace.header().sample_interval);
        trace.visit(&mut builder, &mut |done| progress.set_position(done))?;
        progress.finish_and_clear();
        let (index, classes) = builder.finish();
        Ok(State::new(trace, index, classes))
    }

    /// Each stack's crate, by the crate table's rule (`memprof::Report::crate_of`): for the
    /// `crate` filter. Resolved once per stack, the first time a query asks (and for the stacks
    /// a live trace added since).
    pub fn stack_crates(&self) -> Vec<Arc<str>> {
        self.stack_crates_by(false)
    }

    /// [`State::stack_crates`], or with `by_caller` each stack's `caller ← crate`: what
    /// `/api/crates` sums.
    pub fn stack_crates_by(&self, by_caller: bool) -> Vec<Arc<str>> {
        let mut crates = self.crates.lock().unwrap_or_else(PoisonError::into_inner);
        let crates = &mut crates[usize::from(by_caller)];
        let stacks = self.trace.stacks();
        let from = crates.len();
        if from < stacks.len() {
            let mut resolver = crate::moment::resolver_for(&self.trace, &stacks[from..]);
            for stack in &stacks[from..] {
                let addresses: Vec<ReturnAddress> =
                    stack.iter().map(|&a| ReturnAddress(a as usize)).collect();
                let name = memprof::Report::crate_of(&addresses, &mut resolver, by_caller);
                crates.push(Arc::from(name));
            }
        }
        crates.clone()
    }

    /// `trace` with this index, its stacks resolved into call sites.
    pub fn new(trace: Trace, index: Agg, classes: Classes) -> State {
        State::with_resolved(trace, index, classes, None).0
    }

    /// [`State::new`], with the call sites resolved before (kept beside the trace) when they
    /// are those of this trace with the depth and skip it is resolved with now; and whether they
    /// were.
    pub fn with_resolved(
        trace: Trace,
        index: Agg,
        classes: Classes,
        resolved: Option<Resolved>,
    ) -> (State, bool) {
        let header = trace.header();
        let mut options = ReportOptions::from_env();
        if header.stack_depth > 0 {
            options = options.depth(header.stack_depth as usize);
        }
        options.skip = header.stack_skip as usize;
        let mut whole = options.clone().depth(usize::MAX);
        whole.skip = 0;
        let mut state = State {
            trace,
            index,
            classes,
            stacks: Vec::new(),
            frames: HashMap::new(),
            names: Vec::new(),
            sites: Vec::new(),
            labels: HashMap::new(),
            replays: Replays::default(),
            live: None,
            resolving: Resolving {
                options,
                whole,
                site_ids: HashMap::new(),
                name_ids: HashMap::new(),
            },
            crates: Mutex::new([Vec::new(), Vec::new()]),
        };
        if let Some(resolved) = resolved
            && let Some(sites) = resolved.sites()
            && resolved.fits(&state, &sites)
        {
            state.stacks = resolved.stacks;
            state.frames = resolved.frames;
            state.names = resolved.names;
            state.sites = sites;
            state.labels = state.trace.labels().clone();
            return (state, true);
        }
        state.resolve_new_stacks();
        (state, false)
    }

    /// The call sites resolved, to keep beside the trace; none when a frame of a site is not
    /// among its address's frames.
    pub fn resolved(&self) -> Option<ResolvedRef<'_>> {
        let same = |a: &FrameInfo, b: &FrameInfo| {
            (&a.function, &a.file, a.line, a.short_from, a.std)
                == (&b.function, &b.file, b.line, b.short_from, b.std)
        };
        let unknown = |f: &FrameInfo| same(f, &frame_info(&Frame::default(), f.address));
        let sites = self
            .sites
            .iter()
            .map(|site| {
                let context = site
                    .context
                    .iter()
                    .map(|frame| {
                        let found = self
                            .frames
                            .get(&frame.address)
                            .and_then(|frames| frames.iter().position(|f| same(f, frame)));
                        match found {
                            Some(at) => Some((frame.address, at as u32)),
                            None if unknown(frame) => Some((frame.address, UNKNOWN_FRAME)),
                            None => None,
                        }
                    })
                    .collect::<Option<Vec<_>>>()?;
                Some(KeptSite {
                    context,
                    program: site.program,
                    stacks: site.stacks.clone(),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(ResolvedRef {
            depth: self.resolving.options.depth,
            skip: self.resolving.options.skip,
            stacks: &self.stacks,
            frames: &self.frames,
            names: &self.names,
            sites,
        })
    }

    /// Resolves the stacks the trace defined since the last call into call sites (a live
    /// trace's new stacks), and takes its new marker labels.
    pub fn resolve_new_stacks(&mut self) {
        let from = self.stacks.len();
        let trace = &self.trace;
        let mut resolver = crate::moment::resolver_for(trace, &trace.stacks()[from..]);
        let Resolving {
            options,
            whole,
            site_ids,
            name_ids,
        } = &mut self.resolving;
        let (sites, frames, names) = (&mut self.sites, &mut self.frames, &mut self.names);
        for (id, addresses) in trace.stacks().iter().enumerate().skip(from) {
            let returns: Vec<ReturnAddress> = addresses
                .iter()
                .map(|&a| ReturnAddress(a as usize))
                .collect();
            let resolved = resolver.resolve_stack(&returns);
            // Every frame of the stack, innermost first, with the address it came from.
            let expanded: Vec<(&Frame, u64)> = resolved
                .iter()
                .zip(addresses)
                .flat_map(|(frames, &address)| frames.iter().map(move |f| (f, address)))
                .collect();
            for (frames_of, &address) in resolved.iter().zip(addresses) {
                frames
                    .entry(address)
                    .or_insert_with(|| frames_of.iter().map(|f| frame_info(f, address)).collect());
            }
            let bare: Vec<&Frame> = expanded.iter().map(|(f, _)| *f).collect();
            // The site's context, as the reports group it, and the program's frames with no
            // depth limit, as the flame graph draws them: both by the library's rules.
            let context = memprof::context_range(&bare, options);
            let program = memprof::context_range(&bare, whole);
            let mut intern = |frames: &[&Frame]| -> Vec<u32> {
                frames
                    .iter()
                    .map(|frame| {
                        let name = frame.to_string();
                        let next = names.len() as u32;
                        *name_ids.entry(name).or_insert_with_key(|name| {
                            names.push((name.clone(), frame.is_std()));
                            next
                        })
                    })
                    .collect()
            };
            let mut path = intern(&bare[program.clone()]);
            path.reverse();
            // Contexts by their frames' ids: a trace of 200,000 deep stacks has 200,000 of them.
            let key = intern(&bare[context.clone()]);
            let next = sites.len() as u32;
            let site = *site_ids.entry(key).or_insert(next);
            if site == next {
                let mut context: Vec<FrameInfo> = expanded[context]
                    .iter()
                    .map(|&(frame, address)| frame_info(frame, address))
                    .collect();
                if context.is_empty() {
                    context.push(frame_info(
                        &Frame::default(),
                        addresses.first().copied().unwrap_or(0),
                    ));
                }
                sites.push(SiteInfo {
                    program: context.iter().position(|f| !f.std).unwrap_or(0),
                    context,
                    stacks: Vec::new(),
                });
            }
            sites[site as usize].stacks.push(id as u32);
            self.stacks.push(StackInfo {
                site,
                path,
                shown: program.start as u32..program.end as u32,
                frames: expanded.len() as u32,
            });
        }
        if self.labels.len() != trace.labels().len() {
            self.labels = trace.labels().clone();
        }
    }

    /// Resolves every stack again (a live trace whose symbols arrived at its end), and forgets
    /// their crates.
    pub fn resolve_all_stacks(&mut self) {
        self.stacks.clear();
        self.frames.clear();
        self.names.clear();
        self.sites.clear();
        self.resolving.site_ids.clear();
        self.resolving.name_ids.clear();
        *self
            .crates
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = [Vec::new(), Vec::new()];
        self.resolve_new_stacks();
    }

    /// The label id of a marker's text.
    pub fn label(&self, text: &str) -> Option<u32> {
        self.labels
            .iter()
            .filter(|(_, t)| *t == text)
            .map(|(&id, _)| id)
            .min()
    }

    /// The markers' labels, for an error message.
    pub fn marker_names(&self) -> String {
        let mut names: Vec<&str> = self.labels.values().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }

    /// The program's frames of a stack, innermost first ([`StackInfo::shown`]).
    pub fn stack_frames(&self, stack: u32) -> impl Iterator<Item = &FrameInfo> {
        let shown = self
            .stacks
            .get(stack as usize)
            .map_or(0..0, |s| s.shown.clone());
        self.trace
            .stacks()
            .get(stack as usize)
            .into_iter()
            .flatten()
            .flat_map(|a| self.frames.get(a).into_iter().flat_map(|f| f.iter()))
            .skip(shown.start as usize)
            .take(shown.len())
    }

    /// The site of a class.
    pub fn site_of_class(&self, class: usize) -> u32 {
        let (stack, _) = self.classes.list[class];
        self.stacks[stack as usize].site
    }
}
