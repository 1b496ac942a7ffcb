"""in-process A/B: ember with attention workers, ember without (blocks serial), torch; rounds interleaved."""
import sys, time, statistics, os
sys.path.insert(0, os.getcwd())
import numpy as np, ember as em, torch
from ember_cpu import attention as at
from benchmarks import w4_transformer as w4
size = w4.SIZES["cpu"]
e = w4.ember(em.Device("cpu"), size)
t = w4.torch(torch.device("cpu"), size)
real = at._WORKERS.threads
def on(): at._WORKERS.threads = real
def off(): at._WORKERS.threads = lambda: 1
cfg = [("workers", e, on), ("serial", e, off), ("torch", t, on)]
for _, c, s in cfg:
    s()
    for _ in range(3): c.step(); c.sync()
res = {n: [] for n, _, _ in cfg}
rounds, n = int(sys.argv[1]), int(sys.argv[2])
for r in range(rounds):
    for name, c, s in cfg:
        s()
        for _ in range(n):
            a = time.perf_counter(); o = c.step(); c.sync(); res[name].append(time.perf_counter() - a); del o
for name in res:
    v = np.array(res[name]) * 1e3
    print(f"{name:8s} min {v.min():6.1f}  p10 {np.percentile(v, 10):6.1f}  median {np.median(v):6.1f} ms")
print("load", os.getloadavg())
