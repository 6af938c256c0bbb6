#!/usr/bin/env python3
"""libmemprof_preload.so beside heaptrack on the same C workload, in one run: a Markdown table.

    python3 scripts/preload-overhead.py            # 2,000,000 allocations, 7 rounds
    python3 scripts/preload-overhead.py --quick    # 200,000 allocations, 3 rounds
    python3 scripts/preload-overhead.py --lib /path/to/libmemprof_preload.so -n 4000000 --rounds 9

It builds the library (`cargo build --release -p memprof-preload`, into `--target-dir`, default
`$CARGO_TARGET_DIR` or `target`) unless `--lib` names one, and the C workload
`bench/c/preload_workload.c` with `cc -O2 -g -fomit-frame-pointer` (and a second copy with
`-fno-omit-frame-pointer`, for memprof's frame-pointer unwinder). Then, in rounds, each
configuration once per round, one after the other:

- no profiler;
- `LD_PRELOAD=libmemprof_preload.so`, default settings: every block recorded, DWARF unwinding,
  stacks of 5 frames shown (`MEMPROF_STACK_DEPTH`'s default);
- the same with `MEMPROF_ENABLED=0` (the functions only forward: the cost of the interposition),
  with `MEMPROF_STACK_DEPTH=1` and with `MEMPROF_STACK_DEPTH=32` (every frame of the workload's
  stacks);
- the same with `MEMPROF_TRACE` (trace mode: every event into a file, deleted after the run);
- `MEMPROF_UNWINDER=fp` on the frame-pointer copy of the workload, against that copy without a
  profiler;
- `heaptrack -o FILE ./workload N`: the wall time of the whole command as its users see it. The
  heaptrack script starts `heaptrack_interpret | zstd` on a FIFO, preloads
  `libheaptrack_preload.so` into the program, and waits for the interpreter to finish after the
  program exits; the program itself blocks whenever the FIFO is full. On 2 cores the interpreter
  competes with the program. heaptrack 1.4.0's interpreter fails on this workload (it grows to
  about 19 GB and throws std::bad_alloc, from about 40,000 allocations on), so its runs get 4 GiB
  of address space, a failure is reported, and the command is not run again;
- `heaptrack -r -o FILE ./workload N`: heaptrack's recording only (the raw data through zstd).

Every run's wall time is that of the whole process (start-up and exit included). The added time
per allocation is (t - t_plain) / N from the medians over the rounds, and also the median of the
rounds' own differences (each round's profiled run against that round's plain run, which the
machine's drift moves less). The last column is heaptrack's added time over the configuration's.
"""

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "bench" / "c" / "preload_workload.c"


def log(message):
    print(f"[preload-overhead] {message}", file=sys.stderr, flush=True)


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


def build_library(target_dir):
    env = dict(os.environ, CARGO_TARGET_DIR=str(target_dir))
    command = ["cargo", "build", "--release", "-p", "memprof-preload"]
    log(f"CARGO_TARGET_DIR={target_dir} {' '.join(command)}")
    if subprocess.run(command, cwd=ROOT, env=env).returncode != 0:
        sys.exit("the library's build failed")
    lib = Path(target_dir) / "release" / "libmemprof_preload.so"
    if not lib.is_file():
        sys.exit(f"no library at {lib}")
    return lib


def build_workload(cc, out_dir):
    """The workload without frame pointers (as distributions build C) and with them."""
    exes = {}
    for name, flag in (("preload_workload", "-fomit-frame-pointer"),
                       ("preload_workload_fp", "-fno-omit-frame-pointer")):
        exe = Path(out_dir) / name
        command = [cc, "-O2", "-g", flag, "-o", str(exe), str(SOURCE)]
        log(" ".join(command))
        if subprocess.run(command).returncode != 0:
            sys.exit("the workload's build failed")
        exes[name] = exe
    return exes


class Config:
    def __init__(self, label, exe, env=None, wrapper=None, baseline="no profiler",
                 heaptrack=False):
        self.label = label
        self.exe = exe
        self.env = env or {}
        self.wrapper = wrapper  # function(tmpdir) -> arguments before the program
        self.baseline = baseline
        self.heaptrack = heaptrack
        self.walls = []  # None for a failed run
        self.cpus = []
        self.failures = []


def run_once(config, n, tmpdir):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MEMPROF_") and k != "LD_PRELOAD"}
    env.update({k: v.replace("{tmp}", tmpdir) for k, v in config.env.items()})
    command = (config.wrapper(tmpdir) if config.wrapper else []) + [str(config.exe), str(n)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=1800,
                          preexec_fn=limit_memory if config.heaptrack else None)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    for leftover in Path(tmpdir).iterdir():
        leftover.unlink()
    failed = None
    if done.returncode != 0:
        failed = f"exit {done.returncode}: {done.stderr.strip().splitlines()[-4:]}"
    elif f"{n} allocations" not in done.stdout:
        failed = f"unexpected output {done.stdout!r}"
    elif config.heaptrack and "heaptrack stats" not in done.stdout + done.stderr \
            and "-r" not in command:
        failed = f"heaptrack_interpret gave no statistics: {done.stderr.strip()[-300:]!r}"
    if failed:
        if not config.heaptrack:
            sys.exit(f"{' '.join(command)}: {failed}")
        log(f"{config.label} failed: {failed}")
        config.failures.append(failed)
        return None, None
    return wall, cpu


def limit_memory():
    """4 GiB of address space for heaptrack's runs: heaptrack_interpret 1.4.0 can grow to
    about 19 GB on this workload before it fails (std::bad_alloc), which would push a shared
    machine's other work out of memory."""
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def check_recording(lib, exe, n):
    """One run with the report at exit: the library must have seen the workload's allocations."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMPROF_")}
    env.update(LD_PRELOAD=str(lib), MEMPROF_PRINT_AT_EXIT="1")
    done = subprocess.run([str(exe), str(n), "keep"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    report = done.stderr + done.stdout
    if done.returncode != 0 or "site_kept" not in report:
        sys.exit(f"memprof's report does not name the workload:\n{report[-3000:]}")
    return report


def fmt(value, digits=0):
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="200,000 allocations, 3 rounds")
    parser.add_argument("-n", type=int, help="allocations per run (default 2,000,000)")
    parser.add_argument("--rounds", type=int, help="rounds of runs (default 7)")
    parser.add_argument("--lib", help="libmemprof_preload.so to use instead of building it")
    parser.add_argument("--target-dir",
                        default=os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target")))
    parser.add_argument("--cc", default=os.environ.get("CC", "cc"))
    parser.add_argument("--no-trace", action="store_true", help="leave out trace mode")
    parser.add_argument("--no-heaptrack", action="store_true", help="leave out heaptrack")
    args = parser.parse_args()
    n = args.n or (200_000 if args.quick else 2_000_000)
    rounds = args.rounds or (3 if args.quick else 7)

    lib = Path(args.lib).resolve() if args.lib else build_library(args.target_dir)
    work = tempfile.mkdtemp(prefix="preload-overhead-")
    exes = build_workload(args.cc, work)
    plain, plain_fp = exes["preload_workload"], exes["preload_workload_fp"]
    check_recording(lib, plain, min(n, 100_000))

    heaptrack = None if args.no_heaptrack else shutil.which("heaptrack")
    preload = {"LD_PRELOAD": str(lib)}
    configs = [
        Config("no profiler", plain, baseline=None),
        Config("memprof (default: DWARF, depth 5)", plain, env=preload),
        Config("memprof, `MEMPROF_ENABLED=0` (the functions forward, nothing recorded)", plain,
               env=dict(preload, MEMPROF_ENABLED="0")),
        Config("memprof, `MEMPROF_STACK_DEPTH=1`", plain,
               env=dict(preload, MEMPROF_STACK_DEPTH="1")),
        Config("memprof, `MEMPROF_STACK_DEPTH=32`", plain,
               env=dict(preload, MEMPROF_STACK_DEPTH="32")),
    ]
    if not args.no_trace:
        configs.append(Config("memprof, trace mode (`MEMPROF_TRACE=file`)", plain,
                              env=dict(preload, MEMPROF_TRACE="{tmp}/run.mptrace")))
    configs += [
        Config("no profiler, `-fno-omit-frame-pointer` build", plain_fp, baseline=None),
        Config("memprof, `MEMPROF_UNWINDER=fp`, `-fno-omit-frame-pointer` build", plain_fp,
               env=dict(preload, MEMPROF_UNWINDER="fp"),
               baseline="no profiler, `-fno-omit-frame-pointer` build"),
    ]
    if heaptrack:
        configs += [
            Config("`heaptrack` (whole command: recording + interpreter)", plain,
                   wrapper=lambda d: [heaptrack, "-o", f"{d}/ht"], heaptrack=True),
            Config("`heaptrack -r` (recording only)", plain,
                   wrapper=lambda d: [heaptrack, "-r", "-o", f"{d}/ht"], heaptrack=True),
        ]
    else:
        log("heaptrack not found: its rows are left out")

    loads = [load()]
    log(f"{n:,} allocations, {rounds} rounds, {len(configs)} configurations; load {loads[0]}")
    run_dir = tempfile.mkdtemp(prefix="preload-overhead-run-")
    for r in range(rounds):
        for config in configs:
            if config.heaptrack and config.failures:
                # heaptrack_interpret's failure takes tens of seconds and ~19 GB: once is enough.
                config.walls.append(None)
                config.cpus.append(None)
                continue
            wall, cpu = run_once(config, n, run_dir)
            config.walls.append(wall)
            config.cpus.append(cpu)
        loads.append(load())
        log(f"round {r + 1}/{rounds} done, load {loads[-1]}")
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)

    by_label = {c.label: c for c in configs}

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    rows = []
    for config in configs:
        wall, cpu = med(config.walls), med(config.cpus)
        added = paired = cpu_added = None
        if config.baseline and wall is not None:
            base = by_label[config.baseline]
            added = (wall - med(base.walls)) / n * 1e9
            paired = med([(w - b) / n * 1e9 for w, b in zip(config.walls, base.walls)
                          if w is not None])
            cpu_added = (cpu - med(base.cpus)) / n * 1e9
        rows.append((config, wall, cpu, added, paired, cpu_added))
    heaptrack_rows = [(c, a, p) for c, w, _, a, p, _ in rows if c.heaptrack and w is not None]

    print(f"\n{n:,} allocations (malloc, calloc, realloc; each block freed), {rounds} rounds, "
          f"medians; {cpu_model()}, {os.cpu_count()} cores, {platform.system()} "
          f"{platform.release()}; 1-minute load {loads[0]} at the start, "
          f"{min(loads[1:], key=float)} to {max(loads[1:], key=float)} after the rounds\n")
    headers = ["configuration", "wall time, s (lowest–highest)", "CPU time, s",
               "ns added per allocation (wall)", "paired (wall)", "ns added per allocation (CPU)"]
    headers += [f"{c.label.split(' (')[0]} added ÷ this (paired)" for c, _, _ in heaptrack_rows]
    print("| " + " | ".join(headers) + " |")
    print("|---|" + "---:|" * (len(headers) - 1))
    for config, wall, cpu, added, paired, cpu_added in rows:
        ok = [w for w in config.walls if w is not None]
        if not ok:
            print(f"| {config.label} | failed (run once, not again): {config.failures[-1]} |"
                  + " |" * (len(headers) - 2))
            continue
        cells = [config.label + (f" ({len(config.failures)} runs failed)"
                                 if config.failures else ""),
                 f"{wall:.3f} ({min(ok):.3f}–{max(ok):.3f})", f"{cpu:.3f}",
                 fmt(added), fmt(paired), fmt(cpu_added)]
        for _, h_added, h_paired in heaptrack_rows:
            if added and added > 0 and not config.heaptrack and h_added:
                cells.append(f"{h_added / added:.1f} ({h_paired / paired:.1f})"
                             if paired and paired > 0 else f"{h_added / added:.1f}")
            else:
                cells.append("")
        print("| " + " | ".join(cells) + " |")
    for config in configs:
        if config.failures:
            print(f"\n{config.label}: failed ({len(config.failures)} run(s); a heaptrack command "
                  f"that fails is not run again): {config.failures[-1]}")

if __name__ == "__main__":
    main()
