"""W2 full-size: ember (fusion on / off) and torch alternating, min & median of many steps."""
import gc, statistics, sys, time, os
sys.path.insert(0, os.getcwd())
import ember as em
import torch
from benchmarks import w2_mlp, w1_dispatch
from ember.device import set_defer

def times(case, n):
    ts = []
    for _ in range(n):
        s = time.perf_counter(); out = case.step(); case.sync(); ts.append(time.perf_counter() - s)
    return ts

big = os.environ.get("SIZE", "big") == "big"
size = {"batch": 128, "hidden": 1024} if big else {"batch": 16, "hidden": 64}
n = 10 if big else 100
dev = em.Device("cpu")
cases = {"ember": w2_mlp.ember(dev, size), "torch": w2_mlp.torch(torch.device("cpu"), size)}
if os.environ.get("NOFUSE"):
    dev2 = em.Device("cpu", 0)
for c in cases.values():
    for _ in range(3): c.step(); c.sync()
res = {k: [] for k in cases}
for r in range(int(os.environ.get("ROUNDS", "8"))):
    for k, c in cases.items():
        gc.collect()
        res[k] += times(c, n)
for k, v in res.items():
    print(f"{k}: min {min(v)*1e3:.3f} p25 {statistics.quantiles(v, n=4)[0]*1e3:.3f} median {statistics.median(v)*1e3:.3f} ms")
e, t = res["ember"], res["torch"]
print(f"ratio min {min(e)/min(t):.3f} p25 {statistics.quantiles(e, n=4)[0]/statistics.quantiles(t, n=4)[0]:.3f} median {statistics.median(e)/statistics.median(t):.3f}")
