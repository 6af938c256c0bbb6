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
    let mut child = std::process::Command::new(program);
    child.args(&command[1..]).env("MEMPROF_TRACE", trace);
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
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let path = PathBuf::from(memprof::export::expand_path(
        trace,
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
