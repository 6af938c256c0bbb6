# A Python program driven by its stdin, for memprof attach: "leak" leaks 37 bytes objects of 1500
# bytes (each one block of the C library's malloc, pymalloc or not) made in leak_site and prints
# "leaked N"; "alive" prints "alive"; the end of stdin ends it. Two threads build and drop lists
# of strings all the time.
import sys
import threading
import time

kept = []
stop = False


def leak_site():
    return [bytes(1500) for _ in range(37)]


def churn():
    while not stop:
        words = [str(i) * 20 for i in range(64)]
        del words
        time.sleep(0.0003)


threads = [threading.Thread(target=churn) for _ in range(2)]
for t in threads:
    t.start()
print("ready", flush=True)
leaks = 0
for line in sys.stdin:
    line = line.strip()
    if line == "leak":
        kept.extend(leak_site())
        leaks += 1
        print(f"leaked {leaks}", flush=True)
    elif line == "alive":
        print("alive", flush=True)
stop = True
for t in threads:
    t.join()
print("bye", flush=True)
