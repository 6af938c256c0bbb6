#!/usr/bin/env bash
# The README's sample report, taken from a real run: builds examples/quickstart.rs in release, runs
# it from the repository's root (so that its files read `examples/quickstart.rs`) with no MEMPROF_*
# variable set (the defaults: depth 5, groups of at least 1,024 bytes), and writes what it prints
# into README.md between the lines `<!-- sample:begin -->` and `<!-- sample:end -->`.
#
#   bash scripts/readme-sample.sh
set -euo pipefail
cd "$(dirname "$0")/.."

grep -q '^<!-- sample:begin -->$' README.md && grep -q '^<!-- sample:end -->$' README.md \
  || { echo "README.md has no <!-- sample:begin --> / <!-- sample:end --> lines" >&2; exit 1; }

cargo build --release --example quickstart
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

out=$(mktemp)
trap 'rm -f "$out"' EXIT
for variable in $(env | sed -n 's/^\(MEMPROF_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$variable"; done
"$target_dir/release/examples/quickstart" >"$out"

# The Markdown table as it is (GitHub renders it), the lines before and after it as text.
python3 - "$out" <<'EOF'
import sys

lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
table = [i for i, line in enumerate(lines) if line.startswith("|")]
if not table:
    sys.exit("the example printed no report table")
first, last = table[0], table[-1]


def text(block):
    block = [line for line in block if line.strip()]
    return ["```text", *block, "```", ""] if block else []


sample = text(lines[:first]) + lines[first : last + 1] + [""] + text(lines[last + 1 :])
while sample and sample[-1] == "":
    sample.pop()

readme = open("README.md", encoding="utf-8").read().split("\n")
begin = readme.index("<!-- sample:begin -->")
end = readme.index("<!-- sample:end -->")
readme[begin + 1 : end] = [""] + sample + [""]
open("README.md", "w", encoding="utf-8").write("\n".join(readme))
print(f"README.md: the sample rewritten, {len(sample)} lines")
EOF
