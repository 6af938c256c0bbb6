//! Flamegraph SVG, drawn by inferno from the [folded stacks](super::folded).
//!
//! Needs the `flamegraph` cargo feature. The title is [`ExportOptions::title`] (default
//! "memprof: " and the value's label), the counts are named after the value's unit ("bytes" or
//! "blocks"), the palette is inferno's memory palette, and colors follow function names, so the
//! same profile always gives the same picture.

#![forbid(unsafe_code)]

use super::{CallSites, ExportOptions, folded};
use crate::snapshot::Snapshot;
use crate::symbolize::Resolve;
use inferno::flamegraph::{Options, color};
use std::io::{self, Write};

/// Writes `snapshot` as a flamegraph SVG. A snapshot with nothing to show (every value 0) gives a
/// small SVG that says so.
pub fn write<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    out: &mut W,
) -> io::Result<()> {
    crate::guard::untracked(|| {
        let sites = CallSites::build(snapshot, resolver, options);
        write_sites(&sites, options, true, out)
    })
}

/// Writes `sites` as a flamegraph SVG, with inferno's script that zooms and searches when
/// `script`.
pub(crate) fn write_sites<W: Write + ?Sized>(
    sites: &CallSites,
    options: &ExportOptions,
    script: bool,
    out: &mut W,
) -> io::Result<()> {
    let lines: Vec<String> = folded::lines(sites, options)
        .into_iter()
        .map(|(stack, value)| format!("{stack} {value}"))
        .collect();
    let mut svg = Options::default();
    svg.title = options
        .title
        .clone()
        .unwrap_or_else(|| format!("memprof: {}", options.value.label()));
    svg.count_name = options.value.unit().to_owned();
    svg.colors = color::Palette::Basic(color::BasicPalette::Mem);
    svg.hash = true;
    svg.no_javascript = !script;
    if lines.is_empty() {
        // inferno draws an error for an input without samples; say what is empty instead.
        let text = escape(&format!(
            "{}: no {} in this snapshot",
            svg.title,
            options.value.label()
        ));
        return write!(
            out,
            "<?xml version=\"1.0\" standalone=\"no\"?>\n\
                 <svg version=\"1.1\" width=\"1200\" height=\"60\" \
                 xmlns=\"http://www.w3.org/2000/svg\">\n\
                 <text x=\"600\" y=\"34\" text-anchor=\"middle\" \
                 font-family=\"Verdana\" font-size=\"17\">{text}</text>\n</svg>\n"
        );
    }
    inferno::flamegraph::from_lines(&mut svg, lines.iter().map(String::as_str), &mut *out)
}

/// `text` with the characters XML reserves replaced by entities.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}
