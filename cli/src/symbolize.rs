//! `memprof symbolize`: the trace's symbol section made again offline, from the binaries (or
//! their separate debug files) its module records name, for a trace cut short before it could
//! write its own, or recorded where the debug information was not.

use crate::Failure;
use memprof::trace::OfflineSymbolizer;
use memprof_files::check_replaceable;
use memprof_trace::{SymbolFrame, Trace, write_symbolized};
use std::path::{Path, PathBuf};

/// Resolves every return address of `trace`'s stacks and writes the trace with those symbols to
/// `output` (the trace itself when `None`). An address that nothing on disk names keeps the
/// frames the trace gave it, if any. A module that cannot be read leaves its addresses
/// unknown with a warning naming it; the executable's is an error when the trace has no symbols
/// of its own, since nearly every frame a report shows is its code.
pub fn run(trace: &Trace, debug_dirs: Vec<PathBuf>, output: Option<&Path>) -> Result<(), Failure> {
    // What is at the output is checked before the work: only a regular file or a symbolic link
    // (replaced, not followed) is written over.
    if let Some(output) = output {
        check_replaceable(output).map_err(|e| Failure(format!("{}: {e}", output.display()), 1))?;
    }
    let mut addresses: Vec<u64> = trace.stacks().iter().flatten().copied().collect();
    addresses.sort_unstable();
    addresses.dedup();
    let mut symbolizer = OfflineSymbolizer::new(trace, debug_dirs, std::env::current_dir().ok());
    // What the trace says already, kept for the addresses nothing on disk names.
    let old = trace.symbols();
    let mut kept = 0;
    let progress = crate::common::bar(addresses.len() as u64, "resolving");
    let symbols: Vec<(u64, Vec<SymbolFrame>)> = addresses
        .iter()
        .map(|&address| {
            progress.inc(1);
            let mut frames = symbolizer.resolve(address);
            let unnamed = frames.iter().all(|f| f.function.is_none() && f.line == 0);
            if unnamed
                && let Some(known) = old.get(&address)
                && known.iter().any(|f| f.function.is_some())
            {
                kept += 1;
                frames = known.clone();
            }
            (address, frames)
        })
        .collect();
    progress.finish_and_clear();
    let trace_name = trace.path().display();
    for module in symbolizer.unresolved() {
        if module.executable && !trace.has_symbols() {
            return Err(Failure(
                format!(
                    "{trace_name}: cannot symbolize: the traced executable {}: {} ({} return \
                     addresses in it; --debug-dir DIR finds a separate debug file by build id \
                     or by name)",
                    module.path, module.reason, module.addresses
                ),
                1,
            ));
        }
        say!(
            "memprof: warning: {trace_name}: {}: {}; its {} return addresses stay unknown",
            module.path,
            module.reason,
            module.addresses
        );
    }
    let output = output.unwrap_or(trace.path());
    write_symbolized(trace, &symbols, output)?;
    say!(
        "memprof: {}: {} return addresses symbolized from {} files{}",
        output.display(),
        symbols.len() - kept,
        symbolizer.files_read().len(),
        match kept {
            0 => String::new(),
            _ => format!(", {kept} named as the trace named them (not found on disk)"),
        }
    );
    Ok(())
}
