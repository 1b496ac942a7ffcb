"""What giving a buffer back costs the host on an OpenCL device, and what the pool's releases cost W3/W4.

    python plugins/opencl/scripts/release_cost.py opencl:0 gpu        # from the repository root
    SPIN=2 python plugins/opencl/scripts/release_cost.py opencl:0 quick   # PoCL: a short spin kernel
    MICRO=0 ...                                                     # the training steps only
    WORKLOADS=W2,W3 ...                                             # which workloads (default W3,W4)

First the driver alone (pyopencl): create / first fill / release of idle buffers, then, while a ~3 ms
kernel runs, how long a release of an unrelated buffer, a create, and a release of the kernel's own
buffer take on the host; then the way ember-opencl's :class:`~ember_opencl.release.Releaser` gives a
buffer back (a retain through ctypes, pyopencl's release, the last release on a thread beside 20
launches). Then W3 and W4 (``gpu`` or ``quick`` sizes) under ``static`` and ``adaptive``, 12 steps each,
a line per step: its wall time, the pool's driver allocations and releases and the host time inside
them, requests served by no free buffer (misses) and by the step plan (planned). Written for NVIDIA's
driver 580 (plugins/cuda/logs/h100-2026-12-06-eve/probe-release), where a release waits for the queue.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading
import time
from typing import Any

import numpy as np
import pyopencl as cl

import ember as em
from benchmarks import w2_mlp, w3_cnn, w4_transformer

SPIN = """__kernel void spin(__global float* a, int n) { int i = get_global_id(0);
    float x = a[i]; for (int k = 0; k < n; k++) x = x * 0.999f + 0.001f; a[i] = x; }"""


def micro(rt: Any, n: int) -> None:
    """The driver's own costs (see the module's docstring)."""
    ctx, q = rt.context, rt.queue
    spin = cl.Kernel(cl.Program(ctx, SPIN).build(), "spin")
    mb = 16 << 20

    def ms(t: float) -> str:
        return f"{(time.perf_counter() - t) * 1e3:.3f} ms"

    t = time.perf_counter()
    bufs = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, mb) for _ in range(50)]
    print(f"create 50 x 16 MiB: {(time.perf_counter() - t) / 50 * 1e6:.1f} us each")
    t = time.perf_counter()
    for b in bufs:
        cl.enqueue_fill_buffer(q, b, np.float32(0), 0, mb)
    q.finish()
    print(f"first fill of 50 (then finish): {(time.perf_counter() - t) / 50 * 1e6:.1f} us each")
    t = time.perf_counter()
    for b in bufs:
        b.release()
    print(f"release 50 idle: {(time.perf_counter() - t) / 50 * 1e6:.1f} us each")

    a, other = (cl.Buffer(ctx, cl.mem_flags.READ_WRITE, mb) for _ in range(2))
    for b in (a, other):
        cl.enqueue_fill_buffer(q, b, np.float32(1), 0, mb)
    q.finish()
    t = time.perf_counter()
    spin(q, (mb // 4,), None, a, np.int32(n))
    q.finish()
    print(f"spin kernel alone: {ms(t)}")
    spin(q, (mb // 4,), None, a, np.int32(n))
    t = time.perf_counter()
    other.release()
    print(f"while it runs: release an unrelated buffer {ms(t)}", end="")
    t = time.perf_counter()
    c = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, mb)
    print(f", create {ms(t)}", end="")
    t = time.perf_counter()
    a.release()
    print(f", release the kernel's own {ms(t)}", end="")
    t = time.perf_counter()
    q.finish()
    print(f", then finish {ms(t)}")

    lib = ctypes.CDLL("libOpenCL.so.1")
    lib.clRetainMemObject.argtypes = lib.clReleaseMemObject.argtypes = [ctypes.c_void_p]
    f = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, mb)
    cl.enqueue_fill_buffer(q, f, np.float32(1), 0, mb)
    q.finish()
    spin(q, (mb // 4,), None, c, np.int32(n))
    t = time.perf_counter()
    handle = f.int_ptr
    lib.clRetainMemObject(handle)
    f.release()
    print(f"while it runs: retain + pyopencl's (not last) release {ms(t)}", end="")
    thread = threading.Thread(target=lib.clReleaseMemObject, args=(handle,))
    t = time.perf_counter()
    thread.start()
    for _ in range(20):
        spin(q, (1024,), None, c, np.int32(1))
    print(f"; 20 launches beside the thread's last release {ms(t)}", end="")
    thread.join()
    print(f", the thread done at {ms(t)}")
    q.finish()
    c.release()


def steps(spec: str, sizes: str, module: Any, strategy: str, n: int = 12) -> None:
    """``n`` steps of ``module`` under ``strategy``, a line each (see the module's docstring)."""
    dev = em.Device(spec, memory=strategy)
    gc.collect()
    dev.synchronize()
    dev.memory.empty_cache()
    acc = {"alloc": [0, 0.0], "release": [0, 0.0]}
    pools = dev.memory.pools()
    originals = [(pool, pool._allocate, pool._release) for pool in pools]

    def timed(fn: Any, key: str) -> Any:
        def call(arg: Any) -> Any:
            t = time.perf_counter()
            out = fn(arg)
            acc[key][0] += 1
            acc[key][1] += time.perf_counter() - t
            return out

        return call

    for pool, allocate, release in originals:
        pool._allocate, pool._release = timed(allocate, "alloc"), timed(release, "release")
    case = module.ember(dev, module.SIZES[sizes])
    print(f"== {module.__name__} {strategy}: step ms, allocs, alloc ms, releases, release ms, misses, planned")
    for i in range(n):
        before = {k: tuple(v) for k, v in acc.items()}
        misses, planned = sum(p.misses for p in pools), sum(p.planned for p in pools)
        t = time.perf_counter()
        out = case.step()
        case.sync()
        dt = time.perf_counter() - t
        del out
        allocs, alloc_s = (acc["alloc"][k] - before["alloc"][k] for k in (0, 1))
        frees, free_s = (acc["release"][k] - before["release"][k] for k in (0, 1))
        print(
            f"  {i:2d} {dt * 1e3:8.2f} {allocs:4d} {alloc_s * 1e3:7.2f} {frees:4d} {free_s * 1e3:7.2f}"
            f" {sum(p.misses for p in pools) - misses:4d} {sum(p.planned for p in pools) - planned:4d}"
        )
    stats = dev.memory_stats()
    reserved, in_use = stats["peak_reserved_bytes"] >> 20, stats["peak_in_use_bytes"] >> 20
    print(f"  peak reserved {reserved} MiB, peak in use {in_use} MiB")
    for pool, allocate, release in originals:
        pool._allocate, pool._release = allocate, release
    del case
    gc.collect()
    dev.synchronize()


def main() -> None:
    spec = sys.argv[1] if len(sys.argv) > 1 else "opencl:0"
    sizes = sys.argv[2] if len(sys.argv) > 2 else "gpu"
    dev = em.Device(spec)
    if dev.kind == "opencl":  # the driver's own costs; other devices: the training steps only
        rt = dev.backend.rt
        mode = os.environ.get("EMBER_OPENCL_RELEASE")
        print(dev, "| EMBER_OPENCL_RELEASE:", mode, "| releaser:", rt.releaser is not None)
        if os.environ.get("MICRO", "1") != "0":
            micro(rt, int(os.environ.get("SPIN", "20000")))
    chosen = os.environ.get("WORKLOADS", "W3,W4").split(",")
    modules = {"W2": w2_mlp, "W3": w3_cnn, "W4": w4_transformer}
    for module in (modules[w.strip()] for w in chosen):
        for strategy in ("static", "adaptive"):
            steps(spec, sizes, module, strategy)


if __name__ == "__main__":
    main()
