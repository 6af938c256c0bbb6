//! Types, sizes and "who keeps this alive": the per-type logs and the mermaid object graph of a
//! small document store.
//!
//! `cargo run --release --example object_graph`
//!
//! Types are inferred from the allocation stacks: release builds need debug info
//! (`debug = "limited"`, this crate's release profile has it); `-C symbol-mangling-version=v0`
//! gives the same names from the symbols alone.

use std::collections::HashMap;
use std::rc::Rc;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// An author, shared by the documents they wrote.
struct Author {
    name: String,
}

/// A paragraph of a document.
struct Paragraph {
    text: String,
}

/// A document: its author and its paragraphs.
struct Document {
    author: Rc<Author>,
    paragraphs: Vec<Paragraph>,
}

/// Bytes the program keeps for its own reasons, named explicitly.
struct Thumbnail;

#[inline(never)]
fn load(authors: &[Rc<Author>]) -> HashMap<u64, Box<Document>> {
    (0..12u64)
        .map(|id| {
            let paragraphs = (0..id % 7 + 1)
                .map(|p| Paragraph {
                    text: format!("paragraph {p} of document {id}"),
                })
                .collect();
            let document = Box::new(Document {
                author: authors[(id % 3) as usize].clone(),
                paragraphs,
            });
            (id, document)
        })
        .collect()
}

fn main() -> std::io::Result<()> {
    let authors: Vec<Rc<Author>> = ["Ada", "Grace", "Barbara"]
        .iter()
        .map(|name| {
            Rc::new(Author {
                name: name.to_string(),
            })
        })
        .collect();
    let store = load(&authors);
    let thumbnail = vec![0u8; 4096];
    memprof::types::tag_block::<Thumbnail>(thumbnail.as_ptr().cast());

    let out = &mut std::io::stdout();
    println!("## Live objects per type (log_object_counts)\n");
    memprof::log_object_counts(out)?;
    println!("\n## Heap bytes reachable per type (log_object_sizes)\n");
    memprof::log_object_sizes(out)?;
    println!("\n## Who keeps the `Author`s alive (pretty_log_object_graph::<Rc<Author>>)\n");
    memprof::pretty_log_object_graph::<Rc<Author>>(out)?;
    println!("\n## Objects created over the run (log_object_tallies)\n");
    memprof::log_object_tallies(out)?;

    let document = &store[&6];
    println!(
        "\nobject_size(document 6) = {} bytes ({} paragraphs, by {}); object_size(store) = {} bytes",
        memprof::object_size(&**document),
        document.paragraphs.len(),
        document.author.name,
        memprof::object_size(&store),
    );
    let words: usize = store
        .values()
        .flat_map(|d| &d.paragraphs)
        .map(|p| p.text.split_whitespace().count())
        .sum();
    println!(
        "{} documents, {words} words, {} bytes of thumbnail",
        store.len(),
        thumbnail.len()
    );
    Ok(())
}
