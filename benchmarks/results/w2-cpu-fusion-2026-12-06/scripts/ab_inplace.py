# ruff: noqa: E402, E501  (a measurement script kept with its figures)
"""W2 cpu size, process CPU time per step: the lazy layer handing run_fused a dead operand as the
target's outs (Backend.fusion_outs; CpuBackend.run_fused forwarding outs to FusedKernels.run,
patched in here as its file is not this branch's) against fresh outputs, alternating in one
process, and torch. Checks the losses match a run without it."""

import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch

import ember as em
from benchmarks import w2_mlp
from ember.device import RUN_FUSED
from ember_cpu.backend import FUSED

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
size = {"batch": 128, "hidden": 1024}
dev = em.Device("cpu")
E = w2_mlp.ember(dev, size)
R0 = w2_mlp.ember(dev, size)
T = w2_mlp.torch(torch.device("cpu"), size)
hook = dev._defer


def run_fused(program, operands, *, shape, outs=None):
    return FUSED.run(program, operands, tuple(shape), outs)


E.step()
dev._state.impls[RUN_FUSED] = run_fused
hook.donate = True
lazy_on = [float(E.step().numpy()) for _ in range(3)]
hook.donate = False
lazy_off = [float(R0.step().numpy()) for _ in range(4)][1:]
print("losses in place", lazy_on, "fresh", lazy_off, "in place kernels", FUSED.counts["in_place"])


def t(case, n=10):
    out = []
    for _ in range(n):
        s = time.process_time()
        case.step()
        case.sync()
        out.append(time.process_time() - s)
    return out


for _ in range(3):
    T.step()
R = {"fresh": [], "in place": [], "torch": []}
for _ in range(6):
    hook.donate = False
    R["fresh"] += t(E)
    hook.donate = True
    R["in place"] += t(E)
    R["torch"] += t(T)
q = lambda v: statistics.quantiles(v, n=4)[0] * 1e3
m = lambda v: statistics.median(v) * 1e3
for k, v in R.items():
    print(
        f"{k:8s} p25 {q(v):.3f} med {m(v):.3f} ms  ratio p25 {q(v) / q(R['torch']):.3f} med {m(v) / m(R['torch']):.3f}"
    )
print("in place kernels", FUSED.counts["in_place"])
