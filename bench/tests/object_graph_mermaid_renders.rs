//! The mermaid object graphs, as memprof writes them (the golden files of `src/report/tests.rs`
//! pin the writer to), rendered by mermaid itself in headless Chromium: each graph parses, and
//! draws every node and every edge with the label written for it (type names with their `<`, `>`
//! and quotes back from mermaid's entity codes).
//!
//! mermaid comes from the npm registry (`npm pack`, one version, cached under `target/`). Both
//! tools are required under `scripts/test.sh`; run on its own, the test skips without them.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The mermaid release the graphs are checked with.
const MERMAID: &str = "11.17.2";

/// `mermaid.min.js` of [`MERMAID`], fetched once into `dir`.
fn mermaid_script(dir: &Path) -> Option<PathBuf> {
    let script = dir.join(format!("mermaid-{MERMAID}.min.js"));
    if script.exists() {
        return Some(script);
    }
    if Command::new("npm").arg("--version").output().is_err() {
        common::missing_tool("mermaid check", "apt-get install -y npm");
        return None;
    }
    std::fs::create_dir_all(dir).unwrap();
    let packed = common::run(
        Command::new("npm")
            .args(["pack", "--silent", &format!("mermaid@{MERMAID}")])
            .current_dir(dir),
    );
    let tarball = dir.join(packed.trim());
    common::run(
        Command::new("tar")
            .arg("-xzf")
            .arg(&tarball)
            .args(["-C"])
            .arg(dir)
            .arg("package/dist/mermaid.min.js"),
    );
    std::fs::rename(dir.join("package/dist/mermaid.min.js"), &script).unwrap();
    std::fs::remove_file(tarball).unwrap();
    Some(script)
}

/// Each graph of the golden files: a file may hold several, each starting at `graph`.
fn golden_graphs() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/golden");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mmd"))
        .collect();
    files.sort();
    let mut graphs: Vec<(String, String)> = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        let first = graphs.len();
        for line in text.split_inclusive('\n') {
            if graphs.len() == first || line.starts_with("graph ") {
                graphs.push((format!("{name}#{}", graphs.len() - first), String::new()));
            }
            graphs.last_mut().unwrap().1.push_str(line);
        }
    }
    assert!(graphs.len() >= 3, "{graphs:?}");
    graphs
}

/// Mermaid's entity codes in a label, back to the characters they stand for.
fn decoded(label: &str) -> String {
    label
        .replace("#quot;", "\"")
        .replace("#lt;", "<")
        .replace("#gt;", ">")
}

/// The node and edge labels `graph` asks for.
fn written_labels(graph: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut nodes = BTreeSet::new();
    let mut edges = BTreeSet::new();
    for line in graph.lines().skip(1) {
        let node = line.find("[\"").map(|start| {
            let end = line[start..].find("\"]").unwrap() + start;
            decoded(&line[start + 2..end])
        });
        nodes.extend(node);
        if let Some(start) = line.find("] --") {
            let end = line.rfind("--> ").unwrap();
            edges.insert(line[start + 4..end].to_owned());
        }
    }
    (nodes, edges)
}

#[test]
fn mermaid_draws_every_node_and_edge_written() {
    let Some(chromium) = common::chromium() else {
        common::missing_tool("mermaid check", "apt-get install -y chromium");
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mermaid");
    let Some(script) = mermaid_script(&dir) else {
        return;
    };
    let graphs = golden_graphs();
    let page_dir = dir.join(format!("page-{}", std::process::id()));
    std::fs::create_dir_all(&page_dir).unwrap();
    std::fs::copy(&script, page_dir.join("mermaid.min.js")).unwrap();
    let texts: Vec<&str> = graphs.iter().map(|(_, text)| text.as_str()).collect();
    let page = include_str!("../../tests/tools/mermaid_render.html").replace(
        "@GRAPHS@",
        &serde_json::to_string(&texts).unwrap().replace("</", "<\\/"),
    );
    let page_path = page_dir.join("render.html");
    std::fs::write(&page_path, page).unwrap();
    let dom = common::headless_dom(chromium, &page_path, &page_dir.join("profile"), 20_000);
    let start = dom.find("<pre id=\"memprof-result\">").expect("the page") + 25;
    let end = start + dom[start..].find("</pre>").unwrap();
    let json = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    let results: Vec<serde_json::Value> = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("the page wrote no result ({e}):\n{json}"));
    assert_eq!(results.len(), graphs.len());
    let strings = |value: &serde_json::Value| -> BTreeSet<String> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    for ((name, text), result) in graphs.iter().zip(&results) {
        assert!(
            result["error"].is_null(),
            "{name}: {}\n{text}",
            result["error"]
        );
        let (nodes, edges) = written_labels(text);
        assert!(!nodes.is_empty() && !edges.is_empty(), "{name}:\n{text}");
        assert_eq!(strings(&result["nodes"]), nodes, "{name}:\n{text}");
        assert_eq!(strings(&result["edges"]), edges, "{name}:\n{text}");
    }
    let _ = std::fs::remove_dir_all(page_dir);
}
