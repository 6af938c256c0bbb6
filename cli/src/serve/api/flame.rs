//! `/api/flame`: a flame graph of the live, allocated, leaked or temporary bytes.

use crate::serve::query::{ApiError, At, Params};
use crate::serve::state::State;
use crate::serve::view::{Query, view};

/// A flame graph: its nodes in one vector, each naming its children by index, so that neither
/// building it, nor writing it, nor dropping it recurses, however deep the stacks (a recursion of
/// 10,000 frames is one path of 10,000 nodes).
pub struct Flame<'a> {
    /// The root first.
    nodes: Vec<Node<'a>>,
}

struct Node<'a> {
    name: &'a str,
    /// Whether the frame is the standard library's.
    std: bool,
    value: u64,
    /// Sorted by value, largest first, then by name.
    children: Vec<usize>,
}

impl Flame<'_> {
    /// The tree as JSON: `{"name","value","children":[...]}` from the root down, written with a
    /// stack of its own rather than the thread's.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(64 * self.nodes.len());
        // (node, children written so far)
        let mut open: Vec<(usize, usize)> = Vec::new();
        let start = |node: &Node, out: &mut String| {
            out.push_str("{\"name\":");
            out.push_str(&serde_json::to_string(node.name).unwrap_or_default());
            if node.std {
                out.push_str(",\"std\":true");
            }
            out.push_str(",\"value\":");
            out.push_str(&node.value.to_string());
            out.push_str(",\"children\":[");
        };
        start(&self.nodes[0], &mut out);
        open.push((0, 0));
        while let Some((node, written)) = open.last_mut() {
            let children = &self.nodes[*node].children;
            if let Some(&child) = children.get(*written) {
                if *written > 0 {
                    out.push(',');
                }
                *written += 1;
                start(&self.nodes[child], &mut out);
                open.push((child, 0));
            } else {
                out.push_str("]}");
                open.pop();
            }
        }
        out
    }
}

/// Levels of a text tree drawn with their branches; deeper nodes name their level instead.
const TEXT_LEVELS: usize = 32;

impl Flame<'_> {
    /// The tree as text, for a terminal or a script (bytehound's `allocation_ascii_tree`): one
    /// node a line, outermost caller first, its bytes and share of the root, under the branches
    /// of its callers (past [`TEXT_LEVELS`] levels, its level is written instead, so a line stays
    /// short however deep the stack). Written with a stack of its own, as [`Flame::to_json`].
    pub fn to_text(&self) -> String {
        let total = self.nodes[0].value.max(1) as f64;
        let mut out = String::with_capacity(96 * self.nodes.len());
        // (node, its level, whether it is its parent's last child), in the order they print.
        let mut pending: Vec<(usize, usize, bool)> = vec![(0, 0, true)];
        // Whether each open level's node was the last of its siblings.
        let mut last_at: Vec<bool> = Vec::new();
        while let Some((node, level, last)) = pending.pop() {
            last_at.truncate(level);
            let n = &self.nodes[node];
            if level > 0 {
                for &ancestor_last in last_at.iter().skip(1).take(TEXT_LEVELS) {
                    out.push_str(if ancestor_last { "   " } else { "│  " });
                }
                if level > TEXT_LEVELS {
                    out.push_str(&format!("[level {level}] "));
                }
                out.push_str(if last { "└─ " } else { "├─ " });
            }
            out.push_str(&format!(
                "{} B ({:.1}%) {}\n",
                n.value,
                n.value as f64 * 100.0 / total,
                n.name
            ));
            last_at.push(last);
            for (i, &child) in n.children.iter().enumerate().rev() {
                pending.push((child, level + 1, i + 1 == n.children.len()));
            }
        }
        out
    }
}

/// A stack's path (frame names, outermost first) and its value.
type Path<'a> = (&'a [u32], u64);

/// The flame graph of per-class values: each stack's path (outermost first), merged by common
/// prefix. Frames below 1/10,000 of the whole are left out (their bytes stay in their parent's
/// value), so the tree stays small whatever the number of stacks.
pub fn tree<'a>(state: &'a State, values: impl Iterator<Item = (usize, u64)>) -> Flame<'a> {
    let mut paths: Vec<Path> = Vec::new();
    for (class, value) in values {
        if value > 0 {
            let (stack, _) = state.classes.list[class];
            paths.push((&state.stacks[stack as usize].path, value));
        }
    }
    paths.sort_unstable();
    let total: u64 = paths.iter().map(|p| p.1).sum();
    let threshold = (total / 10_000).max(1);
    let mut nodes = vec![Node {
        name: "all",
        std: false,
        value: total,
        children: Vec::new(),
    }];
    // Nodes whose children are still to find: (node, its paths, its depth). A node's paths are
    // sorted and all share their first `depth` frames.
    let mut pending: Vec<(usize, &[Path], usize)> = vec![(0, &paths, 0)];
    while let Some((parent, group, depth)) = pending.pop() {
        let mut start = group.partition_point(|p| p.0.len() <= depth);
        while start < group.len() {
            let name = group[start].0[depth];
            let end = start + group[start..].partition_point(|p| p.0[depth] == name);
            let below = &group[start..end];
            let value: u64 = below.iter().map(|p| p.1).sum();
            if value >= threshold {
                let (name, std) = &state.names[name as usize];
                nodes.push(Node {
                    name: name.as_str(),
                    std: *std,
                    value,
                    children: Vec::new(),
                });
                let node = nodes.len() - 1;
                nodes[parent].children.push(node);
                pending.push((node, below, depth + 1));
            }
            start = end;
        }
    }
    for parent in 0..nodes.len() {
        let mut children = std::mem::take(&mut nodes[parent].children);
        children.sort_by(|&a, &b| {
            let (a, b) = (&nodes[a], &nodes[b]);
            b.value.cmp(&a.value).then(a.name.cmp(b.name))
        });
        nodes[parent].children = children;
    }
    Flame { nodes }
}

/// `/api/flame`: the tree's JSON, or its text with `format=text`; under sampling, the root has
/// `estimated` and `sample_interval` members (the text a first line saying so).
pub fn flame(state: &State, params: &Params) -> Result<String, ApiError> {
    let text = match params.get("format") {
        None | Some("json") => false,
        Some("text") => true,
        Some(other) => return Err(ApiError::bad(format!("format={other:?}: json or text"))),
    };
    let q = Query::parse(state, params)?;
    let what = params.get("what").unwrap_or("live");
    let classes = state.classes.list.len();
    let values: Vec<u64> = match what {
        "live" => {
            let v = view(state, &q, &[&q.at], None)?;
            v.live(&q.at, classes).iter().map(|l| l.0).collect()
        }
        "leaked" => {
            let v = view(state, &q, &[&At::End], None)?;
            v.live(&At::End, classes).iter().map(|l| l.0).collect()
        }
        "allocated" | "temporary" => {
            let v = view(state, &q, &[], None)?;
            v.range(q.lo, q.hi, classes)
                .iter()
                .map(|c| {
                    if what == "allocated" {
                        c.alloc_bytes
                    } else {
                        c.temporary_bytes
                    }
                })
                .collect()
        }
        other => {
            return Err(ApiError::bad(format!(
                "what={other:?}: live, allocated, leaked or temporary"
            )));
        }
    };
    let tree = tree(state, values.into_iter().enumerate());
    let interval = state.index.totals.sample_interval;
    Ok(match (text, interval) {
        (true, 0) => tree.to_text(),
        (false, 0) => tree.to_json(),
        // Under sampling, marked as the estimates they are.
        (true, _) => format!(
            "≈ estimated from allocations sampled one per {interval} bytes on average\n{}",
            tree.to_text()
        ),
        (false, _) => format!(
            "{{\"estimated\":true,\"sample_interval\":{interval},{}",
            &tree.to_json()[1..]
        ),
    })
}
