//! The resident memory by what holds it, under the preloaded library, as `memprof run`'s summary
//! gives it: memprof's own memory (the library's tables and work, all of it from the library's
//! own allocator) counts as memprof's, not as the allocator's rounding, and the parts add up to
//! the resident size, as they do through the crate.

mod support;

use std::time::Duration;
use support::*;

/// The bytes of the line of the summary's memory section that ends with `name`.
fn part(section: &str, name: &str) -> i64 {
    let line = section
        .lines()
        .find(|l| l.ends_with(name))
        .unwrap_or_else(|| panic!("no {name:?} line in\n{section}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn memprofs_own_memory_is_counted_and_the_parts_add_up() {
    let dir = scratch("memory_breakdown");
    let program = compile(&dir, &["run_leak.c"], "run_leak", &["-O1", "-g"]);
    let trace = dir.join("leak.mptrace");
    let output = run_within(
        clean_command(memprof_command())
            .args(["run", "--trace"])
            .arg(&trace)
            .arg("--")
            .arg(&program)
            .current_dir(&dir),
        Duration::from_secs(120),
        "memprof run",
    );
    assert!(output.status.success(), "{}", both(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let section = stderr
        .split("resident memory at the end: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no memory section in\n{stderr}"));
    let resident: i64 = section.split_whitespace().next().unwrap().parse().unwrap();
    let requested = part(section, "live heap, as requested");
    let rounding = part(section, "allocator's rounding and headers");
    let own = part(section, "memprof's own tables");
    let unaccounted = part(section, "unaccounted (resident less the above)");
    // The program keeps 5,000 blocks of 128 bytes, and stdio its buffer.
    assert!(
        (640_000..640_000 + 16_384).contains(&requested),
        "{section}"
    );
    // memprof's tables and symbol caches are its own, and more than the chunk headers and
    // rounding of 5,000 small blocks with what the C library and the trace's compressor (C code,
    // through the C library's `malloc`) hold.
    assert!(
        own > 0,
        "memprof's own memory counted as nothing:\n{section}"
    );
    assert!(
        rounding < own,
        "memprof's own memory shown as the allocator's rounding:\n{section}"
    );
    assert!(
        unaccounted.abs() * 20 <= resident,
        "the parts leave {unaccounted} of {resident} bytes unaccounted:\n{section}"
    );
}
