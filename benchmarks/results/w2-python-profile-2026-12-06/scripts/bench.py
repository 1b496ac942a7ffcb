"""Alternating ember/torch timing of W2 (cpu size and a small size) and W1, one process."""
import gc, statistics, sys, time, os
sys.path.insert(0, os.getcwd())
import numpy as np
import ember as em
import torch
from benchmarks import w2_mlp, w1_dispatch

def t(case, n):
    for _ in range(3):
        case.step(); case.sync()
    gc.collect()
    ts = []
    for _ in range(n):
        s = time.perf_counter(); out = case.step(); case.sync(); ts.append(time.perf_counter() - s)
    return statistics.median(ts)

dev = em.Device("cpu")
rounds = int(os.environ.get("ROUNDS", "3"))
which = sys.argv[1:] or ["W2", "W2q", "W1"]
res = {}
for r in range(rounds):
    for w in which:
        if w == "W2":
            size, n, mod = {"batch": 128, "hidden": 1024}, 20, w2_mlp
        elif w == "W2q":
            size, n, mod = {"batch": 16, "hidden": 64}, 200, w2_mlp
        else:
            size, n, mod = {"n": 64, "ops": 1000}, 30, w1_dispatch
        e = t(mod.ember(dev, size), n)
        th = t(mod.torch(torch.device("cpu"), size), n)
        res.setdefault(w, []).append((e, th))
for w, v in res.items():
    print(w, " ".join(f"{e*1e3:.3f}/{th*1e3:.3f}={e/th:.2f}" for e, th in v), "best ratio %.2f" % min(e/th for e, th in v), "min e %.3f min t %.3f" % (min(e for e,_ in v)*1e3, min(t for _,t in v)*1e3))
