//! `memprof receive`: one trace sent to `MEMPROF_TRACE=tcp://HOST:PORT`, saved.

use crate::Failure;
use crate::common::{bar, open};
use memprof_files::Replacement;
use std::io::{self, Write};
use std::path::Path;

/// `memprof receive`: accepts one connection and writes what it sends to `output` (under a new
/// temporary name, renamed when the sender closes, so a reader never sees part of a trace; what
/// is at `output` must be a regular file or a symbolic link, replaced, not followed); then says
/// how much arrived and whether it is a whole trace.
pub fn receive(listen: &str, output: &Path) -> Result<(), Failure> {
    let fail = |e: io::Error| Failure(format!("{}: {e}", output.display()), 1);
    // Made before listening: a destination that cannot be written is said at once.
    let mut replacement = Replacement::create(output).map_err(fail)?;
    let listener = std::net::TcpListener::bind(listen)
        .map_err(|e| Failure(format!("--listen {listen}: {e}"), 1))?;
    if let Ok(address) = listener.local_addr() {
        say!("memprof: listening on {address}");
    }
    let (mut stream, peer) = listener
        .accept()
        .map_err(|e| Failure(format!("--listen {listen}: {e}"), 1))?;
    let mut file = io::BufWriter::new(replacement.file());
    let progress = bar(0, "receiving");
    let bytes = io::copy(&mut progress.wrap_read(&mut stream), &mut file).map_err(fail)?;
    progress.finish_and_clear();
    file.flush().map_err(fail)?;
    drop(file);
    replacement.commit().map_err(fail)?;
    let trace = open(output)?;
    say!(
        "memprof: {}: {bytes} bytes from {peer}, {} events, {}",
        output.display(),
        trace.events(),
        if trace.end_record().is_some() {
            "closed normally"
        } else {
            "cut short"
        }
    );
    Ok(())
}
