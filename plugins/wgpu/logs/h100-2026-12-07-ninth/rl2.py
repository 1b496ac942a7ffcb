"""Device probe: W3 on wgpu:0 at GPU size as the runner runs it (MODE=check: the check-size case first)
or alone (MODE=alone); 3 warm-ups, 0.5 s of heat, then STEPS steps: wall, main-thread CPU, bind groups
made, pipelines made, dispatches and submits in each."""

import sys
import time

import ember as em
from benchmarks import runner, w3_cnn
from benchmarks.harness import heat
from benchmarks.peers import ember_impl

mode, steps = sys.argv[1], int(sys.argv[2])
dev = em.Device("wgpu:0")
impl = ember_impl(dev)
if mode == "check":
    runner._check_result(impl, w3_cnn)
case = impl.build(w3_cnn, dict(w3_cnn.SIZES[sys.argv[3] if len(sys.argv) > 3 else "gpu"]))
rt = dev.backend.rt
made = {"bg": 0, "pipe": 0}
bind_group, pipeline = rt._bind_group, rt.pipeline


def counted_bg(*a, **k):
    made["bg"] += 1
    return bind_group(*a, **k)


def counted_pipe(*a, **k):
    before = len(getattr(rt, "_pipelines", {}) or {})
    out = pipeline(*a, **k)
    made["pipe"] += len(getattr(rt, "_pipelines", {}) or {}) - before
    return out


rt._bind_group, rt.pipeline = counted_bg, counted_pipe
for _ in range(3):
    out = case.step()
    case.sync()
    del out
print("heat steps", heat(case, 0.5), "bind groups cached", len(rt._bg_cache), flush=True)
for i in range(steps):
    bg, sub = made["bg"], rt.submits
    t, c = time.perf_counter(), time.thread_time()
    out = case.step()
    case.sync()
    w, c = time.perf_counter() - t, time.thread_time() - c
    del out
    print(
        f"{i}: t={time.time():.3f} {w * 1e3:.2f} ms wall {c * 1e3:.2f} CPU; bind groups {made['bg'] - bg} "
        f"(cached {len(rt._bg_cache)}) submits {rt.submits - sub}",
        flush=True,
    )
