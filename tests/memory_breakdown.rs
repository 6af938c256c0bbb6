//! `MemoryBreakdown::get` on a program with a known heap, known free memory in the allocator, a
//! known mapping of its own and a thread with a known stack: each part holds what it must, and
//! the parts add up to the resident size within the documented tolerance (`docs/dumps.md`): 2% of
//! it plus 4 MiB, for a program that touches what it allocates.

mod common;

use std::sync::mpsc;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

const MIB: u64 = 1 << 20;

/// 32 MiB in blocks of 1 MiB (each mapped by glibc on its own), touched.
#[inline(never)]
fn large_blocks() -> Vec<Vec<u8>> {
    (0..32).map(|_| vec![1u8; MIB as usize]).collect()
}

/// 16 MiB in blocks of 4000 bytes (in the arena), touched.
#[inline(never)]
fn small_blocks() -> Vec<Vec<u8>> {
    (0..4096).map(|_| vec![1u8; 4000]).collect()
}

/// Touches `depth` KiB of this thread's stack, then waits on `done`.
#[inline(never)]
fn deep(depth: usize, done: &mpsc::Receiver<()>, ready: &mpsc::Sender<()>) {
    let frame = std::hint::black_box([1u8; 1024]);
    if depth > 0 {
        deep(depth - 1, done, ready);
    } else {
        ready.send(()).unwrap();
        done.recv().unwrap();
    }
    std::hint::black_box(&frame);
}

fn show(b: &memprof::MemoryBreakdown) -> String {
    let mut text = Vec::new();
    b.write_text(&mut text).unwrap();
    String::from_utf8(text).unwrap()
}

#[test]
fn memory_breakdown() {
    let before = memprof::MemoryBreakdown::get();
    let large = large_blocks();
    let mut small = small_blocks();
    // Free every other small block: 8 MiB of holes glibc cannot give back, as the blocks between
    // them stay.
    let mut kept = Vec::new();
    for (i, block) in small.drain(..).enumerate() {
        if i % 2 == 0 {
            kept.push(block);
        }
    }
    // A 24 MiB mapping of the program's own, touched.
    let mapping_size = 24 * MIB as usize;
    // SAFETY: a new anonymous mapping, checked, touched within its bounds, unmapped at the end.
    let mapping = unsafe {
        let address = libc::mmap(
            std::ptr::null_mut(),
            mapping_size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(address, libc::MAP_FAILED);
        std::ptr::write_bytes(address.cast::<u8>(), 1, mapping_size);
        address
    };
    // A thread with 4 MiB of its stack touched.
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .stack_size(16 << 20)
        .spawn(move || deep(4096, &done_rx, &ready_tx))
        .unwrap();
    ready_rx.recv().unwrap();

    let b = memprof::MemoryBreakdown::get();
    let text = show(&b);
    eprintln!("before:\n{}\nafter:\n{text}", show(&before));

    // The heap as requested: 32 MiB + 8 MiB more than before, and the vectors that hold them.
    let grown = b.heap_requested - before.heap_requested;
    let expected = 32 * MIB + 2048 * 4000;
    assert!(
        (expected..expected + MIB).contains(&grown),
        "grew by {grown}, expected {expected}\n{text}"
    );
    // 2048 holes of 4000 bytes (and their chunk headers) free in the arena.
    let free = b.allocator_free.expect("glibc's allocator");
    assert!(free >= 2048 * 4000, "{text}");
    assert!(free <= 2048 * 4000 + 8 * MIB, "{text}");
    // Rounding: each 1 MiB block is mapped in whole pages with a chunk header and memprof's
    // block header, each small block takes its headers too.
    let rounding = b.heap_rounding.unwrap();
    assert!(rounding >= 2048 * 16, "{text}");
    assert!(rounding <= 4 * MIB, "{text}");
    // The table and its caches.
    assert!(b.memprof_own > 0, "{text}");
    // The mapping, and the thread's stack.
    assert!(
        b.other_mappings >= 24 * MIB && b.other_mappings < 24 * MIB + 4 * MIB,
        "{text}"
    );
    // The thread's 4096 frames each hold 1 KiB, and more in an unoptimized build.
    let stacks = b.stacks - before.stacks;
    assert!((4 * MIB..12 * MIB).contains(&stacks), "{text}");
    assert!(b.code_and_files > 0, "{text}");
    // The allocator's mappings hold the heap parts.
    let heap_parts = b.heap_requested + rounding + free + b.memprof_own;
    assert!(
        b.allocator_resident.abs_diff(heap_parts) <= heap_parts / 50 + 4 * MIB,
        "{text}"
    );
    // And the parts add up to the resident size.
    let tolerance = b.resident / 50 + 4 * MIB;
    assert!(b.unaccounted.unsigned_abs() <= tolerance, "{text}");

    // The same on the endpoint, as text.
    #[cfg(feature = "http")]
    {
        let address = memprof::serve_http("127.0.0.1:0").unwrap();
        let response = common::http_get(address, "/debug/memprof/memory").unwrap();
        let body = String::from_utf8(response.body).unwrap();
        assert_eq!(response.status, 200, "{body}");
        assert!(response.head.contains("text/plain"), "{}", response.head);
        let field = |name: &str| -> i64 {
            let line = body
                .lines()
                .find(|l| l.split_whitespace().next() == Some(name))
                .unwrap_or_else(|| panic!("no {name}:\n{body}"));
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        assert!(field("other_mappings") >= 24 * MIB as i64, "{body}");
        assert!(field("heap_requested") >= expected as i64, "{body}");
        let resident = field("resident");
        assert!(
            field("unaccounted").unsigned_abs() <= resident as u64 / 50 + 4 * MIB,
            "{body}"
        );
        for name in [
            "heap_rounding",
            "allocator_free",
            "memprof_own",
            "stacks",
            "code_and_files",
        ] {
            assert!(field(name) > 0, "{name}\n{body}");
        }
    }

    done_tx.send(()).unwrap();
    thread.join().unwrap();
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(mapping, mapping_size) };
    drop((large, kept));
}
