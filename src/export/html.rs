//! A report in one HTML file that opens in any browser, offline: the call sites in a table
//! sortable by each column, the flame graph of live bytes, and, given the run's events (from a
//! trace), the live bytes over time with the peak and the markers.
//!
//! Everything is in the file: the style, the script, and the data as one JSON document in a
//! `<script type="application/json">` element, with `<`, `>` and `&` written as `\u003c`,
//! `\u003e` and `\u0026` so that no text of the program (a function named `</script>`) can end
//! the element. The flame graph is inferno's SVG, inlined, when memprof is built with the
//! `flamegraph` feature (its script, document type and namespace declarations left out: an SVG
//! element inside HTML needs none), else the page's script draws it from the folded stacks in
//! the data. The file names no URL: nothing is fetched when it opens.
//!
//! A site is named as `memprof serve`'s viewer names it: by its first frame outside the standard
//! library (the collection operation it called aside), and shown with its first frames.

#![forbid(unsafe_code)]

use super::dhat::json_string;
use super::{CallSites, Event, Events, ExportOptions, folded};
use crate::frames::Frame;
use crate::snapshot::Snapshot;
use crate::symbolize::Resolve;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

/// The page, with `{{TITLE}}`, `{{FLAME}}` and `{{DATA}}` where the report goes.
const PAGE: &str = include_str!("html/page.html");

/// Frames listed per site, from the allocating one out.
const FRAMES_SHOWN: usize = 6;

/// A point of the timeline: ns, live bytes.
type Point = (u64, u64);

/// Points of the timeline at most (about two per step of its width).
const TIMELINE_STEPS: u64 = 1000;

/// Writes `snapshot` as a self-contained HTML report, with the timeline when `events` is given.
pub(crate) fn write<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    events: Option<&mut dyn Events>,
    out: &mut W,
) -> io::Result<()> {
    crate::guard::untracked(|| {
        let sites = CallSites::build(snapshot, resolver, options);
        let timeline = match events {
            Some(events) => Some(Timeline::measure(events, options)?),
            None => None,
        };
        let title = options
            .title
            .clone()
            .unwrap_or_else(|| format!("memprof: {}", options.command));
        let data = script_safe(&data_json(&sites, options, &title, timeline.as_ref()));
        let flame = flame_svg(&sites, options)?;
        let (head, rest) = PAGE.split_once("{{TITLE}}").unwrap_or((PAGE, ""));
        let (middle, rest) = rest.split_once("{{FLAME}}").unwrap_or((rest, ""));
        let (flame_end, tail) = rest.split_once("{{DATA}}").unwrap_or((rest, ""));
        out.write_all(head.as_bytes())?;
        out.write_all(html_text(&title).as_bytes())?;
        out.write_all(middle.as_bytes())?;
        out.write_all(flame.as_bytes())?;
        out.write_all(flame_end.as_bytes())?;
        out.write_all(data.as_bytes())?;
        out.write_all(tail.as_bytes())
    })
}

/// The live bytes over time, drawn from the events.
#[derive(Debug, Default, PartialEq, Eq)]
struct Timeline {
    /// In time order: each step's highest point and its last.
    points: Vec<Point>,
    /// The most bytes live at once, and when they first were.
    peak: (u64, u64),
    /// (ns, label) of each marker.
    markers: Vec<(u64, String)>,
    /// The time of the last event.
    end: u64,
}

impl Timeline {
    fn measure(events: &mut dyn Events, options: &ExportOptions) -> io::Result<Timeline> {
        let step = (options.elapsed.as_nanos() as u64 / TIMELINE_STEPS).max(1);
        let mut timeline = Timeline {
            points: vec![(0, 0)],
            ..Timeline::default()
        };
        let mut live: HashMap<u64, u64> = HashMap::new();
        let mut bytes = 0u64;
        // The step being drawn: its number, its highest point, its last point.
        let mut current: Option<(u64, Point, Point)> = None;
        let flush = |points: &mut Vec<Point>, (_, high, last): (u64, Point, Point)| {
            points.push(high);
            if last != high {
                points.push(last);
            }
        };
        events.for_each(&mut |event| {
            let time = match event {
                Event::Alloc {
                    time,
                    address,
                    size,
                    ..
                } => {
                    bytes += size;
                    if let Some(old) = live.insert(address, size) {
                        bytes -= old;
                    }
                    time
                }
                Event::Free { time, address } => {
                    bytes -= live.remove(&address).unwrap_or(0);
                    time
                }
            };
            if bytes > timeline.peak.1 {
                timeline.peak = (time, bytes);
            }
            timeline.end = timeline.end.max(time);
            let number = time / step;
            match &mut current {
                Some((n, high, last)) if *n == number => {
                    if bytes > high.1 {
                        *high = (time, bytes);
                    }
                    *last = (time, bytes);
                }
                _ => {
                    if let Some(done) = current.take() {
                        flush(&mut timeline.points, done);
                    }
                    current = Some((number, (time, bytes), (time, bytes)));
                }
            }
        })?;
        if let Some(done) = current {
            flush(&mut timeline.points, done);
        }
        timeline.markers = events.markers();
        Ok(timeline)
    }
}

/// The frame a site goes by, with its module: its first frame outside the standard library,
/// else its first.
fn site_name<'a>(frames: &[(&'a Frame, Option<&'a str>)]) -> (&'a Frame, Option<&'a str>) {
    frames
        .iter()
        .find(|(f, _)| !f.is_std())
        .or(frames.first())
        .copied()
        .unwrap_or((&UNKNOWN, None))
}

static UNKNOWN: Frame = Frame {
    function: None,
    file: None,
    line: 0,
    column: 0,
};

/// A frame's function, or what stands for it: the module in brackets, `???` when nothing is
/// known (as the viewer writes it).
fn function_of(frame: &Frame, module: Option<&str>) -> String {
    match &frame.function {
        Some(function) => function.clone(),
        None if frame.file.is_none() && module.is_none() => "???".to_owned(),
        None => folded::frame_name(frame, module),
    }
}

/// The report's data as JSON.
fn data_json(
    sites: &CallSites,
    options: &ExportOptions,
    title: &str,
    timeline: Option<&Timeline>,
) -> String {
    let mut json = String::new();
    let totals = sites.sites.iter().fold([0u64; 4], |t, s| {
        [
            t[0] + s.live_bytes,
            t[1] + s.live_blocks,
            t[2] + s.allocated_blocks,
            t[3] + s.allocated_bytes,
        ]
    });
    let _ = write!(
        json,
        "{{\"title\":{},\"command\":{},\"pid\":{},\"elapsed_ns\":{},\"value\":{},\
         \"totals\":{{\"live_bytes\":{},\"live_blocks\":{},\"allocations\":{},\"allocated_bytes\":{}}},\
         \n\"sites\":[",
        json_string(title),
        json_string(&options.command),
        options.pid,
        options.elapsed.as_nanos(),
        json_string(options.value.label()),
        totals[0],
        totals[1],
        totals[2],
        totals[3],
    );
    for (index, site) in sites.sites.iter().enumerate() {
        let frames: Vec<(&Frame, Option<&str>)> = sites
            .frames(site)
            .map(|(location, f)| (f, location.module.as_deref()))
            .collect();
        let (named, module) = site_name(&frames);
        let shown: Vec<String> = frames
            .iter()
            .take(FRAMES_SHOWN)
            .map(|(f, m)| json_string(&frame_text(f, *m)))
            .collect();
        let _ = write!(
            json,
            "{}\n{{\"function\":{},\"file\":{},\"line\":{},\"frames\":[{}],\"more_frames\":{},\
             \"live_bytes\":{},\"live_blocks\":{},\"allocations\":{},\"allocated_bytes\":{}}}",
            if index == 0 { "" } else { "," },
            json_string(&function_of(named, module)),
            json_string(named.short_file().unwrap_or("")),
            named.line,
            shown.join(","),
            frames.len().saturating_sub(FRAMES_SHOWN),
            site.live_bytes,
            site.live_blocks,
            site.allocated_blocks,
            site.allocated_bytes,
        );
    }
    json.push_str("],\n\"flame\":[");
    for (index, (stack, value)) in folded::lines(sites, options).into_iter().enumerate() {
        let _ = write!(
            json,
            "{}\n[{},{value}]",
            if index == 0 { "" } else { "," },
            json_string(&stack)
        );
    }
    json.push_str("],\n\"timeline\":");
    match timeline {
        None => json.push_str("null"),
        Some(t) => {
            let points: Vec<String> = t.points.iter().map(|(x, y)| format!("[{x},{y}]")).collect();
            let markers: Vec<String> = t
                .markers
                .iter()
                .map(|(time, label)| format!("[{time},{}]", json_string(label)))
                .collect();
            let _ = write!(
                json,
                "{{\"peak_ns\":{},\"peak_bytes\":{},\"end_ns\":{},\"markers\":[{}],\n\"points\":[{}]}}",
                t.peak.0,
                t.peak.1,
                t.end,
                markers.join(","),
                points.join(",")
            );
        }
    }
    json.push_str("}\n");
    json
}

/// A frame as the reports print it (`src/main.rs:12:5 in 'app::build_index'`), or what stands
/// for an unknown one.
fn frame_text(frame: &Frame, module: Option<&str>) -> String {
    if frame.function.is_none() && frame.file.is_none() {
        return function_of(frame, module);
    }
    frame.to_string()
}

/// JSON made safe inside a `<script>` element: `<`, `>` and `&` occur only within its strings,
/// where their escapes mean the same.
fn script_safe(json: &str) -> String {
    json.replace('&', "\\u0026")
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
}

/// `text` as HTML text.
fn html_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// inferno's flame graph as an SVG element for the page: what precedes the `<svg` tag, its
/// namespace declarations, its comments and its script element left out (inferno's script is
/// not asked for).
#[cfg(feature = "flamegraph")]
fn flame_svg(sites: &CallSites, options: &ExportOptions) -> io::Result<String> {
    let mut svg = Vec::new();
    super::flamegraph::write_sites(sites, options, false, &mut svg)?;
    let svg = String::from_utf8_lossy(&svg);
    let Some(start) = svg.find("<svg") else {
        return Ok(String::new());
    };
    // Comments, and the script element inferno writes even without its script (settings only).
    let mut out = String::with_capacity(svg.len());
    let mut rest = &svg[start..];
    loop {
        let comment = rest.find("<!--").map(|at| (at, "-->"));
        let script = rest.find("<script").map(|at| (at, "</script>"));
        let Some((at, end)) = comment.into_iter().chain(script).min() else {
            break;
        };
        out.push_str(&rest[..at]);
        rest = rest[at..].split_once(end).map_or("", |(_, after)| after);
    }
    out.push_str(rest);
    // The namespace declarations are attributes of the `<svg` tag alone, as is the call of the
    // script left out.
    let tag_end = out.find('>').unwrap_or(0);
    let mut tag = out[..tag_end].to_owned();
    while let Some(at) = tag.find(" xmlns").or_else(|| tag.find(" onload=")) {
        let value_end = tag[at..]
            .find('"')
            .and_then(|open| {
                tag[at + open + 1..]
                    .find('"')
                    .map(|close| at + open + close + 2)
            })
            .unwrap_or(tag.len());
        tag.replace_range(at..value_end, "");
    }
    out.replace_range(..tag_end, &tag);
    Ok(out)
}

/// Without the `flamegraph` feature, the page draws the flame graph itself.
#[cfg(not(feature = "flamegraph"))]
fn flame_svg(_: &CallSites, _: &ExportOptions) -> io::Result<String> {
    Ok(String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_text_cannot_end_the_element() {
        let json = data_json(
            &CallSites::default(),
            &ExportOptions::default().command("a </script><b> & c"),
            "t",
            None,
        );
        let safe = script_safe(&json);
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'));
        assert!(safe.contains(r"a \u003c/script\u003e\u003cb\u003e \u0026 c"));
    }
}
