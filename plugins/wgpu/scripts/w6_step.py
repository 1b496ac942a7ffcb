"""W6 on wgpu, step by step: the runner's synchronized step, the kernel alone, and the host's share.

    python plugins/wgpu/scripts/w6_step.py --device wgpu:0 [--n 67108864] [--iters 200] [--profile]

W6 is y = gelu(x*a+b)*sigmoid(x) (exact erf GELU, float32, 16 bytes per element). Rows:

* ``step``: the runner's protocol (``python -m benchmarks``): each step built, then
  ``Device.synchronize()``; the median over ``--iters`` steps;
* ``pipelined``: ``--chain`` steps queued (each realized), one synchronize, divided by ``--chain``;
* ``kernel``: the fused kernel alone, ``--chain`` dispatches of its launch plan recorded into one
  batch and one synchronize, divided by ``--chain`` (no lazy layer, no per-step submit);
* ``host``: the same synchronized step at ``--host-n`` elements (default 4096, so the device's
  time is small beside the host's): median microseconds per step, and the wgpu-native C calls per
  step by name (each counted through wgpu-py's wrapper table ``libf``), so a change to the
  submit-and-wait cycle shows as fewer calls and fewer microseconds.

``--profile`` adds a cProfile of the small synchronized steps (top 25 by own time).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import ember as em


def _inputs(dev: em.Device, n: int) -> tuple[Any, Any, Any]:
    rng = np.random.default_rng(0)
    return tuple(em.tensor(rng.standard_normal(n).astype(np.float32), device=dev) for _ in range(3))


def _w6(x: Any, a: Any, b: Any) -> Any:
    return em.gelu(x * a + b) * em.sigmoid(x)


def _steps(dev: em.Device, n: int, iters: int, cpu: list[float] | None = None) -> list[float]:
    """Seconds of each of ``iters`` synchronized steps (after 5 untimed ones); ``cpu`` gets the
    main thread's CPU seconds of each (the host's own work: a blocking wait sleeps)."""
    x, a, b = _inputs(dev, n)
    times = []
    for k in range(iters + 5):
        c0 = time.thread_time()
        t0 = time.perf_counter()
        y = _w6(x, a, b)
        dev.synchronize()
        t1 = time.perf_counter()
        if k >= 5:
            times.append(t1 - t0)
            if cpu is not None:
                cpu.append(time.thread_time() - c0)
        del y
    return times


def _pipelined(dev: em.Device, n: int, chain: int) -> float:
    x, a, b = _inputs(dev, n)
    for _ in range(3):
        _w6(x, a, b).realize()
    dev.synchronize()
    t0 = time.perf_counter()
    for _ in range(chain):
        y = _w6(x, a, b)
        y.realize()
    dev.synchronize()
    del y
    return (time.perf_counter() - t0) / chain


def _kernel(dev: em.Device, n: int, chain: int) -> tuple[float, str]:
    """Seconds per dispatch of the fused kernel's plan alone, and what the kernel is."""
    x, a, b = _inputs(dev, n)
    y = _w6(x, a, b)
    y.realize()
    dev.synchronize()
    rt = dev.backend.rt
    plans = [(k, p) for k, p in rt.plans.items() if len(k[0].instructions) == 5]
    if not plans:
        raise SystemExit("the fused W6 plan was not found in the backend's plan table")
    key, plan = plans[-1]
    kernels = [v for k, v in rt.kernels.items() if k[0] == "ew" and v[1] is plan.pipe]
    what = f"vec {kernels[0][0].vec}, {plan.groups} workgroups" if kernels else f"{plan.groups} workgroups"
    handles = [t._data for t in (x, a, b)]
    out = rt.empty((n,), em.float32)
    buffers = [h.buffer for h in handles] + [out.buffer]
    params = plan.head + bytes(plan.tail)

    def run() -> None:
        for _ in range(chain):
            rt.dispatch(plan.pipe, params, buffers, (plan.groups, 1, 1), "w6")
        rt.synchronize()

    run()  # warm: the GPU's clocks ramp up while it is busy
    t0 = time.perf_counter()
    run()
    return (time.perf_counter() - t0) / chain, what


def count_calls(fn: Callable[[], Any], steps: int) -> dict[str, list[float]]:
    """wgpu-native C calls made by ``steps`` runs of ``fn`` on this thread, by function name:
    ``[count, seconds]`` (each call timed with wgpu-py's error-capturing wrapper around it)."""
    import threading

    from wgpu.backends.wgpu_native import _api

    libf = _api.libf
    me = threading.get_ident()
    table: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    saved = {}
    clock = time.perf_counter
    for name in dir(libf):
        if name.startswith("wgpu"):
            func = getattr(libf, name)
            saved[name] = func

            def counted(*args: Any, _f: Any = func, _n: str = name) -> Any:
                if threading.get_ident() != me:  # wgpu-py's poll thread
                    return _f(*args)
                t0 = clock()
                try:
                    return _f(*args)
                finally:
                    row = table[_n]
                    row[0] += 1
                    row[1] += clock() - t0

            setattr(libf, name, counted)
    try:
        for _ in range(steps):
            fn()
    finally:
        for name, func in saved.items():
            setattr(libf, name, func)
    return dict(table)


def host(dev: em.Device, n: int, iters: int) -> tuple[float, dict[str, list[float]], int]:
    """Median seconds per synchronized step at ``n``, the C calls per 100 steps, and submits per step."""
    cpu: list[float] = []
    step_s = statistics.median(_steps(dev, n, iters, cpu))
    host.cpu_s = sum(cpu) / len(cpu)  # type: ignore[attr-defined]
    x, a, b = _inputs(dev, n)

    def one() -> None:
        y = _w6(x, a, b)  # held over the synchronize, as the runner holds it (the lazy layer skips dropped values)
        dev.synchronize()
        del y

    one()
    rt = dev.backend.rt
    before = rt.submits
    counts = count_calls(one, 100)
    return step_s, counts, rt.submits - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="wgpu:0")
    parser.add_argument("--n", type=int, default=2**26, help="elements of the step, pipelined and kernel rows")
    parser.add_argument("--host-n", type=int, default=4096, help="elements of the host row")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--chain", type=int, default=20)
    parser.add_argument("--skip-large", action="store_true", help="only the host row (e.g. on a CPU adapter)")
    parser.add_argument("--profile", action="store_true", help="a cProfile of the small synchronized steps")
    args = parser.parse_args()
    dev = em.Device(args.device)
    print(f"W6 on {args.device} ({dev.backend.rt.name}); 16 bytes per element")
    if not args.skip_large:
        tb = 16 * args.n / 1e12
        step = statistics.median(_steps(dev, args.n, min(args.iters, 50)))
        piped = _pipelined(dev, args.n, args.chain)
        kern, what = _kernel(dev, args.n, args.chain)
        print(
            f"n = {args.n}: step {step * 1e3:.3f} ms ({tb / step:.2f} TB/s)  pipelined {piped * 1e3:.3f} ms "
            f"({tb / piped:.2f} TB/s)  kernel {kern * 1e3:.3f} ms ({tb / kern:.2f} TB/s; {what})"
        )
    step_s, counts, submits = host(dev, args.host_n, args.iters)
    total = sum(c for c, _ in counts.values()) / 100
    print(
        f"host, n = {args.host_n}: {step_s * 1e6:.1f} us per synchronized step (median of {args.iters}); "
        f"main thread CPU {host.cpu_s * 1e6:.1f} us per step (mean); sync mode {dev.backend.rt.sync_mode}"
    )  # type: ignore[attr-defined]
    print(
        f"  {total:.1f} wgpu-native calls per step through wgpu-py's wrappers (object releases not counted), "
        f"{submits / 100:.2f} submits; per step: calls, us in the call, name"
    )
    for name, (c, t) in sorted(counts.items(), key=lambda kv: -kv[1][1]):
        print(f"  {c / 100:6.2f} {t / 100 * 1e6:8.1f}  {name}")
    if args.profile:
        import cProfile
        import pstats

        x, a, b = _inputs(dev, args.host_n)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.iters):
            y = _w6(x, a, b)
            dev.synchronize()
            del y
        profile.disable()
        print(f"cProfile of {args.iters} synchronized steps at n = {args.host_n}")
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
