//! Profiles a small word-index workload and prints the Markdown report of what is still live.
//!
//! `cargo run --release --example quickstart`
//!
//! The report's files and lines come from the debug information that `debug = "limited"` in this
//! crate's `[profile.release]` asks for.

use std::collections::HashMap;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Splits a generated text into owned words.
#[inline(never)]
fn tokenize(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

/// Maps every word to the positions it occurs at.
#[inline(never)]
fn build_index(words: &[String]) -> HashMap<&str, Vec<usize>> {
    let mut index: HashMap<&str, Vec<usize>> = HashMap::new();
    for (position, word) in words.iter().enumerate() {
        index.entry(word).or_default().push(position);
    }
    index
}

/// Keeps a boxed copy of some position lists, as a cache would.
#[inline(never)]
fn cache_hot_entries(index: &HashMap<&str, Vec<usize>>) -> Vec<Box<[usize]>> {
    index
        .values()
        .filter(|positions| positions[0] % 10 == 0)
        .map(|positions| positions.clone().into_boxed_slice())
        .collect()
}

fn main() {
    let text: String = (0..200_000)
        .map(|i| format!("word{} ", (i * 7919) % 5000))
        .collect();
    let words = tokenize(&text);
    let index = build_index(&words);
    let cache = cache_hot_entries(&index);
    println!(
        "{} words, {} distinct, {} cached lists\n",
        words.len(),
        index.len(),
        cache.len()
    );
    memprof::pretty_log_allocations(&mut std::io::stdout()).expect("write the report");
    let stats = memprof::HeapStats::get();
    // `peak ≥ N` unless the peak is tracked exactly (`MEMPROF_PEAK=1`).
    println!("\n{stats}");
}
