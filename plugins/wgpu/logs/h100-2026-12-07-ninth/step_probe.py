"""Device probe: a workload's ember step on DEVICE under STRATEGY, step by step (wall, main-thread CPU,
the pool's and the OpenCL view ledger's counters), after WARM synchronized warm-ups.
Usage: step_probe.py W3|W4 DEVICE STRATEGY SIZES STEPS [WARM]"""

import sys
import time

import ember as em
from benchmarks import w3_cnn, w4_transformer

mod = {"W3": w3_cnn, "W4": w4_transformer}[sys.argv[1]]
device, strategy, sizes, steps = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
warm = int(sys.argv[6]) if len(sys.argv) > 6 else 0
dev = em.Device(device, memory=strategy)
case = mod.ember(dev, dict(mod.SIZES[sizes]))
rt = dev.backend.rt
pool = dev.memory.pools()[0]
views = getattr(rt, "views", None)
for _ in range(warm):
    out = case.step()
    case.sync()
    del out
for i in range(steps):
    vm = views.made if views else 0
    a, pl, fr, pm = pool.misses, getattr(pool, "planned", 0), pool.frees, getattr(pool, "plan_misses", 0)
    t, c = time.perf_counter(), time.thread_time()
    out = case.step()
    case.sync()
    w, c = time.perf_counter() - t, time.thread_time() - c
    del out
    vmade = (views.made - vm) if views else -1
    print(
        f"{i}: t={time.time():.3f} {w * 1e3:.2f} ms wall {c * 1e3:.2f} CPU; views {vmade} allocs {pool.misses - a} "
        f"frees {pool.frees - fr} planned {getattr(pool, 'planned', 0) - pl} plan misses "
        f"{getattr(pool, 'plan_misses', 0) - pm} drops {getattr(pool, 'plan_drops', 0)}",
        flush=True,
    )
