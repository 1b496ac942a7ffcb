import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
from collections import defaultdict

import ember as em
from benchmarks import w2_mlp
from ember.dispatch import OPS

size = {"batch": 16, "hidden": 64}
dev = em.Device("cpu").autodiff()
x_np, y_np, p_np = w2_mlp.inputs(size)
x = em.tensor(x_np, device=dev)
y = em.tensor(y_np, device=dev)
p = {k: em.tensor(v, device=dev).requires_grad_() for k, v in p_np.items()}
acc = defaultdict(float)
cnt = defaultdict(int)


def wrap(name, f):
    def w(*a, **k):
        s = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[name] += time.perf_counter() - s
            cnt[name] += 1

    return w


for name, op in OPS.items():
    if op.vjp is not None:
        op.vjp = wrap(name, op.vjp)
N = 300
bt = []
for i in range(N + 10):
    if i == 10:
        acc.clear()
        cnt.clear()
    for t in p.values():
        t.grad = None
    h = em.relu(x @ p["w1"] + p["b1"])
    h = em.relu(h @ p["w2"] + p["b2"])
    loss = em.cross_entropy(h @ p["w3"] + p["b3"], y)
    s = time.perf_counter()
    loss.backward()
    bt.append(time.perf_counter() - s)
    with em.no_grad():
        for t in p.values():
            t.copy_(t - 0.01 * t.grad)
print("backward median", statistics.median(bt[10:]) * 1e6, "us; vjps total", sum(acc.values()) / N * 1e6)
for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
    print(f"  {k:16s} {cnt[k] / N:4.1f} {v / N * 1e6:7.1f} us")
