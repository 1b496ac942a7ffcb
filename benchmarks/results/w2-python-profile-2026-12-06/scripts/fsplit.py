# ruff: noqa: E402, E501  (a measurement script kept with its figures)
"""W2 cpu size: per fused region, the time in ember_cpu's run_fused around the numba call vs the call."""

import os
import sys
import time

sys.path.insert(0, os.getcwd())
from collections import defaultdict

import ember as em
from benchmarks import w2_mlp
from ember_cpu import fusion

dev = em.Device("cpu")
case = w2_mlp.ember(dev, {"batch": 128, "hidden": 1024})
for _ in range(3):
    case.step()
    case.sync()
inner = defaultdict(float)
outer = defaultdict(float)
n = defaultdict(int)
orig_kernel = fusion.FusedKernels.kernel


def kernel(self, prog, layout):
    fn = orig_kernel(self, prog, layout)
    key = tuple(i[0] for i in prog.instructions)

    def timed(*a):
        s = time.perf_counter()
        r = fn(*a)
        inner[key] += time.perf_counter() - s
        return r

    return timed


fusion.FusedKernels.kernel = kernel
impls = dev._impls
rf = impls["run_fused"]


def run_fused(prog, ops, shape):
    s = time.perf_counter()
    r = rf(prog, ops, shape=shape)
    key = tuple(i[0] for i in prog.instructions)
    outer[key] += time.perf_counter() - s
    n[key] += 1
    return r


impls["run_fused"] = run_fused
N = 20
for _ in range(N):
    case.step()
    case.sync()
for k in outer:
    print(
        k,
        f"run_fused {outer[k] / n[k] * 1e6:.0f} us, numba call {inner[k] / n[k] * 1e6:.0f} us, around it {(outer[k] - inner[k]) / n[k] * 1e6:.0f} us, {n[k] / N:.0f}/step",
    )
