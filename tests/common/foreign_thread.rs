//! Rounds in which a signal handler frees a Rust block on a thread memprof has never seen: made
//! with `pthread_create`, the thread only calls the C library's `malloc` and `free`, and the
//! signal arrives while it is inside them. Shared by `signal_foreign_thread` and
//! `trace_signal_foreign_thread`, which run the rounds in a child process under a deadline.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::SeqCst};

/// The block the next handler frees, and its length.
static BLOCK: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static BLOCK_LEN: AtomicUsize = AtomicUsize::new(0);
/// The thread is in its loop.
static RUNNING: AtomicBool = AtomicBool::new(false);
/// The handler ran.
static HANDLED: AtomicBool = AtomicBool::new(false);
/// The thread may end.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn handler(_: libc::c_int) {
    let block = BLOCK.swap(std::ptr::null_mut(), SeqCst);
    if !block.is_null() {
        let len = BLOCK_LEN.load(SeqCst);
        // SAFETY: the block was made by `Box::into_raw` of a boxed slice of `len` bytes, and is
        // taken out of `BLOCK` once.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(block, len)) });
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

/// Runs `rounds` rounds: each a block of `size` bytes allocated on this thread, a new thread,
/// one signal to it whose handler frees the block there, and the thread joined.
pub fn run(rounds: usize, size: usize) {
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
    for _ in 0..rounds {
        let block: Box<[u8]> = vec![7u8; size].into_boxed_slice();
        BLOCK_LEN.store(size, SeqCst);
        BLOCK.store(Box::into_raw(block).cast::<u8>(), SeqCst);
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
}
