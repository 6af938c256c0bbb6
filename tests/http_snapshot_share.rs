//! A flood of profile requests over a large live heap does not keep the program's allocations
//! waiting most of the time: the endpoint's snapshots hold the table still at most a tenth of the
//! time (`FREEZE_SHARE` in `src/http/routes.rs`).
//!
//! 300,000 live blocks; three clients ask for `/debug/pprof/heap` again and again for 6 s while a
//! thread allocates and frees, adding up the time its allocations waited for a snapshot (those
//! that took [`STALL`] or more). Within a window W, snapshots that hold the table for h each take
//! at most 1/10 + h/W of it; the bound, 30 %, leaves room for a machine several times slower.

#![cfg(feature = "http")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

const BLOCKS: usize = 300_000;
const WINDOW: Duration = Duration::from_secs(6);

/// An allocation that took this long waited for a snapshot: a busy machine's scheduler leaves a
/// thread waiting tens of milliseconds at most, a snapshot of these blocks holds the table for
/// hundreds (in a debug build).
const STALL: Duration = Duration::from_millis(100);

#[inline(never)]
fn block(i: usize) -> Box<usize> {
    Box::new(i)
}

#[test]
fn a_flood_of_profiles_leaves_allocations_mostly_free() {
    let live: Vec<Box<usize>> = (0..BLOCKS).map(block).collect();
    let address = memprof::serve_http("127.0.0.1:0").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    for _ in 0..3 {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut stream) = TcpStream::connect(address) else {
                    return;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
                let request = format!("GET /debug/pprof/heap HTTP/1.1\r\nHost: {address}\r\n\r\n");
                if stream.write_all(request.as_bytes()).is_err() {
                    return;
                }
                let mut body = Vec::new();
                let _ = stream.read_to_end(&mut body);
            }
        });
    }
    // Let the flood begin.
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let mut waited = Duration::ZERO;
    let mut i = 0;
    while start.elapsed() < WINDOW {
        let before = Instant::now();
        let b = std::hint::black_box(block(i));
        let took = before.elapsed();
        drop(b);
        if took >= STALL {
            waited += took;
        }
        i += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let share = waited.as_secs_f64() / start.elapsed().as_secs_f64();
    assert!(
        share < 0.3,
        "allocations waited {waited:?} of {:?} ({:.0} %) while profiles were served",
        start.elapsed(),
        share * 100.0
    );
    drop(live);
}
