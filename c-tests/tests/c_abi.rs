//! Blocks reported from real C through `include/memprof.h` appear in the Rust report with their C
//! frames; the report functions called from C write the same reports to a file descriptor.

use memprof_c_tests::*;
use std::io::{Read, Seek};
use std::os::fd::AsRawFd;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Live groups whose context mentions `needle`, all frames shown.
fn groups(needle: &str) -> Vec<memprof::Group> {
    let snapshot = memprof::Snapshot::take();
    let options = memprof::ReportOptions::default().min_bytes(0).depth(8);
    memprof::with_symbolizer(|s| memprof::Report::live(&snapshot, s, &options))
        .groups
        .into_iter()
        .filter(|g| g.context.iter().any(|f| f.contains(needle)))
        .collect()
}

/// What `write` (a C function taking a file descriptor) writes.
fn written_by(write: unsafe extern "C" fn(i32) -> i32) -> String {
    let mut file = std::fs::File::from(tempfile_fd());
    // SAFETY: the descriptor is open for the duration of the call.
    let status = unsafe { write(file.as_raw_fd()) };
    assert_eq!(status, 0);
    let mut text = String::new();
    file.rewind().unwrap();
    file.read_to_string(&mut text).unwrap();
    text
}

/// An anonymous temporary file.
fn tempfile_fd() -> std::os::fd::OwnedFd {
    let path = std::env::temp_dir().join(format!("memprof-c-abi-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    file.into()
}

#[test]
fn c_blocks_in_rust_reports() {
    // SAFETY: the C pool's own contract: the nodes are used and freed once, with their count.
    let nodes = unsafe { c_make_nodes(100, 1000) };
    let made = groups("'c_make_nodes'");
    let nodes_group = made
        .iter()
        .find(|g| g.bytes == 100 * 1000)
        .unwrap_or_else(|| panic!("{made:#?}"));
    assert_eq!(nodes_group.blocks, 100);
    // The C frames, with their file and line: the pool function first, then its caller.
    assert!(
        nodes_group.context[0].contains("c/workload.c:")
            && nodes_group.context[0].ends_with("in 'pool_alloc'"),
        "{:#?}",
        nodes_group.context
    );
    assert!(
        nodes_group.context[1].ends_with("in 'c_make_nodes'"),
        "{:#?}",
        nodes_group.context
    );
    assert!(
        made.iter().any(|g| g.blocks == 1 && g.bytes == 100 * 8),
        "{made:#?}"
    );

    // The crate table names C code by its object: here the test's executable, which links it;
    // by caller crate, with the test's own Rust code that called it.
    let exe = std::env::current_exe().unwrap();
    let exe = exe.file_name().unwrap().to_string_lossy().into_owned();
    let snapshot = memprof::Snapshot::take();
    let (rows, by_caller) = memprof::with_symbolizer(|s| {
        (
            memprof::Report::crates(&snapshot, s, false),
            memprof::Report::crates(&snapshot, s, true),
        )
    });
    let live = |rows: &[(String, [u64; 4])], name: &str| {
        rows.iter()
            .find(|(n, _)| n == name)
            .map(|(_, figures)| [figures[0], figures[1]])
            .unwrap_or_else(|| panic!("{name}: {rows:#?}"))
    };
    assert_eq!(live(&rows, &exe), [100 * 1000 + 100 * 8, 101]);
    assert_eq!(
        live(&by_caller, &format!("c_abi ← {exe}")),
        [100 * 1000 + 100 * 8, 101]
    );

    // The report functions, called from C.
    let markdown = written_by(c_write_report);
    assert!(
        markdown.starts_with("| Allocations | Total size | Context |\n"),
        "{markdown}"
    );
    assert!(
        markdown.contains("| 100,000 | ` c/workload.c:") || markdown.contains("100,000 |"),
        "{markdown}"
    );
    assert!(markdown.contains("in 'c_make_nodes'"), "{markdown}");
    let log = written_by(c_write_log);
    let row = log
        .lines()
        .find(|l| l.contains("in 'c_make_nodes'") && l.starts_with("100\t"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(row.starts_with("100\t100000\t"), "{row}");

    // realloc through the pool: the nodes now carry their new size and the realloc's stack.
    // SAFETY: as above.
    unsafe { c_grow_nodes(nodes, 100, 3000) };
    let grown = groups("'c_grow_nodes'");
    assert_eq!(grown.len(), 1, "{grown:#?}");
    assert_eq!((grown[0].blocks, grown[0].bytes), (100, 100 * 3000));
    assert!(
        groups("'c_make_nodes'").iter().all(|g| g.bytes == 800),
        "only the array is left"
    );

    // SAFETY: as above.
    unsafe { c_free_nodes(nodes, 100) };
    assert!(groups("'c_make_nodes'").is_empty());
    assert!(groups("'c_grow_nodes'").is_empty());
}
