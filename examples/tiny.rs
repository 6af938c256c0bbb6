//! A tiny program, for the fixed costs of a profile: a few hundred allocations, then exit. Run
//! with `MEMPROF_TRACE=tiny.mptrace` for trace mode's start and close (docs/overhead-log.md).

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

fn main() {
    let words: Vec<String> = (0..100).map(|i| format!("word{i}")).collect();
    let total: usize = words.iter().map(String::len).sum();
    println!("{} words, {total} bytes", words.len());
}
