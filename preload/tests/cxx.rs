//! C++ under the library: `new`/`delete`, `std::vector` growth and `std::string` are recorded;
//! the log's contexts name the program's C++ functions demangled (`app::make_nodes(int)`, not
//! `_ZN3app10make_nodesEi`). `operator new` and `malloc` should be trimmed from the top, so that
//! the first frame of the nodes' group is `app::make_nodes` at the line of its `new`: they are
//! not when libstdc++ has no debug information (`cxx_frames_demangled_and_operator_new_trimmed`,
//! ignored as a known bug).

mod support;

use support::*;

#[test]
fn cxx_new_vector_string() {
    let dir = scratch("cxx");
    let program = compile(&dir, &["cxx.cpp"], "cxx", &["-O2", "-g"]);
    let output = run_ok(preloaded(&program).env("MEMPROF_STACK_DEPTH", "8"), "cxx");
    assert!(
        String::from_utf8_lossy(&output.stdout).ends_with(" 1024 200\n"),
        "{}",
        both(&output)
    );
    let log = tsv_log(&output.stderr);
    let shown = show(&log);
    // The first frame of the program's own, in every group: named by DWARF, demangled.
    let program_frame =
        |g: &Group| -> Option<String> { g.frames.iter().find(|f| f.contains("cxx.cpp:")).cloned() };
    for group in &log {
        if let Some(frame) = program_frame(group) {
            assert!(!frame.contains("'_Z"), "a mangled name:\n{shown}");
        }
        assert!(!group.frames[0].contains("'malloc'"), "{shown}");
    }

    // 50 nodes of 104 bytes, made by app::make_nodes at its `new`.
    let line = line_of("cxx.cpp", "NEW_LINE");
    let nodes: Vec<&Group> = log
        .iter()
        .filter(|g| program_frame(g).is_some_and(|f| f.contains("'app::make_nodes(int)'")))
        .collect();
    assert_eq!(nodes.len(), 1, "{shown}");
    assert_eq!((nodes[0].count, nodes[0].bytes), (50, 50 * 104), "{shown}");
    assert!(
        program_frame(nodes[0])
            .unwrap()
            .contains(&format!("cxx.cpp:{line}")),
        "{shown}"
    );

    // The vector's last buffer (1,024 longs): the context goes through std::vector's growth
    // into app::grow_vector; the buffers it outgrew are gone.
    let mentioning = |function: &str| -> Vec<&Group> {
        log.iter()
            .filter(|g| g.frames.iter().any(|f| f.contains(function)))
            .collect()
    };
    let vector = mentioning("app::grow_vector");
    let buffer: Vec<_> = vector.iter().filter(|g| g.bytes == 8192).collect();
    assert_eq!(buffer.len(), 1, "{shown}");
    assert_eq!(buffer[0].count, 1, "{shown}");
    assert_eq!(
        vector.iter().map(|g| g.bytes).sum::<u64>(),
        8192 + 24,
        "the vector's buffer and its object only:\n{shown}"
    );

    // The string's 201-byte buffer, and its 32-byte object.
    let string = mentioning("app::make_string");
    assert_eq!(
        {
            let mut sizes: Vec<u64> = string.iter().map(|g| g.bytes).collect();
            sizes.sort();
            sizes
        },
        vec![32, 201],
        "{shown}"
    );

    // Everything app::churn made was deleted.
    assert!(mentioning("app::churn").is_empty(), "{shown}");
}

/// libstdc++ has no DWARF here, so its frames are named from its symbol table, whose C++ names
/// are demangled (`_Znwm` is `operator new(unsigned long)`, trimmed from the top as an allocation
/// function).
#[test]
fn cxx_frames_demangled_and_operator_new_trimmed() {
    let dir = scratch("cxx_trim");
    let program = compile(&dir, &["cxx.cpp"], "cxx", &["-O2", "-g"]);
    let output = run_ok(preloaded(&program).env("MEMPROF_STACK_DEPTH", "8"), "cxx");
    let log = tsv_log(&output.stderr);
    let shown = show(&log);
    for group in &log {
        assert!(
            !group.frames[0].contains("operator new") && !group.frames[0].contains("'_Znwm'"),
            "operator new was not trimmed from the top:\n{shown}"
        );
        assert!(
            group.frames.iter().all(|f| !f.contains("'_Z")),
            "a mangled name:\n{shown}"
        );
    }
    let line = line_of("cxx.cpp", "NEW_LINE");
    let nodes = groups_at(&log, "'app::make_nodes(int)'");
    assert_eq!(nodes.len(), 1, "{shown}");
    assert!(
        nodes[0].frames[0].contains(&format!("cxx.cpp:{line}")),
        "{shown}"
    );
}
