//! Shared by the CLI's tests: a trace written event by event with the format's encoder, so every
//! figure a command or the viewer's API reports on it is known; and the `memprof` binary run.

#![allow(dead_code)]

use memprof_trace::{ChunkEncoder, Compressor, Header, SymbolFrame};
use std::process::{Command, Output};

pub const LEAKY: u64 = 0x1000;
pub const TEMP: u64 = 0x2000;

/// The trace, and the offset of each chunk in it. Two threads (1 `main`, 2 `worker`), two
/// stacks (`app::leaky` at src/app.rs:10, `app::temp` at :20), a marker `m` at 700 ns:
///
/// | ns        | thread | event                                  |
/// |-----------|--------|----------------------------------------|
/// | 100       | 1      | alloc 0xa100, 1000 bytes, leaky        |
/// | 200       | 1      | alloc 0xa200, 10 bytes, temp           |
/// | 300       | 1      | free 0xa200 (temporary, lived 100)     |
/// | 400       | 1      | alloc 0xa200, 20 bytes, temp           |
/// | 500       | 1      | alloc 0xa300, 1000 bytes, leaky        |
/// | 550       | 2      | alloc 0xb000, 5000 bytes, leaky (peak) |
/// | 600       | 1      | free 0xa200 (lived 200)                |
/// | 650       | 2      | free 0xb000 (temporary, lived 100)     |
/// | 700       | 1      | marker `m`                             |
/// | 2,000,700 | 1      | free 0xa300 (temporary, 2,000,200)     |
///
/// 0xa100 is never freed. The worker's chunk comes first in the file.
pub fn known_trace() -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    Header::new(42, 1_700_000_000_000_000_000, "/bin/app".into())
        .with_settings(0, 5, 0)
        .write_to(&mut out)
        .unwrap();
    let mut offsets = Vec::new();
    let mut chunk = |encoder: &mut ChunkEncoder, out: &mut Vec<u8>| {
        offsets.push(out.len());
        encoder
            .finish(Some(&mut Compressor::new(3).unwrap()), out)
            .unwrap();
    };
    let mut definitions = ChunkEncoder::new(0);
    definitions.stack(0, [LEAKY + 1].into_iter());
    definitions.stack(7, [TEMP + 1].into_iter());
    definitions.thread(1, 100, "main");
    definitions.thread(2, 101, "worker");
    definitions.label(3, "m");
    chunk(&mut definitions, &mut out);
    let mut worker = ChunkEncoder::new(2);
    worker.alloc(550, 0xb000, 5000, 0);
    worker.free(650, 0xb000);
    chunk(&mut worker, &mut out);
    let mut main = ChunkEncoder::new(1);
    main.alloc(100, 0xa100, 1000, 0);
    main.alloc(200, 0xa200, 10, 7);
    main.free(300, 0xa200);
    main.alloc(400, 0xa200, 20, 7);
    main.alloc(500, 0xa300, 1000, 0);
    main.free(600, 0xa200);
    main.mark(700, 3);
    main.free(2_000_700, 0xa300);
    chunk(&mut main, &mut out);
    let mut symbols = ChunkEncoder::new(0);
    for (address, function, line) in [(LEAKY + 1, "app::leaky", 10), (TEMP + 1, "app::temp", 20)] {
        symbols.symbol(
            address,
            &[SymbolFrame {
                function: Some(function.into()),
                file: Some("src/app.rs".into()),
                line,
                column: 5,
            }],
        );
    }
    symbols.end(10, 0);
    chunk(&mut symbols, &mut out);
    (out, offsets)
}

/// Runs the `memprof` binary of this package with `args`.
pub fn memprof_cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `memprof args`, which must succeed; returns its standard output.
pub fn stdout_of(args: &[&str]) -> String {
    let output = memprof_cli(args);
    assert!(
        output.status.success(),
        "memprof {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}
