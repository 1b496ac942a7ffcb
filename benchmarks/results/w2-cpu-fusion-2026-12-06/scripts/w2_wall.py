# ruff: noqa: E402, E501  (a measurement script kept with its figures)
"""W2 cpu size: wall ms per step of ember and torch in one process (p25, median), 5 rounds of 10
steps alternating. Run once per setting, alternating processes: e.g. EMBER_CPU_NUMBA_PARALLEL=0
and 1 (NUMBA_THREADING_LAYER=workqueue or the default omp); NOTORCH=1 times ember alone."""

import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch

import ember as em
from benchmarks import w2_mlp

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
size = {"batch": 128, "hidden": 1024}
E = w2_mlp.ember(em.Device("cpu"), size)
T = E if os.environ.get("NOTORCH") else w2_mlp.torch(torch.device("cpu"), size)


def t(case, n=10):
    out = []
    for _ in range(n):
        s = time.perf_counter()
        case.step()
        case.sync()
        out.append(time.perf_counter() - s)
    return out


for c in (E, T):
    for _ in range(3):
        c.step()
        c.sync()
R = {"ember": [], "torch": []}
for _ in range(5):
    R["ember"] += t(E)
    R["torch"] += t(T)
q = lambda v: statistics.quantiles(v, n=4)[0] * 1e3
m = lambda v: statistics.median(v) * 1e3
e, o = R["ember"], R["torch"]
print(
    f"{os.environ.get('TAG', '')} ember p25 {q(e):.2f} med {m(e):.2f} | torch p25 {q(o):.2f} med {m(o):.2f}"
    f" | ratio p25 {q(e) / q(o):.3f} med {m(e) / m(o):.3f}"
)
