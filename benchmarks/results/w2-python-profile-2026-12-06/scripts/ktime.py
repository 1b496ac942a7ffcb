"""FUSION=0 W2: time spent inside backend kernels vs the whole step (the rest is Python)."""

import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
from collections import defaultdict

import ember as em
from benchmarks import w2_mlp

big = os.environ.get("SIZE", "big") == "big"
size = {"batch": 128, "hidden": 1024} if big else {"batch": 16, "hidden": 64}
dev = em.Device("cpu")
case = w2_mlp.ember(dev, size)
for _ in range(3):
    case.step()
    case.sync()
acc = defaultdict(float)
cnt = defaultdict(int)
impls = dev._impls


def wrap(name, f):
    def w(*a, **k):
        s = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[name] += time.perf_counter() - s
            cnt[name] += 1

    return w


for k in list(impls.keys()):
    if impls[k] is not None:
        impls[k] = wrap(k, impls[k])
N = 20
tot = []
for _ in range(N):
    s = time.perf_counter()
    case.step()
    case.sync()
    tot.append(time.perf_counter() - s)
ktot = sum(acc.values()) / N
print(f"step min {min(tot) * 1e3:.3f} median {statistics.median(tot) * 1e3:.3f} ms; kernels {ktot * 1e3:.3f} ms/step")
for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
    print(f"  {k:20s} {cnt[k] / N:5.1f}/step {v / N * 1e3:8.3f} ms")
