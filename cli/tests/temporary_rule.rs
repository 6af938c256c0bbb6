//! What counts as a temporary allocation, in `memprof summary` and in `heaptrack_print` on the
//! same run (`memprof convert -o X.heaptrack.gz` writes the run's events in order, and heaptrack
//! counts them itself), case by case: a block freed by its allocating thread's first free after
//! allocating it, with no allocation of that thread between (memprof, per thread, by address);
//! against heaptrack, whose rule runs over every thread's events merged in time and knows a block
//! by its size and stack. docs/trace-mode.md states the difference; each case here is one line of
//! it.

mod support;

use memprof_trace::{ChunkEncoder, Compressor, Header, SymbolFrame};
use std::path::Path;
use std::process::Command;

/// One event: thread (1 or 2), time, and an allocation (`Some(size, stack)`) or a free.
type Event = (u32, u64, u64, Option<(u64, u32)>);

fn trace(events: &[Event]) -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let chunk = |encoder: &mut ChunkEncoder, out: &mut Vec<u8>| {
        encoder
            .finish(Some(&mut Compressor::new(3).unwrap()), out)
            .unwrap();
    };
    let mut definitions = ChunkEncoder::new(0);
    definitions.stack(0, [0x1001].into_iter());
    definitions.stack(1, [0x2001].into_iter());
    definitions.thread(1, 100, "main");
    definitions.thread(2, 101, "worker");
    chunk(&mut definitions, &mut out);
    for thread in [1, 2] {
        let mut encoder = ChunkEncoder::new(thread);
        for &(_, time, address, alloc) in events.iter().filter(|e| e.0 == thread) {
            match alloc {
                Some((size, stack)) => encoder.alloc(time, address, size, stack),
                None => encoder.free(time, address),
            }
        }
        if !encoder.is_empty() {
            chunk(&mut encoder, &mut out);
        }
    }
    let mut symbols = ChunkEncoder::new(0);
    for (address, function) in [(0x1001, "app::a"), (0x2001, "app::b")] {
        symbols.symbol(
            address,
            &[SymbolFrame {
                function: Some(function.into()),
                file: Some("src/app.rs".into()),
                line: 1,
                column: 1,
            }],
        );
    }
    symbols.end(events.len() as u64, 0);
    chunk(&mut symbols, &mut out);
    out
}

/// The temporary allocations `memprof summary` counts, and those `heaptrack_print` counts in the
/// converted file.
fn counts(dir: &Path, name: &str, events: &[Event]) -> (u64, u64) {
    let path = dir.join(format!("{name}.mptrace"));
    std::fs::write(&path, trace(events)).unwrap();
    let trace = path.to_str().unwrap();
    let summary = support::stdout_of(&["summary", trace]);
    let memprof = summary
        .lines()
        .find_map(|l| l.strip_prefix("temporary allocations: "))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("{summary}"))
        .parse()
        .unwrap();
    let converted = dir.join(format!("{name}.heaptrack.gz"));
    support::stdout_of(&["convert", trace, "-o", converted.to_str().unwrap()]);
    let printed = Command::new("heaptrack_print")
        .arg("-f")
        .arg(&converted)
        .output()
        .expect("heaptrack_print (apt-get install -y heaptrack)");
    assert!(printed.status.success(), "{name}");
    let text = String::from_utf8_lossy(&printed.stdout);
    let heaptrack = text
        .lines()
        .find_map(|l| l.strip_prefix("temporary memory allocations: "))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("{text}"))
        .parse()
        .unwrap();
    (memprof, heaptrack)
}

#[test]
fn temporary_allocations_against_heaptrack() {
    let dir = std::env::temp_dir().join(format!("memprof-temporary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = |thread, time, address, size, stack| (thread, time, address, Some((size, stack)));
    let f = |thread, time, address| (thread, time, address, None);
    let cases: [(&str, Vec<Event>, (u64, u64)); 6] = [
        // Allocated, then freed at once: both count it.
        (
            "at once",
            vec![a(1, 100, 0xa0, 10, 0), f(1, 110, 0xa0)],
            (1, 1),
        ),
        // The last of two allocations freed first: it counts, the first does not.
        (
            "last first",
            vec![
                a(1, 100, 0xb0, 10, 0),
                a(1, 110, 0xc0, 20, 1),
                f(1, 120, 0xc0),
                f(1, 130, 0xb0),
            ],
            (1, 1),
        ),
        // Another free between the allocation and its free ends it as a candidate, in both.
        (
            "a free between",
            vec![
                a(1, 100, 0xe0, 40, 1),
                a(1, 110, 0xd0, 30, 0),
                f(1, 120, 0xe0),
                f(1, 130, 0xd0),
            ],
            (0, 0),
        ),
        // An older block of the same size and stack freed just after an allocation: heaptrack
        // knows blocks by size and stack and counts it; memprof, by address, does not.
        (
            "same size and stack",
            vec![
                a(1, 100, 0xf0, 50, 0),
                a(1, 110, 0xf8, 50, 0),
                f(1, 120, 0xf0),
                f(1, 130, 0xf8),
            ],
            (0, 1),
        ),
        // Two threads interleaved, each freeing its own last allocation: memprof counts each
        // thread apart, both; heaptrack's one stream sees other events between, none.
        (
            "two threads",
            vec![
                a(2, 100, 0x200, 60, 1),
                a(1, 110, 0x100, 70, 0),
                f(2, 120, 0x200),
                f(1, 130, 0x100),
            ],
            (2, 0),
        ),
        // A block freed by another thread right after its allocation: heaptrack counts it;
        // memprof does not (it was not the freeing thread's allocation).
        (
            "another thread frees",
            vec![a(1, 100, 0x300, 80, 0), f(2, 110, 0x300)],
            (0, 1),
        ),
    ];
    for (name, events, expected) in cases {
        assert_eq!(
            counts(&dir, &name.replace(' ', "-"), &events),
            expected,
            "{name}: (memprof summary, heaptrack_print)"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
