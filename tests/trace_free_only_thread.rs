//! A thread that only frees (made with `pthread_create`, it never allocates through memprof, so
//! it never registers an end-of-thread flush) and then ends, while the program goes on: the
//! writer finds its buffer and writes its frees while the program runs, as the flush would have.
//! The program is killed with `SIGKILL` once they are in the trace: no close writes them.

#![cfg(feature = "trace")]

use memprof_trace::{Reader, Record};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child process, which frees on its thread and then waits to be killed.
const CHILD: &str = "MEMPROF_TEST_TRACE_FREE_ONLY_THREAD_CHILD";
/// Blocks the thread frees.
const BLOCKS: usize = 100;
/// How long the frees may take to reach the trace.
const DEADLINE: Duration = Duration::from_secs(20);

/// The thread: frees the blocks it is given, allocates nothing through memprof.
extern "C" fn free_all(blocks: *mut libc::c_void) -> *mut libc::c_void {
    let blocks = blocks.cast::<Vec<Box<[u8; 100]>>>();
    // SAFETY: the vector the main thread lends, which outlives the thread (joined); its boxes
    // are taken out once. The vector itself stays the main thread's to free.
    let boxes = unsafe { &mut *blocks };
    while let Some(block) = boxes.pop() {
        drop(block);
    }
    std::ptr::null_mut()
}

fn child() -> ! {
    let mut blocks: Vec<Box<[u8; 100]>> = Vec::with_capacity(BLOCKS);
    for i in 0..BLOCKS {
        blocks.push(Box::new([i as u8; 100]));
    }
    let addresses: Vec<String> = blocks
        .iter()
        .map(|b| format!("{:#x}", &**b as *const [u8; 100] as usize))
        .collect();
    // SAFETY: a plain thread given the vector, joined at once.
    unsafe {
        let mut thread: libc::pthread_t = std::mem::zeroed();
        let arg = (&mut blocks as *mut Vec<Box<[u8; 100]>>).cast::<libc::c_void>();
        assert_eq!(
            libc::pthread_create(&mut thread, std::ptr::null(), free_all, arg),
            0
        );
        assert_eq!(libc::pthread_join(thread, std::ptr::null_mut()), 0);
    }
    assert!(blocks.is_empty());
    println!("FREED {}", addresses.join(" "));
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Frees of `addresses` in the complete chunks of `bytes`, made by threads other than those
/// that allocated them. Another thread's frees are left out: once the blocks are freed, the
/// allocating thread may be given one of their addresses again, and its buffers are written
/// while the child waits (a second).
fn frees_in(bytes: &[u8], addresses: &HashSet<u64>) -> usize {
    let chunks = || -> Vec<memprof_trace::Chunk> {
        let Ok(mut reader) = Reader::new(bytes) else {
            return Vec::new();
        };
        std::iter::from_fn(|| reader.next_chunk().ok().flatten()).collect()
    };
    let chunks = chunks();
    let allocating: HashSet<u32> = chunks
        .iter()
        .filter(|chunk| {
            chunk.records().any(
                |record| matches!(record, Ok(Record::Alloc { address, .. }) if addresses.contains(&address)),
            )
        })
        .map(|chunk| chunk.header.thread)
        .collect();
    let mut frees = 0;
    for chunk in chunks
        .iter()
        .filter(|c| !allocating.contains(&c.header.thread))
    {
        for record in chunk.records() {
            match record {
                Ok(Record::Free { address, .. }) if addresses.contains(&address) => frees += 1,
                Ok(_) => {}
                Err(_) => return frees,
            }
        }
    }
    frees
}

#[test]
fn a_thread_that_only_frees_has_its_frees_written_once_it_ends() {
    if std::env::var_os(CHILD).is_some() {
        child();
    }
    let path = std::env::temp_dir().join(format!(
        "memprof-trace-free-only-{}.mptrace",
        std::process::id()
    ));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_thread_that_only_frees_has_its_frees_written_once_it_ends",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("MEMPROF_TRACE", &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addresses: HashSet<u64> = loop {
        let line = lines.next().expect("the child's addresses").unwrap();
        if let Some(list) = line.strip_prefix("FREED ") {
            break list
                .split(' ')
                .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap())
                .collect();
        }
    };
    assert_eq!(addresses.len(), BLOCKS);
    let start = Instant::now();
    let mut frees = 0;
    while start.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(100));
        assert!(child.try_wait().unwrap().is_none(), "the child ended");
        frees = frees_in(&std::fs::read(&path).unwrap_or_default(), &addresses);
        if frees >= BLOCKS {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        frees, BLOCKS,
        "the ended thread's frees in the trace within {DEADLINE:?}"
    );
    assert_eq!(frees_in(&bytes, &addresses), BLOCKS);
}
