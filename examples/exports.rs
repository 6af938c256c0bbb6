//! Profiles a small workload and writes every export memprof has to a directory.
//!
//! `cargo run --example exports --features flamegraph -- /tmp/profile`
//!
//! Then open them with the tools they are for:
//!
//! - `pprof -top -sample_index=inuse_space /tmp/profile/heap.pb.gz` (or `-http=:8080`)
//! - `inferno-flamegraph < /tmp/profile/heap.folded > heap.svg`, or `heap.svg` as written
//! - `heaptrack_print -f /tmp/profile/heap.heaptrack.gz`
//! - Valgrind's `dh_view.html`, "Load…" `/tmp/profile/heap.dhat.json`

use memprof::export::{self, ExportOptions};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Keeps one buffer per record: live at the end.
#[inline(never)]
fn load_records(count: usize) -> Vec<Vec<u8>> {
    (0..count).map(|i| vec![(i % 251) as u8; 4096]).collect()
}

/// Builds and drops a scratch string per record: allocated over the run, not live.
#[inline(never)]
fn render_records(records: &[Vec<u8>]) -> usize {
    records
        .iter()
        .map(|r| format!("{:?}", &r[..64]).len())
        .sum()
}

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memprof-exports".to_owned());
    std::fs::create_dir_all(&dir)?;
    let records = load_records(1000);
    let rendered = render_records(&records);
    println!("{} records, {rendered} bytes rendered", records.len());

    let snapshot = memprof::Snapshot::take();
    let options = ExportOptions::default();
    memprof::with_symbolizer(|symbolizer| -> std::io::Result<()> {
        let mut endings = vec![".pb.gz", ".folded", ".dhat.json", ".heaptrack.gz", ".md"];
        if cfg!(feature = "flamegraph") {
            endings.push(".svg");
        }
        for ending in endings {
            let written = export::write_path(
                &format!("{dir}/heap{ending}"),
                &snapshot,
                symbolizer,
                &options,
            )?;
            println!("wrote {}", written.display());
        }
        Ok(())
    })?;
    // The same at exit, for any program: MEMPROF_OUTPUT=/tmp/heap-%p.pb.gz,/tmp/heap-%p.folded
    drop(records);
    Ok(())
}
