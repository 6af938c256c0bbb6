//! `memprof convert -o X.heaptrack.gz` on sampled traces whose estimates stand for billions of
//! blocks (one recorded byte at a 2^30 interval stands for about 2^30 blocks), and at the
//! extreme interval `u64::MAX`: the file is written, small, and opens in `heaptrack_print`.

mod support;

use memprof_trace::{ChunkEncoder, Compressor, Header, SymbolFrame};
use std::path::PathBuf;
use std::process::Command;

/// A trace sampled at `interval`: 50 blocks of 1 byte from `app::tiny`, left live, and one of
/// 4096 bytes freed.
fn sampled_trace(interval: u64) -> Vec<u8> {
    let mut out = Vec::new();
    Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(interval, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let finish = |encoder: &mut ChunkEncoder, out: &mut Vec<u8>| {
        encoder
            .finish(Some(&mut Compressor::new(3).unwrap()), out)
            .unwrap();
    };
    let mut definitions = ChunkEncoder::new(0);
    definitions.stack(0, [0x1001].into_iter());
    definitions.thread(1, 100, "main");
    finish(&mut definitions, &mut out);
    let mut main = ChunkEncoder::new(1);
    for block in 0..50 {
        main.alloc(100 + block, 0xa000 + 16 * block, 1, 0);
    }
    main.alloc(200, 0xb000, 4096, 0);
    main.free(300, 0xb000);
    finish(&mut main, &mut out);
    let mut symbols = ChunkEncoder::new(0);
    symbols.symbol(
        0x1001,
        &[SymbolFrame {
            function: Some("app::tiny".into()),
            file: Some("src/app.rs".into()),
            line: 10,
            column: 5,
        }],
    );
    symbols.end(400, 0);
    finish(&mut symbols, &mut out);
    out
}

#[test]
fn sampled_traces_convert_to_heaptrack() {
    let found = Command::new("heaptrack_print").arg("--version").output();
    assert!(
        found.is_ok(),
        "heaptrack_print is missing: apt-get install -y heaptrack"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("convert-heaptrack-sampled-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for interval in [1 << 30, u64::MAX] {
        let trace = dir.join(format!("sampled-{interval}.mpt"));
        std::fs::write(&trace, sampled_trace(interval)).unwrap();
        let output = dir.join(format!("sampled-{interval}.heaptrack.gz"));
        let result = support::memprof_cli(&[
            "convert",
            trace.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
        ]);
        assert!(
            result.status.success(),
            "interval {interval}: {}",
            String::from_utf8_lossy(&result.stderr)
        );
        let size = std::fs::metadata(&output).unwrap().len();
        assert!(size < 10_000, "interval {interval}: {size} bytes");
        let printed = Command::new("heaptrack_print")
            .arg("-f")
            .arg(&output)
            .output()
            .unwrap();
        assert!(printed.status.success(), "interval {interval}");
        let text = String::from_utf8_lossy(&printed.stdout);
        assert!(text.contains("app::tiny"), "interval {interval}: {text}");
    }
}
