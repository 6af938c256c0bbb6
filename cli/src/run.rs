//! `memprof run`: runs a program with a trace, then prints the trace's summary.

use crate::{Failure, ReportArgs, bar, open, report_options, summary};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `memprof run`: the program with `MEMPROF_TRACE` (and `MEMPROF_OUTPUT`) set, then the summary
/// of its trace. Fails with the program's status when it failed, after the summary.
pub fn run_program(
    trace: &str,
    output: Option<&str>,
    command: &[std::ffi::OsString],
) -> Result<(), Failure> {
    if trace.contains("%t") {
        return Err(Failure(
            "--trace: %t cannot be found again after the run; use %p or a plain path".into(),
            2,
        ));
    }
    let program = Path::new(&command[0]);
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // `%e` is the program's name as given here, expanded before the run: the program's own `%e`
    // would be the name of the file its executable is (`./link` names its target's), which this
    // command could not know.
    let trace = expand_name(trace, &name);
    let mut child = std::process::Command::new(program);
    child.args(&command[1..]).env("MEMPROF_TRACE", &trace);
    if let Some(output) = output {
        child.env("MEMPROF_OUTPUT", output);
    }
    let mut child = child
        .spawn()
        .map_err(|e| Failure(format!("{}: cannot run: {e}", program.display()), 1))?;
    let pid = child.id();
    let status = child
        .wait()
        .map_err(|e| Failure(format!("{}: {e}", program.display()), 1))?;
    let path = PathBuf::from(memprof::export::expand_path(
        &trace,
        pid,
        Duration::ZERO,
        &name,
    ));
    if !path.exists() {
        return Err(Failure(
            format!(
                "{}: no trace written by {} ({status}); is it built with memprof's `trace` \
                 feature, and memprof its global allocator?",
                path.display(),
                program.display()
            ),
            1,
        ));
    }
    let trace = open(&path)?;
    let options = report_options(&trace, &ReportArgs::default());
    let summary = summary::Summary::of(&trace, &options, 10, &bar)?;
    let mut out = io::stdout().lock();
    summary
        .write(&mut out)
        .map_err(|e| Failure(format!("cannot write: {e}"), 1))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure(
            format!("{} failed: {status}", program.display()),
            1,
        ))
    }
}

/// `pattern` with `%e` replaced by `name` (its own `%` doubled), every other placeholder kept.
fn expand_name(pattern: &str, name: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + name.len());
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '%' {
            continue;
        }
        match chars.peek() {
            Some('e') => {
                out.pop();
                out.push_str(&name.replace('%', "%%"));
                chars.next();
            }
            Some(&next) => {
                out.push(next);
                chars.next();
            }
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_name_is_expanded() {
        assert_eq!(
            super::expand_name("m-%e-%p-%%e-%x.%", "a%pp"),
            "m-a%%pp-%p-%%e-%x.%"
        );
    }
}
