# ruff: noqa: E402, E501  (a measurement script kept with its figures)
"""Prototype (monkeypatch, not committed): ember_cpu.fusion.plan cached per (shape, operand shapes
and strides), views by reshape(-1) instead of as_strided where the operand is contiguous. Prints
W2 cpu-size process CPU time per step, as is and patched, alternating, and torch's."""

import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import numpy as np
import torch

import ember as em

torch.set_num_threads(1)
from benchmarks import w2_mlp
from ember_cpu import fusion

orig_plan = fusion.plan
_PLANS = {}


def fast_plan(shape, tensors):
    key = (shape, tuple([(t.shape, t.strides) for t in tensors]))
    hit = _PLANS.get(key)
    if hit is None:
        layout, cshape, arrays, args = orig_plan(shape, tensors)
        how = []
        for t, a in zip(tensors, arrays):
            f = fusion._fit(t, shape)
            flat = f.flags.c_contiguous and a.shape == (f.size,) and a.strides == (f.itemsize,)
            how.append(None if flat else (a.shape, a.strides))
        _PLANS[key] = (layout, cshape, tuple(how), tuple(args))
        return layout, cshape, arrays, args
    layout, cshape, how, args = hit
    arrays = [
        t.reshape(-1) if h is None else np.lib.stride_tricks.as_strided(fusion._fit(t, shape), shape=h[0], strides=h[1])
        for t, h in zip(tensors, how)
    ]
    return layout, cshape, arrays, list(args)


size = {"batch": 128, "hidden": 1024}
cases = {"ember": w2_mlp.ember(em.Device("cpu"), size), "torch": w2_mlp.torch(torch.device("cpu"), size)}


def t(case, n=10):
    ts = []
    for _ in range(n):
        s = time.process_time()
        case.step()
        case.sync()
        ts.append(time.process_time() - s)
    return ts


for c in cases.values():
    for _ in range(3):
        c.step()
        c.sync()
R = {"as is": [], "patched": [], "torch": []}
for _r in range(6):
    fusion.plan = orig_plan
    R["as is"] += t(cases["ember"])
    fusion.plan = fast_plan
    R["patched"] += t(cases["ember"])
    R["torch"] += t(cases["torch"])
q = lambda v: statistics.quantiles(v, n=4)[0] * 1e3
for k, v in R.items():
    print(f"{k:8s} p25 {q(v):.3f} med {statistics.median(v) * 1e3:.3f} ms")
