#!/usr/bin/env python3
"""libmemprof_preload.so beside heaptrack on the same C workload, in one run: a Markdown table.

    python3 scripts/preload-overhead.py            # 2,000,000 allocations, 7 rounds
    python3 scripts/preload-overhead.py --quick    # 200,000 allocations, 3 rounds
    python3 scripts/preload-overhead.py --lib /path/to/libmemprof_preload.so -n 4000000 --rounds 9
    python3 scripts/preload-overhead.py --real           # real programs (below)
    python3 scripts/preload-overhead.py --threads        # 8 threads, cross-thread frees
    python3 scripts/preload-overhead.py --trace-memory   # trace mode's resident set and cost

`--quick` cuts every mode's sizes (to a tenth; `--trace-memory`'s workload to a fifth) and its
rounds to 3; `--rounds` sets the rounds.

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

The other modes measure each run by `os.wait4`: wall time, and CPU time (user + system) and peak
resident set of the process and every descendant it waited for, so `heaptrack -r`'s script and
its zstd count. Each runs its configurations in interleaved rounds after one run of each that
is not counted (it fills the page cache); a configuration that fails (an exit code, an output
that is not the program's, no trace) is reported in the table and not run again, and a failing
run without a profiler stops the script.

- `--real`: real programs, each bare, under the library (default settings) and under
  `heaptrack -r -o FILE`: python3 (the interpreter itself, not a pyenv shim, with
  `PYTHONMALLOC=malloc`) building a list of 2.5 million strings, and building and dropping
  30,000 dicts of 64 lists; perl building and emptying a hash of 500,000 hashes;
  `find /usr -xdev` (to /dev/null); `git log -p -n 2000` on this repository's clone (its
  commits, up to 2,000); `sort` of a generated file of a million lines (`LC_ALL=C`); and
  `rg -n alloc /usr/include` (ripgrep: scripts/install-deps.sh installs it). Per program: CPU
  and wall time as × the bare run, and heaptrack's added CPU ÷ memprof's, from the medians;
  whether the targets are met: memprof's CPU at most 1.3× the bare run's, and at least 4 times
  less added CPU than `heaptrack -r`'s.
- `--threads`: `bench/c/preload_threads.c` (`-n` operations, default 4,000,000: an allocation of
  16 B to 4 KiB and its free, over 8 threads, most blocks handed through a lock-free ring to the
  next thread, which frees them) bare, under the library and under `heaptrack -r`: ns added per
  operation, wall and CPU, and heaptrack's added ÷ memprof's (target: at least 5).
- `--trace-memory`: the C workload (`-n`, default 500,000 allocations) and `rg -n alloc
  /usr/include`, bare, under the library, and under the library with `MEMPROF_TRACE=FILE`
  (checked to be written): peak resident set (`ru_maxrss`), trace mode's beyond the live
  table's (target: at most 8 MB), and trace mode's added CPU ÷ the library's (both record the
  same events, so this is the ratio per event; target: at most 1.5).
"""

import argparse
import os
import platform
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "bench" / "c" / "preload_workload.c"
THREADS_SOURCE = ROOT / "bench" / "c" / "preload_threads.c"


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


def machine(loads):
    """The date, the machine and its load, for a table's heading: `loads` is the load before
    the rounds, then after each."""
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {cpu_model()}, "
            f"{os.cpu_count()} cores, {platform.system()} {platform.release()}; 1-minute load "
            f"{loads[0]} at the start, {min(loads[1:], key=float)} to "
            f"{max(loads[1:], key=float)} after the rounds")


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


# --real, --threads and --trace-memory: each run's own resource usage (os.wait4), every failure
# reported in the table.


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MEMPROF_") and k != "LD_PRELOAD"}
    env.update(extra or {})
    return env


def clear(directory):
    for leftover in Path(directory).iterdir():
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink()


class Measured:
    """One run: wall time; CPU time, user + system, of the process and every descendant it
    waited for (what `os.wait4` gives, so heaptrack's zstd and its script count); peak resident
    set of the largest of them (KiB); the exit code; the start of the output and the end of the
    errors."""

    def __init__(self, wall, usage, code, out, out_size, err):
        self.wall = wall
        self.cpu = usage.ru_utime + usage.ru_stime
        self.maxrss = usage.ru_maxrss
        self.code = code
        self.out = out
        self.out_size = out_size
        self.err = err
        self.trace_size = None


def measure(command, env, tmpdir, to_devnull=False, heaptrack=False, timeout=1800):
    tmp = Path(tmpdir)
    out_path = Path(os.devnull) if to_devnull else tmp / "stdout"
    with open(out_path, "wb") as out, open(tmp / "stderr", "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=err, start_new_session=True,
                                preexec_fn=limit_memory if heaptrack else None)

        def kill():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - start
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    head, size = "", 0
    if not to_devnull:
        size = out_path.stat().st_size
        with open(out_path, "rb") as f:
            head = f.read(1 << 18).decode(errors="replace")
    errors = (tmp / "stderr").read_bytes()[-2000:].decode(errors="replace")
    return Measured(wall, usage, code, head, size, errors)


class Series:
    """One configuration of one program, run once per round. `command` and `env`'s values may
    hold `{tmp}`, the run's scratch directory, emptied after each run. `check(run, tmpdir)`
    returns what is wrong with a run that exited with one of `codes`, or None."""

    def __init__(self, label, command, env=None, heaptrack=False, check=None, codes=(0,),
                 to_devnull=False, fatal=False):
        self.label = label
        self.command = command
        self.env = env or {}
        self.heaptrack = heaptrack
        self.check = check
        self.codes = codes
        self.to_devnull = to_devnull
        self.fatal = fatal
        self.runs = []  # Measured, or None for a failed run or one not made
        self.failures = []

    def run(self, tmpdir):
        if self.failures:
            # A configuration that failed once is not run again (heaptrack's failures can take
            # minutes and gigabytes); its failure is in the table.
            self.runs.append(None)
            return
        command = [a.replace("{tmp}", tmpdir) for a in self.command]
        env = clean_env({k: v.replace("{tmp}", tmpdir) for k, v in self.env.items()})
        run = measure(command, env, tmpdir, self.to_devnull, self.heaptrack)
        failed = None
        if run.code not in self.codes:
            tail = run.err.strip().splitlines()[-4:]
            failed = f"exit {run.code}: {tail}"
        elif self.check:
            failed = self.check(run, tmpdir)
        clear(tmpdir)
        if failed:
            if self.fatal:
                sys.exit(f"{' '.join(command)}: {failed}")
            log(f"{self.label} failed: {failed}")
            self.failures.append(failed)
            self.runs.append(None)
        else:
            self.runs.append(run)

    def values(self, field):
        return [getattr(r, field) if r else None for r in self.runs]

    def med(self, field):
        values = [v for v in self.values(field) if v is not None]
        return statistics.median(values) if values else None

    def failure(self):
        return f"failed (once; not run again): {self.failures[-1]}" if self.failures else None


def paired(series, base, field, combine):
    """The median over the rounds of combine(this round's value, the base's in that round)."""
    values = [combine(a, b) for a, b in zip(series.values(field), base.values(field))
              if a is not None and b is not None]
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def rounds_of(all_series, rounds, tmpdir):
    """Each series once per round, in turn, after one run of each that is not counted (it
    brings the programs and their files into the page cache)."""
    for series in all_series:
        series.run(tmpdir)
        series.runs.pop()
    loads = [load()]
    log(f"{rounds} rounds of {len(all_series)} runs; load {loads[0]}")
    for r in range(rounds):
        for series in all_series:
            series.run(tmpdir)
        loads.append(load())
        log(f"round {r + 1}/{rounds} done, load {loads[-1]}")
    return loads


def ratio(a, b):
    return a / b if a is not None and b else None


def expect_output(text):
    def check(run, _tmpdir):
        if text not in run.out:
            return f"output without {text!r}: {run.out[:200]!r}"
        return None
    return check


def expect_size(least, text):
    def check(run, _tmpdir):
        if run.out_size < least or text not in run.out:
            return f"{run.out_size:,} bytes of output, {least:,} and {text!r} expected"
        return None
    return check


def heaptrack_command():
    heaptrack = shutil.which("heaptrack")
    if not heaptrack:
        sys.exit("heaptrack is needed (scripts/install-deps.sh installs it)")
    return [heaptrack, "-r", "-o", "{tmp}/ht"]


def first_line(command):
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=60)
        return done.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown"


PYTHON_DICTS = """t = 0
for i in range({n}):
    d = {{f"k{{j}}": [j, i] for j in range(64)}}
    t += len(d)
print(t)
"""
PERL_HASH = ('my $n = shift; my %h; $h{"k$_"} = {v => $_, s => "s$_"} for 1..$n; my $t = 0; '
             '$t += $_->{v} for values %h; delete $h{"k$_"} for 1..$n; print "$t\\n"')


def real_programs(quick, work):
    """(label, command, environment, check, exit codes, output to /dev/null) for --real."""
    scale = 10 if quick else 1
    python = sys.executable  # the interpreter itself: a pyenv shim is a script of its own
    n_list, n_dicts, n_perl = 2_500_000 // scale, 30_000 // scale, 500_000 // scale
    commits = 2000 // scale
    have = int(subprocess.run(["git", "-C", str(ROOT), "rev-list", "--count", "HEAD"],
                              stdout=subprocess.PIPE, text=True, check=True).stdout)
    sort_input = Path(work) / "sort-input.txt"
    rng = random.Random(1)
    words = ["alloc", "free", "heap", "stack", "frame", "trace", "block", "table", "thread"]
    with open(sort_input, "w") as f:
        for i in range(1_000_000 // scale):
            f.write(f"{rng.choice(words)}-{rng.getrandbits(48):x} {i} "
                    f"{rng.choice(words) * rng.randint(0, 4)}\n")
    sort_size = sort_input.stat().st_size
    find_dir = "/usr/share" if quick else "/usr"
    rg_dir = "/usr/include/linux" if quick else "/usr/include"
    pymalloc = {"PYTHONMALLOC": "malloc"}
    return [
        (f"python3, `[str(i) for i in range({n_list:_})]`",
         [python, "-c", f"x = [str(i) for i in range({n_list})]\nprint(len(x))"], pymalloc,
         expect_output(str(n_list)), (0,), False),
        (f"python3, {n_dicts:,} dicts of 64 lists built and dropped",
         [python, "-c", PYTHON_DICTS.format(n=n_dicts)], pymalloc,
         expect_output(str(n_dicts * 64)), (0,), False),
        (f"perl, a hash of {n_perl:,} hashes", ["perl", "-e", PERL_HASH, str(n_perl)], {},
         expect_output(str(n_perl * (n_perl + 1) // 2)), (0,), False),
        # find's exit code is 1 when a directory cannot be read (not as root).
        (f"`find {find_dir} -xdev` (to /dev/null)", ["find", find_dir, "-xdev"], {}, None,
         (0, 1), True),
        (f"`git log -p -n {commits}` ({min(commits, have)} commits of this repository)",
         ["git", "-C", str(ROOT), "log", "-p", f"-n{commits}"], {}, expect_output("commit "),
         (0,), False),
        (f"`sort` ({1_000_000 // scale:,} lines, {sort_size / 1e6:.0f} MB; `LC_ALL=C`)",
         ["sort", str(sort_input)], {"LC_ALL": "C"}, expect_size(sort_size, "alloc-"),
         (0,), False),
        (f"`rg -n alloc {rg_dir}`", ["rg", "-n", "alloc", rg_dir], {}, expect_output("alloc"),
         (0,), False),
    ]


def verdict(met):
    return "–" if met is None else ("met" if met else "**missed**")


def real_mode(args, lib, rounds):
    if not shutil.which("rg"):
        sys.exit("rg is needed (scripts/install-deps.sh installs the ripgrep package)")
    heaptrack = heaptrack_command()
    work = tempfile.mkdtemp(prefix="preload-overhead-")
    programs = []
    for label, command, env, check, codes, devnull in real_programs(args.quick, work):
        programs.append((label, [
            Series(f"{label}, bare", command, env, check=check, codes=codes,
                   to_devnull=devnull, fatal=True),
            Series(f"{label}, memprof", command, dict(env, LD_PRELOAD=str(lib)), check=check,
                   codes=codes, to_devnull=devnull),
            Series(f"{label}, heaptrack -r", heaptrack + command, env, heaptrack=True,
                   check=check, codes=codes, to_devnull=devnull),
        ]))
    run_dir = tempfile.mkdtemp(prefix="preload-overhead-run-")
    loads = rounds_of([s for _, group in programs for s in group], rounds, run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)

    versions = "; ".join(first_line(c) for c in (
        [sys.executable, "--version"], ["perl", "-e", "print qq(perl $^V)"],
        ["find", "--version"], ["git", "--version"], ["sort", "--version"], ["rg", "--version"],
        [heaptrack[0], "--version"]))
    print(f"\nReal programs, bare, under libmemprof_preload.so (default settings) and under "
          f"`heaptrack -r` (recording only), {rounds} rounds, medians (in brackets: the median "
          f"of each round's ratio to that round's bare run); {machine(loads)}. {versions}\n")
    headers = ["program", "bare: CPU, s", "bare: wall, s", "memprof: CPU ×", "memprof: wall ×",
               "`heaptrack -r`: CPU ×", "`heaptrack -r`: wall ×",
               "`heaptrack -r` added CPU ÷ memprof's", "memprof CPU ≤ 1.3×",
               "≥ 4× less added CPU than `heaptrack -r`"]
    print("| " + " | ".join(headers) + " |")
    print("|---|" + "---:|" * (len(headers) - 3) + "---|---|")
    met_cpu, met_ratio = [], []
    for label, (bare, memprof, ht) in programs:
        cells = [label, f"{bare.med('cpu'):.3f}", f"{bare.med('wall'):.3f}"]
        for series in (memprof, ht):
            if series.failure():
                cells += [series.failure(), ""]
                continue
            for field in ("cpu", "wall"):
                x = ratio(series.med(field), bare.med(field))
                p = paired(series, bare, field, ratio)
                cells.append(f"{x:.2f} ({p:.2f})")
        cpu_ok = ratios_ok = None
        if not memprof.failure():
            cpu_ok = ratio(memprof.med("cpu"), bare.med("cpu")) <= 1.3
        if memprof.failure() or ht.failure():
            cells.append("–")
        else:
            m_added = memprof.med("cpu") - bare.med("cpu")
            h_added = ht.med("cpu") - bare.med("cpu")
            if m_added <= 0:
                cells.append(f"memprof adds nothing measurable ({m_added * 1e3:+.0f} ms), "
                             f"heaptrack {h_added * 1e3:+.0f} ms")
                ratios_ok = h_added > 0
            else:
                cells.append(f"{h_added / m_added:.1f}")
                ratios_ok = h_added / m_added >= 4
        cells += [verdict(cpu_ok), verdict(ratios_ok)]
        met_cpu.append(cpu_ok)
        met_ratio.append(ratios_ok)
        print("| " + " | ".join(cells) + " |")
    def count(met):
        unmeasured = sum(1 for m in met if m is None)
        return (f"met on {sum(1 for m in met if m)} of {len(met)} programs"
                + (f" ({unmeasured} not measured: a run failed)" if unmeasured else ""))
    print(f"\nTargets: memprof's CPU at most 1.3× the bare run's: {count(met_cpu)}; at least 4× "
          f"less added CPU than `heaptrack -r`: {count(met_ratio)}.")
    report_failures(s for _, group in programs for s in group)


def report_failures(all_series):
    for series in all_series:
        if series.failures:
            print(f"\n{series.label}: failed ({len(series.failures)} run(s); a configuration "
                  f"that fails is not run again): {series.failures[-1]}")


def build_threads(cc, out_dir):
    exe = Path(out_dir) / "preload_threads"
    command = [cc, "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", str(exe),
               str(THREADS_SOURCE)]
    log(" ".join(command))
    if subprocess.run(command).returncode != 0:
        sys.exit("the threaded workload's build failed")
    return exe


def threads_checksum(n, threads=8):
    """What bench/c/preload_threads.c prints as its checksum: every block's stamp, summed."""
    total = 0
    for i in range(threads):
        share = n // threads + (i < n % threads)
        total += share * (i << 40) + share * (share - 1) // 2
    return total % (1 << 64)


def threads_mode(args, lib, rounds):
    heaptrack = heaptrack_command()
    n = args.n or (400_000 if args.quick else 4_000_000)
    work = tempfile.mkdtemp(prefix="preload-overhead-")
    exe = build_threads(args.cc, work)
    check = expect_output(f"{n} operations, ")
    checksum = expect_output(f"checksum {threads_checksum(n)}")

    def both(run, tmpdir):
        return check(run, tmpdir) or checksum(run, tmpdir)
    command = [str(exe), str(n)]
    bare = Series("no profiler", command, check=both, fatal=True)
    memprof = Series("memprof (default: DWARF, depth 5)", command, {"LD_PRELOAD": str(lib)},
                     check=both)
    ht = Series("`heaptrack -r` (recording only)", heaptrack + command, heaptrack=True,
                check=both)
    run_dir = tempfile.mkdtemp(prefix="preload-overhead-run-")
    loads = rounds_of([bare, memprof, ht], rounds, run_dir)
    across = [int(r.out.split(", ")[1].split()[0]) for r in memprof.runs + bare.runs if r]
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)

    print(f"\n`bench/c/preload_threads.c`: {n:,} operations (an allocation of 16 B to 4 KiB and "
          f"its free) over 8 threads, {min(across):,} to {max(across):,} blocks freed by "
          f"another thread; {rounds} rounds, medians; {machine(loads)}\n")
    headers = ["configuration", "wall time, s (lowest–highest)", "CPU time, s",
               "ns added per operation (wall)", "paired (wall)", "ns added per operation (CPU)",
               "paired (CPU)", "`heaptrack -r` added ÷ this: wall (CPU)"]
    print("| " + " | ".join(headers) + " |")
    print("|---|" + "---:|" * (len(headers) - 1))

    def added(series, field):
        if series.failure():
            return None, None
        a = (series.med(field) - bare.med(field)) / n * 1e9
        p = paired(series, bare, field, lambda x, y: (x - y) / n * 1e9)
        return a, p
    h_wall, h_cpu = added(ht, "wall")[0], added(ht, "cpu")[0]
    for series in (bare, memprof, ht):
        if series.failure():
            print(f"| {series.label} | {series.failure()} |" + " |" * (len(headers) - 2))
            continue
        walls = [w for w in series.values("wall") if w is not None]
        cells = [series.label, f"{series.med('wall'):.3f} ({min(walls):.3f}–{max(walls):.3f})",
                 f"{series.med('cpu'):.3f}"]
        if series is bare:
            cells += [""] * 5
        else:
            (aw, pw), (ac, pc) = added(series, "wall"), added(series, "cpu")
            cells += [fmt(aw), fmt(pw), fmt(ac), fmt(pc)]
            if series is memprof and h_wall is not None and aw > 0 and ac > 0:
                cells.append(f"{h_wall / aw:.1f} ({h_cpu / ac:.1f})")
            else:
                cells.append("")
        print("| " + " | ".join(cells) + " |")
    if memprof.failure() or ht.failure():
        print("\nTarget (at least 5× less added per operation than `heaptrack -r`): not measured, "
              "a configuration failed.")
    else:
        aw, ac = added(memprof, "wall")[0], added(memprof, "cpu")[0]
        print(f"\nTarget, at least 5× less added per operation than `heaptrack -r`: wall "
              f"{h_wall / aw:.1f}× ({verdict(h_wall / aw >= 5)}), CPU {h_cpu / ac:.1f}× "
              f"({verdict(h_cpu / ac >= 5)})." if aw > 0 and ac > 0 else
              "\nTarget: memprof adds nothing measurable.")
    report_failures((bare, memprof, ht))


def trace_written(run, tmpdir):
    traces = [p for p in Path(tmpdir).glob("trace-*.mptrace") if p.stat().st_size > 0]
    if not traces:
        return f"no trace written in {tmpdir}: {list(Path(tmpdir).iterdir())}"
    run.trace_size = sum(p.stat().st_size for p in traces)
    return None


def trace_memory_mode(args, lib, rounds):
    if not shutil.which("rg"):
        sys.exit("rg is needed (scripts/install-deps.sh installs the ripgrep package)")
    n = args.n or (100_000 if args.quick else 500_000)
    work = tempfile.mkdtemp(prefix="preload-overhead-")
    exe = build_workload(args.cc, work)["preload_workload"]
    rg_dir = "/usr/include/linux" if args.quick else "/usr/include"
    programs = [
        (f"`bench/c/preload_workload.c`, {n:,} allocations", [str(exe), str(n)],
         expect_output(f"{n} allocations")),
        (f"`rg -n alloc {rg_dir}`", ["rg", "-n", "alloc", rg_dir], expect_output("alloc")),
    ]
    groups = []
    for label, command, check in programs:
        def with_trace(run, tmpdir, check=check):
            return check(run, tmpdir) or trace_written(run, tmpdir)
        groups.append((label, [
            Series(f"{label}, bare", command, check=check, fatal=True),
            Series(f"{label}, memprof", command, {"LD_PRELOAD": str(lib)}, check=check),
            Series(f"{label}, memprof, trace mode", command,
                   {"LD_PRELOAD": str(lib), "MEMPROF_TRACE": "{tmp}/trace-%p.mptrace"},
                   check=with_trace),
        ]))
    run_dir = tempfile.mkdtemp(prefix="preload-overhead-run-")
    loads = rounds_of([s for _, group in groups for s in group], rounds, run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)

    print(f"\nTrace mode's resident memory and cost: peak resident set (`ru_maxrss`) bare, under "
          f"libmemprof_preload.so (the live table) and with `MEMPROF_TRACE=FILE` as well; "
          f"{rounds} rounds, medians; MB are 10^6 bytes; {machine(loads)}\n")
    headers = ["program", "peak RSS, MB: bare", "memprof", "trace mode",
               "trace mode − memprof, MB (target ≤ 8)", "trace, MB", "CPU, s: bare",
               "added: memprof", "added: trace mode",
               "trace mode's added CPU ÷ memprof's (paired) (target ≤ 1.5)"]
    print("| " + " | ".join(headers) + " |")
    print("|---|" + "---:|" * (len(headers) - 1))
    notes = []
    for label, (bare, memprof, trace) in groups:
        failed = memprof.failure() or trace.failure()
        if failed:
            print(f"| {label} | {failed} |" + " |" * (len(headers) - 2))
            continue
        mb = {s: s.med("maxrss") * 1024 / 1e6 for s in (bare, memprof, trace)}
        beyond = mb[trace] - mb[memprof]
        c_bare = bare.med("cpu")
        a_mem, a_trace = memprof.med("cpu") - c_bare, trace.med("cpu") - c_bare
        rel = a_trace / a_mem if a_mem > 0 else None
        p = paired(trace, bare, "cpu", lambda t, b: t - b)
        pm = paired(memprof, bare, "cpu", lambda m, b: m - b)
        rel_paired = p / pm if pm and pm > 0 else None
        cells = [label, f"{mb[bare]:.1f}", f"{mb[memprof]:.1f}", f"{mb[trace]:.1f}",
                 f"{beyond:.1f} ({verdict(beyond <= 8)})", f"{trace.med('trace_size') / 1e6:.1f}",
                 f"{c_bare:.3f}", f"{a_mem:.3f}", f"{a_trace:.3f}",
                 (f"{rel:.2f} ({rel_paired:.2f}) ({verdict(rel <= 1.5)})" if rel is not None
                  else f"– (memprof adds {a_mem * 1e3:+.0f} ms)")]
        print("| " + " | ".join(cells) + " |")
        if "preload_workload" in label:
            notes.append(f"On the C workload, per allocation (each has its free): memprof adds "
                         f"{a_mem / n * 1e9:,.0f} ns of CPU, trace mode {a_trace / n * 1e9:,.0f}.")
    print("\nBoth runs under the library record the same events, so the ratio of their added "
          "CPU is that of their added CPU per event. " + " ".join(notes))
    report_failures(s for _, group in groups for s in group)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--real", action="store_true",
                      help="real programs bare, under the library and under heaptrack -r")
    mode.add_argument("--threads", action="store_true",
                      help="bench/c/preload_threads.c: 8 threads, cross-thread frees")
    mode.add_argument("--trace-memory", action="store_true",
                      help="trace mode's peak resident set and cost beside the live table's")
    parser.add_argument("--quick", action="store_true",
                        help="a tenth of the sizes (200,000 allocations), 3 rounds")
    parser.add_argument("-n", type=int,
                        help="allocations per run (default 2,000,000; --threads: operations, "
                             "4,000,000; --trace-memory: 500,000)")
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
    if args.real or args.threads or args.trace_memory:
        if args.no_heaptrack or args.no_trace:
            sys.exit("--no-heaptrack and --no-trace apply to the C workload's table only")
        mode = real_mode if args.real else threads_mode if args.threads else trace_memory_mode
        mode(args, lib, rounds)
        return
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
          f"medians; {machine(loads)}\n")
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
