import gc, statistics, sys, time, os
sys.path.insert(0, os.getcwd())
import ember as em
from benchmarks import w2_mlp
from collections import defaultdict
size = {"batch": 128, "hidden": 1024}
dev = em.Device("cpu")
case = w2_mlp.ember(dev, size)
for _ in range(3): case.step(); case.sync()
acc = defaultdict(list)
impls = dev._impls
f = impls["run_fused"]
def w(program, operands, shape):
    s = time.perf_counter()
    r = f(program, operands, shape=shape)
    acc[(tuple(i[0] for i in program.instructions), shape)].append(time.perf_counter() - s)
    return r
impls["run_fused"] = w
for _ in range(20): case.step(); case.sync()
for k, v in acc.items():
    print(k, "min %.3f med %.3f ms" % (min(v)*1e3, statistics.median(v)*1e3), len(v)/20)
