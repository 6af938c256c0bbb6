//! A `.svg` output is a flamegraph with the `flamegraph` feature, and without it an error that
//! creates no file (not an empty one). Either way no temporary file is left beside it.

#[test]
fn svg_with_or_without_the_feature() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("export_svg");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("heap.svg");
    let snapshot = memprof::Snapshot::take();
    let written = memprof::with_symbolizer(|symbolizer| {
        memprof::export::write_path(
            path.to_str().unwrap(),
            &snapshot,
            symbolizer,
            &memprof::export::ExportOptions::default(),
        )
    });
    if cfg!(feature = "flamegraph") {
        assert_eq!(written.unwrap(), path);
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<?xml") && svg.contains("<svg"), "{svg}");
    } else {
        let error = written.expect_err("no flamegraph without the feature");
        assert!(
            error.to_string().contains("`flamegraph` feature")
                && error.to_string().contains("no file written"),
            "{error}"
        );
        assert!(
            !path.exists(),
            "an empty {} was left behind",
            path.display()
        );
    }
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "heap.svg")
        .collect();
    assert!(names.is_empty(), "left behind: {names:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
