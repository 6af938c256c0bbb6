//! Folded stacks, the input of flamegraph tools: `outer;middle;inner <value>` per line.
//!
//! Frames run from the outermost (the root of the flamegraph) to the allocating one; every
//! inlined call is a frame of its own. A frame is the function name alone, as flamegraph tools
//! expect (`app::build_index`; an unknown one reads `[unknown]`), so the lines of one function are
//! one box. A `;` inside a name (Rust array types such as `[u8; 4]`) becomes `:`, as inferno's
//! own collapsers do, and line breaks become spaces. The value is [`ExportOptions::value`] (live
//! bytes by default); call sites whose value is 0 are left out; equal stacks are summed; lines
//! are sorted.

#![forbid(unsafe_code)]

use super::{CallSites, ExportOptions};
use crate::frames::Frame;
use crate::snapshot::Snapshot;
use crate::symbolize::Resolve;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// A frame as folded stacks show it: the function name, without `;` or line breaks; an unknown
/// function is shown by its module's file name in brackets (`[libc.so.6]`): the module the frame
/// names (a frame known only by its module, as the symbolizer and a trace's symbols give it,
/// which the reports print), else the module the address falls in, else `[unknown]`.
pub(crate) fn frame_name(frame: &Frame, module: Option<&str>) -> String {
    let own = frame.file.as_deref().filter(|_| frame.line == 0);
    let name = match (&frame.function, own.or(module)) {
        (Some(function), _) => function.clone(),
        (None, Some(module)) => format!("[{}]", module.rsplit('/').next().unwrap_or(module)),
        (None, None) => "[unknown]".to_owned(),
    };
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// The folded lines of `sites`: stack text to value, values of equal stacks summed, zeros left out.
pub(crate) fn lines(sites: &CallSites, options: &ExportOptions) -> BTreeMap<String, u64> {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for site in &sites.sites {
        let value = options.value.of(site);
        if value == 0 {
            continue;
        }
        let names: Vec<String> = sites
            .frames(site)
            .rev()
            .map(|(location, f)| frame_name(f, location.module.as_deref()))
            .collect();
        let stack = if names.is_empty() {
            "[unknown]".to_owned()
        } else {
            names.join(";")
        };
        *lines.entry(stack).or_default() += value;
    }
    lines
}

/// Writes `snapshot` as folded stacks.
pub fn write<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    out: &mut W,
) -> io::Result<()> {
    crate::guard::untracked(|| {
        let sites = CallSites::build(snapshot, resolver, options);
        let mut buffer = String::new();
        for (stack, value) in lines(&sites, options) {
            buffer.push_str(&stack);
            buffer.push(' ');
            buffer.push_str(&value.to_string());
            buffer.push('\n');
        }
        out.write_all(buffer.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_semicolons_and_line_breaks() {
        let frame = Frame {
            function: Some("<[u8; 4] as app::Fill>::fill\n".into()),
            ..Frame::default()
        };
        assert_eq!(frame_name(&frame, None), "<[u8: 4] as app::Fill>::fill ");
        assert_eq!(frame_name(&Frame::default(), None), "[unknown]");
        assert_eq!(
            frame_name(&Frame::default(), Some("/usr/lib/libc.so.6")),
            "[libc.so.6]"
        );
        // Known only by its module, as the reports print it: that module, wherever the address.
        let libc = Frame {
            file: Some("/usr/lib/x86_64-linux-gnu/libc.so.6".into()),
            ..Frame::default()
        };
        assert_eq!(frame_name(&libc, None), "[libc.so.6]");
        assert_eq!(frame_name(&libc, Some("/usr/bin/other")), "[libc.so.6]");
    }
}
