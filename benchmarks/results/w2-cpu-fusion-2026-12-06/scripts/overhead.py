"""FusedKernels.run for `p - lr * g` over (1024, 1024) float32: the baseline's run (the fusion.py
given as argv[1]), this tree's, and the bare kernel call (np.empty, the kernel, the reshape):
what run adds around the kernel, in us."""

import importlib.util
import statistics
import sys
import time
import types

import numpy as np

from ember.lazy.program import FusedProgram
from ember_cpu.backend import FUSED

spec = importlib.util.spec_from_file_location("ember_cpu.fusion_old", sys.argv[1])
old = importlib.util.module_from_spec(spec)
spec.loader.exec_module(old)
inputs = (("float32", "tensor"), ("float32", "tensor"), ("float32", "scalar"))
prog = FusedProgram(inputs, (("mul", "float32", (1, 2)), ("sub", "float32", (0, 3))), (4,))
shape = (1024, 1024)
p = np.random.rand(*shape).astype(np.float32)
g = np.random.rand(*shape).astype(np.float32)
new_run = FUSED.run
old_run = types.MethodType(old.FusedKernels.run, FUSED)
fn = FUSED.kernel(prog, old.Layout(("c", "c"), 0))
n = p.size


def bare():
    o = np.empty(n, np.float32)
    fn(n, p.reshape(-1), g.reshape(-1), np.float32(0.01), o)
    return o.reshape(shape)


cases = {
    "old": lambda: old_run(prog, [p, g, 0.01], shape),
    "new": lambda: new_run(prog, [p, g, 0.01], shape),
    "bare": bare,
}
for f in cases.values():
    f()
    f()
R = {k: [] for k in cases}
for _ in range(200):
    for k, f in cases.items():
        t = time.perf_counter()
        x = f()
        R[k].append(time.perf_counter() - t)
        del x
for k, v in R.items():
    print(f"{k:5s} p25 {statistics.quantiles(v, n=4)[0] * 1e6:.1f} med {statistics.median(v) * 1e6:.1f} us")
