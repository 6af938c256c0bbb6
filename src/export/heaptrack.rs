//! heaptrack data (interpreted text format, file version 3), gzip-compressed, as
//! `heaptrack_print` and `heaptrack_gui` read it.
//!
//! Lines, all numbers in hex: `v 10400 3` (heaptrack 1.4, sized strings), `X` the command line,
//! `s <length> <text>` strings (1-based), `i <ip> <module> <function> <file> <line> ...` one per
//! location with its inlined frames (innermost first), `t <ip> <parent>` the trace tree (leaf =
//! allocation site, parent = caller, 0 = root), `a <size> <trace>` allocation kinds (0-based),
//! `+ <kind>` / `- <kind>` events, and a final `c <ms>` timestamp.
//!
//! A snapshot has totals per call site, not the order of events, so the events are made up from
//! them (a real event stream comes with the trace mode):
//!
//! - each block allocated and freed since is written as a `+` directly followed by its `-`, so
//!   heaptrack counts every one of them as a *temporary* allocation; their sizes are the site's
//!   freed bytes spread evenly over its freed blocks (sizes differ by at most one byte);
//! - then every live block, with its own size, as a `+` alone: heaptrack reports these as leaked
//!   (live at the end).
//!
//! All temporary pairs come first, so heaptrack's peak is the live heap at the end (or the largest
//! single freed block, if larger), not the process's real peak
//! ([`HeapStats::peak_bytes`](crate::HeapStats::peak_bytes)), which a snapshot cannot attribute to
//! call sites.

#![forbid(unsafe_code)]

use super::{CallSites, ExportOptions};
use crate::snapshot::Snapshot;
use crate::symbolize::Resolve;
use flate2::Compression;
use flate2::write::GzEncoder;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

/// The heaptrack version written in the header (1.4.0).
const HEAPTRACK_VERSION: u32 = 0x10400;
/// The file format version: 3 has sized strings.
const FILE_VERSION: u32 = 3;

/// The string table: 1-based indices, 0 = none.
struct Strings {
    text: String,
    index: HashMap<String, usize>,
}

impl Strings {
    fn get(&mut self, s: &str) -> usize {
        if s.is_empty() {
            return 0;
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        // Lines end at a line break: a string must not hold one.
        let clean = s.replace(['\n', '\r'], " ");
        let _ = writeln!(self.text, "s {:x} {clean}", clean.len());
        let i = self.index.len() + 1;
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// Writes the uncompressed heaptrack text of `snapshot`: what [`write()`] compresses.
pub fn write_text<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    out: &mut W,
) -> io::Result<()> {
    crate::guard::untracked(|| {
        let sites = CallSites::build(snapshot, resolver, options);
        let mut strings = Strings {
            text: String::new(),
            index: HashMap::new(),
        };
        // One `i` line per location, with the module its address falls in.
        let mut ips = String::new();
        for location in &sites.locations {
            let address = location.address.lookup_address();
            let module = location.module.as_deref().unwrap_or("");
            let _ = write!(ips, "i {address:x} {:x}", strings.get(module));
            for frame in &location.frames {
                let function = strings.get(frame.function.as_deref().unwrap_or(""));
                let file = match &frame.file {
                    Some(file) if frame.line != 0 => strings.get(file),
                    _ => 0,
                };
                let _ = write!(ips, " {function:x} {file:x} {:x}", frame.line);
            }
            ips.push('\n');
        }
        // Sites without a single frame hang from one unknown location.
        let mut unknown_ip = None;
        // The trace tree, shared between sites from the outermost frame in.
        let mut traces = String::new();
        let mut trace_ids: HashMap<(usize, usize), usize> = HashMap::new();
        let mut kinds = String::new();
        let mut kind_ids: HashMap<(u64, usize), usize> = HashMap::new();
        let mut kind = |size: u64, trace: usize, kinds: &mut String| -> usize {
            let next = kind_ids.len();
            *kind_ids.entry((size, trace)).or_insert_with(|| {
                let _ = writeln!(kinds, "a {size:x} {trace:x}");
                next
            })
        };
        let mut temporary: Vec<(usize, u64)> = Vec::new();
        let mut live: Vec<usize> = Vec::new();
        for site in &sites.sites {
            let mut path: Vec<usize> = site.locations.iter().rev().map(|l| l + 1).collect();
            if path.is_empty() {
                path.push(*unknown_ip.get_or_insert_with(|| {
                    let _ = writeln!(ips, "i 0 0 {:x} 0 0", strings.get("[unknown]"));
                    sites.locations.len() + 1
                }));
            }
            let mut parent = 0;
            for ip in path {
                let next = trace_ids.len() + 1;
                parent = *trace_ids.entry((ip, parent)).or_insert_with(|| {
                    let _ = writeln!(traces, "t {ip:x} {parent:x}");
                    next
                });
            }
            let freed = site.freed_blocks();
            if let Some(size) = site.freed_bytes().checked_div(freed) {
                let larger = site.freed_bytes() % freed;
                if larger > 0 {
                    temporary.push((kind(size + 1, parent, &mut kinds), larger));
                }
                if freed > larger {
                    temporary.push((kind(size, parent, &mut kinds), freed - larger));
                }
            }
            for &size in &site.live_sizes {
                live.push(kind(size, parent, &mut kinds));
            }
        }
        let mut head = format!(
            "v {HEAPTRACK_VERSION:x} {FILE_VERSION:x}\n# memprof snapshot: freed blocks as +/- \
             pairs, then live blocks\nX {}\n",
            options.command.replace(['\n', '\r'], " ")
        );
        head.push_str(&strings.text);
        head.push_str(&ips);
        head.push_str(&traces);
        head.push_str(&kinds);
        out.write_all(head.as_bytes())?;
        let mut events = String::with_capacity(1 << 16);
        for (kind, count) in temporary {
            let pair = format!("+ {kind:x}\n- {kind:x}\n");
            for _ in 0..count {
                events.push_str(&pair);
                if events.len() >= 1 << 16 {
                    out.write_all(events.as_bytes())?;
                    events.clear();
                }
            }
        }
        for kind in live {
            let _ = writeln!(events, "+ {kind:x}");
            if events.len() >= 1 << 16 {
                out.write_all(events.as_bytes())?;
                events.clear();
            }
        }
        let _ = writeln!(events, "c {:x}", options.elapsed.as_millis());
        out.write_all(events.as_bytes())
    })
}

/// Writes `snapshot` as a gzip-compressed heaptrack file.
pub fn write<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    out: &mut W,
) -> io::Result<()> {
    let mut gzip = GzEncoder::new(out, Compression::fast());
    write_text(snapshot, resolver, options, &mut gzip)?;
    gzip.finish()?;
    Ok(())
}
