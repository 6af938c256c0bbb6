//! What the server knows of one trace: the opened trace, its index, its call sites (stacks
//! grouped by context as the reports group them) with their frames resolved once, and a small
//! cache of the scans that answered queries the index could not.

use super::index::{Agg, Builder, Classes};
use crate::Failure;
use indicatif::ProgressBar;
use memprof::{Frame, ReportOptions, Resolve, ReturnAddress};
use memprof_trace::Trace;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A frame as the API writes it.
#[derive(Clone, Debug)]
pub struct FrameInfo {
    /// The function, `???` when unknown.
    pub function: String,
    /// The file, empty when unknown.
    pub file: String,
    /// The line, 0 when unknown.
    pub line: u32,
    /// The return address it came from.
    pub address: u64,
}

/// One stack of the trace.
#[derive(Debug)]
pub struct StackInfo {
    /// Its call site.
    pub site: u32,
    /// The program's frames (the report's context with no depth limit), outermost first, as
    /// indices into [`State::names`]: the flame graph's path.
    pub path: Vec<u32>,
}

/// A call site: stacks with one context.
#[derive(Debug)]
pub struct SiteInfo {
    /// Its context's first frame.
    pub frame: FrameInfo,
    /// Its stacks.
    pub stacks: Vec<u32>,
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
    /// Frame names of the flame graphs' paths.
    pub names: Vec<String>,
    /// Its call sites, by id.
    pub sites: Vec<SiteInfo>,
    /// Markers: label id → text.
    pub labels: HashMap<u32, String>,
    /// Recent scans by their query.
    pub scans: Mutex<Vec<(String, Arc<Agg>)>>,
    /// Recent exports' bodies by their query.
    pub exports: Mutex<Vec<(String, Arc<Vec<u8>>)>>,
    /// Held while a scan runs: one at a time, so memory stays that of one replay.
    pub scanning: Mutex<()>,
}

fn frame_info(frame: &Frame, address: u64) -> FrameInfo {
    FrameInfo {
        function: frame.function.clone().unwrap_or_else(|| "???".into()),
        file: frame.file.clone().unwrap_or_default(),
        line: frame.line,
        address,
    }
}

impl State {
    /// Opens and indexes `trace` (`quiet`: no progress bar, for the live trace's rebuilds).
    pub fn build(trace: Trace, quiet: bool) -> Result<State, Failure> {
        let progress = if quiet {
            ProgressBar::hidden()
        } else {
            crate::bar(trace.events(), "indexing")
        };
        let mut builder = Builder::index();
        trace.visit(&mut builder, &mut |done| progress.set_position(done))?;
        progress.finish_and_clear();
        let (index, classes) = builder.finish();

        let header = trace.header();
        let mut options = ReportOptions::from_env();
        if header.stack_depth > 0 {
            options = options.depth(header.stack_depth as usize);
        }
        options.skip = header.stack_skip as usize;
        let mut whole = options.clone().depth(usize::MAX);
        whole.skip = 0;
        let mut resolver = crate::moment::resolver(&trace);
        let mut site_ids: HashMap<Vec<u32>, u32> = HashMap::new();
        let mut sites: Vec<SiteInfo> = Vec::new();
        let mut stacks = Vec::with_capacity(trace.stacks().len());
        let mut frames: HashMap<u64, Arc<[FrameInfo]>> = HashMap::new();
        let mut names: Vec<String> = Vec::new();
        let mut name_ids: HashMap<String, u32> = HashMap::new();
        for (id, addresses) in trace.stacks().iter().enumerate() {
            let returns: Vec<ReturnAddress> = addresses
                .iter()
                .map(|&a| ReturnAddress(a as usize))
                .collect();
            let context = memprof::context_of(&returns, &mut resolver, &options);
            let mut first = None;
            for &address in addresses {
                let resolved = resolver.resolve(ReturnAddress(address as usize));
                if first.is_none() {
                    first = resolved
                        .iter()
                        .find(|f| context.first() == Some(&f.to_string()))
                        .map(|f| frame_info(f, address));
                }
                frames
                    .entry(address)
                    .or_insert_with(|| resolved.iter().map(|f| frame_info(f, address)).collect());
            }
            let mut intern = |frames: Vec<String>| -> Vec<u32> {
                frames
                    .into_iter()
                    .map(|name| {
                        let next = names.len() as u32;
                        *name_ids.entry(name).or_insert_with_key(|name| {
                            names.push(name.clone());
                            next
                        })
                    })
                    .collect()
            };
            let mut path = intern(memprof::context_of(&returns, &mut resolver, &whole));
            path.reverse();
            // Contexts by their frames' ids: a trace of 200,000 deep stacks has 200,000 of them.
            let context = intern(context);
            let next = sites.len() as u32;
            let site = *site_ids.entry(context).or_insert(next);
            if site == next {
                sites.push(SiteInfo {
                    frame: first.unwrap_or(FrameInfo {
                        function: "???".into(),
                        file: String::new(),
                        line: 0,
                        address: addresses.first().copied().unwrap_or(0),
                    }),
                    stacks: Vec::new(),
                });
            }
            sites[site as usize].stacks.push(id as u32);
            stacks.push(StackInfo { site, path });
        }
        let labels = trace.labels().clone();
        Ok(State {
            trace,
            index,
            classes,
            stacks,
            frames,
            names,
            sites,
            labels,
            scans: Mutex::new(Vec::new()),
            exports: Mutex::new(Vec::new()),
            scanning: Mutex::new(()),
        })
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

    /// The frames of a stack, innermost first.
    pub fn stack_frames(&self, stack: u32) -> impl Iterator<Item = &FrameInfo> {
        self.trace
            .stacks()
            .get(stack as usize)
            .into_iter()
            .flatten()
            .flat_map(|a| self.frames.get(a).into_iter().flat_map(|f| f.iter()))
    }

    /// The site of a class.
    pub fn site_of_class(&self, class: usize) -> u32 {
        let (stack, _) = self.classes.list[class];
        self.stacks[stack as usize].site
    }
}
