//! The baseline file's text, the diff a failing check prints, the tolerance and the site names,
//! on synthetic figures and frames.

use super::*;

fn figures(
    allocated_blocks: u64,
    allocated_bytes: u64,
    live_blocks: u64,
    live_bytes: u64,
) -> Figures {
    Figures {
        allocated_blocks,
        allocated_bytes,
        live_blocks,
        live_bytes,
    }
}

fn sites(rows: &[(&str, Figures)]) -> BTreeMap<String, Figures> {
    rows.iter().map(|(n, f)| (n.to_string(), *f)).collect()
}

const TOKENIZE: &str = "parse::tokenize → alloc::vec::Vec<T,A>::push";
const INTERN: &str = "parse::intern → alloc::string::String::push_str";
const BUILD: &str = "parse::build → alloc::boxed::Box<T>::new";
const CACHE: &str = "parse::cache → std::collections::hash::map::HashMap<K,V,S>::insert";

fn before() -> BTreeMap<String, Figures> {
    sites(&[
        (TOKENIZE, figures(3, 72, 1, 24)),
        (INTERN, figures(2, 64, 0, 0)),
        (BUILD, figures(1, 16, 1, 16)),
        ("parse::same", figures(5, 500, 0, 0)),
    ])
}

#[test]
fn the_diff_lists_each_kind_of_change_then_the_totals() {
    let mut after = before();
    after.insert(TOKENIZE.into(), figures(5, 120, 1, 24));
    after.insert(INTERN.into(), figures(2, 48, 0, 0));
    after.remove(BUILD);
    after.insert(CACHE.into(), figures(1, 192, 1, 192));
    let text = differences(&before(), &after, Tolerance::default(), Compared::Sites).unwrap();
    assert_eq!(
        text,
        "\
grew (1):
  parse::tokenize → alloc::vec::Vec<T,A>::push: allocated 3 → 5 blocks, 72 → 120 bytes; live 1 blocks, 24 bytes
shrank (1):
  parse::intern → alloc::string::String::push_str: allocated 2 blocks, 64 → 48 bytes; live 0 blocks, 0 bytes
appeared (1):
  parse::cache → std::collections::hash::map::HashMap<K,V,S>::insert: allocated 0 → 1 blocks, 0 → 192 bytes; live 0 → 1 blocks, 0 → 192 bytes
disappeared (1):
  parse::build → alloc::boxed::Box<T>::new: allocated 1 → 0 blocks, 16 → 0 bytes; live 1 → 0 blocks, 16 → 0 bytes
total: allocated 11 → 13 blocks, 652 → 860 bytes; live 2 blocks, 40 → 216 bytes
"
    );
    assert_eq!(
        differences(&before(), &before(), Tolerance::default(), Compared::Sites),
        None
    );
}

#[test]
fn a_site_grows_or_shrinks_by_its_first_changed_figure() {
    // Fewer bytes allocated but more kept: allocated bytes come first, so it shrank.
    let after = sites(&[(TOKENIZE, figures(3, 64, 2, 48))]);
    let base = sites(&[(TOKENIZE, figures(3, 72, 1, 24))]);
    let text = differences(&base, &after, Tolerance::default(), Compared::Sites).unwrap();
    assert!(text.starts_with("shrank (1):\n"), "{text}");
    // The same allocations, more of them kept: grew.
    let after = sites(&[(TOKENIZE, figures(3, 72, 2, 48))]);
    let text = differences(&base, &after, Tolerance::default(), Compared::Sites).unwrap();
    assert!(text.starts_with("grew (1):\n"), "{text}");
}

#[test]
fn the_tolerance_accepts_within_and_rejects_outside() {
    let base = sites(&[
        (TOKENIZE, figures(10, 1000, 2, 200)),
        (INTERN, figures(4, 400, 0, 0)),
    ]);
    let five = Tolerance {
        bytes_percent: 5,
        ..Default::default()
    };
    // 5% of 1000 and of 200: at the edge, accepted.
    let edge = sites(&[
        (TOKENIZE, figures(10, 1050, 2, 190)),
        (INTERN, figures(4, 400, 0, 0)),
    ]);
    assert_eq!(differences(&base, &edge, five, Compared::Sites), None);
    // One byte past it: rejected, the other site within counted.
    let past = sites(&[
        (TOKENIZE, figures(10, 1051, 2, 200)),
        (INTERN, figures(4, 410, 0, 0)),
    ]);
    let text = differences(&base, &past, five, Compared::Sites).unwrap();
    assert_eq!(
        text,
        "\
grew (1):
  parse::tokenize → alloc::vec::Vec<T,A>::push: allocated 10 blocks, 1000 → 1051 bytes; live 2 blocks, 200 bytes
(1 other site changed within the tolerance)
total: allocated 14 blocks, 1400 → 1461 bytes; live 2 blocks, 200 bytes
tolerance: bytes 5%, blocks 0%
"
    );
    // Bytes' tolerance says nothing of blocks.
    let one_more = sites(&[
        (TOKENIZE, figures(11, 1000, 2, 200)),
        (INTERN, figures(4, 400, 0, 0)),
    ]);
    assert!(differences(&base, &one_more, five, Compared::Sites).is_some());
    let blocks = Tolerance {
        blocks_percent: 10,
        ..five
    };
    assert_eq!(differences(&base, &one_more, blocks, Compared::Sites), None);
    // A site that appears fails whatever the tolerance.
    let mut appeared = base.clone();
    appeared.insert(CACHE.into(), figures(1, 1, 0, 0));
    let wide = Tolerance {
        bytes_percent: 1000,
        blocks_percent: 1000,
    };
    let text = differences(&base, &appeared, wide, Compared::Sites).unwrap();
    assert!(text.starts_with("appeared (1):\n"), "{text}");
    // The wider of the test's tolerance and the file's, figure by figure.
    assert_eq!(
        five.wider(Tolerance {
            bytes_percent: 2,
            blocks_percent: 3
        }),
        Tolerance {
            bytes_percent: 5,
            blocks_percent: 3
        }
    );
}

#[test]
fn a_baseline_of_the_other_build_compares_its_totals_only() {
    // The release build inlined `tokenize` into `parse`: other sites, the same totals.
    let release = sites(&[
        (
            "parse::parse → alloc::vec::Vec<T,A>::push",
            figures(3, 72, 1, 24),
        ),
        (INTERN, figures(2, 64, 0, 0)),
        (BUILD, figures(1, 16, 1, 16)),
        ("parse::same", figures(5, 500, 0, 0)),
    ]);
    assert!(differences(&before(), &release, Tolerance::default(), Compared::Sites).is_some());
    assert_eq!(
        differences(&before(), &release, Tolerance::default(), Compared::Totals),
        None
    );
    let mut more = release.clone();
    more.insert(CACHE.into(), figures(1, 8, 0, 0));
    assert_eq!(
        differences(&before(), &more, Tolerance::default(), Compared::Totals).as_deref(),
        Some("total: allocated 11 → 12 blocks, 652 → 660 bytes; live 2 blocks, 40 bytes\n")
    );
}

#[test]
fn the_file_reads_back_as_it_was_written() {
    let baseline = Baseline {
        build: Build::Release,
        tolerance: Some(Tolerance {
            bytes_percent: 5,
            blocks_percent: 0,
        }),
        lines: false,
        sites: before(),
    };
    let text = baseline.render("parse");
    assert!(
        text.contains("\nbuild: release\ntolerance: bytes 5%, blocks 0%\n"),
        "{text}"
    );
    assert!(text.contains("Scope::assert_baseline(\"parse\")"), "{text}");
    // Sorted by site, the total last; the columns line up.
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("  "))
        .collect();
    assert_eq!(
        rows,
        [
            "        1           16         1           16  parse::build → alloc::boxed::Box<T>::new",
            "        2           64         0            0  parse::intern → alloc::string::String::push_str",
            "        5          500         0            0  parse::same",
            "        3           72         1           24  parse::tokenize → alloc::vec::Vec<T,A>::push",
            "       11          652         2           40  (total)",
        ]
    );
    assert_eq!(Baseline::parse(&text), Ok(baseline.clone()));
    let lines = Baseline {
        lines: true,
        tolerance: None,
        ..baseline
    };
    assert_eq!(Baseline::parse(&lines.render("parse")), Ok(lines));
}

#[test]
fn a_wrong_file_is_refused_naming_its_line() {
    let parse = |text: &str| Baseline::parse(text).unwrap_err();
    assert_eq!(
        parse("# nothing\n"),
        "no `build: debug` or `build: release` line"
    );
    assert_eq!(
        parse("build: debug\n1 2 3 4  a\n1 2 3 4  a\n"),
        "line 3: the site \"a\" is listed twice"
    );
    assert_eq!(
        parse("build: debug\n1 2 3 4  a\n2 2 3 4  (total)\n"),
        "the (total) line is not the sum of the sites (the line → the sum: allocated 2 → 1 \
         blocks, 2 bytes; live 3 blocks, 4 bytes)"
    );
    assert_eq!(
        parse("build: fast\n"),
        "line 1: the build is `debug` or `release`"
    );
    assert_eq!(
        parse("build: debug\ntolerance: bytes five\n"),
        "line 2: \"bytes five\" is not a tolerance (`bytes 5%`, `blocks 1%`)"
    );
    assert_eq!(
        parse("build: debug\n1 x 3 4  a\n"),
        "line 2: \"x\" is not a whole number"
    );
    assert_eq!(
        parse("build: debug\n1 2 3 4\n"),
        "line 2: four figures, then the site"
    );
    // Two tolerance lines: the wider of each.
    let two =
        Baseline::parse("build: debug\ntolerance: bytes 5%\ntolerance: blocks 2%, bytes 1%\n");
    assert_eq!(
        two.unwrap().tolerance,
        Some(Tolerance {
            bytes_percent: 5,
            blocks_percent: 2
        })
    );
}

fn frame(function: &str, file: &str, line: u32) -> Frame {
    Frame {
        function: Some(function.into()),
        file: Some(file.into()),
        line,
        column: 5,
    }
}

#[test]
fn a_site_is_the_programs_first_frame_and_the_operation_it_called() {
    let vec = "/rustc/0/library/alloc/src/vec/mod.rs";
    let stack = [
        frame("memprof::record::alloc", "src/record.rs", 10),
        frame("__rustc::__rust_alloc", "src/main.rs", 1),
        frame("alloc::raw_vec::RawVecInner<A>::grow_one", vec, 20),
        frame("alloc::vec::Vec<T,A>::push", vec, 30),
        frame("parse::tokenize", "src/parse.rs", 12),
        frame("parse::main", "src/main.rs", 40),
        frame("std::rt::lang_start", "/rustc/0/library/std/src/rt.rs", 1),
    ];
    let frames: Vec<&Frame> = stack.iter().collect();
    assert_eq!(
        site_name(&frames, false),
        "parse::tokenize → alloc::vec::Vec<T,A>::push"
    );
    assert_eq!(
        site_name(&frames, true),
        "parse::tokenize (src/parse.rs:12) → alloc::vec::Vec<T,A>::push"
    );
    // The program allocating itself (through `alloc::alloc`, say, inlined away): no operation.
    let own: Vec<&Frame> = [&stack[0], &stack[1], &stack[4], &stack[5]].into();
    assert_eq!(site_name(&own, false), "parse::tokenize");
    // A frame without a function: its module, without the path.
    let module = Frame {
        function: None,
        file: Some("/usr/lib/x86_64-linux-gnu/libfoo.so.1".into()),
        line: 0,
        column: 0,
    };
    let c: Vec<&Frame> = [&stack[0], &stack[1], &module, &stack[5]].into();
    assert_eq!(site_name(&c, false), "[libfoo.so.1]");
}

#[test]
fn names_that_cannot_make_a_file_are_refused() {
    for good in ["parse", "report_synthetic", "a-b.c", "v2"] {
        assert!(valid_name(good), "{good}");
    }
    for bad in ["", "../x", "a/b", ".hidden", "x.release", "a b", "é"] {
        assert!(!valid_name(bad), "{bad}");
    }
    assert_eq!(Build::Debug.file_name("parse"), "parse.txt");
    assert_eq!(Build::Release.file_name("parse"), "parse.release.txt");
}
