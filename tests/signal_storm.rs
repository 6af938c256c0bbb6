//! A storm of both of memprof's signals: `MEMPROF_DUMP_SIGNAL` and `MEMPROF_TOGGLE_SIGNAL` arrive
//! thousands of times while threads allocate and free. Nothing hangs (the child runs under a
//! deadline), nothing crashes, the dumps are whole files, and at the end no block the program
//! freed is left in the table: frees are applied whether recording is paused or not.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child: the directory the dumps go to.
const CHILD: &str = "MEMPROF_TEST_SIGNAL_STORM_DIR";

/// The sizes the workers allocate: 37 past a multiple of 64, which nothing else asks for.
fn is_worker_size(size: u64) -> bool {
    (1000..20_000).contains(&size) && size % 64 == 37
}

#[inline(never)]
fn work(seed: usize, stop: &AtomicBool) -> u64 {
    let mut held: Vec<Vec<u8>> = Vec::with_capacity(64);
    let mut operations = 0;
    while !stop.load(Ordering::Relaxed) {
        let size = 1024 + 37 + ((seed * 131 + operations as usize * 17) % 200) * 64;
        held.push(Vec::with_capacity(size));
        if held.len() == 64 {
            held.clear();
        }
        operations += 1;
    }
    operations
}

fn storm(dir: &str) {
    let stop = AtomicBool::new(false);
    let (mut dumps, mut toggles) = (0u32, 0u32);
    let started = Instant::now();
    let operations: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..3)
            .map(|seed| {
                let stop = &stop;
                scope.spawn(move || work(seed, stop))
            })
            .collect();
        while started.elapsed() < Duration::from_secs(3) {
            let signal = if dumps <= toggles {
                dumps += 1;
                libc::SIGUSR1
            } else {
                toggles += 1;
                libc::SIGUSR2
            };
            // SAFETY: sends a signal to this process; memprof's handlers are installed.
            unsafe { libc::kill(libc::getpid(), signal) };
            std::thread::sleep(Duration::from_micros(500));
        }
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    // Whether recording ends paused says nothing: two toggles still pending at once are one
    // signal to the kernel. What must hold either way is below: every freed block left the table.
    memprof::resume();
    let left = memprof::Snapshot::take()
        .blocks
        .iter()
        .filter(|b| is_worker_size(b.size))
        .count();
    // The dump thread symbolizes and writes while the storm goes on; on a loaded machine its
    // first file may come after the storm has ended.
    let path = format!("{dir}/heap-{}.folded", std::process::id());
    let waited = Instant::now();
    while !std::path::Path::new(&path).exists() && waited.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let dump = std::fs::read_to_string(&path).expect("a dump was written");
    eprintln!(
        "signal storm: {dumps} dump and {toggles} toggle signals in {:.1?}, {operations} \
         allocations by 3 threads, {left} freed blocks left in the table, last dump {} lines",
        started.elapsed(),
        dump.lines().count()
    );
    assert_eq!(left, 0);
    // A dump is a whole folded file: every line ends with its count.
    assert!(
        dump.lines().all(|l| l
            .rsplit_once(' ')
            .is_some_and(|(_, n)| n.parse::<u64>().is_ok())),
        "{dump}"
    );
}

#[test]
fn signal_storm() {
    if let Ok(dir) = std::env::var(CHILD) {
        storm(&dir);
        return;
    }
    let dir = std::env::temp_dir().join(format!("memprof-signal-storm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap().to_owned();
    let output = format!("{dir}/heap-%p.folded");
    let result = common::c_library::run_child(
        "signal_storm",
        &[
            (CHILD, &dir),
            ("MEMPROF_DUMP_SIGNAL", "USR1"),
            ("MEMPROF_TOGGLE_SIGNAL", "USR2"),
            ("MEMPROF_OUTPUT", &output),
        ],
        Duration::from_secs(120),
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        result.status.success(),
        "{:?}\n{}\n{}",
        result.status,
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
}
