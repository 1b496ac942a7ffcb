# ruff: noqa: E402, E501  (a measurement script kept with its figures)
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch
import torch.nn.functional as F

from benchmarks import w2_mlp

torch.set_num_threads(1)
size = {"batch": 16, "hidden": 64}
case = w2_mlp.torch(torch.device("cpu"), size)
x_np, y_np, p_np = w2_mlp.inputs(size)
import numpy as np

x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
p = {k: torch.from_numpy(np.ascontiguousarray(v.T)).requires_grad_() for k, v in p_np.items()}
opt = torch.optim.SGD(p.values(), lr=0.01)
T = {k: [] for k in ("zero", "l1", "l2", "ce", "bwd", "upd")}
for i in range(300):
    c = time.perf_counter
    t0 = c()
    opt.zero_grad(set_to_none=True)
    t1 = c()
    h = F.relu(F.linear(x, p["w1"], p["b1"]))
    t2 = c()
    h = F.relu(F.linear(h, p["w2"], p["b2"]))
    t3 = c()
    loss = F.cross_entropy(F.linear(h, p["w3"], p["b3"]), y)
    t4 = c()
    loss.backward()
    t5 = c()
    opt.step()
    t6 = c()
    if i >= 10:
        for k, a, b in zip(T, (t0, t1, t2, t3, t4, t5), (t1, t2, t3, t4, t5, t6)):
            T[k].append(b - a)
tot = 0
for k, v in T.items():
    m = statistics.median(v) * 1e6
    tot += m
    print(f"torch {k:5s} {m:8.1f} us")
print("total", round(tot, 1))
