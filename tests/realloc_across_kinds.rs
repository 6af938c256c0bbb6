//! A reallocation across 64 KiB (a block under it, which carries a header, grown past it, and
//! back) is one reallocation: the block keeps its explicit tag, the peak counts the old block out
//! before the new one in, and a trace records a reallocation, not an allocation and a free.

use std::path::Path;
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// The tagged type.
struct Sample(#[allow(dead_code)] u64);

/// 60 KiB and 70 KiB of samples.
const SMALL: usize = 60 * 1024 / 8;
const LARGE: usize = 70 * 1024 / 8;

/// The explicit tag's name of the live block at `address`, if any.
fn tag_of(address: usize) -> Option<&'static str> {
    let snapshot = memprof::Snapshot::take();
    let block = snapshot.blocks.iter().find(|b| b.address == address)?;
    let names = memprof::types::tag_names();
    (block.tag != 0).then(|| names[block.tag as usize - 1])
}

/// The traced child, with `MEMPROF_PEAK=1`: grows and shrinks the buffer, checks its tag and the
/// peak, and writes where its trace went into `dir`.
fn child(dir: &Path) {
    let before = memprof::HeapStats::get();
    let mut samples: Vec<Sample> = Vec::with_capacity(SMALL);
    samples.push(Sample(1));
    memprof::tag(&samples);
    let name = tag_of(samples.as_ptr() as usize);
    assert!(name.is_some_and(|name| name.contains("Sample")), "{name:?}");
    let name = name.unwrap();

    samples.reserve_exact(LARGE - samples.len());
    assert_eq!(samples.capacity(), LARGE);
    assert_eq!(
        tag_of(samples.as_ptr() as usize),
        Some(name),
        "after growing"
    );
    let grown = memprof::HeapStats::get();
    // Only the new block counts at the realloc's moment: the old one left first.
    let truth = before.live_bytes + (LARGE * 8) as u64;
    assert!(
        grown.peak_bytes <= before.peak_bytes.max(truth) + 8192,
        "a peak of {} bytes, where the live heap was {} then {} bytes ({:?})",
        grown.peak_bytes,
        before.live_bytes,
        truth,
        before,
    );

    samples.shrink_to(SMALL);
    assert_eq!(samples.capacity(), SMALL);
    assert_eq!(
        tag_of(samples.as_ptr() as usize),
        Some(name),
        "after shrinking"
    );
    drop(samples);

    let path = memprof::close_trace().unwrap();
    if let Some(path) = path {
        memprof::untracked(|| std::fs::write(dir.join("path"), path.to_str().unwrap()).unwrap());
    }
}

#[test]
fn a_realloc_across_64_kib_is_one_realloc() {
    if let Some(dir) = std::env::var_os("MEMPROF_TEST_ACROSS_DIR") {
        child(Path::new(&dir));
        return;
    }
    let dir = std::env::temp_dir().join(format!("memprof-across-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "a_realloc_across_64_kib_is_one_realloc",
            "--nocapture",
        ])
        .env("MEMPROF_TEST_ACROSS_DIR", &dir)
        .env("MEMPROF_PEAK", "1");
    if cfg!(feature = "trace") {
        command.env("MEMPROF_TRACE", dir.join("across.mptrace"));
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    #[cfg(feature = "trace")]
    {
        use memprof_trace::{Reader, Record};
        let path = std::fs::read_to_string(dir.join("path")).expect("the trace's path");
        let bytes = std::fs::read(path).unwrap();
        let mut reader = Reader::new(&bytes[..]).unwrap();
        // (reallocs, allocs) of the buffer's two sizes.
        let (mut reallocs, mut allocs) = (Vec::new(), 0);
        while let Some(chunk) = reader.next_chunk().unwrap() {
            for record in chunk.records() {
                match record.unwrap() {
                    Record::Realloc { size, .. } if size == (LARGE * 8) as u64 => {
                        reallocs.push(size)
                    }
                    Record::Realloc { size, .. } if size == (SMALL * 8) as u64 => {
                        reallocs.push(size)
                    }
                    Record::Alloc { size, .. } if size == (LARGE * 8) as u64 => allocs += 1,
                    _ => {}
                }
            }
        }
        assert_eq!(
            (reallocs, allocs),
            (vec![(LARGE * 8) as u64, (SMALL * 8) as u64], 0)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
