//! A C program's own `mmap`, `munmap` and `mremap` under `libmemprof_preload.so`: its live
//! mappings at the end of the trace are exactly the ones it made and kept (a partial unmap
//! splitting one, a grown `mremap` moving another), with stacks that name its functions, and
//! glibc's allocator's own mappings (a large `malloc`) are not among them.

mod support;

use memprof_trace::{Trace, Visitor};
use std::path::PathBuf;
use std::process::Command;

const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static void *anonymous(size_t n) {
    return mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

__attribute__((noinline)) void *map_alpha(size_t n) { void *p = anonymous(n); return p; }
__attribute__((noinline)) void *map_beta(size_t n) { void *p = anonymous(n); return p; }
__attribute__((noinline)) void *map_gamma(size_t n) { void *p = anonymous(n); return p; }
__attribute__((noinline)) void *map_gone(size_t n) { void *p = anonymous(n); return p; }
__attribute__((noinline)) void *grow_gamma(void *p, size_t old, size_t new_size) {
    void *q = mremap(p, old, new_size, MREMAP_MAYMOVE);
    return q;
}

int main(void) {
    long page = sysconf(_SC_PAGESIZE);
    char *a = map_alpha(3 * page);
    char *b = map_beta(2 * page);
    char *c = map_gamma(page);
    char *gone = map_gone(page);
    if (a == MAP_FAILED || b == MAP_FAILED || c == MAP_FAILED || gone == MAP_FAILED) return 1;
    a[0] = 1; b[0] = 2; c[0] = 3;
    if (munmap(a + page, page) != 0) return 2;
    if (munmap(gone, page) != 0) return 3;
    c = grow_gamma(c, page, 64 * page);
    if (c == MAP_FAILED) return 4;
    /* glibc's allocator maps this itself, not through the program's mmap. */
    char *big = malloc(1 << 20);
    big[0] = 4;
    printf("page %ld\na %lu\nb %lu\nc %lu\nbig %lu\n", page, (unsigned long)a,
           (unsigned long)b, (unsigned long)c, (unsigned long)big);
    return 0;
}
"#;

/// The library under test, built by the tests' support.
fn library() -> PathBuf {
    support::library()
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memprof-preload-mappings-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_programs_own_mappings_are_traced_with_their_stacks() {
    let dir = temp_dir();
    let source = dir.join("maps.c");
    std::fs::write(&source, PROGRAM).unwrap();
    let program = dir.join("maps");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(&cc)
        .args(["-O0", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&program)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("a C compiler ({cc}) is needed: {e}"));
    assert!(status.success(), "{cc} failed");

    let trace_path = dir.join("t.mptrace");
    let output = Command::new(&program)
        .env("LD_PRELOAD", library())
        .env("MEMPROF_TRACE", &trace_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{:?}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = |name: &str| -> u64 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{name} not printed: {stdout}"))
            .parse()
            .unwrap()
    };
    let (page, a, b, c, big) = (
        printed("page"),
        printed("a"),
        printed("b"),
        printed("c"),
        printed("big"),
    );

    struct Nothing;
    impl Visitor for Nothing {}
    let trace = Trace::open(&trace_path).unwrap();
    let end = trace.visit(&mut Nothing, &mut |_| {}).unwrap();
    let live: Vec<(u64, u64, u32)> = end
        .heap
        .mappings
        .iter()
        .map(|(start, len, m)| (start, len, m.stack))
        .collect();
    let ranges: Vec<(u64, u64)> = live.iter().map(|&(s, l, _)| (s, l)).collect();
    let mut expected = vec![
        (a, page),
        (a + 2 * page, page),
        (b, 2 * page),
        (c, 64 * page),
    ];
    expected.sort_unstable();
    assert_eq!(ranges, expected, "live mappings at the end");
    assert_eq!(end.heap.mappings.bytes(), 68 * page);

    // glibc's own mapping of the large block is not the program's mapping; the block itself is
    // a recorded heap block.
    assert!(end.heap.mappings.get(big).is_none());
    assert!(end.heap.live.get(big).is_some_and(|b| b.size == 1 << 20));

    // Each mapping's stack names the C function that made it.
    let names = |stack: u32| -> Vec<String> {
        trace.stacks()[stack as usize]
            .iter()
            .flat_map(|address| trace.symbols().get(address).into_iter().flatten())
            .filter_map(|frame| frame.function.clone())
            .collect()
    };
    for &(start, _, stack) in &live {
        let want = match start {
            s if s == c => "grow_gamma",
            s if s == b => "map_beta",
            _ => "map_alpha",
        };
        let names = names(stack);
        assert!(
            names.iter().any(|n| n == want),
            "the mapping at {start:#x} names {names:?}, not {want}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
