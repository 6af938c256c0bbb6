//! MemProf's object graph as a mermaid flowchart.

#![forbid(unsafe_code)]

use crate::object_graph::Graph;
use std::io::{self, Write};

/// A type name inside a quoted mermaid label: `"`, `<` and `>` as mermaid's entity codes
/// (`#quot;`, `#lt;`, `#gt;`), which it renders as the characters (left as is, `<app::Foo>` would
/// be taken for an HTML tag and vanish).
pub(crate) fn label(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Writes `graph` as MemProf does: `graph LR`, a node per target object
/// (`  0x<addr>["0x<addr> TypeName"]`), then an edge per reference from the referring block to
/// the referred one, labelled with the byte offset of the pointer in the referrer and the level
/// (0 for references to a target, 1 for references to those referrers, …):
/// `  0x<from>["0x<from> TypeName"] --@(field <offset>),<level>--> 0x<to>`.
pub(crate) fn write<W: Write + ?Sized>(graph: &Graph, out: &mut W) -> io::Result<()> {
    let mut buffer = String::from("graph LR\n");
    for node in &graph.targets {
        buffer.push_str(&format!(
            "  0x{:x}[\"0x{:x} {}\"]\n",
            node.address,
            node.address,
            label(&node.name)
        ));
    }
    for edge in &graph.edges {
        buffer.push_str(&format!(
            "  0x{:x}[\"0x{:x} {}\"] --@(field {}),{}--> 0x{:x}\n",
            edge.from.address,
            edge.from.address,
            label(&edge.from.name),
            edge.field,
            edge.level,
            edge.to
        ));
    }
    out.write_all(buffer.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_escape_what_mermaid_would_misread() {
        assert_eq!(label("app::Foo"), "app::Foo");
        assert_eq!(
            label("alloc::sync::Arc<app::Baz>"),
            "alloc::sync::Arc#lt;app::Baz#gt;"
        );
        assert_eq!(label("a\"b"), "a#quot;b");
    }
}
