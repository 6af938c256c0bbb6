// A Rust program built without memprof (std's allocator: the C library's malloc), driven by its
// stdin for memprof attach: "leak" leaks 37 vectors of 1500 bytes made at leak_site and prints
// "leaked N"; "alive" prints "alive"; the end of stdin ends it. Two threads build and drop
// strings all the time.
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};

#[inline(never)]
fn leak_site() -> Vec<u8> {
    std::hint::black_box(vec![7u8; 1500])
}

static STOP: AtomicBool = AtomicBool::new(false);

fn main() {
    let threads: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                while !STOP.load(Ordering::Relaxed) {
                    let words: Vec<String> = (0..64).map(|i| "x".repeat(40 + i)).collect();
                    drop(std::hint::black_box(words));
                    std::thread::sleep(std::time::Duration::from_micros(300));
                }
            })
        })
        .collect();
    println!("ready");
    let mut kept = Vec::new();
    let mut leaks = 0;
    for line in std::io::stdin().lock().lines() {
        match line.unwrap().as_str() {
            "leak" => {
                for _ in 0..37 {
                    kept.push(leak_site());
                }
                leaks += 1;
                println!("leaked {leaks}");
            }
            "alive" => println!("alive"),
            _ => {}
        }
    }
    STOP.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    std::mem::forget(kept);
    println!("bye");
}
