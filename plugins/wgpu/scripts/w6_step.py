"""W6 on wgpu, step by step: the runner's synchronized step, the kernel alone, and the host's share.

    python plugins/wgpu/scripts/w6_step.py --device wgpu:0 [--n 67108864] [--iters 200] [--profile]

W6 is y = gelu(x*a+b)*sigmoid(x) (exact erf GELU, float32, 16 bytes per element). One table row
per host configuration (the runtime's recorder, native or public, and its synchronize mode,
spin, wait or map; ``public/map`` is how the backend synchronized before), each with:

* ``step``: the runner's protocol (``python -m benchmarks``): each step built, then
  ``Device.synchronize()``; the median over ``--steps`` steps at ``--n`` elements;
* ``host``: the same synchronized step at ``--host-n`` elements (default 4096, so the device's
  time is small beside the host's): median microseconds per step and the main thread's CPU
  microseconds per step (a blocking wait sleeps, a spin does not).

Then, once: ``pipelined`` (``--chain`` steps, each realized and submitted at once, one synchronize,
divided by ``--chain``: the device's throughput with the host's work overlapped); ``kernel``: the
fused kernel's launch plan alone at several workgroup counts (``--chain`` dispatches recorded, then
timed from the submit to the end of the wait, divided by ``--chain``); and the wgpu-native C calls
of one small synchronized step by name, count and time (``--profile`` adds a cProfile).
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
        dev.backend.rt.flush()  # submitted now: the device runs it while the host builds the next step
    dev.synchronize()
    del y
    return (time.perf_counter() - t0) / chain


def _kernel(dev: em.Device, n: int, chain: int, grids: list[int]) -> tuple[str, list[tuple[int, float]]]:
    """What the fused kernel is, and seconds per dispatch of its launch plan at each workgroup count
    (the plan's own first): ``chain`` dispatches recorded, then timed from submit to the wait's end."""
    x, a, b = _inputs(dev, n)
    y = _w6(x, a, b)
    y.realize()
    dev.synchronize()
    rt = dev.backend.rt
    plans = [(k, p) for k, p in rt.plans.items() if len(k[0].instructions) == 5 and k[1] == (n,)]
    if not plans:
        raise SystemExit("the fused W6 plan was not found in the backend's plan table")
    _, plan = plans[-1]
    kernels = [v for k, v in rt.kernels.items() if k[0] == "ew" and v[1] is plan.pipe]
    what = f"vec {kernels[0][0].vec}" if kernels else "?"
    out = rt.empty((n,), em.float32)
    buffers = [t._data.buffer for t in (x, a, b)] + [out.buffer]
    params = plan.head + bytes(plan.tail)
    rows = []
    for groups in dict.fromkeys([plan.groups, *grids]):
        groups = min(groups, rt.max_groups)
        times = []
        for _ in range(3):  # the first warms the GPU's clocks
            for _ in range(chain):
                rt.dispatch(plan.pipe, params, buffers, (groups, 1, 1), "w6")
            t0 = time.perf_counter()
            rt.synchronize()
            times.append((time.perf_counter() - t0) / chain)
        rows.append((groups, min(times[1:])))
    got = rt.read([out])[0]
    want = y.numpy()
    if not np.array_equal(got, want):
        raise SystemExit(f"the kernel alone wrote other values than the step: max |diff| {np.max(np.abs(got - want))}")
    return what, rows


class _CountedLib:
    """Stands in for wgpu-py's cffi ``lib`` in ember's native recorder: counts and times its calls."""

    def __init__(self, lib: Any, wrap: Callable[[str, Any], Any]) -> None:
        self._lib = lib
        self._wrap = wrap

    def __getattr__(self, name: str) -> Any:
        return self._wrap(name, getattr(self._lib, name))


def count_calls(fn: Callable[[], Any], steps: int, rt: Any = None) -> dict[str, list[float]]:
    """wgpu-native C calls made by ``steps`` runs of ``fn`` on this thread, by function name:
    ``[count, seconds]``: those through wgpu-py's error-capturing wrappers (``libf``, timed with
    the wrapper) and, given the runtime ``rt``, those its native recorder makes on the raw
    ``lib`` (names marked ``*``). Object releases done by wgpu-py's ``__del__`` are not seen."""
    import threading

    from wgpu.backends.wgpu_native import _api

    libf = _api.libf
    me = threading.get_ident()
    table: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    saved = {}
    clock = time.perf_counter

    def wrap(name: str, func: Any) -> Any:
        def counted(*args: Any) -> Any:
            if threading.get_ident() != me:  # wgpu-py's poll thread
                return func(*args)
            t0 = clock()
            try:
                return func(*args)
            finally:
                row = table[name]
                row[0] += 1
                row[1] += clock() - t0

        return counted

    for name in dir(libf):
        if name.startswith("wgpu"):
            saved[name] = getattr(libf, name)
            setattr(libf, name, wrap(name, saved[name]))
    rec = getattr(rt, "recorder", None)
    raw = getattr(rec, "lib", None)
    if raw is not None:
        rec.lib = _CountedLib(raw, lambda name, func: wrap(name + " *", func))
    try:
        for _ in range(steps):
            fn()
    finally:
        for name, func in saved.items():
            setattr(libf, name, func)
        if raw is not None:
            rec.lib = raw
    return dict(table)


def host_calls(dev: em.Device, n: int) -> tuple[dict[str, list[float]], int]:
    """The C calls of 100 synchronized steps at ``n`` (see :func:`count_calls`) and their submits."""
    x, a, b = _inputs(dev, n)

    def one() -> None:
        y = _w6(x, a, b)  # held over the synchronize, as the runner holds it (the lazy layer skips dropped values)
        dev.synchronize()
        del y

    one()
    rt = dev.backend.rt
    before = rt.submits
    counts = count_calls(one, 100, rt)
    return counts, rt.submits - before


def _configure(rt: Any, recorder: str, mode: str) -> None:
    """Switch the runtime's recorder and synchronize mode (between batches)."""
    from ember_wgpu import recorder as rec_mod

    rt.synchronize()
    cls = rec_mod.NativeRecorder if recorder == "native" else rec_mod.PublicRecorder
    if rt.recorder.kind != recorder:
        rt.recorder = cls(rt.device, rt.queue)
    rt.sync_mode = mode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="wgpu:0")
    parser.add_argument("--n", type=int, default=2**26, help="elements of the step, pipelined and kernel rows")
    parser.add_argument("--host-n", type=int, default=4096, help="elements of the host column")
    parser.add_argument("--steps", type=int, default=50, help="synchronized steps at --n per configuration")
    parser.add_argument("--iters", type=int, default=500, help="synchronized steps at --host-n per configuration")
    parser.add_argument("--chain", type=int, default=20)
    parser.add_argument(
        "--grids", default="1024,4096,8192,16384,32768,65535", help="workgroup counts of the kernel rows"
    )
    parser.add_argument("--configs", default="native/spin,native/wait,native/map,public/map")
    parser.add_argument("--skip-large", action="store_true", help="only the host column (e.g. on a CPU adapter)")
    parser.add_argument("--profile", action="store_true", help="a cProfile of the small synchronized steps")
    args = parser.parse_args()
    dev = em.Device(args.device)
    rt = dev.backend.rt
    default = (rt.recorder.kind, rt.sync_mode)
    tb = 16 * args.n / 1e12
    print(f"W6 on {args.device} ({rt.name}); 16 bytes per element; defaults: {default[0]} recorder, {default[1]}")
    print(f"| recorder/sync | step ms at n={args.n} | step TB/s | host us per step at n={args.host_n} | host CPU us |")
    print("|---|---|---|---|---|")
    best: tuple[float, str] | None = None
    for config in args.configs.split(","):
        recorder, mode = config.split("/")
        _configure(rt, recorder, mode)
        step = "–"
        rate = "–"
        if not args.skip_large:
            s = statistics.median(_steps(dev, args.n, args.steps))
            step, rate = f"{s * 1e3:.3f}", f"{tb / s:.2f}"
            best = min(best or (s, config), (s, config))
        cpu: list[float] = []
        h = statistics.median(_steps(dev, args.host_n, args.iters, cpu))
        print(f"| {config} | {step} | {rate} | {h * 1e6:.1f} | {sum(cpu) / len(cpu) * 1e6:.1f} |")
    _configure(rt, *default)
    if best is not None:
        print(
            f"best step: {best[0] * 1e3:.3f} ms ({tb / best[0]:.2f} TB/s, {best[1]}); issue 10/11's 3.4 TB/s is "
            f"{tb / 3.4 * 1e3:.3f} ms per step at this n"
        )
    if not args.skip_large:
        piped = _pipelined(dev, args.n, args.chain)
        print(f"pipelined (default config): {piped * 1e3:.3f} ms per step ({tb / piped:.2f} TB/s)")
        what, rows = _kernel(dev, args.n, args.chain, [int(g) for g in args.grids.split(",")])
        for groups, sec in rows:
            print(f"kernel alone ({what}), {groups:5d} workgroups: {sec * 1e3:.3f} ms ({tb / sec:.2f} TB/s)")
    counts, submits = host_calls(dev, args.host_n)
    total = sum(c for c, _ in counts.values()) / 100
    print(
        f"  {total:.1f} wgpu-native calls per step ({rt.recorder.kind} recorder; *: on the raw cffi "
        f"lib, else through wgpu-py's wrappers; wgpu-py's own object releases not seen), {submits / 100:.2f} "
        "submits; per step: calls, us in the call, name"
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
