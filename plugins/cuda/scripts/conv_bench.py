"""W3's convolution and pooling pieces at its GPU shapes (batch 512, 1x28x28 -> conv 32 -> pool ->
conv 64 -> pool; float32) on cuda:0: GPU time per call of each ember-cuda kernel alone, of each op
through ``conv.conv_kernels`` (and its other layouts in ``conv.OPTIONS``) and of torch's equivalent
(cuDNN; TF32 off, as ember's float32), with each result's largest difference from torch's (without
torch, each layout's from the default one's); then W3's whole step under ``em.jit`` (wall time, and
GPU time per step traced by torch.profiler) beside torch's eager step, and the kernels' launch
counts. GPU time, not host time: a spin kernel holds the stream while the host queues the calls, so
the events see the kernels back to back (a line names any case whose queueing outran the spin). A
case that fails prints its error and the rest go on. The previous kernels' figures beside these
(before they were removed) are in ``plugins/cuda/logs/h100-2026-12-06-late/call1/conv-bench.txt``.
Runs in well under a minute from the repository root:

    python3 plugins/cuda/scripts/conv_bench.py
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
from ember_cuda import conv

import ember as em

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # the repository (for benchmarks/)

N = int(os.environ.get("CONV_BENCH_BATCH", "512"))  # W3 GPU size; smaller to smoke-test
REPS = 20
#: (input, weight) of W3's two convolutions, padding 1
LAYERS = {"conv1": ((N, 1, 28, 28), (32, 1, 3, 3)), "conv2": ((N, 32, 14, 14), (64, 32, 3, 3))}
#: inputs of W3's two 2x2 max pools
POOLS = {"pool1": (N, 32, 28, 28), "pool2": (N, 64, 14, 14)}
GEO = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
PGEO = {"kernel": (2, 2), "stride": (2, 2), "padding": ((0, 0), (0, 0)), "dilation": (1, 1)}
_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


class Timer:
    """GPU milliseconds per call of a function queued on ``stream``, by CUDA events recorded after a
    spin kernel that holds the stream while the host queues the calls."""

    def __init__(self, cp: Any, stream: Any, sync: Callable[[], None]) -> None:
        self.cp, self.stream, self.sync = cp, stream, sync
        self.spin = cp.RawKernel(_SPIN, "spin")
        self.khz = cp.cuda.Device().attributes["ClockRate"]
        self.late: list[str] = []

    def __call__(self, name: str, fn: Callable[[], Any], reps: int = REPS) -> float:
        cp = self.cp
        with self.stream:
            fn()  # compile, allocate
            self.sync()
            t = time.perf_counter()
            fn()
            self.sync()
            host = time.perf_counter() - t  # an upper bound of the host's time per call
            hold = min(0.5, max(0.01, 2 * reps * host))
            # twice: the first pass grows the memory pool to what ``reps`` calls queued behind a
            # held stream take (no buffer comes back until the stream moves); the second is timed
            for _ in range(2):
                start, stop = cp.cuda.Event(), cp.cuda.Event()
                self.spin((1,), (1,), (np.int64(hold * self.khz * 1e3),))
                start.record(self.stream)
                t = time.perf_counter()
                for _ in range(reps):
                    fn()
                queued = time.perf_counter() - t
                stop.record(self.stream)
                stop.synchronize()
        if queued > hold:
            self.late.append(name)
        return cp.cuda.get_elapsed_time(start, stop) / reps


def _fmt(t: float | None) -> str:
    return f"{t:8.4f}" if t is not None else "       -"


def main() -> None:
    t_begin = time.perf_counter()
    dev = em.Device.cuda(0)
    backend = dev.backend
    cp = backend.cp
    ops = ("matmul", "conv", "conv_weight_grad", "conv_transpose", "max_pool", "max_pool_backward")
    table = {op: backend.implementation(op) for op in ops}
    new = conv.conv_kernels(cp, table)
    timer = Timer(cp, backend.stream, backend.synchronize)
    rng = cp.random.default_rng(0)
    f32, i32 = cp.float32, np.int32
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    print(f"W3 conv/pool pieces, batch {N}, float32, {name.decode() if isinstance(name, bytes) else name}, {sms} SMs")
    print(f"  {'GPU ms per call':52s} {'ember':>8s} {'torch':>8s}")
    failures: list[str] = []

    def row(label: str, t: float | None, t_torch: float | None, note: str = "") -> None:
        print(f"  {label:52s} {_fmt(t)} {_fmt(t_torch)}  {note}", flush=True)

    def guarded(label: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001 - report and go on with the other cases
            failures.append(label)
            print(f"  {label}: FAILED\n" + "".join("    " + ln for ln in traceback.format_exc().splitlines(True)))

    # -- each kernel alone, launched with the arguments conv.py gives it ----------------------------
    module = cp.RawModule(code=conv.source("float"))

    def kernel(kname: str, total: int, args: tuple[Any, ...]) -> Callable[[], None]:
        fn = module.get_function(f"ember_{kname}_float")
        blocks = max(1, min(-(-total // 256), sms * 32))
        return lambda: fn((blocks,), (256,), args)

    data: dict[str, tuple[Any, ...]] = {}
    for layer, (xs, ws) in LAYERS.items():
        x = rng.standard_normal(xs, dtype=f32)
        w = rng.standard_normal(ws, dtype=f32) * float(1 / np.sqrt(np.prod(ws[1:])))
        b = rng.standard_normal(ws[:1], dtype=f32)
        g = rng.standard_normal((N, ws[0], *xs[2:]), dtype=f32)
        data[layer] = (x, w, b, g)
    backend.synchronize()
    print(" kernels alone:")

    def im2col_case(layer: str) -> None:
        x, w, b, g = data[layer]
        n, c, h, wd = x.shape
        ck, length, cout = c * 9, h * wd, w.shape[0]
        dims = (i32(n), i32(c), i32(h), i32(wd), i32(h), i32(wd), *(i32(v) for v in (3, 3, 1, 1, 1, 1, 1, 1)))
        rows = -(-(ck + 1) // 4) * 4
        cols = cp.empty((n, rows, length), f32)
        extra = (i32(rows * length), i32(length), i32(rows - ck), i32(1))
        for name in ("im2col3x3", "im2col"):
            t = timer(f"{layer} {name}", kernel(name, n * c * length, (x, cols, *dims, *extra)))
            label = f"{layer} im2col (by sample, {ck} + {rows - ck} rows)" if name != "im2col" else ""
            row(label or "  the same, the window not fixed at compile time", t, None)
        if layer == "conv2":  # the input gradient's col2im: columns of Cin*K rows back to (N, Cin, H, W)
            y = cp.empty(x.shape, f32)
            args = (cols, y, b, *dims, i32(rows * length), i32(length), i32(0))
            for name in ("col2im3x3", "col2im"):
                t = timer(f"{layer} {name}", kernel(name, y.size, args))
                label = f"{layer} col2im (by sample)" if name != "col2im" else ""
                row(label or "  the same, the window not fixed at compile time", t, None)
        yt = rng.standard_normal((cout, n, length), dtype=f32)
        dst = cp.empty((n, cout, length), f32)
        args = (yt, dst, b, i32(cout), i32(n), i32(length // 4), i32(1))
        t = timer(f"{layer} swap01v", kernel("swap01v", yt.size // 4, args))
        row(f"{layer} swap01 of ({cout}, N, L) + bias (float4)", t, None)

    def pool_case(pool: str) -> None:
        xs = POOLS[pool]
        x = rng.standard_normal(xs, dtype=f32)
        n, c, h, w = xs
        out = cp.empty((n, c, h // 2, w // 2), f32)
        dims = (i32(n * c), i32(h), i32(w), i32(h // 2), i32(w // 2))
        geo = tuple(i32(v) for v in (2, 2, 2, 2, 0, 0, 1, 1))
        t = timer(f"{pool} max_pool", kernel("max_pool", out.size, (x, out, *dims, *geo)))
        row(f"{pool} max_pool", t, None)
        g = rng.standard_normal(out.shape, dtype=f32)
        dx = cp.empty(xs, f32)
        args = (g, x, dx, *dims, i32(2), i32(2), i32(0), i32(0))
        for name in ("max_pool_backward_tiled2x2", "max_pool_backward_tiled"):
            t = timer(f"{pool} {name}", kernel(name, out.size, args))
            label = f"{pool} max_pool_backward (a thread per window)" if name.endswith("2x2") else ""
            row(label or "  the same, the window not fixed at compile time", t, None)

    for layer in LAYERS:
        guarded(f"{layer} kernels", lambda layer=layer: im2col_case(layer))
    for pool in POOLS:
        guarded(f"{pool} kernels", lambda pool=pool: pool_case(pool))

    # -- the ops, as autodiff calls them, beside torch's ----------------------------------------------
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        torch = F = None
        print("torch is not installed: no comparison with it")
    ttimer = None
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)  # (CuPy 14 warns: deprecated)
        ttimer = Timer(cp, stream, torch.cuda.synchronize)
    ref = "torch" if torch is not None else "default"
    print(" ops through conv_kernels, torch's equivalent, and each result against torch's"
          f"{'' if torch is not None else ' (no torch: each layout against the default one)'}:")  # fmt: skip
    worst: dict[str, float] = {}
    totals = {"ember": 0.0, "torch": 0.0}

    def relative(got: Any, want: Any) -> float:
        return float(cp.abs(got - want).max()) / max(float(cp.abs(want).max()), 1e-30)

    def check(label: str, got: Any, want: Any) -> str:
        """``got``'s largest difference from ``want``: torch's result, or without torch the default layout's."""
        if want is None:
            return ""
        backend.synchronize()
        if torch is not None:
            torch.cuda.synchronize()
            want = cp.from_dlpack(want.detach().contiguous())
        worst[label] = err = relative(got, want)
        return f"max|ember - {ref}|/max|{ref}| {err:.1e}"

    def op(label: str, fn: Callable[[], Any], f_torch: Any, want: Any) -> Any:
        """Times ``fn`` and torch's ``f_torch``; returns what the other layouts are checked against
        (``want``, torch's result, or without torch ``fn``'s)."""
        t = timer(label, fn)
        t_torch = ttimer(label + " torch", f_torch) if ttimer is not None and f_torch is not None else None
        totals["ember"] += t
        totals["torch"] += t_torch or 0.0
        got = fn()
        row(label, t, t_torch, check(label, got, want))
        return want if want is not None else got

    def variant(label: str, options: dict[str, Any], fn: Callable[[], Any], want: Any) -> None:
        keep = dict(conv.OPTIONS)
        conv.OPTIONS.update(options)
        try:
            t = timer(label, fn)
            row(f"  {label}", t, None, check(label, fn(), want))
        finally:
            conv.OPTIONS.update(keep)

    def conv_cases(layer: str) -> None:
        x, w, b, g = data[layer]
        kw = {**GEO, "kernel": (3, 3)}
        size = x.shape[2:]
        if torch is not None:
            tx, tw, tb, tg = (torch.from_dlpack(a) for a in (x, w, b, g))
            aten = torch.ops.aten

            def fwd_t() -> Any:
                return F.conv2d(tx, tw, tb, padding=1)

            def wgrad_t() -> Any:
                mask = [False, True, False]
                return aten.convolution_backward(tg, tx, tw, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)[1]

            def dgrad_t() -> Any:
                mask = [True, False, False]
                return aten.convolution_backward(tg, tx, tw, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)[0]

        else:
            fwd_t = wgrad_t = dgrad_t = None
        fn = lambda: new["conv"](x, w, b, **GEO)  # noqa: E731
        want = op(f"{layer} forward (+ bias)", fn, fwd_t, fwd_t() if fwd_t else None)
        cols = {"implicit": False}  # the im2col + cuBLAS layouts
        for label, value in (("by sample, batched GEMM", 0), ("one GEMM + swap", conv.NEVER)):
            variant(f"{layer} forward, columns, {label}", {**cols, "forward_by_sample": value}, fn, want)
        fn = lambda: new["conv_weight_grad"](g, x, **kw)  # noqa: E731
        want = op(f"{layer} weight grad", fn, wgrad_t, wgrad_t() if wgrad_t else None)
        for label, ratio in (("per-sample partials", 1e9), ("swap + one GEMM", 0)):
            variant(f"{layer} weight grad, columns, {label}", {**cols, "wgrad_partials": ratio}, fn, want)
        if layer == "conv1":  # 9 columns: the default keeps the partials; the implicit GEMM's tile idles
            variant(f"{layer} weight grad, implicit GEMM", {"implicit_wgrad_columns": 1}, fn, want)
            return  # W3's first layer takes no input gradient
        fn = lambda: new["conv_transpose"](g, w, size=size, **GEO)  # noqa: E731
        want = op(f"{layer} input grad (conv_transpose)", fn, dgrad_t, dgrad_t() if dgrad_t else None)
        for label, value in (("by sample, batched GEMM", 0), ("swap + one GEMM", conv.NEVER)):
            variant(f"{layer} input grad, columns, {label}", {**cols, "transpose_by_sample": value}, fn, want)

    def pool_ops(pool: str) -> None:
        x = rng.standard_normal(POOLS[pool], dtype=f32)
        out = new["max_pool"](x, **PGEO)
        g = rng.standard_normal(out.shape, dtype=f32)
        backend.synchronize()
        fwd_t = bwd_t = want_out = want_dx = None
        if torch is not None:
            tx, tg = torch.from_dlpack(x), torch.from_dlpack(g)

            def fwd_t() -> Any:
                return F.max_pool2d(tx, 2, return_indices=True)

            want_out, idx = fwd_t()

            def bwd_t() -> Any:
                return torch.ops.aten.max_pool2d_with_indices_backward(tg, tx, [2, 2], [2, 2], [0, 0], [1, 1], False,
                                                                       idx)  # fmt: skip

            want_dx = bwd_t()
        op(f"{pool} max_pool", lambda: new["max_pool"](x, **PGEO), fwd_t, want_out)
        op(f"{pool} max_pool backward", lambda: new["max_pool_backward"](g, x, **PGEO), bwd_t, want_dx)

    for layer in LAYERS:
        guarded(f"{layer} ops", lambda layer=layer: conv_cases(layer))
    for pool in POOLS:
        guarded(f"{pool} ops", lambda pool=pool: pool_ops(pool))
    if totals["ember"]:
        row("sum of the ops above (a W3 step runs each once)", totals["ember"], totals["torch"] or None)
    if torch is not None:
        guarded("W3 step", lambda: w3_step(dev, torch))
    else:
        print("no torch: no W3 step section (it traces kernels with torch.profiler)")
    late = timer.late + (ttimer.late if ttimer is not None else [])
    if late:
        print(f"queueing outran the spin (these figures include host gaps): {late}")
    bad = {k: f"{v:.1e}" for k, v in worst.items() if not v <= 1e-4}
    print(f"results against {ref}:", f"LARGE DIFFERENCES {bad}" if bad else f"{len(worst)} within 1e-4")
    if failures:
        print(f"FAILED cases: {failures}")
    print(f"conv launches: {dict(conv.CALLS)}; {time.perf_counter() - t_begin:.1f} s in all")


def w3_step(dev: Any, torch: Any) -> None:
    """W3's step under em.jit (ember-cuda's kernels), then torch's eager step: median wall time of 20
    steps, the GPU time of 3 steps traced by CUPTI, and how far the two results are apart after the
    first step and after 26."""
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, ROOT)
    from benchmarks import w3_cnn
    from benchmarks.harness import time_case

    size = {"batch": N}

    def traced(case: Any) -> tuple[float, int, dict[str, float]]:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                case.step()
            case.sync()
        rows = [e for e in prof.key_averages() if e.device_time_total > 0]
        ours = {e.key: e.device_time_total / 3e3 for e in rows if e.key.startswith(("ember_im2col", "ember_col2im",
                "ember_swap01", "ember_max_pool", "ember_pack"))}  # fmt: skip
        return sum(e.device_time_total for e in rows) / 3e3, sum(e.count for e in rows) // 3, ours

    def first_step(case: Any) -> dict[str, Any]:
        case.step()
        case.sync()
        return case.result()

    def gap(a: dict[str, Any], b: dict[str, Any]) -> str:
        diff = {k: float(np.abs(a[k] - v).max() / max(np.abs(v).max(), 1e-30)) for k, v in b.items()}
        worst = max(diff, key=diff.get)
        return f"{diff[worst]:.1e} ({worst})"

    print(f" W3 step, batch {N} (em.jit; GPU ms per step from a CUPTI trace of 3 steps):")
    case = w3_cnn.ember_jit(dev, size)
    wall = sorted(time_case(case, 3, 20))[10]
    gpu, count, ours = traced(case)
    last = case.result()  # after 26 steps from the seeded start
    step1 = first_step(w3_cnn.ember(dev, size))  # eager, one step from the seeded start
    print(f"  ember: {wall * 1e3:.3f} ms wall, {gpu:.3f} ms GPU in {count} kernels a step")
    print("    " + ", ".join(f"{k.removeprefix('ember_')} {v:.3f}" for k, v in sorted(ours.items())))
    print(f"  after 1 step, ember vs torch: {gap(step1, first_step(w3_cnn.torch(torch.device('cuda'), size)))}")
    case = w3_cnn.torch(torch.device("cuda"), size)
    wall = sorted(time_case(case, 3, 20))[10]
    gpu, count, _ = traced(case)
    print(f"  torch eager: {wall * 1e3:.3f} ms wall, {gpu:.3f} ms GPU in {count} kernels a step")
    print(f"  after 26 steps, ember vs torch: {gap(last, case.result())} (float32 trajectories part as they "
          "train: scripts/w3_drift.py)")  # fmt: skip


if __name__ == "__main__":
    main()
