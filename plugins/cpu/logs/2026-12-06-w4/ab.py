"""alternate ember and torch W4 steps in one process; median ms each, several rounds."""
import sys, time, statistics, os
sys.path.insert(0, os.getcwd())
import ember as em
import torch
from benchmarks import w4_transformer as w4
from benchmarks.peers import torch_sync
size = w4.SIZES["cpu"]
dev = em.Device("cpu")
e = w4.ember(dev, size)
t = w4.torch(torch.device("cpu"), size)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
n = int(sys.argv[2]) if len(sys.argv) > 2 else 6
for c in (e, t):
    for _ in range(3):
        c.step(); c.sync()
for r in range(rounds):
    res = {}
    for name, c in (("ember", e), ("torch", t)):
        ts = []; cs = []
        for _ in range(n):
            s = time.perf_counter(); p = time.process_time(); o = c.step(); c.sync(); ts.append(time.perf_counter() - s); cs.append(time.process_time() - p); del o
        res[name] = statistics.median(ts) * 1e3
        res[name + "_cpu"] = statistics.median(cs) * 1e3
    print(f"round {r}: ember {res['ember']:.1f} ms  torch {res['torch']:.1f} ms  ratio {res['ember']/res['torch']:.2f} | cpu ember {res['ember_cpu']:.1f} torch {res['torch_cpu']:.1f} ratio {res['ember_cpu']/res['torch_cpu']:.2f}  load {os.getloadavg()[0]:.1f}", flush=True)
