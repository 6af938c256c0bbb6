#!/usr/bin/env python3
"""The shape of the house, checked: docs/layout.md ("The check") says what and why.

Fails, naming the file, when
  - a source file of the library, the command, the trace crate or the preloaded library is over
    MAX_LINES lines (unit-test files aside);
  - files import each other in a loop (a module and its own submodules aside: a parent composes
    its children, and they share its types);
  - a module imports from a layer above its own, as the `layers` block of docs/layout.md orders
    them, or from the crate root's re-exports (`crate::Name`);
  - a module is in no layer (so a new one is placed on purpose);
  - the library's API documentation lists more than MAX_PUBLIC items with every feature on
    (`--no-doc` skips this one, which runs rustdoc).

Usage: scripts/check-structure.py [--no-doc]
"""

import os
import re
import subprocess
import sys

MAX_LINES = 900
MAX_PUBLIC = 82
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = {"memprof": "src", "memprof-cli": "cli/src", "memprof-trace": "memprof-trace/src",
          "memprof-preload": "preload/src", "memprof-files": "files/src",
          "memprof-http": "http/src"}

USE = re.compile(r"\buse\s+((?:crate|super)\s*::[^;]*);", re.S)
INLINE = re.compile(r"(?<![\w:])((?:crate|super)(?:\s*::\s*(?:super|[A-Za-z_]\w*))+)")
STRIP = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'', re.S)


def module_of(rel):
    """`table/slots.rs` -> ("table", "slots"); `lib.rs`/`main.rs` -> ()."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def expand(tree):
    """`crate::{a::B, c::{d, e}}` -> ["crate::a::B", "crate::c::d", "crate::c::e"]."""
    tree = re.sub(r"\s+", "", tree)
    depth, start, out = 0, None, []
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                prefix = tree[:start]
                inner, parts, d, s = tree[start + 1:i], [], 0, 0
                for j, c in enumerate(inner):
                    d += c == "{"
                    d -= c == "}"
                    if c == "," and d == 0:
                        parts.append(inner[s:j])
                        s = j + 1
                parts.append(inner[s:])
                for p in parts:
                    if p and p != "self":
                        out.extend(expand(prefix + p))
                    elif p == "self":
                        out.append(prefix.rstrip(":"))
                return out
    return [tree.split(" as ")[0]]


def nested_modules(code):
    """Line ranges of inline `mod name { ... }` blocks, where `super` means the file itself."""
    spans, stack, depth = [], [], 0
    for m in re.finditer(r"\bmod\s+\w+\s*\{|[{}]", code):
        tok = m.group(0)
        if tok.startswith("mod"):
            stack.append((depth, m.start()))
            depth += 1
        elif tok == "{":
            depth += 1
        else:
            depth -= 1
            if stack and stack[-1][0] == depth:
                spans.append((stack.pop()[1], m.end()))
    return spans


def targets(mod, code, modules):
    """The modules a file's code names through `crate::` or `super::`, with the paths."""
    code = STRIP.sub(lambda m: " " * len(m.group(0)) if m.group(0)[0] != "\n" else "\n", code)
    spans = nested_modules(code)
    found = []
    paths = [(m.start(), p) for m in USE.finditer(code) for p in expand(m.group(1))]
    used = [range(m.start(), m.end()) for m in USE.finditer(code)]
    for m in INLINE.finditer(code):
        if not any(m.start() in r for r in used):
            paths.append((m.start(), re.sub(r"\s+", "", m.group(1))))
    for pos, path in paths:
        segs = path.split("::")
        if segs[0] == "crate":
            base, segs = (), segs[1:]
        else:
            inside = any(a <= pos < b for a, b in spans)
            base = mod if inside else mod[:-1]
            segs = segs[1:]
            while segs and segs[0] == "super":
                base, segs = base[:-1], segs[1:]
        full = base + tuple(segs)
        best = ()
        for k in range(len(full), 0, -1):
            if full[:k] in modules:
                best = full[:k]
                break
        found.append((best, "::".join(["crate"] + list(full)), full))
    return found


def read_layers():
    """The `layers` block of docs/layout.md: `crate: module module ...`, lowest layer first."""
    text = open(os.path.join(ROOT, "docs/layout.md")).read()
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    if not block:
        sys.exit("check-structure: docs/layout.md has no ```layers block")
    layers, only = {}, {}
    for line in block.group(1).splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        crate, mods = (part.strip() for part in line.split(":", 1))
        if " only " in crate:
            crate, seen = crate.split(" only ")
            only.setdefault(crate, {})[tuple(seen.split("::"))] = [tuple(m.split("::")) for m in mods.split()]
        else:
            layers.setdefault(crate, []).append([tuple(m.split("::")) for m in mods.split()])
    return layers, only


def layer_of(mod, order):
    best = None
    for rank, group in enumerate(order):
        for m in group:
            if mod[:len(m)] == m and (best is None or len(m) > best[1]):
                best = (rank, len(m))
    return None if best is None else best[0]


def related(a, b):
    return a[:len(b)] == b or b[:len(a)] == a


def cycles(edges):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def root_items(code):
    """The names the crate root defines itself (a child may use its parent's items)."""
    return set(re.findall(r"^(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?"
                          r"(?:struct|enum|fn|static|const|type|trait|union)"
                          r"\s+([A-Za-z_]\w*)", code, re.M))


def check_crate(crate, src, order, only, problems):
    files = {}
    for dirpath, _, names in os.walk(os.path.join(ROOT, src)):
        for name in names:
            if name.endswith(".rs"):
                rel = os.path.relpath(os.path.join(dirpath, name), os.path.join(ROOT, src))
                files[module_of(rel)] = os.path.join(src, rel)
    modules = set(files)
    own = root_items(open(os.path.join(ROOT, files[()])).read())
    edges = {}
    for mod, path in sorted(files.items()):
        code = open(os.path.join(ROOT, path)).read()
        is_test = path.endswith("/tests.rs") or "/tests/" in path
        lines = code.count("\n")
        if not is_test and lines > MAX_LINES:
            problems.append(f"{path}: {lines} lines, over {MAX_LINES}: split it along its roles")
        if is_test or not mod:
            continue
        mine = layer_of(mod, order)
        if mine is None:
            problems.append(f"{path}: module {'::'.join(mod)} is in no layer of docs/layout.md")
        for target, text, full in targets(mod, code, modules):
            if not target and len(full) > 0 and full[0] in own:
                continue
            if not target:
                problems.append(f"{path}: imports `{text}` through the crate root's re-exports: "
                                f"import it from the module that defines it")
                continue
            if related(mod, target):
                continue
            edges.setdefault(path, set()).add(files[target])
            allowed = only.get(target[:1])
            if allowed is not None and not related(mod, target[:1]) and not any(mod[:len(a)] == a for a in allowed):
                problems.append(f"{path}: imports `{text}`: only {', '.join('::'.join(a) for a in allowed)} "
                                f"may see {target[0]} (docs/layout.md); go through the stage meant for it")
            theirs = layer_of(target, order)
            if mine is not None and theirs is not None and theirs > mine:
                problems.append(f"{path}: imports `{text}`, from a layer above its own "
                                f"({'::'.join(target)} comes after {'::'.join(mod)} in docs/layout.md)")
    for comp in cycles(edges):
        problems.append("import circle: " + " <-> ".join(comp))


def public_items(problems):
    env = dict(os.environ, RUSTDOCFLAGS="-A warnings")
    run = subprocess.run(["cargo", "doc", "--no-deps", "-p", "memprof", "--all-features", "-q"],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        problems.append("cargo doc failed:\n" + run.stderr[-2000:])
        return
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    html = open(os.path.join(target, "doc/memprof/all.html")).read()
    items = re.findall(r'<li><a href="[^"]+\.html(?:#[^"]*)?">', html)
    if len(items) > MAX_PUBLIC:
        problems.append(f"src/lib.rs: the API documentation lists {len(items)} public items with "
                        f"every feature on, over {MAX_PUBLIC} (target/doc/memprof/all.html)")
    return len(items)


def main():
    problems = []
    layers, only = read_layers()
    for crate, src in CRATES.items():
        if crate not in layers:
            problems.append(f"docs/layout.md: the layers block has no line for {crate}")
            continue
        check_crate(crate, src, layers[crate], only.get(crate, {}), problems)
    count = None if "--no-doc" in sys.argv else public_items(problems)
    for p in problems:
        print(f"check-structure: {p}")
    if problems:
        print(f"check-structure: {len(problems)} problem(s); docs/layout.md says what is checked and why")
        return 1
    print("check-structure: ok (files, circles, layers" + (f", {count} public items)" if count else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
