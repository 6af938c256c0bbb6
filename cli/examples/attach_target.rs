//! The target of `cli/tests/attach_builtin.rs`: a program with memprof built in (its global
//! allocator), which `memprof attach` reaches over its control channel. It says `ready`, then
//! for each line of its stdin, `leak` or `paused`, leaks at that site and says `done`; it ends at
//! the end of its stdin. A thread allocates and frees meanwhile.

use std::io::BufRead;
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Blocks and bytes the target leaks at `leak_here`, and at `leak_while_paused`.
const LEAKED: usize = 37;
const LEAKED_SIZE: usize = 4321;
const PAUSED: usize = 11;
const PAUSED_SIZE: usize = 7777;

#[inline(never)]
fn leak_here() {
    for _ in 0..LEAKED {
        std::mem::forget(std::hint::black_box(vec![1u8; LEAKED_SIZE]));
    }
}

#[inline(never)]
fn leak_while_paused() {
    for _ in 0..PAUSED {
        std::mem::forget(std::hint::black_box(vec![2u8; PAUSED_SIZE]));
    }
}

fn main() {
    std::thread::spawn(|| {
        loop {
            let churn: Vec<Vec<u8>> = (0..64).map(|i| vec![0u8; 100 + i]).collect();
            drop(std::hint::black_box(churn));
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    println!("ready");
    for line in std::io::stdin().lock().lines() {
        match line.unwrap().as_str() {
            "leak" => leak_here(),
            "paused" => leak_while_paused(),
            _ => {}
        }
        println!("done");
    }
}
