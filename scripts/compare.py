#!/usr/bin/env python3
"""memprof beside its peers, in one run: prints Markdown tables.

    python3 scripts/compare.py            # about seven minutes on 2 cores, after the builds
    python3 scripts/compare.py --quick    # smaller inputs, one run each: about a minute

What it measures (all in the same run, so the ratios hold on a noisy machine):

1. Overhead per allocation: `benches/peers.rs` (divan), an alloc+free pair and a realloc round
   trip through `System`, memprof and dhat-rs in one process, at stack depths 5, 16 and 32, in a
   frame-pointer build and a default build (memprof's DWARF unwinder).
2. Whole process: `examples/workload*.rs` on a churn workload, pulldown-cmark, serde_json, a
   realloc-heavy recursive workload, a tree of a million boxed nodes and three real crates,
   without a profiler, with memprof (frame pointers, also sampled; default build), dhat-rs,
   `heaptrack -r` and `valgrind --tool=dhat`: time of the measured part, nanoseconds added per
   allocation, wall time and peak resident set, each with its ratio to the run without a
   profiler. Valgrind runs a smaller input against a plain run of that same input.
3. Threads: churn throughput on 1 and 2 threads, and the same for threads that free each other's
   blocks; 8 threads on 2 cores must end (no deadlock) with
   every event accounted for (memprof's live totals back where they were, its allocation count
   equal to dhat-rs's on the same work, every marked block seen).
4. Memory: the profiler's resident bytes per live block, 512 MiB of live blocks of one size
   (at most 4 million), for sizes from 16 bytes to 1 MiB, with glibc's mmap threshold fixed;
   and for the largest sizes, the slope to 1 GiB, which leaves the profiler's fixed costs out.
5. Reports: a million live blocks over ten thousand stacks: snapshot, the Markdown report and
   each export, with a cold symbolizer and a warm one.
6. Paired runs, 15 pairs: memprof on churn at depths 5 and 32 and `heaptrack -r` on churn
   (nanoseconds added per allocation), and memprof sampled every 512 KiB on churn and
   serde_json (time ratio). Each profiled run follows a run without a profiler at once, and the
   median is taken of the pairs' differences, which this machine's drift does not swamp the way
   it swamps a difference of medians.
7. The HTTP endpoint scraped (`--only scraped`): a long churn run (about ten seconds) sampled
   every 512 KiB, with `MEMPROF_HTTP` and its heap profile fetched every second, against the
   same sampled run without the endpoint and against no profiler, in triples of runs one after
   the other (7 triples, quick 3): the time ratios' medians.
8. Debug builds (`--only debug`): nanoseconds memprof adds per allocation on churn in a debug
   build with Cargo's defaults, in one with the quick start's `opt-level = 3` for memprof, and
   in the release build, each paired with the same build without a profiler (7 pairs, quick 3).

Each measurement runs `--runs` times (5 by default; the tools take turns) and the median is
shown. A tool that is not installed is skipped with a note in the table. The builds go to
`--target-dir` (default `$CARGO_TARGET_DIR` or `target`) and `--fp-target-dir` (default
`<target-dir>/fp`, built with `-C force-frame-pointers=yes`).
"""

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["workload", "workload_plain", "workload_dhat"]
# Mean bytes between sampled allocations in the sampled memprof run (jemalloc's default, 512 KiB).
SAMPLE_INTERVAL = 524288


def log(message):
    print(f"[compare] {message}", file=sys.stderr, flush=True)


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def wait_for_quiet(threshold, max_wait):
    """Waits until the 1-minute load is at most `threshold`, for at most `max_wait` seconds."""
    start = time.time()
    while float(load()) > threshold and time.time() - start < max_wait:
        log(f"load {load()} above {threshold}; waiting")
        time.sleep(15)


# ------------------------------------------------------------------------------------------------
# builds


def build(target_dir, frame_pointers, examples=EXAMPLES, bench=True, profile=("--release",)):
    """Builds the workload examples (with the `http` feature, which costs nothing until
    `MEMPROF_HTTP` asks for the endpoint) and the peers bench; returns {name: executable}.
    `profile`: Cargo's arguments choosing the build profile (`()` for a debug build)."""
    env = dict(os.environ, CARGO_TARGET_DIR=str(target_dir))
    if frame_pointers:
        env["RUSTFLAGS"] = (env.get("RUSTFLAGS", "") + " -C force-frame-pointers=yes").strip()
    executables = {}
    # The frame-pointer build can also trace (cargo feature `trace`), for the trace-mode rows.
    features = ["--features", "trace"] if frame_pointers else []
    commands = [
        ["cargo", "build", *profile, "-p", "memprof-bench", "--features", "http",
         "--message-format=json"]
        + features + [a for e in examples for a in ("--example", e)],
    ]
    if bench:
        commands.append(["cargo", "bench", "-p", "memprof-bench", "--bench", "peers", "--no-run",
                         "--message-format=json"])
    for command in commands:
        log(("RUSTFLAGS='-C force-frame-pointers=yes' " if frame_pointers else "")
            + f"CARGO_TARGET_DIR={target_dir} " + " ".join(command))
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"build failed: {' '.join(command)}")
        for line in done.stdout.splitlines():
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            if message.get("reason") == "compiler-artifact" and message.get("executable"):
                executables[message["target"]["name"]] = message["executable"]
    missing = [n for n in list(examples) + (["peers"] if bench else []) if n not in executables]
    if missing:
        sys.exit(f"build made no executable for {missing}")
    return executables


# ------------------------------------------------------------------------------------------------
# running


class Failed(Exception):
    pass


def run(command, env=None, timeout=900):
    """Runs a command; returns (wall seconds, RESULT fields, stdout)."""
    full_env = dict(os.environ)
    for key in list(full_env):
        if key.startswith("MEMPROF_"):
            del full_env[key]
    full_env.update(env or {})
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=full_env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failed(f"timed out after {timeout} s: {' '.join(map(str, command))}")
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise Failed(f"exit {done.returncode}: {' '.join(map(str, command))}\n"
                     f"{done.stderr[-2000:]}")
    fields = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    return wall, fields, done.stdout


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


class Tool:
    """One way of running the workload: a binary, maybe a wrapper, maybe an environment."""

    def __init__(self, label, exe, wrapper=None, env=None, baseline=None, available=True,
                 note=""):
        self.label = label
        self.exe = exe
        self.wrapper = wrapper  # function(tmpdir) -> list of arguments before the binary
        self.env = env or {}
        self.baseline = baseline  # label of the run without a profiler to compare with
        self.available = available
        self.note = note

    def run_once(self, scenario, size, tmpdir):
        """One run: (wall seconds, RESULT fields)."""
        prefix = self.wrapper(tmpdir) if self.wrapper else []
        wall, fields, _ = run(prefix + [self.exe, scenario, str(size)], env=self.env)
        for leftover in Path(tmpdir).iterdir():
            leftover.unlink()
        return wall, fields


def summarize(samples):
    """The medians of a tool's runs."""
    hots = [float(f["hot_s"]) for _, f in samples]
    return {
        "wall": median([w for w, _ in samples]),
        "hot": median(hots),
        # Half the range of the runs: how far apart they were.
        "spread": (max(hots) - min(hots)) / 2,
        "rss_kb": median([int(f["peak_rss_kb"]) for _, f in samples]),
        "allocs": samples[-1][1].get("allocs", "-"),
    }


# ------------------------------------------------------------------------------------------------
# 1. per-allocation overhead (divan)

UNITS = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}


def parse_divan(output):
    """{(bench, arg): median ns} from divan's table."""
    results, bench = {}, None
    for line in output.splitlines():
        m = re.match(r"^[│ ]*[├╰]─ (\S+)\s+(.*)$", line)
        if not m:
            continue
        name, rest = m.groups()
        cells = [c.strip() for c in rest.split("│")]
        if not cells[0]:
            bench = name
            continue
        if len(cells) < 3:
            continue
        value, unit = cells[2].split()
        results[(bench, name)] = float(value) * UNITS[unit]
    return results


def per_allocation(builds, depths, sample_count, sample_size):
    rows = []
    for build_label, exes, unwinder in builds:
        for depth in depths:
            _, _, out = run([exes["peers"], "--bench", "--sample-count", str(sample_count),
                             "--sample-size", str(sample_size)],
                            env={"MEMPROF_STACK_DEPTH": str(depth)}, timeout=600)
            r = parse_divan(out)
            d = str(depth)
            row = {"build": build_label, "unwinder": unwinder, "depth": depth, "load": load()}
            for op in ("alloc_free", "realloc", "realloc_growth"):
                system = r[(f"{op}_system", d)]
                memprof = r[(f"{op}_memprof", d)]
                dhat = r[(f"{op}_dhat", d)]
                row[op] = (system, memprof, dhat)
            rows.append(row)
    return rows


def fmt_ns(ns):
    if ns is None:
        return "–"
    if ns >= 10_000:
        return f"{ns / 1000:,.1f} µs"
    return f"{ns:,.0f} ns" if ns >= 100 else f"{ns:.1f} ns"


def print_per_allocation(rows):
    print("### Overhead per allocation (divan, `benches/peers.rs`, median)\n")
    print("Time per operation; `+` is the time added to plain `System` in the same process. "
          "An alloc+free pair is one allocation; a realloc round trip is alloc, realloc, free "
          "(two recorded allocations); realloc growth is a block grown from 16 bytes to 4 KiB by "
          "255 reallocs of 16 bytes each, then freed (256 recorded allocations).\n")
    print("| build | depth | op | System | memprof | memprof + | dhat-rs | dhat-rs + "
          "| dhat-rs + / memprof + |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        for op, name in (("alloc_free", "alloc+free"), ("realloc", "realloc round trip"),
                         ("realloc_growth", "realloc growth")):
            system, memprof, dhat = row[op]
            added_m, added_d = memprof - system, dhat - system
            ratio = f"{added_d / added_m:.1f}×" if added_m > 0 else "–"
            print(f"| {row['build']} | {row['depth']} | {name} | {fmt_ns(system)} | "
                  f"{fmt_ns(memprof)} | {fmt_ns(added_m)} | {fmt_ns(dhat)} | {fmt_ns(added_d)} | "
                  f"{ratio} |")
    print()


# ------------------------------------------------------------------------------------------------
# 2. whole process


def whole_process(tools, scenarios, valgrind_sizes, runs, tmpdir, count_exe):
    """Returns per scenario ({tool label: (size, medians or None, note)}, {size: allocations}).

    The tools take turns, run after run, so a change of the machine's load falls on all of them.
    Valgrind runs once, on its smaller input, beside a plain run of that input."""
    results = {}
    for scenario, size in scenarios:
        log(f"whole process: {scenario} {size} (load {load()})")
        small = valgrind_sizes[scenario]
        plan = []  # (tool, size, runs)
        for tool in tools:
            if tool.label.startswith("valgrind"):
                plan.append((tool, small, 1))
            elif tool.label.startswith("no profiler (Valgrind"):
                plan.append((tool, small, runs))
            else:
                plan.append((tool, size, runs))
        samples = {tool.label: [] for tool, _, _ in plan}
        failed = {}
        for r in range(runs):
            for tool, s, n in plan:
                if tool.available and r < n and tool.label not in failed:
                    try:
                        samples[tool.label].append(tool.run_once(scenario, s, tmpdir))
                    except Failed as error:
                        log(f"{tool.label} failed: {error}")
                        failed[tool.label] = str(error).splitlines()[0]
        measured = {}
        for tool, s, _ in plan:
            got = samples[tool.label]
            if tool.label in failed:
                measured[tool.label] = (s, None, f"FAILED: {failed[tool.label]}")
            else:
                measured[tool.label] = (s, summarize(got) if got else None, tool.note)
        # Allocations in the measured part, as memprof counts them, at the Valgrind size too.
        _, fields, _ = run([count_exe, scenario, str(small)])
        counts = {size: None, small: int(fields["allocs"])}
        m = measured["memprof (frame pointers)"][1]
        if m and m["allocs"] != "-":
            counts[size] = int(m["allocs"])
        results[scenario] = (measured, counts)
    return results


def print_whole_process(tools, results):
    print("### Whole process (median of the runs)\n")
    print("`measured` is the workload's own timing of its allocating part; `ns added / alloc` is "
          "(measured − measured without a profiler) ÷ allocations in it (memprof's count), "
          "± half the range of the runs of both. "
          "`wall` is the whole process, tool start-up and its files included; peak RSS is "
          "`VmHWM` of the workload process.\n")
    by_label = {t.label: t for t in tools}
    for scenario, (measured, counts) in results.items():
        size = next(iter(measured.values()))[0]
        print(f"**{scenario}** (size {size:,}, {counts[size] or 0:,} allocations measured)\n")
        print("| tool | size | measured | ns added / alloc | wall | × wall | peak RSS | × RSS | "
              "note |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for label, (s, m, note) in measured.items():
            if m is None:
                print(f"| {label} | {s:,} | – | – | – | – | – | – | "
                      f"{note or 'not run'} |")
                continue
            base_label = by_label[label].baseline
            base = measured.get(base_label, (None, None, None))[1] if base_label else None
            allocs = counts.get(s)
            added = ratio_wall = ratio_rss = "–"
            if base:
                if allocs:
                    noise = (m["spread"] ** 2 + base["spread"] ** 2) ** 0.5 * 1e9 / allocs
                    added = f"{(m['hot'] - base['hot']) * 1e9 / allocs:,.0f}"
                    if noise >= 1:
                        added += f" ± {noise:,.0f}"
                ratio_wall = f"{m['wall'] / base['wall']:.2f}"
                ratio_rss = f"{m['rss_kb'] / base['rss_kb']:.2f}"
            print(f"| {label} | {s:,} | {m['hot']:.3f} s | {added} | {m['wall']:.2f} s | "
                  f"{ratio_wall} | {m['rss_kb'] / 1024:,.1f} MB | {ratio_rss} | {note} |")
        print()


# ------------------------------------------------------------------------------------------------
# 3. threads


def threads(exes_fp, exes, iterations, runs, scenario="threads"):
    """Iterations per second on 1 and 2 threads of `scenario` (`threads`: churn on each thread;
    `exchange`: the recursive workload, each thread freeing 1/16 of the other's blocks); the
    configurations take turns, run after run."""
    configs = [
        ("no profiler (frame pointers)", exes_fp["workload_plain"], iterations),
        ("memprof (frame pointers)", exes_fp["workload"], iterations),
        ("memprof (default build, DWARF)", exes["workload"], iterations),
        ("dhat-rs", exes["workload_dhat"], max(iterations // 5, 1000)),
    ]
    rates = {(label, t): [] for label, _, _ in configs for t in (1, 2)}
    for _ in range(runs):
        for label, exe, n in configs:
            for t in (1, 2):
                _, fields, _ = run([exe, scenario, str(n), str(t)])
                rates[(label, t)].append(float(fields["iters_per_s"]))
    # Other processes only ever slow a run down: the best run is the one they disturbed least.
    return [(label, n, max(rates[(label, 1)]), max(rates[(label, 2)]))
            for label, _, n in configs]


def oversubscribed(exes, threads_count, iterations):
    """8 threads on 2 cores: ends in time, and no event is lost."""
    checks = []
    try:
        _, m, _ = run([exes["workload"], "threads", str(iterations), str(threads_count)],
                      timeout=300)
    except Failed as error:
        return [("memprof ends (no deadlock)", False, str(error))]
    checks.append(("memprof ends (no deadlock)", True, f"{float(m['hot_s']):.2f} s"))
    checks.append(("live blocks back to the count before the threads", m["live_blocks_diff"] == "0",
                   f"difference {m['live_blocks_diff']}"))
    checks.append(("live bytes back to the count before the threads", m["live_bytes_diff"] == "0",
                   f"difference {m['live_bytes_diff']}"))
    checks.append(("every marked block of every thread seen in a snapshot",
                   m["marks_seen"] == m["marks_expected"],
                   f"{m['marks_seen']} of {m['marks_expected']}"))
    try:
        _, d, _ = run([exes["workload_dhat"], "threads", str(iterations), str(threads_count)],
                      timeout=600)
        checks.append(("allocations counted equal dhat-rs's count on the same work",
                       d["allocs"] == m["allocs"], f"memprof {int(m['allocs']):,}, "
                       f"dhat-rs {int(d['allocs']):,}"))
    except Failed as error:
        checks.append(("dhat-rs cross-check", False, str(error)))
    return checks


def print_threads(rows, checks, threads_count, exchange_rows=()):
    print("### Threads (churn, iterations per second, best run)\n")
    print("Each thread does the same work; the best of the runs is shown, since other processes "
          "on the machine only ever slow a run down, and the two threads need both cores.\n")
    print("| tool | iterations per thread | 1 thread | 2 threads | 2 threads ÷ 1 thread |")
    print("|---|---:|---:|---:|---:|")
    for label, n, one, two in rows:
        print(f"| {label} | {n:,} | {one:,.0f} | {two:,.0f} | {two / one:.2f}× |")
    print()
    if exchange_rows:
        print("The recursive workload on each thread, every thread handing 1/16 of its blocks to "
              "the other to free (`exchange`):\n")
        print("| tool | iterations per thread | 1 thread | 2 threads | 2 threads ÷ 1 thread |")
        print("|---|---:|---:|---:|---:|")
        for label, n, one, two in exchange_rows:
            print(f"| {label} | {n:,} | {one:,.0f} | {two:,.0f} | {two / one:.2f}× |")
        print()
    print(f"{threads_count} threads on {os.cpu_count()} cores (memprof, frame pointers):\n")
    print("| check | result | detail |")
    print("|---|---|---|")
    for name, ok, detail in checks:
        print(f"| {name} | {'ok' if ok else 'FAILED'} | {detail} |")
    print()


# ------------------------------------------------------------------------------------------------
# 4. memory per live block


# Block sizes of the memory measurement, 16 bytes to 1 MiB.
MEMORY_SIZES = [16, 64, 256, 1000, 4096, 16384, 65536, 262144, 1048576]


def memory_blocks(size, heap_bytes):
    """How many blocks of `size` bytes make `heap_bytes` of live heap (at most 4 million)."""
    return max(1, min(4_000_000, heap_bytes // size))


# glibc's threshold for mapping a block on its own, fixed for the memory runs (its default, which
# glibc otherwise raises as large blocks are freed): with it left to move, the profiler's own
# large arrays, freed as its tables grow, change where the program's blocks of 128 KiB and more
# go, and the difference in resident memory is glibc's layout, not the profiler's.
MMAP_THRESHOLD = 128 * 1024

MEMORY_LABELS = ("no profiler", "no profiler (frame pointers)", "memprof (frame pointers)",
                 "memprof (default build, DWARF)", "dhat-rs")


def memory(tools_by_label, sizes, heap_bytes, runs, labels=MEMORY_LABELS):
    """{size: {label: (median RSS growth kB, median peak kB, baseline label)}}."""
    growth = {}
    for size in sizes:
        blocks = memory_blocks(size, heap_bytes)
        log(f"memory: {blocks:,} blocks of {size:,} bytes (load {load()})")
        growth[size] = {}
        for label in labels:
            tool = tools_by_label[label]
            values, peaks = [], []
            for _ in range(runs):
                env = dict(tool.env or {}, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
                _, fields, _ = run([tool.exe, "live", str(blocks), str(size)], env=env)
                values.append(int(fields["rss_growth_kb"]))
                peaks.append(int(fields["peak_rss_kb"]))
            growth[size][label] = (median(values), median(peaks), tool.baseline)
    return growth


def print_marginal(growth, doubled, heap_bytes):
    """Bytes per block from the slope between `heap_bytes` and twice that: what each further
    block costs, without the profiler's fixed costs (its unwinder's tables, say), which the
    figures above spread over few blocks at the largest sizes."""
    labels = ("memprof (frame pointers)", "memprof (default build, DWARF)")
    print(f"Per further block, from the slope between {heap_bytes >> 20} MiB and "
          f"{heap_bytes >> 19} MiB of live blocks (the profiler's fixed costs left out):\n")
    print("| block size | blocks | " + " | ".join(labels) + " |")
    print("|---:|---:|" + "---:|" * len(labels))
    for size, by_label in doubled.items():
        blocks = memory_blocks(size, heap_bytes)
        more = memory_blocks(size, 2 * heap_bytes) - blocks
        cells = []
        for label in labels:
            once = per_block(growth[size], label, 1)
            twice = per_block(by_label, label, 1)
            cells.append("–" if more <= 0 else f"{(twice - once) / more:,.1f}")
        print(f"| {size:,} B | {blocks:,} → {blocks + more:,} | " + " | ".join(cells) + " |")
    print()


def per_block(by_label, label, blocks):
    """The profiler's resident bytes per live block: its growth minus its baseline's."""
    kb, _, base_label = by_label[label]
    if not base_label:
        return None
    return (kb - by_label[base_label][0]) * 1024 / blocks


def print_memory(growth, heap_bytes):
    print(f"### Memory: live blocks of one size, {heap_bytes >> 20} MiB of them (at most 4 million)"
          " (median)\n")
    print("The profiler's resident bytes per live block: the resident set the process added while "
          "the blocks were allocated (and written), minus what the same binary added without a "
          "profiler, divided by the number of blocks. Every run has glibc's threshold for mapping "
          f"a block on its own fixed at {MMAP_THRESHOLD >> 10} KiB (`MALLOC_MMAP_THRESHOLD_`), "
          "so that the profiler's own memory does not move the program's blocks.\n")
    labels = ("memprof (frame pointers)", "memprof (default build, DWARF)", "dhat-rs")
    print("| block size | blocks | " + " | ".join(labels) + " |")
    print("|---:|---:|" + "---:|" * len(labels))
    for size, by_label in growth.items():
        blocks = memory_blocks(size, heap_bytes)
        cells = []
        for label in labels:
            value = per_block(by_label, label, blocks)
            cells.append("–" if value is None else f"{value:,.1f}")
        print(f"| {size:,} B | {blocks:,} | " + " | ".join(cells) + " |")
    print()


# ------------------------------------------------------------------------------------------------
# 5. reports


def reports(exe, blocks, runs):
    results = []
    for _ in range(runs):
        _, fields, _ = run([exe, "report", str(blocks)], timeout=900)
        results.append(fields)
    keys = [k for k in results[0] if k.endswith("_s")]
    return {k: median([float(r[k]) for r in results]) for k in keys}, results[0]


def print_reports(times, fields):
    print(f"### Reports: {int(fields['live_blocks']):,} live blocks over "
          f"{int(fields['stacks']):,} distinct stacks (median)\n")
    print(f"Allocating them took {times['fill_s']:.2f} s under memprof; a snapshot "
          f"{times['snapshot_s']:.2f} s.\n")
    print("| output | cold symbolizer | warm symbolizer | size |")
    print("|---|---:|---:|---:|")
    print(f"| Markdown report (`pretty_log_allocations`, snapshot included) | "
          f"{times['markdown_cold_s']:.2f} s | {times['markdown_warm_s']:.2f} s | "
          f"{int(fields['markdown_bytes']):,} B |")
    for name, title in (("pprof", "pprof `.pb.gz`"), ("folded", "folded stacks"),
                        ("dhat", "DHAT JSON"), ("heaptrack", "heaptrack `.gz`")):
        if f"{name}_cold_s" in times:
            print(f"| {title} | {times[f'{name}_cold_s']:.2f} s | "
                  f"{times[f'{name}_warm_s']:.2f} s | {int(fields[f'{name}_bytes']):,} B |")
    print()


# ------------------------------------------------------------------------------------------------
# 6. paired runs


def paired_runs(tools_by_label, label, scenario, size, pairs, tmpdir):
    """`pairs` runs of the tool's baseline (the workload without a profiler), each followed at
    once by a run of the tool: `(baseline seconds, profiled seconds)` of each pair's measured
    part. Pairing cancels most of the machine's drift, which is larger than the overhead being
    measured."""
    tool = tools_by_label[label]
    base = tools_by_label[tool.baseline]
    runs = []
    for _ in range(pairs):
        _, plain = base.run_once(scenario, size, tmpdir)
        _, profiled = tool.run_once(scenario, size, tmpdir)
        runs.append((float(plain["hot_s"]), float(profiled["hot_s"])))
    return runs


def ratios(runs):
    return [profiled / base for base, profiled in runs]


def ns_added(runs, allocs):
    return [(profiled - base) * 1e9 / allocs for base, profiled in runs]


def print_paired(sampling_rows, overhead_rows, allocs):
    print("### Paired runs\n")
    print("Each profiled run follows a run without a profiler (of the same build) at once, and "
          "the pair's difference is taken before the median, so a change of the machine's load "
          "between pairs cancels out. The whole-process table above takes the difference of the "
          f"medians instead. Churn makes {allocs:,} allocations (memprof's count).\n")
    print("| workload | tool | pairs | median | lowest | highest |")
    print("|---|---|---:|---:|---:|---:|")
    for label, runs in overhead_rows:
        added = ns_added(runs, allocs)
        print(f"| churn | {label} | {len(runs)} | {statistics.median(added):,.1f} ns added "
              f"per allocation | {min(added):,.1f} | {max(added):,.1f} |")
    for scenario, runs in sampling_rows:
        r = ratios(runs)
        print(f"| {scenario} | memprof (frame pointers), sampled every 512 KiB | {len(runs)} | "
              f"{statistics.median(r):.3f} time ratio | {min(r):.3f} | {max(r):.3f} |")
    print()


# ------------------------------------------------------------------------------------------------
# 8. debug builds

# The quick start's fix for debug builds: memprof alone compiled with optimization.
OPTIMIZED_MEMPROF = ("--config", "profile.dev.package.memprof.opt-level=3")


def debug_builds(target_dir, release_exes, size, pairs, tmpdir):
    """Nanoseconds added per allocation on churn by memprof in a debug build (Cargo's defaults:
    memprof unoptimized), in a debug build with the quick start's `opt-level = 3` for memprof, and
    in a release build, each paired with the same build's run without a profiler."""
    builds = [
        ("debug build, Cargo's defaults", build(target_dir / "debug-default", False,
                                                ["workload", "workload_plain"], False, ())),
        ("debug build, memprof at `opt-level = 3`",
         build(target_dir / "debug-opt", False, ["workload", "workload_plain"], False,
               OPTIMIZED_MEMPROF)),
        ("release build", release_exes),
    ]
    rows = []
    for label, exes in builds:
        plain = Tool("plain", exes["workload_plain"])
        profiled = Tool(label, exes["workload"], baseline="plain")
        _, fields = profiled.run_once("churn", size, tmpdir)
        allocs = int(fields["allocs"])
        runs = paired_runs({"plain": plain, label: profiled}, label, "churn", size, pairs, tmpdir)
        rows.append((label, allocs, ns_added(runs, allocs)))
    return rows


def measure_debug(target_dir, release_exes, quick, tmpdir):
    log(f"debug builds (load {load()})")
    size = 20_000 if quick else 50_000
    rows = debug_builds(target_dir, release_exes, size, 3 if quick else 7, tmpdir)
    print_debug_builds(rows, size)


def print_debug_builds(rows, size):
    print("### Debug builds\n")
    print(f"Churn ({size:,}) in each build, memprof's default build (DWARF unwinder), paired with "
          "the same build without a profiler as in *Paired runs*: nanoseconds memprof adds per "
          "allocation. The second row is the quick start's `[profile.dev.package.memprof] "
          "opt-level = 3`.\n")
    print("| build | allocations | pairs | median ns added | lowest | highest |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, allocs, added in rows:
        print(f"| {label} | {allocs:,} | {len(added)} | {statistics.median(added):,.0f} | "
              f"{min(added):,.0f} | {max(added):,.0f} |")
    print()


# ------------------------------------------------------------------------------------------------
# 7. the HTTP endpoint, scraped


def thread_cpu_seconds(pid, name):
    """CPU time (user and system) of the threads of `pid` named `name`, in seconds."""
    ticks = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        if comm == name:
            fields = text[text.rindex(")") + 2:].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def run_scraped(exe, scenario, size, env, every, path="/debug/pprof/heap"):
    """One run of `exe` serving its endpoint on a free port (`MEMPROF_HTTP=127.0.0.1:0`), whose
    `path` is fetched every `every` seconds while it runs: (RESULT fields, profiles fetched, CPU
    seconds of the endpoint's threads)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MEMPROF_")}
    full_env.update(env, MEMPROF_HTTP="127.0.0.1:0")
    process = subprocess.Popen([exe, scenario, str(size)], env=full_env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    found, address, errors, fetched, cpu = threading.Event(), [], [], [0], [0.0]

    def read_stderr():
        for line in process.stderr:
            errors.append(line)
            m = re.search(r"serving the heap profile at (http://[^/\s]+)", line)
            if m:
                address.append(m.group(1))
                found.set()

    def scrape():
        if not found.wait(30):
            return
        due = time.monotonic() + every
        while process.poll() is None:
            if time.monotonic() < due:
                time.sleep(0.01)
                continue
            due += every
            try:
                with urllib.request.urlopen(address[0] + path, timeout=30) as response:
                    response.read()
                fetched[0] += 1
                cpu[0] = thread_cpu_seconds(process.pid, "memprof-http")
            except OSError as error:
                if process.poll() is None:
                    errors.append(f"fetching {path}: {error}\n")

    threads = [threading.Thread(target=read_stderr), threading.Thread(target=scrape)]
    for thread in threads:
        thread.start()
    stdout = process.stdout.read()
    process.wait()
    for thread in threads:
        thread.join()
    if process.returncode != 0 or not address or any("fetching" in e for e in errors):
        raise Failed(f"exit {process.returncode}: {exe} {scenario} {size}\n{''.join(errors)}")
    fields = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    return fields, fetched[0], cpu[0]


def scraped(exes_fp, size, triples):
    """`triples` of runs, one after the other: churn without a profiler, sampled by memprof, and
    sampled with the endpoint scraped every second. Returns [(plain, sampled, scraped seconds,
    profiles fetched, CPU seconds of the endpoint, sampled and scraped peak resident KiB)]."""
    sampling = {"MEMPROF_SAMPLE_INTERVAL": f"bytes:{SAMPLE_INTERVAL}"}
    rows = []
    for _ in range(triples):
        _, plain, _ = run([exes_fp["workload_plain"], "churn", str(size)])
        _, sampled, _ = run([exes_fp["workload"], "churn", str(size)], env=sampling)
        fields, fetched, cpu = run_scraped(exes_fp["workload"], "churn", size, sampling, 1.0)
        rows.append((float(plain["hot_s"]), float(sampled["hot_s"]), float(fields["hot_s"]),
                     fetched, cpu, (int(sampled["peak_rss_kb"]), int(fields["peak_rss_kb"]))))
    return rows


def print_scraped(rows, size):
    print("### The HTTP endpoint, scraped every second\n")
    print(f"Churn of size {size:,} in a frame-pointer build: without a profiler; sampled every "
          f"512 KiB (`MEMPROF_SAMPLE_INTERVAL=bytes:{SAMPLE_INTERVAL}`); the same with "
          "`MEMPROF_HTTP=127.0.0.1:0` and `/debug/pprof/heap` fetched every second while it "
          "runs (the first fetch symbolizes, later ones hit the symbolizer's cache). Runs in "
          "triples, one after the other; medians of the triples' ratios.\n")
    print("| ratio | triples | median | lowest | highest |")
    print("|---|---:|---:|---:|---:|")
    for name, values in (
            ("time: sampled and scraped ÷ sampled", [c / b for _, b, c, *_ in rows]),
            ("time: sampled ÷ no profiler", [b / a for a, b, *_ in rows]),
            ("time: sampled and scraped ÷ no profiler", [c / a for a, _, c, *_ in rows]),
            ("CPU time of the endpoint's threads ÷ the scraped run's time",
             [cpu / c for _, _, c, _, cpu, _ in rows])):
        print(f"| {name} | {len(rows)} | {statistics.median(values):.3f} | {min(values):.3f} | "
              f"{max(values):.3f} |")
    seconds = statistics.median([c for _, _, c, *_ in rows])
    fetched = statistics.median([f for _, _, _, f, *_ in rows])
    cpu = statistics.median([cpu / max(f, 1) for _, _, _, f, cpu, _ in rows])
    rss = [statistics.median([r[5][i] for r in rows]) / 1024 for i in (0, 1)]
    print(f"\nA scraped run took {seconds:.1f} s (median) and served {fetched:.0f} profiles, "
          f"{cpu * 1000:.0f} ms of CPU time each (the first symbolizes). Peak resident set: "
          f"{rss[0]:.0f} MiB sampled, {rss[1]:.0f} MiB sampled and scraped (the symbolizer's "
          "debug information, loaded by the first profile as by any report).\n")


def measure_scraped(exes_fp, quick):
    log(f"the endpoint scraped (load {load()})")
    size = 500_000 if quick else 2_000_000
    print_scraped(scraped(exes_fp, size, 3 if quick else 7), size)


# ------------------------------------------------------------------------------------------------
# targets


def print_targets(per_alloc, whole, thread_rows, growth, heap_bytes, sampling_rows, overhead_rows,
                  churn_allocs, exchange_rows=()):
    def added(build, depth, op="alloc_free"):
        for row in per_alloc:
            if row["build"] == build and row["depth"] == depth:
                s, m, d = row[op]
                return m - s, d - s
        return None, None

    measured, counts = whole["churn"]
    size = next(iter(measured.values()))[0]
    allocs = counts[size]

    def churn_added(label, base):
        m, b = measured.get(label, (0, None, ""))[1], measured.get(base, (0, None, ""))[1]
        if not (m and b and allocs):
            return None
        return (m["hot"] - b["hot"]) * 1e9 / allocs

    fp5 = churn_added("memprof (frame pointers)", "no profiler (frame pointers)")
    fp32 = churn_added("memprof (frame pointers), depth 32", "no profiler (frame pointers)")
    sampled = churn_added("memprof (frame pointers), sampled", "no profiler (frame pointers)")
    dwarf5 = churn_added("memprof (default build, DWARF)", "no profiler")
    dhat = churn_added("dhat-rs", "no profiler")
    heaptrack = churn_added("heaptrack -r", "no profiler")
    paired = {label: statistics.median(ns_added(runs, churn_allocs))
              for label, runs in overhead_rows}
    paired_fp5 = paired.get("memprof (frame pointers)")
    paired_heaptrack = paired.get("heaptrack -r")
    b_fp5, b_dhat5 = added("frame pointers", 5)
    b_fp32, _ = added("frame pointers", 32)
    b_dwarf5, _ = added("default (DWARF)", 5)
    worst = [per_block(by_label, "memprof (frame pointers)", memory_blocks(size, heap_bytes))
             for size, by_label in growth.items()]
    worst = max(worst) if worst else None
    scaling = next((two / one for label, _, one, two in thread_rows
                    if label == "memprof (frame pointers)"), None)
    exchange_scaling = next((two / one for label, _, one, two in exchange_rows
                             if label == "memprof (frame pointers)"), None)

    def row(name, value, goal, ok, unit=""):
        shown = "–" if value is None else f"{value:,.1f}{unit}"
        verdict = "–" if value is None else ("met" if ok(value) else "missed")
        print(f"| {name} | {goal} | {shown} | {verdict} |")

    print("### Targets\n")
    print("| target | goal | measured | |")
    print("|---|---|---:|---|")
    row("frame pointers, depth 5, churn: ns added per allocation", fp5, "≤ 40",
        lambda v: v <= 40)
    row("the same, median of paired runs", paired_fp5, "≤ 40", lambda v: v <= 40)
    row("frame pointers, depth 5, alloc+free bench: ns added", b_fp5, "≤ 40", lambda v: v <= 40)
    row("dhat-rs overhead ÷ memprof overhead (churn)", dhat / fp5 if dhat and fp5 else None,
        "≥ 25", lambda v: v >= 25, "×")
    row("dhat-rs overhead ÷ memprof overhead (alloc+free bench, depth 5)",
        b_dhat5 / b_fp5 if b_dhat5 and b_fp5 else None, "≥ 25", lambda v: v >= 25, "×")
    row("heaptrack -r overhead ÷ memprof overhead (churn)",
        heaptrack / fp5 if heaptrack and fp5 else None, "≥ 15", lambda v: v >= 15, "×")
    row("the same, medians of paired runs",
        paired_heaptrack / paired_fp5 if paired_heaptrack and paired_fp5 else None, "≥ 15",
        lambda v: v >= 15, "×")
    row("default build (DWARF), depth 5, churn: ns added", dwarf5, "≤ 150", lambda v: v <= 150)
    row("default build (DWARF), depth 5, alloc+free bench: ns added", b_dwarf5, "≤ 150",
        lambda v: v <= 150)
    row("frame pointers, depth 32, churn: ns added", fp32, "≤ 80", lambda v: v <= 80)
    row("the same, median of paired runs", paired.get("memprof (frame pointers), depth 32"),
        "≤ 80", lambda v: v <= 80)
    row("frame pointers, depth 32, alloc+free bench: ns added", b_fp32, "≤ 80",
        lambda v: v <= 80)
    row("for comparison, not a target: sampled every 512 KiB, frame pointers, churn: ns added",
        sampled, "≤ 40", lambda v: v <= 40)
    churn_ratios = next((ratios(r) for s, r in sampling_rows if s == "churn"), None)
    row("sampled every 512 KiB, churn: time added (median of paired runs)",
        (statistics.median(churn_ratios) - 1) * 100 if churn_ratios else None, "< 5 %",
        lambda v: v < 5, " %")
    row("2 threads ÷ 1 thread throughput under memprof", scaling, "≥ 1.7", lambda v: v >= 1.7,
        "×")
    row("2 threads ÷ 1 thread throughput under memprof, exchanging blocks", exchange_scaling,
        "≥ 1.8", lambda v: v >= 1.8, "×")
    row("profiler bytes per live block, worst block size from 16 B to 1 MiB", worst, "≤ 40",
        lambda v: v <= 40)
    print()


# ------------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller inputs, one run each")
    parser.add_argument("--runs", type=int, help="runs per measurement (default 5, quick 1)")
    parser.add_argument("--target-dir", type=Path,
                        default=Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")))
    parser.add_argument("--fp-target-dir", type=Path)
    parser.add_argument("--wait-load", type=float, metavar="LOAD",
                        help="before measuring, wait (at most --max-wait s) for the 1-minute "
                             "load to fall to LOAD")
    parser.add_argument("--max-wait", type=float, default=600)
    parser.add_argument("--only",
                        default="alloc,process,paired,sampling,threads,memory,reports,scraped,"
                                "debug",
                        help="comma-separated sections to run")
    args = parser.parse_args()
    runs = args.runs or (1 if args.quick else 5)
    fp_dir = args.fp_target_dir or args.target_dir / "fp"
    only = set(args.only.split(","))

    # The sections that need only the workloads run without the others' builds.
    few = ["workload", "workload_plain"]
    alone = only <= {"scraped", "debug"}
    if alone:
        exes = build(args.target_dir, False, few, bench=False) if "debug" in only else {}
        exes_fp = build(fp_dir, True, few, bench=False) if "scraped" in only else {}
    else:
        exes = build(args.target_dir, frame_pointers=False)
        exes_fp = build(fp_dir, frame_pointers=True)
    if args.wait_load is not None:
        wait_for_quiet(args.wait_load, args.max_wait)

    heaptrack = shutil.which("heaptrack")
    valgrind = shutil.which("valgrind")
    versions = []
    for tool, flag in ((heaptrack, "--version"), (valgrind, "--version")):
        if tool:
            v = subprocess.run([tool, flag], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True).stdout.strip().splitlines()
            versions.append(v[0] if v else tool)
    rustc = subprocess.run(["rustc", "--version"], stdout=subprocess.PIPE, text=True).stdout
    print("## memprof beside its peers\n")
    print(f"`python3 scripts/compare.py{' --quick' if args.quick else ''}` — {cpu_model()}, "
          f"{os.cpu_count()} cores, Linux {platform.release()}, {rustc.strip()}, "
          f"{', '.join(versions) or 'no heaptrack, no Valgrind'}; 1-minute load at the start: "
          f"{load()}; median of {runs} run(s).\n")

    tmpdir = tempfile.mkdtemp(prefix="memprof-compare-")
    quick = args.quick
    if alone:
        if "scraped" in only:
            measure_scraped(exes_fp, quick)
        if "debug" in only:
            measure_debug(args.target_dir, exes, quick, tmpdir)
        print(f"1-minute load at the end: {load()}.")
        shutil.rmtree(tmpdir, ignore_errors=True)
        return 0
    tools = [
        Tool("no profiler", exes["workload_plain"]),
        Tool("no profiler (frame pointers)", exes_fp["workload_plain"]),
        Tool("memprof (frame pointers)", exes_fp["workload"],
             baseline="no profiler (frame pointers)"),
        Tool("memprof (frame pointers), depth 32", exes_fp["workload"],
             env={"MEMPROF_STACK_DEPTH": "32"}, baseline="no profiler (frame pointers)"),
        Tool("memprof (frame pointers), sampled", exes_fp["workload"],
             env={"MEMPROF_SAMPLE_INTERVAL": f"bytes:{SAMPLE_INTERVAL}"},
             baseline="no profiler (frame pointers)",
             note=f"`MEMPROF_SAMPLE_INTERVAL=bytes:{SAMPLE_INTERVAL}`"),
        Tool("memprof (frame pointers), trace", exes_fp["workload"],
             env={"MEMPROF_TRACE": os.path.join(tmpdir, "trace-%p.mptrace")},
             baseline="no profiler (frame pointers)", note="`MEMPROF_TRACE`"),
        Tool("memprof (default build, DWARF)", exes["workload"], baseline="no profiler"),
        Tool("dhat-rs", exes["workload_dhat"], baseline="no profiler"),
        Tool("heaptrack -r", exes["workload_plain"],
             wrapper=lambda d: [heaptrack, "-r", "-o", os.path.join(d, "heaptrack")],
             baseline="no profiler", available=bool(heaptrack),
             note="" if heaptrack else "heaptrack not installed"),
        Tool("no profiler (Valgrind's size)", exes["workload_plain"]),
        Tool("valgrind --tool=dhat", exes["workload_plain"],
             wrapper=lambda d: [valgrind, "--tool=dhat",
                                f"--dhat-out-file={os.path.join(d, 'dhat.out')}"],
             baseline="no profiler (Valgrind's size)", available=bool(valgrind),
             note=("smaller input, one run" if valgrind else "valgrind not installed")),
    ]
    by_label = {t.label: t for t in tools}
    status = 0
    per_alloc, whole, thread_rows, growth, sampling_rows, overhead_rows = [], {}, [], {}, [], []
    exchange_rows = []
    # Live heap of the memory measurement, per block size.
    heap_bytes = (128 if quick else 512) << 20
    churn_allocs = None
    if "alloc" in only:
        log(f"per-allocation benches (load {load()})")
        builds = [("frame pointers", exes_fp, "fp"), ("default (DWARF)", exes, "dwarf")]
        per_alloc = per_allocation(builds, [5, 16, 32], 100 if quick else 200,
                                   200 if quick else 1000)
        print_per_allocation(per_alloc)
    if "process" in only:
        scenarios = ([("churn", 30_000), ("markdown", 5_000), ("json", 10_000),
                      ("recursive", 50_000), ("tree", 18), ("crates", 5_000)] if quick else
                     [("churn", 100_000), ("markdown", 20_000), ("json", 20_000),
                      ("recursive", 200_000), ("tree", 20), ("crates", 20_000)])
        valgrind_sizes = ({"churn": 5_000, "markdown": 1_000, "json": 2_000, "recursive": 5_000,
                           "tree": 12, "crates": 500} if quick else
                          {"churn": 20_000, "markdown": 2_000, "json": 3_000,
                           "recursive": 20_000, "tree": 14, "crates": 1_000})
        whole = whole_process(tools, scenarios, valgrind_sizes, runs, tmpdir,
                              exes_fp["workload"])
        print_whole_process(tools, whole)
    if "paired" in only or "sampling" in only:
        log(f"paired runs (load {load()})")
        pairs = 5 if quick else 15
        churn_size = 30_000 if quick else 100_000
        _, fields, _ = run([exes_fp["workload"], "churn", str(churn_size)])
        churn_allocs = int(fields["allocs"])
        if "paired" in only:
            overhead_rows = [(label, paired_runs(by_label, label, "churn", churn_size, pairs,
                                                 tmpdir))
                             for label in ("memprof (frame pointers)",
                                           "memprof (frame pointers), trace",
                                           "memprof (frame pointers), depth 32", "heaptrack -r")
                             if by_label[label].available]
        if "sampling" in only:
            sampling_rows = [(scenario, paired_runs(by_label, "memprof (frame pointers), sampled",
                                                    scenario, size, pairs, tmpdir))
                             for scenario, size in (("churn", churn_size),
                                                    ("json", 5_000 if quick else 20_000))]
        print_paired(sampling_rows, overhead_rows, churn_allocs)
    if "threads" in only:
        log(f"threads (load {load()})")
        thread_rows = threads(exes_fp, exes, 20_000 if quick else 50_000, runs)
        exchange_rows = threads(exes_fp, exes, 20_000 if quick else 100_000, runs, "exchange")
        checks = oversubscribed(exes_fp, 8, 2_000 if quick else 5_000)
        print_threads(thread_rows, checks, 8, exchange_rows)
        if not all(ok for _, ok, _ in checks):
            status = 1
    if "memory" in only:
        log(f"memory (load {load()})")
        growth = memory(by_label, MEMORY_SIZES, heap_bytes, runs)
        print_memory(growth, heap_bytes)
        # The sizes where 512 MiB makes few blocks: their slope to twice the heap.
        large = [size for size in MEMORY_SIZES if memory_blocks(size, heap_bytes) < 100_000]
        doubled = memory(by_label, large, 2 * heap_bytes, runs, MEMORY_LABELS[:4])
        print_marginal(growth, doubled, heap_bytes)
    if "reports" in only:
        log(f"reports (load {load()})")
        times, fields = reports(exes["workload"], 1_000_000, 1 if quick else min(runs, 2))
        print_reports(times, fields)
    if "scraped" in only:
        measure_scraped(exes_fp, quick)
    if "debug" in only:
        measure_debug(args.target_dir, exes, quick, tmpdir)
    if any(m is None and note.startswith("FAILED")
           for measured, _ in whole.values() for _, m, note in measured.values()):
        status = 1
    if per_alloc and whole and thread_rows and growth:
        print_targets(per_alloc, whole, thread_rows, growth, heap_bytes, sampling_rows,
                      overhead_rows, churn_allocs, exchange_rows)
    print(f"1-minute load at the end: {load()}.")
    shutil.rmtree(tmpdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
