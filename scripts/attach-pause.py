#!/usr/bin/env python3
"""The pause `memprof attach` costs a process, seen from inside it (docs/overhead.md).

Builds bench/c/attach_pause.c (50 threads allocating, 1 GiB of heap, a thread stamping the clock),
starts it, reads the longest gap between two stamps over a second without memprof, then over an
attach (`memprof attach --duration 2`) and its detach, ROUNDS times.

    python3 scripts/attach-pause.py [--memprof target/release/memprof] [--rounds 5]
"""
import argparse
import os
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--memprof", default=os.path.join(ROOT, "target/release/memprof"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="attach-pause-")
    program = os.path.join(work, "attach_pause")
    subprocess.run(["cc", "-O2", "-pthread", "-o", program,
                    os.path.join(ROOT, "bench/c/attach_pause.c")], check=True)
    target = subprocess.Popen([program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = int(target.stdout.readline().split()[1])

    def longest():
        target.stdin.write("\n")
        target.stdin.flush()
        return int(target.stdout.readline().split()[2])

    longest()
    time.sleep(1)
    print(f"without memprof, 1 s: longest gap {longest()} us")
    for round in range(args.rounds):
        longest()
        result = subprocess.run([args.memprof, "attach", "--duration", "2", "--trace",
                                 os.path.join(work, "t-%p.mptrace"), str(pid)],
                                capture_output=True, text=True)
        said = [l for l in result.stderr.splitlines() if "stopped" in l]
        gap = longest()
        print(f"attach + 2 s + detach: longest gap {gap} us; the command: {' / '.join(said)}")
    target.stdin.close()
    target.wait()


main()
