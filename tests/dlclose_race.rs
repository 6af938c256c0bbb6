//! Two threads load and unload a library each in a loop while another allocates from Rust code that a
//! second library, loaded once and kept, calls back: the DWARF walk meets that library's code on
//! every allocation while the set of loaded modules keeps changing. Nothing may crash or hang, and
//! the stacks must still go through the kept library to the Rust code that called it.
//!
//! The race runs in a child process (this same binary) under a watchdog, with the DWARF unwinder
//! whatever the build (`MEMPROF_UNWINDER=dwarf`).

mod common;

use common::c_library;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Threads that load and unload a library of their own in a loop.
const CHURNERS: usize = 2;
/// How long the threads race.
const RACE: Duration = Duration::from_secs(3);
/// Every this many allocations through the kept library, one block is kept, to check its stack.
const KEEP_EVERY: usize = 64;
/// The size of the kept blocks, which no other allocation of the child has.
const KEPT_SIZE: usize = 4093;

/// Loaded and unloaded in a loop: a few functions, so that it has call-frame tables to read.
const CHURNED: &str = r#"
int churned_square(int x) { return x * x; }
int churned_value(int x) { return churned_square(x) + 1; }
"#;

/// Loaded once and kept: calls the Rust callback it is given, then returns (no tail call).
const HOST: &str = r#"
typedef void (*callback)(unsigned long);
int host_calls = 0;
void host_call(callback cb, unsigned long arg) {
    cb(arg);
    host_calls++;
}
"#;

type HostCall = unsafe extern "C" fn(extern "C" fn(libc::c_ulong), libc::c_ulong);

/// Blocks kept from the callback, freed at the end.
static KEPT: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// Called back from the kept library: allocates, and keeps every `KEEP_EVERY`th block.
#[inline(never)]
extern "C" fn allocate_in_callback(i: libc::c_ulong) {
    let i = i as usize;
    if i.is_multiple_of(KEEP_EVERY) {
        let block = std::hint::black_box(vec![7u8; KEPT_SIZE]);
        KEPT.lock().unwrap().push(block);
    } else {
        drop(std::hint::black_box(vec![1u8; 16 + i % 200]));
    }
}

/// Calls into the kept library, which calls `allocate_in_callback`, until `stop`; returns how many
/// calls it made.
#[inline(never)]
fn allocate_through_host(host_call: HostCall, stop: &AtomicBool) -> usize {
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: `host_call` is the kept library's `void host_call(callback, unsigned long)`,
        // which stays loaded for the whole test.
        unsafe { host_call(allocate_in_callback, i as libc::c_ulong) };
        i += 1;
    }
    std::hint::black_box(i)
}

/// Loads and unloads `path` until `stop`, calling into it each time; returns the cycles.
fn churn(path: &std::path::Path, stop: &AtomicBool, cycles: &AtomicUsize) {
    while !stop.load(Ordering::Relaxed) {
        let handle = c_library::open(path);
        let value = c_library::symbol(handle, "churned_value");
        // SAFETY: `churned_value` is `int churned_value(int)` in the library just opened.
        let value: unsafe extern "C" fn(libc::c_int) -> libc::c_int =
            unsafe { std::mem::transmute(value) };
        // SAFETY: as above; the library stays open until `close` below.
        assert_eq!(unsafe { value(3) }, 10);
        c_library::close(handle);
        cycles.fetch_add(1, Ordering::Relaxed);
    }
}

/// The child: races the two threads, then checks the kept blocks' stacks.
fn race(churned: &[String], host: &str) {
    let host = c_library::open(host.as_ref());
    // SAFETY: `host_call` has the type `HostCall` (see `HOST`).
    let host_call: HostCall = unsafe { std::mem::transmute(c_library::symbol(host, "host_call")) };
    let stop = AtomicBool::new(false);
    let cycles = AtomicUsize::new(0);
    let started = Instant::now();
    let calls = std::thread::scope(|scope| {
        let churners: Vec<_> = churned
            .iter()
            .map(|path| scope.spawn(|| churn(path.as_ref(), &stop, &cycles)))
            .collect();
        let allocator = scope.spawn(|| allocate_through_host(host_call, &stop));
        std::thread::sleep(RACE);
        stop.store(true, Ordering::Relaxed);
        for churner in churners {
            churner.join().unwrap();
        }
        allocator.join().unwrap()
    });
    let elapsed = started.elapsed();
    let cycles = cycles.load(Ordering::Relaxed);

    // Every kept block is in the table, and its stack runs from the callback through the kept
    // library; most stacks go on to the Rust code that called the library.
    let kept = KEPT.lock().unwrap().len();
    let snapshot = memprof::Snapshot::take();
    let stacks: Vec<_> = snapshot
        .blocks
        .iter()
        .filter(|b| b.size == KEPT_SIZE as u64)
        .map(|b| snapshot.stack(b.stack).frames.clone())
        .collect();
    assert_eq!(stacks.len(), kept, "kept blocks missing from the table");
    let names = |frames: &[memprof::ReturnAddress]| -> Vec<String> {
        memprof::with_symbolizer(|symbolizer| {
            use memprof::Resolve;
            frames
                .iter()
                .flat_map(|&a| symbolizer.resolve(a).to_vec())
                .map(|f| f.to_string())
                .collect()
        })
    };
    let (mut through_host, mut complete) = (0, 0);
    for frames in &stacks {
        let names = names(frames);
        let at = |needle: &str| names.iter().position(|n| n.contains(needle));
        let callback = at("allocate_in_callback");
        let host_frame = at("'host_call'");
        let caller = at("dlclose_race::allocate_through_host");
        assert!(callback.is_some(), "no callback frame in {names:#?}");
        if host_frame.is_some_and(|h| callback < Some(h)) {
            through_host += 1;
            if caller.is_some_and(|c| host_frame < Some(c)) {
                complete += 1;
            }
        }
    }
    eprintln!(
        "race: {elapsed:?}, {cycles} dlopen/dlclose cycles, {calls} calls through the kept \
         library, {kept} blocks kept, {through_host} stacks through the library, {complete} on \
         to its Rust caller"
    );
    assert!(
        cycles > 10,
        "the churning thread hardly ran: {cycles} cycles"
    );
    assert!(
        kept > 10,
        "the allocating thread hardly ran: {kept} blocks kept"
    );
    assert_eq!(through_host, kept, "stacks that lost the library's frame");
    // A walk that meets the kept library just as the modules change may end there; most do not.
    assert!(
        complete * 10 >= kept * 9,
        "only {complete} of {kept} stacks reach the library's caller"
    );
    KEPT.lock().unwrap().clear();
    c_library::close(host);
}

#[test]
fn dlclose_race() {
    if let (Ok(churned), Ok(host)) = (
        std::env::var("MEMPROF_TEST_CHURNED"),
        std::env::var("MEMPROF_TEST_HOST"),
    ) {
        let churned: Vec<String> = churned.split(':').map(str::to_owned).collect();
        race(&churned, &host);
        return;
    }
    let dir = c_library::scratch_dir("dlclose-race");
    let churned = (0..CHURNERS)
        .map(|i| {
            let path = c_library::compile(&dir, &format!("churned{i}"), CHURNED);
            path.to_str().unwrap().to_owned()
        })
        .collect::<Vec<_>>()
        .join(":");
    let host = c_library::compile(&dir, "host", HOST);
    let started = Instant::now();
    let output = c_library::run_child(
        "dlclose_race",
        &[
            ("MEMPROF_TEST_CHURNED", &churned),
            ("MEMPROF_TEST_HOST", host.to_str().unwrap()),
            ("MEMPROF_UNWINDER", "dwarf"),
            ("MEMPROF_STACK_DEPTH", "32"),
        ],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        output.status.success(),
        "the child failed after {:?}: {:?}\n{stderr}",
        started.elapsed(),
        output.status
    );
    eprintln!(
        "{}",
        stderr
            .lines()
            .find(|l| l.starts_with("race:"))
            .unwrap_or("")
    );
}
