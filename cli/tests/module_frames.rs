//! A frame the trace has no symbol for (a trace cut short and not symbolized since, or code no
//! file describes) but whose module a `MODULES` record holds: the reports name it by that module,
//! as the process's own symbolizer does, rather than `???`, and the folded export names the same
//! module (`[libc.so.6]`); the C library's start of the process below `main` is trimmed as in the
//! process's own reports.

mod support;

use memprof_trace::{ChunkEncoder, Compressor, Header, ModuleEntry, SymbolFrame};

const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";
/// The C library's code, as the module record places it.
const LIBC_TEXT: (u64, u64) = (0x7f00_0000_0000, 0x7f00_0010_0000);

fn trace() -> Vec<u8> {
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
    definitions.modules(&[
        ModuleEntry {
            path: "/bin/app".into(),
            bias: 0,
            build_id: Vec::new(),
            text: vec![(0x1000, 0x9000)],
        },
        ModuleEntry {
            path: LIBC.into(),
            bias: LIBC_TEXT.0,
            build_id: Vec::new(),
            text: vec![LIBC_TEXT],
        },
    ]);
    // `app::compare` called by the C library's `qsort` (no symbol), called by `app::main`,
    // called by the C library's start of the process (no symbol).
    definitions.stack(
        0,
        [0x1001, LIBC_TEXT.0 + 0x5001, 0x2001, LIBC_TEXT.0 + 0x100].into_iter(),
    );
    definitions.thread(1, 100, "main");
    chunk(&mut definitions, &mut out);
    let mut main = ChunkEncoder::new(1);
    main.alloc(100, 0xa000, 4096, 0);
    chunk(&mut main, &mut out);
    let mut symbols = ChunkEncoder::new(0);
    for (address, function, line) in [(0x1001, "app::compare", 10), (0x2001, "app::main", 20)] {
        symbols.symbol(
            address,
            &[SymbolFrame {
                function: Some(function.into()),
                file: Some("src/main.rs".into()),
                line,
                column: 5,
            }],
        );
    }
    symbols.end(1, 0);
    chunk(&mut symbols, &mut out);
    out
}

#[test]
fn frames_known_by_their_module_read_alike_in_reports_and_exports() {
    let dir = std::env::temp_dir().join(format!("memprof-module-frames-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.mptrace");
    std::fs::write(&path, trace()).unwrap();
    let trace = path.to_str().unwrap();

    let report = support::stdout_of(&["report", trace]);
    assert!(!report.contains("???"), "{report}");
    let row = report
        .lines()
        .find(|l| l.contains("app::compare"))
        .unwrap_or_else(|| panic!("{report}"));
    let frames: Vec<&str> = row.split("<br>").collect();
    assert_eq!(frames.len(), 3, "{row}");
    assert!(frames[1].contains(&format!("` {LIBC} `")), "{row}");
    assert!(frames[2].contains("app::main"), "{row}");

    let folded = dir.join("t.folded");
    support::stdout_of(&["convert", trace, "-o", folded.to_str().unwrap()]);
    let folded = std::fs::read_to_string(&folded).unwrap();
    assert_eq!(folded, "app::main;[libc.so.6];app::compare 4096\n");
    std::fs::remove_dir_all(&dir).unwrap();
}
