//! A trace closed by the program ends with its memory by what held it (the `MEMORY` record,
//! trace format 1.2), measured as `MemoryBreakdown::get` measures it: the heap the program kept
//! is in it, and the parts add up to the resident size within the documented tolerance.

#![cfg(feature = "trace")]

#[global_allocator]
static GLOBAL: memprof::MemProf =
    memprof::MemProf::new().trace("/tmp/memprof-trace-memory-%p.mptrace");

const MIB: u64 = 1 << 20;

#[inline(never)]
fn kept() -> Vec<Vec<u8>> {
    (0..16).map(|_| vec![1u8; MIB as usize]).collect()
}

#[test]
fn trace_memory() {
    assert!(memprof::is_tracing());
    let blocks = kept();
    let closed = memprof::close_trace().unwrap().expect("a trace was open");
    drop(blocks);
    let trace = memprof_trace::Trace::open(&closed).unwrap();
    let memory = *trace.memory().expect("a MEMORY record before the end");
    eprintln!("{memory:?}");
    assert!(memory.heap_requested >= 16 * MIB, "{memory:?}");
    assert!(memory.resident >= memory.heap_requested, "{memory:?}");
    assert!(
        memory.heap_rounding.is_some() && memory.allocator_free.is_some(),
        "{memory:?}"
    );
    assert!(memory.code_and_files > 0 && memory.stacks > 0, "{memory:?}");
    let tolerance = memory.resident / 50 + 4 * MIB;
    assert!(
        memory.unaccounted().unsigned_abs() <= tolerance,
        "{memory:?}"
    );
    std::fs::remove_file(&closed).unwrap();
}
