// A Rust program (std's allocator: the C library's `malloc`) whose start-up and threads ask the C
// library for their stack (`pthread_getattr_np`, which allocates holding the thread's lock). Its
// threads and a deep recursion on the main thread, which grows the main stack far past where it
// was at start-up, leak blocks that the log at exit must show with exact counts.

use std::hint::black_box;

pub const THREADS: usize = 4;
pub const THREAD_BLOCKS: usize = 25;
pub const THREAD_SIZE: usize = 333;
pub const DEPTH: usize = 600;
pub const DEEP_SIZE: usize = 77;

#[inline(never)]
fn thread_leak(blocks: usize) {
    for _ in 0..blocks {
        let block: Vec<u8> = Vec::with_capacity(black_box(THREAD_SIZE));
        std::mem::forget(black_box(block));
    }
}

/// Leaks one block at each level, with 4 KiB of stack per level: about 2.4 MiB below `main`.
#[inline(never)]
fn deep_leak(level: usize) -> usize {
    let pad = black_box([level as u8; 4096]);
    let block: Vec<u8> = Vec::with_capacity(black_box(DEEP_SIZE));
    std::mem::forget(black_box(block));
    let below = if level > 1 { deep_leak(level - 1) } else { 0 };
    black_box(&pad)[level % 4096] as usize + below
}

fn main() {
    let threads: Vec<_> = (0..THREADS)
        .map(|_| std::thread::spawn(|| thread_leak(THREAD_BLOCKS)))
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    black_box(deep_leak(DEPTH));
    println!("ok");
}
