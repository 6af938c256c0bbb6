//! Golden files: `tests/golden/<name>`, rewritten with `MEMPROF_BLESS=1`. Shared by the
//! integration tests and the crate's own unit tests, so it names nothing of the crate.

use std::path::PathBuf;

/// Compares `actual` with `tests/golden/<name>`; with `MEMPROF_BLESS=1`, rewrites the file instead.
pub fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("MEMPROF_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with MEMPROF_BLESS=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        let mut diff = String::new();
        let (want, got): (Vec<_>, Vec<_>) = (expected.lines().collect(), actual.lines().collect());
        for i in 0..want.len().max(got.len()) {
            match (want.get(i), got.get(i)) {
                (Some(w), Some(g)) if w == g => {}
                (w, g) => diff.push_str(&format!(
                    "line {}:\n  expected: {}\n  actual:   {}\n",
                    i + 1,
                    w.unwrap_or(&"<none>"),
                    g.unwrap_or(&"<none>")
                )),
            }
        }
        panic!(
            "{} differs (MEMPROF_BLESS=1 rewrites it):\n{diff}",
            path.display()
        );
    }
}
