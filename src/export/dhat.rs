//! DHAT JSON (`dhatFileVersion` 2), as Valgrind's `dh_view.html` reads it.
//!
//! `mode` is `rust-heap`, like dhat-rs's files; block lifetimes are on (`bklt: true`), access
//! counts off (`bkacc: false`). Per program point (one per call site):
//!
//! | field | value |
//! |---|---|
//! | `tb`, `tbk` | bytes and blocks allocated over the run |
//! | `eb`, `ebk` | bytes and blocks live in the snapshot ("at t-end") |
//! | `mb`, `mbk` | the site's most live bytes, and its blocks then: exact with events; from a snapshot alone **approximated** by the larger of its live and at-peak values, a lower bound (the table keeps no per-site maximum) |
//! | `gb`, `gbk` | bytes and blocks live at the global peak, when the table keeps the peak (`MEMPROF_PEAK`, on for `.dhat.json` outputs); otherwise the live values |
//! | `tl` | with events only: the lifetimes of the site's blocks added up, a block still live counting up to `te` |
//!
//! Times are in ns (`tu` `ns`, `Mtu` `ms`) since the program started, from a snapshot and from a
//! trace alike: a trace's lifetimes are often shorter than a microsecond, and one unit for both
//! lets two files be compared. `te` is [`ExportOptions::elapsed`] (at least 1). From a snapshot
//! alone, `tl` is left out (blocks carry no allocation time, so the viewer's average-lifetime
//! column reads `NaN` rather than a made-up number), and `tg` is `te` (the peak's time is not
//! kept). With events ([`export::write_with_events`](super::write_with_events), from a trace),
//! `tg` is when the live bytes first reached their maximum. Frames (`ftbl`) read
//! `0x1234: app::f (src/main.rs:12:5)`, Valgrind's style; `ftbl[0]` is `[root]`; `fs` lists a
//! site's frames innermost first, inlined calls expanded. The file is written one program point
//! per line.

#![forbid(unsafe_code)]

use super::events::{self, Events};
use super::{CallSites, ExportOptions};
use crate::address::ReturnAddress;
use crate::frames::Frame;
use crate::snapshot::Snapshot;
use crate::symbolize::Resolve;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

/// A frame as DHAT prints it: `0x<address>: <function> (<file>:<line>:<column>)`, or
/// `(in <module>)` when the source is not known, `???` for the function when unknown.
pub(crate) fn frame_string(address: ReturnAddress, frame: &Frame, module: Option<&str>) -> String {
    let mut text = format!(
        "0x{:X}: {}",
        address.lookup_address(),
        frame.function.as_deref().unwrap_or("???")
    );
    match &frame.file {
        Some(file) if frame.line != 0 => {
            let _ = write!(text, " ({file}:{}", frame.line);
            if frame.column != 0 {
                let _ = write!(text, ":{}", frame.column);
            }
            text.push(')');
        }
        Some(module) => {
            let _ = write!(text, " (in {module})");
        }
        None => {
            if let Some(module) = module {
                let _ = write!(text, " (in {module})");
            }
        }
    }
    text
}

/// `text` as a JSON string literal.
pub(crate) fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Writes `snapshot` as a DHAT JSON file.
pub fn write<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    out: &mut W,
) -> io::Result<()> {
    write_with_events(snapshot, resolver, options, None, out)
}

/// Writes `snapshot` as a DHAT JSON file, with lifetimes, per-site maxima and the peak's time
/// from `events` when given (see the module's documentation).
pub(crate) fn write_with_events<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    events: Option<&mut dyn Events>,
    out: &mut W,
) -> io::Result<()> {
    crate::guard::untracked(|| {
        let sites = CallSites::build(snapshot, resolver, options);
        let mut frames: Vec<String> = vec!["[root]".to_owned()];
        let mut frame_ids: HashMap<String, usize> = HashMap::new();
        // The viewer divides by `te` for rates: never 0.
        let te = (options.elapsed.as_nanos() as u64).max(1);
        let units = ("ns", "ms", 10_000);
        let (measured, tg) = match events {
            Some(events) => {
                let site_of = events::site_of_stacks(&sites, snapshot.stacks.len());
                let measured = events::measure(&sites, &site_of, events, te)?;
                let tg = measured.peak_time;
                (Some(measured), tg)
            }
            None => (None, te),
        };
        let mut json = String::new();
        json.push_str("{\"dhatFileVersion\":2\n,\"mode\":\"rust-heap\"\n,\"verb\":\"Allocated\"\n");
        let _ = write!(
            json,
            ",\"bklt\":true\n,\"bkacc\":false\n,\"tu\":\"{}\"\n,\"Mtu\":\"{}\"\n",
            units.0, units.1
        );
        let _ = write!(
            json,
            ",\"tuth\":{}\n,\"cmd\":{}\n,\"pid\":{}\n,\"tg\":{tg}\n,\"te\":{te}\n,\"pps\":\n[",
            units.2,
            json_string(&options.command),
            options.pid
        );
        for (i, site) in sites.sites.iter().enumerate() {
            let fs: Vec<String> = sites
                .frames(site)
                .map(|(location, frame)| {
                    let text = frame_string(location.address, frame, location.module.as_deref());
                    let id = *frame_ids.entry(text).or_insert_with_key(|text| {
                        frames.push(text.clone());
                        frames.len() - 1
                    });
                    id.to_string()
                })
                .collect();
            let (eb, ebk) = (site.live_bytes, site.live_blocks);
            let (gb, gbk) = (site.peak_bytes, site.peak_blocks);
            let ((mb, mbk), tl) = match &measured {
                Some(measured) => (
                    measured.max[i],
                    format!("\"tl\":{},", measured.lifetimes[i]),
                ),
                None => ((eb.max(gb), ebk.max(gbk)), String::new()),
            };
            let _ = writeln!(
                json,
                "{}{{\"tb\":{},\"tbk\":{},{tl}\"mb\":{mb},\"mbk\":{mbk},\"gb\":{gb},\"gbk\":{gbk},\
                 \"eb\":{eb},\"ebk\":{ebk},\"fs\":[{}]}}",
                if i == 0 { "" } else { "," },
                site.allocated_bytes,
                site.allocated_blocks,
                fs.join(",")
            );
        }
        json.push_str("]\n,\"ftbl\":\n[");
        for (i, frame) in frames.iter().enumerate() {
            let _ = writeln!(
                json,
                "{}{}",
                if i == 0 { "" } else { "," },
                json_string(frame)
            );
        }
        json.push_str("]\n}\n");
        out.write_all(json.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(
            json_string("a\"b\\c\nd\u{1}é"),
            "\"a\\\"b\\\\c\\nd\\u0001é\""
        );
    }

    #[test]
    fn frames_read_like_valgrind() {
        let mut frame = Frame {
            function: Some("app::f".into()),
            file: Some("src/main.rs".into()),
            line: 12,
            column: 5,
        };
        let at = ReturnAddress(0x4AA1DA0);
        assert_eq!(
            frame_string(at, &frame, None),
            "0x4AA1D9F: app::f (src/main.rs:12:5)"
        );
        frame.line = 0;
        frame.file = Some("/usr/lib/libfoo.so".into());
        assert_eq!(
            frame_string(at, &frame, None),
            "0x4AA1D9F: app::f (in /usr/lib/libfoo.so)"
        );
        assert_eq!(frame_string(at, &Frame::default(), None), "0x4AA1D9F: ???");
        assert_eq!(
            frame_string(at, &Frame::default(), Some("/lib/libc.so.6")),
            "0x4AA1D9F: ??? (in /lib/libc.so.6)"
        );
    }
}
