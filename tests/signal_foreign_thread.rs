//! A signal handler frees a Rust block on a thread memprof has never seen (made with
//! `pthread_create`, it only calls the C library's `malloc` and `free`), while that thread is
//! inside them: the free goes through the table without claiming a writer for the thread, which
//! would allocate and wait for the lock the interrupted `malloc` holds. A hang is the failure: the
//! test runs itself as a child process under a deadline.

use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::SeqCst};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child process, which runs the rounds.
const CHILD: &str = "MEMPROF_TEST_SIGNAL_FOREIGN_THREAD_CHILD";
/// Rounds: a new thread each, one signal each.
const ROUNDS: usize = 300;
/// How long the child may take for all of them.
const DEADLINE: Duration = Duration::from_secs(60);

/// The block the next handler frees.
static BLOCK: AtomicPtr<[u8; 64]> = AtomicPtr::new(std::ptr::null_mut());
/// The thread is in its loop.
static RUNNING: AtomicBool = AtomicBool::new(false);
/// The handler ran.
static HANDLED: AtomicBool = AtomicBool::new(false);
/// The thread may end.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn handler(_: libc::c_int) {
    let block = BLOCK.swap(std::ptr::null_mut(), SeqCst);
    if !block.is_null() {
        // SAFETY: the block was made by `Box::into_raw` and is taken out of `BLOCK` once.
        drop(unsafe { Box::from_raw(block) });
    }
    HANDLED.store(true, SeqCst);
}

/// The thread: the C library's allocator, in a loop.
extern "C" fn churn(_: *mut libc::c_void) -> *mut libc::c_void {
    let mut first = true;
    while !STOP.load(SeqCst) {
        // SAFETY: a block of the C library, freed at once.
        unsafe {
            let p = libc::malloc(4000);
            std::hint::black_box(p);
            let q = libc::malloc(20000);
            libc::free(p);
            libc::free(q);
        }
        if first {
            RUNNING.store(true, SeqCst);
            first = false;
        }
    }
    std::ptr::null_mut()
}

fn rounds() {
    // SAFETY: a handler that only frees a Rust block and stores a flag.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
            0
        );
    }
    for _ in 0..ROUNDS {
        BLOCK.store(Box::into_raw(Box::new([7u8; 64])), SeqCst);
        RUNNING.store(false, SeqCst);
        HANDLED.store(false, SeqCst);
        STOP.store(false, SeqCst);
        // SAFETY: a plain thread, joined below.
        let thread = unsafe {
            let mut thread: libc::pthread_t = std::mem::zeroed();
            let made =
                libc::pthread_create(&mut thread, std::ptr::null(), churn, std::ptr::null_mut());
            assert_eq!(made, 0);
            thread
        };
        while !RUNNING.load(SeqCst) {
            std::hint::spin_loop();
        }
        // SAFETY: the thread runs until `STOP`.
        assert_eq!(unsafe { libc::pthread_kill(thread, libc::SIGUSR1) }, 0);
        while !HANDLED.load(SeqCst) {
            std::hint::spin_loop();
        }
        STOP.store(true, SeqCst);
        // SAFETY: the thread made above, joined once.
        let joined = unsafe { libc::pthread_join(thread, std::ptr::null_mut()) };
        assert_eq!(joined, 0);
    }
    let stats = memprof::HeapStats::get();
    assert!(stats.live_blocks < 1000, "the freed blocks left the table");
}

#[test]
fn a_handler_frees_on_a_thread_memprof_never_saw() {
    if std::env::var_os(CHILD).is_some() {
        rounds();
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_handler_frees_on_a_thread_memprof_never_saw"])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "the child failed: {status}");
            return;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{ROUNDS} rounds did not end in {DEADLINE:?}: a handler's free hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
