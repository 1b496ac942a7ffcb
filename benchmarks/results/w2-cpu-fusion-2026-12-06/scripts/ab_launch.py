# ruff: noqa: E402, E501  (a measurement script kept with its figures)
"""W2 cpu size, process CPU time per step: the baseline's FusedKernels.run (the fusion.py given as
argv[1], e.g. `git show 63ebe9a:plugins/cpu/src/ember_cpu/fusion.py > /tmp/fusion_old.py`) and
this tree's, alternating in one process, and torch's. Run with OMP_NUM_THREADS=1
EMBER_CPU_BLAS_THREADS=1 to see the Python overhead."""

import importlib.util
import os
import statistics
import sys
import time
import types

sys.path.insert(0, os.getcwd())
import torch

import ember as em
from benchmarks import w2_mlp
from ember_cpu import backend as cb

spec = importlib.util.spec_from_file_location("ember_cpu.fusion_old", sys.argv[1])
old = importlib.util.module_from_spec(spec)
spec.loader.exec_module(old)
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
size = {"batch": 128, "hidden": 1024}
E = w2_mlp.ember(em.Device("cpu"), size)
T = w2_mlp.torch(torch.device("cpu"), size)
new_run = cb.FUSED.run
old_run = types.MethodType(old.FusedKernels.run, cb.FUSED)


def t(case, n=10):
    out = []
    for _ in range(n):
        s = time.process_time()
        case.step()
        case.sync()
        out.append(time.process_time() - s)
    return out


for c in (E, T):
    for _ in range(3):
        c.step()
        c.sync()
R = {"before": [], "after": [], "torch": []}
for _ in range(6):
    cb.FUSED.run = old_run
    R["before"] += t(E)
    cb.FUSED.run = new_run
    R["after"] += t(E)
    R["torch"] += t(T)
q = lambda v: statistics.quantiles(v, n=4)[0] * 1e3
m = lambda v: statistics.median(v) * 1e3
for k, v in R.items():
    print(
        f"{k:7s} p25 {q(v):.3f} med {m(v):.3f} ms  ratio p25 {q(v) / q(R['torch']):.3f} med {m(v) / m(R['torch']):.3f}"
    )
