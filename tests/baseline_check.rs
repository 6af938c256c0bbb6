//! `Scope::assert_baseline` end to end, in this same binary run as a child with its own package
//! directory (`CARGO_MANIFEST_DIR`): a missing file fails with the text it would have and how to
//! accept it, and writes nothing; `MEMPROF_BLESS=1` writes it, without line numbers, and again
//! the same; the check then passes, and fails with the per-site diff when the code allocates
//! more; a tolerance (the test's, or the file's own line) accepts within and rejects outside;
//! `lines: yes` names the sites with their lines; a build without its own file compares the
//! other build's totals only, until it writes its own; and a FIFO or a link to a device where the
//! file should be fails the check without a hang, and a blessing replaces the link (a FIFO it
//! leaves, saying so).

use std::path::{Path, PathBuf};
use std::process::Command;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child: how it checks (`exact`, `within5`).
const CHILD: &str = "MEMPROF_TEST_BASELINE_MODE";

/// Strings made and dropped: one `format!` each and the vector's growth.
#[inline(never)]
fn make_words(n: usize) -> Vec<String> {
    let mut words = Vec::new();
    for i in 0..n {
        words.push(format!("word{i}"));
    }
    std::hint::black_box(words)
}

/// One buffer kept past the check.
#[inline(never)]
fn keep_buffer(size: usize) -> Vec<u8> {
    std::hint::black_box(vec![7u8; size])
}

fn run_child(mode: &str) {
    let number = |name: &str| -> usize { std::env::var(name).unwrap().parse().unwrap() };
    let (n, size) = (
        number("MEMPROF_TEST_BASELINE_N"),
        number("MEMPROF_TEST_BASELINE_SIZE"),
    );
    let scope = memprof::Scope::start();
    drop(make_words(n));
    let kept = keep_buffer(size);
    match mode {
        "exact" => scope.assert_baseline("work"),
        "within5" => scope.assert_baseline_within(
            "work",
            memprof::Tolerance {
                bytes_percent: 5,
                ..Default::default()
            },
        ),
        other => panic!("no mode {other}"),
    }
    drop(kept);
    println!("child checked");
}

/// The build this test is, as the baseline names it, and the other one.
const BUILDS: (&str, &str) = if cfg!(debug_assertions) {
    ("debug", "release")
} else {
    ("release", "debug")
};

/// Runs the child in package directory `dir`: whether it passed, and what it printed.
fn child(dir: &Path, mode: &str, n: usize, size: usize, bless: bool) -> (bool, String) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "baseline_check",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, mode)
        .env("CARGO_MANIFEST_DIR", dir)
        .env("MEMPROF_TEST_BASELINE_N", n.to_string())
        .env("MEMPROF_TEST_BASELINE_SIZE", size.to_string())
        .env_remove("MEMPROF_BLESS");
    if bless {
        command.env("MEMPROF_BLESS", "1");
    }
    let output = command.output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let passed = output.status.success() && printed.contains("child checked");
    (passed, printed)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether `text` holds a line number after a Rust file (`.rs:12`).
fn has_line_numbers(text: &str) -> bool {
    text.match_indices(".rs:")
        .any(|(at, _)| text[at + 4..].starts_with(|c: char| c.is_ascii_digit()))
}

/// The site of a row of the file: what follows its four figures.
fn site_of(row: &str) -> &str {
    let mut rest = row.trim_start();
    for _ in 0..4 {
        rest = rest[rest.find(' ').unwrap()..].trim_start();
    }
    rest
}

#[test]
fn baseline_check() {
    if let Ok(mode) = std::env::var(CHILD) {
        run_child(&mode);
        return;
    }
    let dir = std::env::temp_dir().join(format!("memprof-baseline-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let files = dir.join("tests/memprof");
    let (own, other): (PathBuf, PathBuf) = if cfg!(debug_assertions) {
        (files.join("work.txt"), files.join("work.release.txt"))
    } else {
        (files.join("work.release.txt"), files.join("work.txt"))
    };

    // No file: fails with its would-be text and how to accept it; nothing written.
    let (passed, printed) = child(&dir, "exact", 4, 1000, false);
    assert!(!passed, "{printed}");
    assert!(
        printed.contains("memprof: no baseline")
            && printed.contains(&own.display().to_string())
            && printed.contains("Its text would be:")
            && printed.contains(&format!("\nbuild: {}\n", BUILDS.0))
            && printed.contains("baseline_check::make_words")
            && printed.contains("MEMPROF_BLESS=1"),
        "{printed}"
    );
    assert!(!own.exists() && !other.exists());

    // Blessed: the file, sorted sites, no line numbers; blessing again changes nothing.
    let (passed, printed) = child(&dir, "exact", 4, 1000, true);
    assert!(passed, "{printed}");
    let text = read(&own);
    assert!(text.contains(&format!("\nbuild: {}\n", BUILDS.0)), "{text}");
    let sites: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(' '))
        .map(site_of)
        .collect();
    assert!(
        sites
            .iter()
            .any(|s| s.starts_with("baseline_check::make_words → "))
            && sites
                .iter()
                .any(|s| s.starts_with("baseline_check::keep_buffer"))
            && sites.last() == Some(&"(total)"),
        "{text}"
    );
    let listed = &sites[..sites.len() - 1];
    assert!(listed.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert!(!has_line_numbers(&text), "{text}");
    // The buffer kept: 1 block of 1000 bytes live at the check at its site.
    let keep = text
        .lines()
        .find(|l| l.contains("baseline_check::keep_buffer"))
        .unwrap();
    let figures: Vec<u64> = keep
        .split_whitespace()
        .take(4)
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(figures, [1, 1000, 1, 1000], "{text}");
    assert!(child(&dir, "exact", 4, 1000, true).0);
    assert_eq!(read(&own), text);

    // A file broken by hand fails the check, naming its line; a rewrite mends it.
    std::fs::write(&own, text.replace("(total)", "(total)\nbuild debug")).unwrap();
    let (passed, printed) = child(&dir, "exact", 4, 1000, false);
    assert!(
        !passed && printed.contains("neither a comment, a setting nor a site"),
        "{printed}"
    );
    assert!(child(&dir, "exact", 4, 1000, true).0);
    assert_eq!(read(&own), text);

    // Checked: the same code passes.
    let (passed, printed) = child(&dir, "exact", 4, 1000, false);
    assert!(passed, "{printed}");

    // One more string: the sites that made it grew, each before → after, then the totals.
    let (passed, printed) = child(&dir, "exact", 5, 1000, false);
    assert!(!passed, "{printed}");
    assert!(
        printed.contains("differ from its baseline")
            && printed.contains("grew (")
            && printed.contains("baseline_check::make_words → ")
            && printed.contains("4 → 5 blocks")
            && printed.contains("\ntotal: allocated ")
            && !printed.contains("shrank (")
            && !printed.contains("appeared (")
            && printed.contains("MEMPROF_BLESS=1"),
        "{printed}"
    );
    assert_eq!(read(&own), text, "a failed check writes nothing");
    // Fewer: shrank.
    let (passed, printed) = child(&dir, "exact", 3, 1000, false);
    assert!(
        !passed && printed.contains("shrank (") && printed.contains("4 → 3 blocks"),
        "{printed}"
    );

    // The buffer 4% larger: exact fails, a 5% tolerance accepts; 10% larger it rejects.
    let (passed, printed) = child(&dir, "exact", 4, 1040, false);
    assert!(
        !passed && printed.contains("1000 → 1040 bytes"),
        "{printed}"
    );
    assert!(child(&dir, "within5", 4, 1040, false).0);
    let (passed, printed) = child(&dir, "within5", 4, 1100, false);
    assert!(!passed, "{printed}");
    assert!(
        printed.contains("1000 → 1100 bytes") && printed.contains("tolerance: bytes 5%, blocks 0%"),
        "{printed}"
    );
    // The file's own tolerance line widens the test's; a rewrite keeps it.
    let tolerant = text.replace(
        &format!("build: {}\n", BUILDS.0),
        &format!("build: {}\ntolerance: bytes 20%\n", BUILDS.0),
    );
    std::fs::write(&own, &tolerant).unwrap();
    assert!(child(&dir, "exact", 4, 1100, false).0);
    assert!(!child(&dir, "exact", 4, 1300, false).0);
    assert!(child(&dir, "exact", 4, 1000, true).0);
    assert!(read(&own).contains("\ntolerance: bytes 20%, blocks 0%\n"));

    // `lines: yes`: the program's frames with their file and line.
    std::fs::write(&own, text.replace("build: ", "lines: yes\nbuild: ")).unwrap();
    assert!(child(&dir, "exact", 4, 1000, true).0);
    let with_lines = read(&own);
    assert!(
        with_lines.contains("\nlines: yes\n")
            && with_lines.contains("baseline_check::keep_buffer (tests/baseline_check.rs:"),
        "{with_lines}"
    );
    std::fs::write(&own, &text).unwrap();

    // Only the other build's file, its sites named otherwise (inlined there) and the same totals:
    // the totals pass; one more string fails on the totals, saying why no site is listed.
    let renamed: String = text
        .replace(
            &format!("build: {}", BUILDS.0),
            &format!("build: {}", BUILDS.1),
        )
        .replace("baseline_check::make_words", "baseline_check::run_child");
    std::fs::remove_file(&own).unwrap();
    std::fs::write(&other, &renamed).unwrap();
    let (passed, printed) = child(&dir, "exact", 4, 1000, false);
    assert!(passed, "{printed}");
    let (passed, printed) = child(&dir, "exact", 5, 1000, false);
    assert!(!passed, "{printed}");
    assert!(
        printed.contains(&format!("{} ({} build)", other.display(), BUILDS.1))
            && printed.contains("only the totals are compared")
            && printed.contains("\ntotal: allocated ")
            && !printed.contains("grew ("),
        "{printed}"
    );
    // Blessing writes this build's own file and leaves the other's; with both there, this
    // build's is the one checked (the other's totals are made wrong to tell).
    assert!(child(&dir, "exact", 4, 1000, true).0);
    assert_eq!(read(&own), text);
    assert_eq!(read(&other), renamed);
    std::fs::write(&other, renamed.replace("(total)", "(no total)")).unwrap();
    let (passed, printed) = child(&dir, "exact", 4, 1000, false);
    assert!(passed, "{printed}");

    // Something else where the file should be: a FIFO, a link to a device. The check fails
    // naming it, without waiting on the FIFO or reading the device; blessing replaces it.
    for planted in ["fifo", "link"] {
        std::fs::remove_file(&own).unwrap();
        match planted {
            "fifo" => assert!(Command::new("mkfifo").arg(&own).status().unwrap().success()),
            _ => std::os::unix::fs::symlink("/dev/zero", &own).unwrap(),
        }
        let (passed, printed) = child(&dir, "exact", 4, 1000, false);
        assert!(
            !passed && printed.contains(&format!("cannot read {}", own.display())),
            "{planted}: {printed}"
        );
        let (blessed, printed) = child(&dir, "exact", 4, 1000, true);
        if planted == "fifo" {
            // Not replaced: only a regular file or a link is, as every file memprof writes.
            assert!(
                !blessed && printed.contains("a FIFO is there, not a regular file; left as it was"),
                "{printed}"
            );
            std::fs::remove_file(&own).unwrap();
            assert!(child(&dir, "exact", 4, 1000, true).0);
        } else {
            assert!(blessed, "{printed}");
        }
        assert_eq!(read(&own), text, "{planted}");
    }

    std::fs::remove_dir_all(&dir).unwrap();
}
