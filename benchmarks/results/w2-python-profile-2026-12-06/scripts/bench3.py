# ruff: noqa: E402, E501  (a measurement script kept with its figures)
"""W2 (and W2 small) ember vs torch by process CPU time per step (load-robust with 1 thread), alternating."""

import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch

import ember as em

torch.set_num_threads(1)
from benchmarks import w2_mlp


def times(case, n):
    ts = []
    for _ in range(n):
        s = time.process_time()
        case.step()
        case.sync()
        ts.append(time.process_time() - s)
    return ts


big = os.environ.get("SIZE", "big") == "big"
size = {"batch": 128, "hidden": 1024} if big else {"batch": 16, "hidden": 64}
n = 10 if big else 200
dev = em.Device("cpu")
cases = {"ember": w2_mlp.ember(dev, size), "torch": w2_mlp.torch(torch.device("cpu"), size)}
for c in cases.values():
    for _ in range(3):
        c.step()
        c.sync()
res = {k: [] for k in cases}
for _r in range(int(os.environ.get("ROUNDS", "6"))):
    for k, c in cases.items():
        gc.collect()
        res[k] += times(c, n)
e, t = res["ember"], res["torch"]
q = lambda v: statistics.quantiles(v, n=4)[0]
print(
    f"cpu-time/step ember min {min(e) * 1e3:.3f} p25 {q(e) * 1e3:.3f} med {statistics.median(e) * 1e3:.3f} | torch min {min(t) * 1e3:.3f} p25 {q(t) * 1e3:.3f} med {statistics.median(t) * 1e3:.3f} | ratio p25 {q(e) / q(t):.3f} med {statistics.median(e) / statistics.median(t):.3f}"
)
