"""W3's convolution and pooling pieces at its GPU shapes (batch 512, 1x28x28 -> conv 32 -> pool ->
conv 64 -> pool; float32) on cuda:0: GPU time per call of each kernel alone (the previous
``conv.py``, kept as ``conv_old.py``, beside the current one), of each op through ember-cuda's
``conv_kernels`` (old, new, and the new one's other layouts in ``conv.OPTIONS``) and of torch's
equivalent (cuDNN; TF32 off, as ember's float32), with each result's largest difference from
torch's; then W3's whole step under ``em.jit`` with the old and the new kernels (wall time, and GPU
time per step traced by torch.profiler) beside torch's eager step. GPU time, not host time: a spin
kernel holds the stream while the host queues the calls, so the events see the kernels back to
back (a line names any case whose queueing outran the spin). A case that fails prints its error
and the rest go on. Runs in well under a minute from the repository root:

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

import ember as em

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # the repository (for benchmarks/)
sys.path.insert(0, HERE)
import conv_old  # noqa: E402 - the previous conv.py, beside this script
from ember_cuda import conv  # noqa: E402

N = int(os.environ.get("CONV_BENCH_BATCH", "512"))  # W3 GPU size; smaller to smoke-test
REPS = 20
#: (input, weight) of W3's two convolutions, padding 1
LAYERS = {"conv1": ((N, 1, 28, 28), (32, 1, 3, 3)), "conv2": ((N, 32, 14, 14), (64, 32, 3, 3))}
#: inputs of W3's two 2x2 max pools
POOLS = {"pool1": (N, 32, 28, 28), "pool2": (N, 64, 14, 14)}
CONV_OPS = ("conv", "conv_weight_grad", "conv_transpose", "max_pool", "max_pool_backward")
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
    new, old = conv.conv_kernels(cp, table), conv_old.conv_kernels(cp, table)
    timer = Timer(cp, backend.stream, backend.synchronize)
    rng = cp.random.default_rng(0)
    f32, i32 = cp.float32, np.int32
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    print(f"W3 conv/pool pieces, batch {N}, float32, {name.decode() if isinstance(name, bytes) else name}, {sms} SMs")
    print(f"  {'GPU ms per call':52s} {'old':>8s} {'new':>8s} {'new/old':>7s} {'torch':>8s}")
    failures: list[str] = []

    def row(label: str, t_old: float | None, t_new: float | None, t_torch: float | None, note: str = "") -> None:
        ratio = f"{t_new / t_old:6.2f}x" if t_old and t_new else "       "
        print(f"  {label:52s} {_fmt(t_old)} {_fmt(t_new)} {ratio} {_fmt(t_torch)}  {note}", flush=True)

    def guarded(label: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001 - report and go on with the other cases
            failures.append(label)
            print(f"  {label}: FAILED\n" + "".join("    " + ln for ln in traceback.format_exc().splitlines(True)))

    # -- each kernel alone, launched with the arguments the two modules give it --------------------
    mods = {"old": cp.RawModule(code=conv_old.source("float")), "new": cp.RawModule(code=conv.source("float"))}

    def kernel(which: str, kname: str, total: int, args: tuple[Any, ...]) -> Callable[[], None]:
        fn = mods[which].get_function(f"ember_{kname}_float")
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
        rows_new = -(-(ck + 1) // 4) * 4
        cols_old, cols_new = cp.empty((ck, n * length), f32), cp.empty((n, rows_new, length), f32)
        t_old = timer(f"{layer} im2col old", kernel("old", "im2col", cols_old.size, (x, cols_old, *dims)))
        extra = (i32(rows_new * length), i32(length), i32(rows_new - ck), i32(1))
        for name in ("im2col3x3", "im2col"):
            t_new = timer(f"{layer} {name}", kernel("new", name, n * c * length, (x, cols_new, *dims, *extra)))
            label = f"{layer} im2col (new: by sample, {ck} + {rows_new - ck} rows)" if name != "im2col" else ""
            row(label or "  the same, the window not fixed at compile time", t_old, t_new, None)
        if layer == "conv2":  # the input gradient's col2im: columns of Cin*K rows back to (N, Cin, H, W)
            y = cp.empty(x.shape, f32)
            t_old = timer("col2im old", kernel("old", "col2im", y.size, (cols_old, y, *dims)))
            args = (cols_new, y, b, *dims, i32(rows_new * length), i32(length), i32(0))
            for name in ("col2im3x3", "col2im"):
                t_new = timer(f"{name} new", kernel("new", name, y.size, args))
                label = f"{layer} col2im (new: by sample)" if name != "col2im" else ""
                row(label or "  the same, the window not fixed at compile time", t_old, t_new, None)
        yt = rng.standard_normal((cout, n, length), dtype=f32)
        dst = cp.empty((n, cout, length), f32)
        t_old = timer(
            "swap old", kernel("old", "swap01", yt.size, (yt, dst, b, i32(cout), i32(n), i32(length), i32(1)))
        )
        args = (yt, dst, b, i32(cout), i32(n), i32(length // 4), i32(1))
        t_new = timer("swap new", kernel("new", "swap01v", yt.size // 4, args))
        row(f"{layer} swap01 of ({cout}, N, L) + bias (new: float4)", t_old, t_new, None)

    def pool_case(pool: str) -> None:
        xs = POOLS[pool]
        x = rng.standard_normal(xs, dtype=f32)
        n, c, h, w = xs
        out = cp.empty((n, c, h // 2, w // 2), f32)
        dims = (i32(n * c), i32(h), i32(w), i32(h // 2), i32(w // 2))
        geo = tuple(i32(v) for v in (2, 2, 2, 2, 0, 0, 1, 1))
        t_old = timer("pool old", kernel("old", "max_pool", out.size, (x, out, *dims, *geo)))
        t_new = timer("pool new", kernel("new", "max_pool", out.size, (x, out, *dims, *geo)))
        row(f"{pool} max_pool", t_old, t_new, None)
        g = rng.standard_normal(out.shape, dtype=f32)
        dx = cp.empty(xs, f32)
        t_old = timer("pool bwd old", kernel("old", "max_pool_backward", dx.size, (g, x, out, dx, *dims, *geo)))
        args = (g, x, out, dx, *dims, i32(2), i32(2), i32(0), i32(0))
        for name in ("max_pool_backward_tiled2x2", "max_pool_backward_tiled"):
            t_new = timer(f"pool bwd {name}", kernel("new", name, out.size, args))
            label = f"{pool} max_pool_backward (new: a thread per window)" if name.endswith("2x2") else ""
            row(label or "  the same, the window not fixed at compile time", t_old, t_new, None)

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
    print(" ops through conv_kernels (old, new), torch's equivalent, and the new result against torch's:")
    worst: dict[str, float] = {}
    totals = {"old": 0.0, "new": 0.0, "torch": 0.0}

    def relative(got: Any, want: Any) -> float:
        return float(cp.abs(got - want).max()) / max(float(cp.abs(want).max()), 1e-30)

    def check(label: str, got: Any, want: Any) -> str:
        if want is None:
            return ""
        backend.synchronize()
        torch.cuda.synchronize()
        worst[label] = err = relative(got, cp.from_dlpack(want.detach().contiguous()))
        return f"max|new - torch|/max|torch| {err:.1e}"

    def op(label: str, f_old: Callable[[], Any], f_new: Callable[[], Any], f_torch: Any, want: Any) -> None:
        t_old, t_new = timer(label + " old", f_old), timer(label + " new", f_new)
        t_torch = ttimer(label + " torch", f_torch) if ttimer is not None and f_torch is not None else None
        totals["old"] += t_old
        totals["new"] += t_new
        totals["torch"] += t_torch or 0.0
        got = f_new()
        worst[label + " (new vs old)"] = err = relative(got, f_old())
        note = check(label, got, want) if want is not None else f"max|new - old|/max|old| {err:.1e}"
        row(label, t_old, t_new, t_torch, note)

    def variant(label: str, option: str, value: Any, fn: Callable[[], Any], want: Any) -> None:
        keep = conv.OPTIONS[option]
        conv.OPTIONS[option] = value
        try:
            t = timer(label, fn)
            row(f"  {label}", None, t, None, check(label, fn(), want))
        finally:
            conv.OPTIONS[option] = keep

    def conv_cases(layer: str) -> None:
        x, w, b, g = data[layer]
        kw = {**GEO, "kernel": (3, 3)}
        size = x.shape[2:]
        tx = tw = tb = tg = None
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
        want_y = fwd_t() if fwd_t else None
        f_new = lambda: new["conv"](x, w, b, **GEO)  # noqa: E731
        op(f"{layer} forward (+ bias)", lambda: old["conv"](x, w, b, **GEO), f_new, fwd_t, want_y)
        for label, value in (("by sample, batched GEMM", 0), ("one GEMM + swap", conv.NEVER)):
            variant(f"{layer} forward, {label}", "forward_by_sample", value, f_new, want_y)
        want_dw = wgrad_t() if wgrad_t else None
        f_new = lambda: new["conv_weight_grad"](g, x, **kw)  # noqa: E731
        op(f"{layer} weight grad", lambda: old["conv_weight_grad"](g, x, **kw), f_new, wgrad_t, want_dw)
        for label, ratio in (("per-sample partials", 1e9), ("swap + one GEMM", 0)):
            variant(f"{layer} weight grad, {label}", "wgrad_partials", ratio, f_new, want_dw)
        if layer == "conv1":
            return  # W3's first layer takes no input gradient
        want_dx = dgrad_t() if dgrad_t else None
        f_new = lambda: new["conv_transpose"](g, w, size=size, **GEO)  # noqa: E731
        op(f"{layer} input grad (conv_transpose)", lambda: old["conv_transpose"](g, w, size=size, **GEO), f_new,
           dgrad_t, want_dx)  # fmt: skip
        for label, value in (("by sample, batched GEMM", 0), ("swap + one GEMM", conv.NEVER)):
            variant(f"{layer} input grad, {label}", "transpose_by_sample", value, f_new, want_dx)

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
        op(f"{pool} max_pool", lambda: old["max_pool"](x, **PGEO), lambda: new["max_pool"](x, **PGEO), fwd_t, want_out)
        f_new = lambda: new["max_pool_backward"](g, x, out, **PGEO)  # noqa: E731
        op(f"{pool} max_pool backward", lambda: old["max_pool_backward"](g, x, out, **PGEO), f_new, bwd_t, want_dx)

    for layer in LAYERS:
        guarded(f"{layer} ops", lambda layer=layer: conv_cases(layer))
    for pool in POOLS:
        guarded(f"{pool} ops", lambda pool=pool: pool_ops(pool))
    if torch is not None:
        guarded("W3 step", lambda: w3_step(dev, old, new, torch))
    else:
        print("no torch: no W3 step section (it traces kernels with torch.profiler)")
    if totals["old"]:
        print(f"  {'sum of the ops above (a W3 step runs each once)':52s} {_fmt(totals['old'])} {_fmt(totals['new'])} "
              f"{totals['new'] / totals['old']:6.2f}x {_fmt(totals['torch'] or None)}")  # fmt: skip
    late = timer.late + (ttimer.late if ttimer is not None else [])
    if late:
        print(f"queueing outran the spin (these figures include host gaps): {late}")
    bad = {k: f"{v:.1e}" for k, v in worst.items() if not v <= 1e-4}
    print("results (new against torch and old):", f"LARGE DIFFERENCES {bad}" if bad else f"{len(worst)} within 1e-4")
    if failures:
        print(f"FAILED cases: {failures}")
    print(f"conv launches: {dict(conv.CALLS)}; {time.perf_counter() - t_begin:.1f} s in all")


def w3_step(dev: Any, old: dict[str, Any], new: dict[str, Any], torch: Any) -> None:
    """W3's step under em.jit with each module's kernels in the device's op table, then torch's
    eager step: median wall time of 20 steps, and the GPU time of 3 steps traced by CUPTI."""
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, ROOT)
    from benchmarks import w3_cnn
    from benchmarks.harness import time_case
    from ember.backend import EXTENSION_KERNELS
    from ember.device import invalidate

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

    def install(table: dict[str, Any] | None) -> None:
        """``table``'s conv ops as the device kind's kernels (extension kernels win over the
        backend's own table); None: the backend's own again."""
        for op in CONV_OPS:
            if table is None:
                EXTENSION_KERNELS.pop((op, dev.kind), None)
            else:
                EXTENSION_KERNELS[(op, dev.kind)] = lambda backend, *h, _f=table[op], **p: _f(*h, **p)
            invalidate(dev.kind, op)

    print(f" W3 step, batch {N} (em.jit; GPU ms per step from a CUPTI trace of 3 steps):")
    results = {}
    try:
        for label, table in (("old conv.py", old), ("new conv.py", new)):
            install(table)
            case = w3_cnn.ember_jit(dev, size)
            wall = sorted(time_case(case, 3, 20))[10]
            gpu, count, ours = traced(case)
            results[label] = case.result()
            first = w3_cnn.ember(dev, size)  # eager, one step from the seeded start
            first.step()
            first.sync()
            results[label + " step 1"] = first.result()
            print(f"  ember {label}: {wall * 1e3:.3f} ms wall, {gpu:.3f} ms GPU in {count} kernels a step")
            print("    " + ", ".join(f"{k.removeprefix('ember_')} {v:.3f}" for k, v in sorted(ours.items())))
    finally:
        install(None)

    def gap(a: dict[str, Any], b: dict[str, Any]) -> str:
        diff = {k: float(np.abs(a[k] - v).max() / max(np.abs(v).max(), 1e-30)) for k, v in b.items()}
        worst = max(diff, key=diff.get)
        return f"{diff[worst]:.1e} ({worst})"

    print(f"  largest max|d|/max|b| over loss and gradients: new vs old after 1 step "
          f"{gap(results['new conv.py step 1'], results['old conv.py step 1'])}, after 26 steps "
          f"{gap(results['new conv.py'], results['old conv.py'])} (float32 trajectories part as they "
          "train: scripts/w3_drift.py)")  # fmt: skip
    first = w3_cnn.torch(torch.device("cuda"), size)
    first.step()
    first.sync()
    print(f"  after 1 step, new vs torch: {gap(results['new conv.py step 1'], first.result())}")
    case = w3_cnn.torch(torch.device("cuda"), size)
    wall = sorted(time_case(case, 3, 20))[10]
    gpu, count, _ = traced(case)
    print(f"  torch eager: {wall * 1e3:.3f} ms wall, {gpu:.3f} ms GPU in {count} kernels a step")
    last = case.result()  # after the same 26 steps: three float32 trajectories, pairwise
    print(f"  after 26 steps: new vs torch {gap(results['new conv.py'], last)}, old vs torch "
          f"{gap(results['old conv.py'], last)} (alike to new vs old: rounding grown by training)")  # fmt: skip


if __name__ == "__main__":
    main()
