//! Allocation baselines: what the code in a test's [`Scope`] allocated and kept, per call site,
//! in a file a person reviews (`tests/memprof/NAME.txt` beside the package's `Cargo.toml`),
//! checked by [`Scope::assert_baseline`] and written by a run with `MEMPROF_BLESS=1`.
//!
//! A site is named as the reports name it, without addresses or line numbers: the program's
//! first frame and the collection operation it called (`parse::tokenize →
//! alloc::vec::Vec<T,A>::push`). The file says which build measured it (`build: debug` or
//! `build: release`, from `debug_assertions`): where inlining or the optimizer makes one build's
//! sites differ from the other's, each build has a file of its own (`NAME.txt` for debug builds,
//! `NAME.release.txt` for release builds), compared site by site; a build without its own file
//! compares the totals of the other build's, and says so.

#![forbid(unsafe_code)]

use super::{NO_STACK, Scope};
use crate::address::StackId;
use crate::frames::{self, Frame};
use crate::guard::untracked;
use crate::symbolize::{self, Resolve};
use crate::table::TABLE;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// How far a test's figures may drift from its baseline before the check fails: each site's
/// bytes (allocated and live) may differ from the baseline's by `bytes_percent` percent of the
/// baseline's figure either way, its blocks by `blocks_percent` percent. A site that appears or
/// disappears fails whatever the tolerance. The default, 0 and 0, asks for the exact figures.
///
/// ```rust,no_run
/// # let scope = memprof::Scope::start();
/// scope.assert_baseline_within(
///     "parse",
///     memprof::Tolerance { bytes_percent: 5, ..Default::default() },
/// );
/// ```
///
/// The baseline file may widen it with a line of its own, `tolerance: bytes 5%, blocks 1%`: the
/// wider of the two applies, figure by figure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tolerance {
    /// How far each site's bytes, allocated and live, may be from the baseline's, in percent of
    /// the baseline's figure.
    pub bytes_percent: u32,
    /// How far each site's blocks, allocated and live, may be from the baseline's, in percent of
    /// the baseline's figure.
    pub blocks_percent: u32,
}

impl Tolerance {
    /// The wider of two tolerances, figure by figure.
    fn wider(self, other: Tolerance) -> Tolerance {
        Tolerance {
            bytes_percent: self.bytes_percent.max(other.bytes_percent),
            blocks_percent: self.blocks_percent.max(other.blocks_percent),
        }
    }

    /// Whether `after` is within the tolerance of `before` (a byte figure when `bytes`).
    fn accepts(self, before: u64, after: u64, bytes: bool) -> bool {
        let percent = if bytes {
            self.bytes_percent
        } else {
            self.blocks_percent
        };
        u128::from(before.abs_diff(after)) * 100 <= u128::from(before) * u128::from(percent)
    }
}

/// The build a baseline was measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Build {
    /// With `debug_assertions` (`cargo test`).
    Debug,
    /// Without them (`cargo test --release`).
    Release,
}

impl Build {
    /// The build this code is: memprof's own `debug_assertions`, which Cargo sets alike for the
    /// test and the crates it links unless a profile says otherwise.
    pub(crate) const CURRENT: Build = if cfg!(debug_assertions) {
        Build::Debug
    } else {
        Build::Release
    };

    fn name(self) -> &'static str {
        match self {
            Build::Debug => "debug",
            Build::Release => "release",
        }
    }

    fn other(self) -> Build {
        match self {
            Build::Debug => Build::Release,
            Build::Release => Build::Debug,
        }
    }

    /// The file of baseline `name` measured in this build.
    pub(crate) fn file_name(self, name: &str) -> String {
        match self {
            Build::Debug => format!("{name}.txt"),
            Build::Release => format!("{name}.release.txt"),
        }
    }
}

/// One site's figures, or the totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Figures {
    pub(crate) allocated_blocks: u64,
    pub(crate) allocated_bytes: u64,
    pub(crate) live_blocks: u64,
    pub(crate) live_bytes: u64,
}

impl Figures {
    fn add(&mut self, other: Figures) {
        self.allocated_blocks += other.allocated_blocks;
        self.allocated_bytes += other.allocated_bytes;
        self.live_blocks += other.live_blocks;
        self.live_bytes += other.live_bytes;
    }

    /// The figures in the order a change is judged by, each with whether it counts bytes.
    fn judged(self) -> [(u64, bool); 4] {
        [
            (self.allocated_bytes, true),
            (self.allocated_blocks, false),
            (self.live_bytes, true),
            (self.live_blocks, false),
        ]
    }

    fn within(self, after: Figures, tolerance: Tolerance) -> bool {
        self.judged()
            .iter()
            .zip(after.judged())
            .all(|(&(before, bytes), (after, _))| tolerance.accepts(before, after, bytes))
    }
}

/// The name of the totals' row.
const TOTAL: &str = "(total)";

/// A baseline: read from its file, or measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Baseline {
    /// The build that measured it.
    pub(crate) build: Build,
    /// The file's own tolerance line(s), kept when it is rewritten.
    pub(crate) tolerance: Option<Tolerance>,
    /// Whether sites are named with the file and line of the program's frame (`lines: yes`).
    pub(crate) lines: bool,
    /// The figures per site, by name.
    pub(crate) sites: BTreeMap<String, Figures>,
}

impl Baseline {
    fn total(sites: &BTreeMap<String, Figures>) -> Figures {
        let mut total = Figures::default();
        for figures in sites.values() {
            total.add(*figures);
        }
        total
    }

    /// The file's text.
    pub(crate) fn render(&self, name: &str) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "\
# memprof allocation baseline, checked by Scope::assert_baseline(\"{name}\"):
# the blocks and bytes that the code in a test's memprof::Scope allocated, and those still live
# at the check, per call site: the program's first frame → the collection operation it called
# (function names only, no line numbers: moving code leaves the file as it is).
# Every test run checks it; a run with MEMPROF_BLESS=1 (`MEMPROF_BLESS=1 cargo test`) rewrites
# it, to review in the diff and commit. Lines kept when it is rewritten: `tolerance: bytes 5%,
# blocks 0%` (how far the figures may drift) and `lines: yes` (sites with their file and line).
# `build:` is the build that measured it; each build checks its own file site by site:
#   debug: {debug}
#   release: {release}
# and without it, the other build's totals only.
build: {}
",
            self.build.name(),
            debug = Build::Debug.file_name(name),
            release = Build::Release.file_name(name),
        );
        if let Some(t) = self.tolerance {
            let _ = writeln!(
                out,
                "tolerance: bytes {}%, blocks {}%",
                t.bytes_percent, t.blocks_percent
            );
        }
        if self.lines {
            out.push_str("lines: yes\n");
        }
        let _ = writeln!(out, "#\n#{:>21} {:>22}", "allocated", "live at the check");
        let _ = writeln!(
            out,
            "#{:>8} {:>12} {:>9} {:>12}  site",
            "blocks", "bytes", "blocks", "bytes"
        );
        let row = |out: &mut String, f: &Figures, site: &str| {
            let _ = writeln!(
                out,
                "{:>9} {:>12} {:>9} {:>12}  {site}",
                f.allocated_blocks, f.allocated_bytes, f.live_blocks, f.live_bytes
            );
        };
        for (site, figures) in &self.sites {
            row(&mut out, figures, site);
        }
        row(&mut out, &Baseline::total(&self.sites), TOTAL);
        out
    }

    /// Reads a baseline file's text; an error names the line.
    pub(crate) fn parse(text: &str) -> Result<Baseline, String> {
        let mut build = None;
        let mut tolerance: Option<Tolerance> = None;
        let mut lines = false;
        let mut sites = BTreeMap::new();
        let mut total = None;
        for (index, line) in text.lines().enumerate() {
            let at = |what: &str| format!("line {}: {what}", index + 1);
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.starts_with(|c: char| c.is_ascii_digit()) {
                let mut rest = line;
                let mut values = [0u64; 4];
                for value in &mut values {
                    let (field, after) = rest
                        .split_once(char::is_whitespace)
                        .ok_or_else(|| at("four figures, then the site"))?;
                    *value = field
                        .parse()
                        .map_err(|_| at(&format!("{field:?} is not a whole number")))?;
                    rest = after.trim_start();
                }
                let figures = Figures {
                    allocated_blocks: values[0],
                    allocated_bytes: values[1],
                    live_blocks: values[2],
                    live_bytes: values[3],
                };
                if rest == TOTAL {
                    total = Some(figures);
                } else if sites.insert(rest.to_owned(), figures).is_some() {
                    return Err(at(&format!("the site {rest:?} is listed twice")));
                }
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                return Err(at("neither a comment, a setting nor a site"));
            };
            let value = value.trim();
            match key.trim() {
                "build" => {
                    build = Some(match value {
                        "debug" => Build::Debug,
                        "release" => Build::Release,
                        _ => return Err(at("the build is `debug` or `release`")),
                    })
                }
                "tolerance" => {
                    let parsed = parse_tolerance(value).map_err(|e| at(&e))?;
                    tolerance = Some(tolerance.unwrap_or_default().wider(parsed));
                }
                "lines" => {
                    lines = match value {
                        "yes" => true,
                        "no" => false,
                        _ => return Err(at("`lines:` is `yes` or `no`")),
                    }
                }
                other => return Err(at(&format!("{other:?} is not a setting of a baseline"))),
            }
        }
        let build = build.ok_or("no `build: debug` or `build: release` line")?;
        if let Some(total) = total
            && total != Baseline::total(&sites)
        {
            return Err(format!(
                "the {TOTAL} line is not the sum of the sites (the line → the sum: {})",
                describe(total, Baseline::total(&sites))
            ));
        }
        Ok(Baseline {
            build,
            tolerance,
            lines,
            sites,
        })
    }
}

/// `bytes 5%, blocks 1%`, either part alone.
fn parse_tolerance(value: &str) -> Result<Tolerance, String> {
    let mut tolerance = Tolerance::default();
    for part in value.split(',') {
        let part = part.trim();
        let parsed = part.split_once(char::is_whitespace).and_then(|(what, n)| {
            let n = n.trim().strip_suffix('%')?.trim().parse::<u32>().ok()?;
            Some((what, n))
        });
        match parsed {
            Some(("bytes", n)) => tolerance.bytes_percent = n,
            Some(("blocks", n)) => tolerance.blocks_percent = n,
            _ => {
                return Err(format!(
                    "{part:?} is not a tolerance (`bytes 5%`, `blocks 1%`)"
                ));
            }
        }
    }
    Ok(tolerance)
}

/// A figure, or its change: `3`, `3 → 5`.
fn change(before: u64, after: u64) -> String {
    if before == after {
        before.to_string()
    } else {
        format!("{before} → {after}")
    }
}

/// A site's figures before and after: `allocated 3 → 5 blocks, 72 → 120 bytes; live 1 blocks, 24
/// bytes`.
fn describe(before: Figures, after: Figures) -> String {
    format!(
        "allocated {} blocks, {} bytes; live {} blocks, {} bytes",
        change(before.allocated_blocks, after.allocated_blocks),
        change(before.allocated_bytes, after.allocated_bytes),
        change(before.live_blocks, after.live_blocks),
        change(before.live_bytes, after.live_bytes),
    )
}

/// What a check compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compared {
    /// Every site (a baseline of this build).
    Sites,
    /// The totals alone (a baseline of the other build).
    Totals,
}

/// How the measured sites differ from the baseline's beyond the tolerance, as the failure prints
/// it (the sites that grew, shrank, appeared and disappeared, each before → after, then the
/// totals); `None` when they do not. A site grew or shrank by the first of its figures that
/// changed, in the order allocated bytes, allocated blocks, live bytes, live blocks.
pub(crate) fn differences(
    before: &BTreeMap<String, Figures>,
    after: &BTreeMap<String, Figures>,
    tolerance: Tolerance,
    compared: Compared,
) -> Option<String> {
    let totals = (Baseline::total(before), Baseline::total(after));
    let exact = tolerance == Tolerance::default();
    let mut out = String::new();
    if compared == Compared::Totals {
        if totals.0.within(totals.1, tolerance) {
            return None;
        }
    } else {
        let mut sections: [(&str, Vec<String>); 4] = [
            ("grew", Vec::new()),
            ("shrank", Vec::new()),
            ("appeared", Vec::new()),
            ("disappeared", Vec::new()),
        ];
        let mut within = 0;
        let names: std::collections::BTreeSet<&String> =
            before.keys().chain(after.keys()).collect();
        for name in names {
            let (old, new) = (before.get(name), after.get(name));
            let (o, n) = (
                old.copied().unwrap_or_default(),
                new.copied().unwrap_or_default(),
            );
            let section = match (old, new) {
                (None, _) => 2,
                (_, None) => 3,
                _ if o == n => continue,
                _ if o.within(n, tolerance) => {
                    within += 1;
                    continue;
                }
                _ => {
                    let first = o
                        .judged()
                        .iter()
                        .zip(n.judged())
                        .find(|(a, b)| a.0 != b.0)
                        .map(|(a, b)| a.0 < b.0);
                    if first == Some(true) { 0 } else { 1 }
                }
            };
            sections[section]
                .1
                .push(format!("  {name}: {}", describe(o, n)));
        }
        if sections.iter().all(|(_, rows)| rows.is_empty()) {
            return None;
        }
        for (title, rows) in &sections {
            if !rows.is_empty() {
                let _ = writeln!(out, "{title} ({}):", rows.len());
                for row in rows {
                    let _ = writeln!(out, "{row}");
                }
            }
        }
        if within > 0 {
            let _ = writeln!(
                out,
                "({within} other site{} changed within the tolerance)",
                if within == 1 { "" } else { "s" }
            );
        }
    }
    let _ = writeln!(out, "total: {}", describe(totals.0, totals.1));
    if !exact {
        let _ = writeln!(
            out,
            "tolerance: bytes {}%, blocks {}%",
            tolerance.bytes_percent, tolerance.blocks_percent
        );
    }
    Some(out)
}

/// A frame as a site's name shows it: the function, with the file and line when `lines`; a frame
/// without a function, its file (a module's name alone, in brackets); `???` when nothing is known.
fn frame_name(frame: &Frame, lines: bool) -> String {
    let file = frame.short_file();
    let position = match (file, frame.line) {
        (Some(file), line) if line != 0 => Some(format!("{file}:{line}")),
        _ => None,
    };
    match (&frame.function, file) {
        (Some(function), _) => match position {
            Some(position) if lines => format!("{function} ({position})"),
            _ => function.clone(),
        },
        (None, Some(file)) => match position {
            Some(position) if lines => position,
            Some(_) => file.to_owned(),
            None => format!("[{}]", file.rsplit('/').next().unwrap_or(file)),
        },
        (None, None) => "???".to_owned(),
    }
}

/// The name of the site of a stack (its frames innermost first, inlined calls expanded): the
/// program's first frame → the collection operation it called, as the reports' contexts begin
/// (memprof's own frames, the allocator's and the standard library's internals left out); either
/// alone when the stack has no other.
pub(crate) fn site_name(frames: &[&Frame], lines: bool) -> String {
    let context = &frames[frames::context_range(frames, 0, usize::MAX)];
    let std_run = context.iter().take_while(|f| f.is_std()).count();
    let operation = std_run.checked_sub(1).map(|last| context[last]);
    match (context.get(std_run), operation) {
        (Some(program), Some(operation)) => format!(
            "{} → {}",
            frame_name(program, lines),
            frame_name(operation, false)
        ),
        (Some(program), None) => frame_name(program, lines),
        (None, Some(operation)) => frame_name(operation, false),
        (None, None) => "(no frames)".to_owned(),
    }
}

/// The scope's figures per site. Call it untracked.
fn measure(scope: &Scope, lines: bool) -> BTreeMap<String, Figures> {
    let (per_stack, total) = scope.with(|s| {
        let mut per_stack: HashMap<StackId, Figures> = HashMap::new();
        for (&stack, &(blocks, bytes)) in &s.sites {
            let site = per_stack.entry(stack).or_default();
            site.allocated_blocks += blocks;
            site.allocated_bytes += bytes;
        }
        for &(size, stack) in s.live.values() {
            if let Some(stack) = stack {
                let site = per_stack.entry(stack).or_default();
                site.live_blocks += 1;
                site.live_bytes += size;
            }
        }
        let total = Figures {
            allocated_blocks: s.stats.allocated_blocks,
            allocated_bytes: s.stats.allocated_bytes,
            live_blocks: s.stats.live_blocks,
            live_bytes: s.stats.live_bytes,
        };
        (per_stack, total)
    });
    let mut sites: BTreeMap<String, Figures> = BTreeMap::new();
    symbolize::with_symbolizer(|symbolizer| {
        for (stack, figures) in per_stack {
            let resolved = symbolizer.resolve_stack(&TABLE.stacks.frames(stack));
            let expanded: Vec<&Frame> = resolved.iter().flat_map(|f| f.iter()).collect();
            sites
                .entry(site_name(&expanded, lines))
                .or_default()
                .add(figures);
        }
    });
    let listed = Baseline::total(&sites);
    let unlisted = Figures {
        allocated_blocks: total
            .allocated_blocks
            .saturating_sub(listed.allocated_blocks),
        allocated_bytes: total.allocated_bytes.saturating_sub(listed.allocated_bytes),
        live_blocks: total.live_blocks.saturating_sub(listed.live_blocks),
        live_bytes: total.live_bytes.saturating_sub(listed.live_bytes),
    };
    if unlisted != Figures::default() {
        sites.insert(NO_STACK.to_owned(), unlisted);
    }
    sites
}

/// Whether `name` may name a baseline: letters, digits, `_`, `-` and `.`, not first, and not
/// ending in `.release` (the release build's file of another name).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && !name.ends_with(".release")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The directory of the baseline files: `tests/memprof` in the package's directory (Cargo's
/// `CARGO_MANIFEST_DIR` when the test runs under it, else the working directory).
fn directory() -> PathBuf {
    let config = crate::config::get();
    config
        .manifest_dir
        .clone()
        .or_else(|| config.working_dir.clone())
        .unwrap_or_else(|| PathBuf::from("."))
        .join("tests")
        .join("memprof")
}

/// The text of the regular file at `path`, `None` when there is none; read without following a
/// link, nor waiting on a FIFO or reading a device.
fn read_text(path: &Path) -> Result<Option<String>, String> {
    let fail = |e: &dyn std::fmt::Display| format!("cannot read {}: {e}", path.display());
    let mut file = match memprof_files::open_no_follow(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail(&e)),
    };
    let meta = file.metadata().map_err(|e| fail(&e))?;
    if !meta.is_file() {
        return Err(fail(&format_args!(
            "{} is there, not a regular file",
            memprof_files::kind(&meta)
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|e| fail(&e))?;
    Ok(Some(text))
}

/// The baseline at `path`, `None` when there is no file; read as [`read_text`] reads.
fn read(path: &Path) -> Result<Option<Baseline>, String> {
    let Some(text) = read_text(path)? else {
        return Ok(None);
    };
    Baseline::parse(&text)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `text` to `path` (and its directory) without following a link planted there.
fn write(path: &Path, text: &str) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = memprof_files::Replacement::create(path)?;
    file.file().write_all(text.as_bytes())?;
    file.commit()?;
    Ok(())
}

/// How to accept measured figures.
const HOW_TO_BLESS: &str = "run the test with MEMPROF_BLESS=1 (`MEMPROF_BLESS=1 cargo test`), \
                            review the file's diff and commit it";

/// Checks the scope against baseline `name` (or writes it, under `MEMPROF_BLESS=1`); the
/// failure's message. Call it untracked.
fn run(scope: &Scope, name: &str, tolerance: Tolerance) -> Result<(), String> {
    let dir = directory();
    let own = dir.join(Build::CURRENT.file_name(name));
    let other = dir.join(Build::CURRENT.other().file_name(name));
    let bless = crate::config::get().bless;
    // A file that cannot be read fails the check; a rewrite replaces it (and its write says
    // what is wrong, if anything still is).
    let read = |path: &Path| match read(path) {
        Err(_) if bless => Ok(None),
        result => result,
    };
    let found = match read(&own)? {
        Some(baseline) => Some((&own, baseline)),
        None => read(&other)?.map(|baseline| (&other, baseline)),
    };
    let measured = Baseline {
        build: Build::CURRENT,
        tolerance: found.as_ref().and_then(|(_, b)| b.tolerance),
        lines: found.as_ref().is_some_and(|(_, b)| b.lines),
        sites: measure(scope, found.as_ref().is_some_and(|(_, b)| b.lines)),
    };
    let text = measured.render(name);
    if bless {
        if read_text(&own).ok().flatten().as_deref() != Some(text.as_str()) {
            write(&own, &text).map_err(|e| format!("cannot write {}: {e}", own.display()))?;
            crate::config::warn(format_args!("wrote the baseline {}", own.display()));
        }
        return Ok(());
    }
    let Some((path, before)) = found else {
        return Err(format!(
            "memprof: no baseline {} for Scope::assert_baseline({name:?}) (nor {}, the {} \
             build's). Its text would be:\n\n{text}\nTo accept these figures, {HOW_TO_BLESS}.",
            own.display(),
            other.display(),
            Build::CURRENT.other().name(),
        ));
    };
    let tolerance = tolerance.wider(before.tolerance.unwrap_or_default());
    let compared = if before.build == Build::CURRENT {
        Compared::Sites
    } else {
        Compared::Totals
    };
    let Some(body) = differences(&before.sites, &measured.sites, tolerance, compared) else {
        return Ok(());
    };
    let note = match compared {
        Compared::Sites => String::new(),
        Compared::Totals => format!(
            "(the baseline was measured in a {} build and this is a {} build, whose sites may \
             differ where code is inlined: only the totals are compared; MEMPROF_BLESS=1 in this \
             build writes its own file, {}, compared site by site)\n",
            before.build.name(),
            Build::CURRENT.name(),
            own.display()
        ),
    };
    Err(format!(
        "memprof: the allocations of this scope differ from its baseline {} ({} build):\n{body}\
         {note}If the change is meant, {HOW_TO_BLESS}.",
        path.display(),
        before.build.name(),
    ))
}

impl Scope {
    /// Asserts that the scope's blocks and bytes, allocated and still live, are those of
    /// baseline `name`, site by site: the file `tests/memprof/NAME.txt` beside the package's
    /// `Cargo.toml` (`NAME.release.txt` in release builds), which a run with `MEMPROF_BLESS=1`
    /// writes. A missing file fails, printing the text it would have and how to accept it; a
    /// change fails with the sites that grew, shrank, appeared and disappeared, each before →
    /// after, then the totals. `name` is letters, digits, `_`, `-` and `.` (not first). See
    /// docs/heap-assertions.md for the file and the rule between debug and release builds.
    #[track_caller]
    pub fn assert_baseline(&self, name: &str) {
        self.assert_baseline_within(name, Tolerance::default());
    }

    /// [`Scope::assert_baseline`], with each site's figures allowed to differ from the
    /// baseline's within `tolerance` (widened by the file's own `tolerance:` line, if any).
    #[track_caller]
    pub fn assert_baseline_within(&self, name: &str, tolerance: Tolerance) {
        if !valid_name(name) {
            panic!(
                "memprof: {name:?} cannot name a baseline: use letters, digits, `_`, `-` and \
                 `.` (not first), not ending in `.release`"
            );
        }
        if let Some(why) = self.nothing_recorded() {
            panic!(
                "memprof: expected the figures of baseline {name:?} in this scope, but nothing \
                 was recorded: {why}"
            );
        }
        if let Err(message) = untracked(|| run(self, name, tolerance)) {
            std::panic::panic_any(message);
        }
    }
}

#[cfg(test)]
mod tests;
