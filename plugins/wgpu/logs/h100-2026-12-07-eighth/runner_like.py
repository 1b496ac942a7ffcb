"""Device probe (call6; run as .ci/runner_like.py SIZES STEPS): the runner's W3 ember row step by step
(the check-size case, three warm-ups, the pool probe, then timed steps with the pool's counters)."""

import gc
import sys
import time

import ember as em
from benchmarks import runner, w3_cnn
from benchmarks.peers import ember_impl

dev = em.Device("wgpu:0")
impl = ember_impl(dev)
chk = runner._check_result(impl, w3_cnn)
case = impl.build(w3_cnn, dict(w3_cnn.SIZES[sys.argv[1]]))
rt = dev.backend.rt
pool = rt.pool
for _ in range(3):
    out = case.step()
    case.sync()
    del out
gc.collect()
runner._pool_counts(dev)
for i in range(int(sys.argv[2])):
    a, m, pl, d, fr = pool.misses, pool.plan_misses, pool.planned, pool.plan_drops, pool.frees
    sub, rej, ast = rt.submits, pool.plan_rejoins, pool._astray
    t = time.perf_counter()
    c = time.thread_time()
    out = case.step()
    case.sync()
    w, c = time.perf_counter() - t, time.thread_time() - c
    del out
    plan = pool._plan
    print(
        f"{i}: {w * 1e3:.2f} ms wall {c * 1e3:.2f} CPU; allocs {pool.misses - a} frees {pool.frees - fr} "
        f"plan misses {pool.plan_misses - m} planned {pool.planned - pl} drops {pool.plan_drops - d} "
        f"rejoins {pool.plan_rejoins - rej}"
        f" astray {ast}->{pool._astray} submits {rt.submits - sub} period {plan.period if plan else None} "
        f"extent {plan.extent if plan else None}"
    )
