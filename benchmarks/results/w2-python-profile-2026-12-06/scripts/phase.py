import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())

import ember as em
from benchmarks import w2_mlp

big = os.environ.get("SIZE") == "big"
size = {"batch": 128, "hidden": 1024} if big else {"batch": 16, "hidden": 64}
dev = em.Device("cpu").autodiff()
x_np, y_np, p_np = w2_mlp.inputs(size)
x = em.tensor(x_np, device=dev)
y = em.tensor(y_np, device=dev)
p = {k: em.tensor(v, device=dev).requires_grad_() for k, v in p_np.items()}
T = {k: [] for k in ("zero", "l1", "l2", "ce", "bwd", "upd", "sync")}
for i in range(300 if not big else 40):
    c = time.perf_counter
    t0 = c()
    for t in p.values():
        t.grad = None
    t1 = c()
    h = em.relu(x @ p["w1"] + p["b1"])
    t2 = c()
    h = em.relu(h @ p["w2"] + p["b2"])
    t3 = c()
    loss = em.cross_entropy(h @ p["w3"] + p["b3"], y)
    t4 = c()
    loss.backward()
    t5 = c()
    with em.no_grad():
        for t in p.values():
            t.copy_(t - 0.01 * t.grad)
    t6 = c()
    dev.synchronize()
    t7 = c()
    if i >= 10:
        for k, a, b in zip(T, (t0, t1, t2, t3, t4, t5, t6), (t1, t2, t3, t4, t5, t6, t7)):
            T[k].append(b - a)
tot = 0
for k, v in T.items():
    m = statistics.median(v) * 1e6
    tot += m
    print(f"{k:5s} {m:8.1f} us")
print("total", round(tot, 1))
