#!/usr/bin/env bash
# The test suite: every test in a default build (stacks unwound with DWARF call-frame information),
# the stack-dependent tests again in a frame-pointer build, the stack tests (and the exports read
# by their tools) in release builds, the type tests with v0 symbol mangling, the heap assertions
# under libtest's threads, and the doc-tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests that open an output in its real reader fail, rather than skip, when the reader is
# missing (scripts/install-deps.sh installs them all).
export MEMPROF_REQUIRE_TOOLS=1

echo "== default build (DWARF unwinder)"
cargo nextest run --workspace --all-features --no-fail-fast

echo "== frame-pointer build"
# Only the library and its C tests: the other members' test binaries would be built for nothing.
RUSTFLAGS="-C force-frame-pointers=yes" MEMPROF_EXPECT_FP=1 CARGO_TARGET_DIR=target/fp \
  cargo nextest run -p memprof -p memprof-c-tests --no-fail-fast \
  -E 'binary(stack_walk) | binary(stack_trim) | binary(labels_frames) | binary(exact_counts) | binary(c_abi) | binary(print_at_exit) | binary(diff_leak) | binary(export_readers) | binary(export_outputs) | binary(output_and_dump)'

echo "== the command without its optional features"
# `convert -o x.svg` must fail without leaving a file when the `flamegraph` feature is off: a
# test the all-features build above compiles out.
cargo nextest run -p memprof-cli --no-fail-fast -E 'binary(output_files)'

echo "== the stack tests in release builds, where the allocator's entry is inlined into the program"
# With them the allocation baselines' end-to-end test: a release build checks its own file,
# and the debug build's totals only.
cargo nextest run --cargo-profile release --no-fail-fast \
  -E 'binary(stack_walk) | binary(stack_trim) | binary(labels_frames) | binary(release_frames) | binary(export_readers) | binary(types_program) | binary(tail_call_frames) | binary(trace_tail_call_frames) | binary(no_debug_info) | binary(baseline_check)'
# The crate table on a program with three dependencies, whose generics inline into its code.
cargo nextest run --cargo-profile release -p memprof-bench --no-fail-fast -E 'binary(crates_table)'
RUSTFLAGS="-C force-frame-pointers=yes" MEMPROF_EXPECT_FP=1 CARGO_TARGET_DIR=target/fp \
  cargo nextest run --cargo-profile release --no-fail-fast \
  -E 'binary(stack_walk) | binary(stack_trim) | binary(labels_frames) | binary(release_frames) | binary(types_program) | binary(tail_call_frames) | binary(trace_tail_call_frames)'

echo "== memprof attach on a stripped release build of a program with memprof built in"
# Its mark must outlive the linker's --gc-sections and `strip` (docs/attach.md).
cargo nextest run --cargo-profile release -p memprof-cli --no-fail-fast -E 'binary(attach_builtin)'

echo "== the control channel in a build without trace mode: a trace asked for is an error"
cargo nextest run -p memprof --no-fail-fast -E 'binary(control)'

echo "== one cargo install gives memprof run everything it needs"
# The release build above left the command's artifacts in the target directory; the install
# reuses them. A fresh HOME: the carried library is written to its cache and preloaded.
install_root=$(mktemp -d)
cargo install --quiet --locked --path cli --root "$install_root" --target-dir "${CARGO_TARGET_DIR:-target}"
HOME="$install_root/home" XDG_CACHE_HOME= "$install_root/bin/memprof" run \
  --trace "$install_root/ls-%p.mptrace" -- /bin/ls / > /dev/null
ls "$install_root"/home/.cache/memprof/libmemprof_preload-*.so
rm -rf "$install_root"

echo "== v0 symbol mangling (types from symbol names)"
RUSTFLAGS="-C symbol-mangling-version=v0" CARGO_TARGET_DIR=target/v0 \
  cargo nextest run --no-fail-fast -E 'binary(types_counts) | binary(object_graph_memprof_example)'

echo "== heap assertions from tests running on threads of one process"
cargo test --test heap_assertions

echo "== doc-tests"
cargo test --doc --all-features
