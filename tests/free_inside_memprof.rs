//! A block of the program freed while memprof works for the program (a report growing the
//! program's own buffer, code run `untracked`) leaves the table: the table never names freed memory.

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

fn recorded(address: usize) -> bool {
    let snapshot = memprof::Snapshot::take();
    snapshot
        .blocks
        .binary_search_by_key(&address, |b| b.address)
        .is_ok()
}

#[test]
fn frees_inside_memprof_leave_the_table() {
    // The report writes into this vector and grows it: its first buffer is freed inside memprof.
    let mut out: Vec<u8> = Vec::with_capacity(1);
    // A block allocated next usually lies just after it, so that growing it moves it (and frees
    // the first buffer) rather than extends it in place.
    let after = std::hint::black_box(Box::new([0u8; 32]));
    let first = out.as_ptr() as usize;
    assert!(recorded(first));
    memprof::pretty_log_allocations(&mut out).unwrap();
    assert_ne!(out.as_ptr() as usize, first, "the report grew the buffer");
    assert!(!recorded(first), "the freed buffer is gone from the table");
    drop(after);

    // A recorded block freed inside `untracked`.
    let boxed = Box::new([0u8; 512]);
    let address = &*boxed as *const [u8; 512] as usize;
    assert!(recorded(address));
    memprof::untracked(|| drop(boxed));
    assert!(!recorded(address));
}
