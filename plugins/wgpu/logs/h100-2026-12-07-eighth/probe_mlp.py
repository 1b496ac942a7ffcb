"""Device probe (call2, call4; run as .ci/probe_mlp.py): the memory conformance MLP on wgpu:0, per
step: driver allocations, their sizes (with where the first ones came from) and the plan's counters."""

import traceback

import ember as em
from ember_conformance.test_memory import _trainer

dev = em.Device("wgpu:0").autodiff()
step = _trainer(dev, 256, 2048, 512, lambda params: em.optim.SGD(params, lr=1e-2))
pool = dev.memory.pools()[0]
made = []
alloc = pool._allocate


def counted(n):
    made.append((n, "".join(traceback.format_stack(limit=9)[:-1]) if len(made) < 400 else ""))
    return alloc(n)


pool._allocate = counted
shown = 0
for i in range(24):
    made.clear()
    loss = step()
    if i in (8, 13):
        loss.numpy()
    del loss
    s = dev.memory_stats()
    plan = s["pools"]["device"]["plan"] if "device" in s["pools"] else s["pools"]
    print(f"step {i}: allocations {s['allocations']} (+{[n for n, _ in made]}) plan {plan}")
    if i >= 6 and made and shown < 3:
        shown += 1
        for n, st in made:
            print(f"  --- {n} bytes from\n{st}")
