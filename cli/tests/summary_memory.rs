//! `memprof summary` of a trace whose end carries the process's memory by what held it (the
//! `MEMORY` record of trace format 1.2): a section with each part and its share of the resident
//! memory; a trace without the record (older, or cut short) has no such section.

mod support;

use memprof_trace::{ChunkEncoder, Compressor, Header, MemoryParts};
use support::stdout_of;

/// A trace of one allocation, closed with `memory` (when given) before its end record.
fn trace(memory: Option<&MemoryParts>) -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(7, 1_700_000_000_000_000_000, "/bin/service".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let mut compressor = Compressor::new(3).unwrap();
    let mut definitions = ChunkEncoder::new(0);
    definitions.stack(0, [0x1234u64].into_iter());
    definitions.thread(1, 7, "main");
    definitions.finish(Some(&mut compressor), &mut out).unwrap();
    let mut events = ChunkEncoder::new(1);
    events.alloc(100, 0xa000, 4096, 0);
    events.finish(Some(&mut compressor), &mut out).unwrap();
    let mut end = ChunkEncoder::new(0);
    if let Some(memory) = memory {
        end.memory(memory);
    }
    end.end(1, 0);
    end.finish(Some(&mut compressor), &mut out).unwrap();
    out
}

#[test]
fn summary_shows_the_memory_at_the_end() {
    let dir = std::env::temp_dir().join(format!("memprof-summary-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let parts = MemoryParts {
        resident: 100 << 20,
        heap_requested: 40 << 20,
        heap_rounding: Some(1 << 20),
        allocator_free: Some(9 << 20),
        memprof_own: 1 << 20,
        stacks: 10 << 20,
        code_and_files: 9 << 20,
        other_mappings: 25 << 20,
        allocator_resident: 51 << 20,
    };
    let with = dir.join("with.mptrace");
    std::fs::write(&with, trace(Some(&parts))).unwrap();
    let summary = stdout_of(&["summary", with.to_str().unwrap()]);
    let section = summary
        .split("\nresident memory at the end: 104857600 bytes\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{summary}"));
    let lines: Vec<&str> = section.lines().take(10).collect();
    assert_eq!(
        lines,
        [
            "    41943040   40.0%  live heap, as requested",
            "     1048576    1.0%  allocator's rounding and headers",
            "     9437184    9.0%  free memory the allocator keeps",
            "     1048576    1.0%  memprof's own tables",
            "           0    0.0%  of these four, not resident (never touched, or given back)",
            "    10485760   10.0%  thread stacks",
            "     9437184    9.0%  code, libraries, mapped files",
            "    26214400   25.0%  other anonymous mappings",
            "     5242880    5.0%  unaccounted (resident less the above)",
            "    53477376   51.0%  resident in the allocator's mappings (holds the four heap parts)",
        ],
        "{summary}"
    );

    // Another allocator than glibc's: its parts unknown.
    let other = MemoryParts {
        heap_rounding: None,
        allocator_free: None,
        ..parts
    };
    std::fs::write(&with, trace(Some(&other))).unwrap();
    let summary = stdout_of(&["summary", with.to_str().unwrap()]);
    assert!(
        summary.contains("\n           -          allocator's rounding and headers\n"),
        "{summary}"
    );

    let without = dir.join("without.mptrace");
    std::fs::write(&without, trace(None)).unwrap();
    let summary = stdout_of(&["summary", without.to_str().unwrap()]);
    assert!(summary.contains("closed normally"), "{summary}");
    assert!(!summary.contains("resident memory"), "{summary}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The notes under the parts, as `summary` prints them for `parts`.
fn notes_of(parts: &MemoryParts, name: &str) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("memprof-summary-notes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.mptrace"));
    std::fs::write(&path, trace(Some(parts))).unwrap();
    let summary = stdout_of(&["summary", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    let section = summary
        .split("\nresident memory at the end: ")
        .nth(1)
        .unwrap_or_else(|| panic!("{summary}"));
    section
        .lines()
        .skip(11)
        .take_while(|line| line.starts_with("  ") && !line.trim().is_empty())
        .map(|line| line.trim().to_owned())
        .collect()
}

/// A heap part larger than the resident memory (a large block never touched), a negative "not
/// resident" line and a negative "unaccounted" each come with a line saying why.
#[test]
fn summary_explains_shares_over_100_and_negative_lines() {
    let legend = "The lines down to \"unaccounted\" add up to the resident memory (the shares are \
                  of it); the last line is a part of it, not added: compare it with the four heap \
                  parts.";
    let untouched = MemoryParts {
        resident: 100 << 20,
        heap_requested: 150 << 20,
        heap_rounding: Some(1 << 20),
        allocator_free: Some(9 << 20),
        memprof_own: 1 << 20,
        stacks: 10 << 20,
        code_and_files: 9 << 20,
        other_mappings: 25 << 20,
        allocator_resident: 51 << 20,
    };
    assert_eq!(
        notes_of(&untouched, "untouched"),
        [
            legend,
            "A heap part over 100%: the heap parts count what the allocator holds, touched or \
             not, and memory never touched (or given back) is not resident.",
            "The negative \"not resident\" line takes away the 115343360 bytes of the four heap \
             parts that the allocator's mappings do not hold resident (blocks or free memory \
             never touched, or given back to the system), so that the lines add up.",
        ]
    );
    // Another allocator than glibc's: nothing is taken away, and the parts add up to more.
    let other = MemoryParts {
        heap_rounding: None,
        allocator_free: None,
        ..untouched
    };
    assert_eq!(
        notes_of(&other, "other"),
        [
            legend,
            "A heap part over 100%: the heap parts count what the allocator holds, touched or \
             not, and memory never touched (or given back) is not resident.",
            "\"unaccounted\" is negative: the parts add up to 99614720 bytes more than the \
             resident memory; with another allocator than glibc's, the live heap and memprof's \
             tables count in full, blocks never touched (not resident) too.",
        ]
    );
}
