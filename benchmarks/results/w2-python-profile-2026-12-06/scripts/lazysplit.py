"""W2 cpu size: time per step in the lazy layer's realize (Python) beside run_fused, and in the hook's __call__."""
import sys, os, time, statistics
sys.path.insert(0, os.getcwd())
import ember as em
from ember.lazy import graph
from benchmarks import w2_mlp
dev = em.Device("cpu")
case = w2_mlp.ember(dev, {"batch": 128, "hidden": 1024})
for _ in range(3): case.step(); case.sync()
acc = {"realize": 0.0, "run_fused": 0.0, "hook": 0.0, "hook_n": 0}
orig_realize = graph.Lazy.realize
def realize(self, target):
    s = time.perf_counter(); orig_realize(self, target); acc["realize"] += time.perf_counter() - s
graph.Lazy.realize = realize
orig_call = graph.Lazy.__call__
depth = [0]
def call(self, *a):
    depth[0] += 1
    s = time.perf_counter()
    try: return orig_call(self, *a)
    finally:
        depth[0] -= 1
        if depth[0] == 0: acc["hook"] += time.perf_counter() - s; acc["hook_n"] += 1
graph.Lazy.__call__ = call
impls = dev._impls; rf = impls["run_fused"]
def run_fused(p, o, shape):
    s = time.perf_counter(); r = rf(p, o, shape=shape); acc["run_fused"] += time.perf_counter() - s; return r
impls["run_fused"] = run_fused
N = 30
for _ in range(N): case.step(); case.sync()
print(f"per step: realize {acc['realize']/N*1e6:.0f} us of which run_fused {acc['run_fused']/N*1e6:.0f} us -> lazy Python {(acc['realize']-acc['run_fused'])/N*1e6:.0f} us; hook calls {acc['hook_n']/N:.0f}/step, {acc['hook']/N*1e6:.0f} us (incl. realizes they trigger)")
