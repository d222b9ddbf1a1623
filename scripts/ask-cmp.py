#!/usr/bin/env python3
"""Alternate commands, N runs each; p50 of wall and user+sys CPU. usage: cmp.py N name=cmd ..."""
import os, sys, time, shlex, statistics, subprocess
n = int(sys.argv[1]); cmds = [a.split('=', 1) for a in sys.argv[2:]]
res = {k: ([], []) for k, _ in cmds}
for k, c in cmds:  # warmup
    for _ in range(3): subprocess.run(shlex.split(c), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for i in range(n):
    for k, c in cmds:
        t = time.perf_counter()
        p = subprocess.Popen(shlex.split(c), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, st, ru = os.wait4(p.pid, 0)
        w = time.perf_counter() - t
        assert st == 0, (k, st)
        res[k][0].append(w * 1e3); res[k][1].append((ru.ru_utime + ru.ru_stime) * 1e3)
print(f"load {os.getloadavg()[0]:.2f}")
for k, (w, c) in res.items():
    print(f"{k:30s} wall p50 {statistics.median(w):6.1f} ms  cpu p50 {statistics.median(c):6.1f} ms  (n={n})")
