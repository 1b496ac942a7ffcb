"""Standard workloads W2, W5, W6 (shared/WORKLOADS.md) on an OpenCL device, and cold/warm start.

    python plugins/opencl/scripts/bench.py --device opencl:0 [--gpu] [--only W2,W5,W6] [--start]

``--start`` times two fresh processes to the first W2 result: one with an empty kernel cache
(cold: every kernel compiled) and one reusing it (warm: binaries loaded from disk). Prints
one JSON object per measurement.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()  # before importing ember: the first-result clock starts here

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402


def emit(**kw: object) -> None:
    print(json.dumps(kw), flush=True)


def median_ms(fn, dev, warmup: int = 3, iters: int = 10) -> float:
    for _ in range(warmup):
        fn()
    dev.synchronize()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        dev.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def mlp(em, dev, batch: int, hidden: int):
    """W2: Linear(784,h)-ReLU-Linear(h,h)-ReLU-Linear(h,10), CE, backward, SGD(0.01); returns step()."""
    rng = np.random.default_rng(0)
    ad = dev.autodiff()

    def param(shape):
        bound = 1.0 / np.sqrt(shape[0])
        return em.tensor(rng.uniform(-bound, bound, shape).astype(np.float32), device=ad, requires_grad=True)

    params = [param((784, hidden)), param((hidden,)), param((hidden, hidden)), param((hidden,))]
    params += [param((hidden, 10)), param((10,))]
    x = em.tensor(rng.standard_normal((batch, 784)).astype(np.float32), device=ad)
    y = em.tensor(rng.integers(0, 10, size=batch), device=ad)

    def step():
        w1, b1, w2, b2, w3, b3 = params
        h = em.relu(x @ w1 + b1)
        h = em.relu(h @ w2 + b2)
        loss = em.cross_entropy(h @ w3 + b3, y)
        loss.backward()
        with em.no_grad():
            for p in params:
                p.copy_(p - 0.01 * p.grad)
                p.grad = None
        return loss

    return step


def w2(em, dev, gpu: bool) -> None:
    batch, hidden = (4096, 4096) if gpu else (128, 1024)
    step = mlp(em, dev, batch, hidden)
    ms = median_ms(step, dev)
    emit(workload="W2", device=str(dev), batch=batch, hidden=hidden, median_ms=round(ms, 3))


def w5(em, dev, gpu: bool, tiling: str | None = None) -> None:
    n = 8192 if gpu else 2048
    rng = np.random.default_rng(0)
    a = em.tensor(rng.standard_normal((n, n)).astype(np.float32), device=dev)
    b = em.tensor(rng.standard_normal((n, n)).astype(np.float32), device=dev)
    if tiling:
        from ember_opencl.matmul import TILINGS, matmul

        rt = dev.backend.rt
        t = TILINGS[tiling]

        def run():
            return matmul(rt, a._data, b._data, t)

    else:

        def run():
            return a @ b

    ms = median_ms(run, dev, warmup=2, iters=5 if gpu else 3)
    gflops = 2 * n**3 / (ms * 1e-3) / 1e9
    emit(workload="W5", device=str(dev), n=n, tiling=tiling or "auto", median_ms=round(ms, 3), gflops=round(gflops, 1))


def w6(em, dev, gpu: bool) -> None:
    n = 2**26 if gpu else 2**22
    rng = np.random.default_rng(0)
    x, a, b = (em.tensor(rng.standard_normal(n).astype(np.float32), device=dev) for _ in range(3))
    ms = median_ms(lambda: em.gelu(x * a + b) * em.sigmoid(x), dev)
    emit(workload="W6", variant="unfused (5 kernels)", device=str(dev), n=n, median_ms=round(ms, 3),
         gbps=round(16 * n / (ms * 1e-3) / 1e9, 1))  # fmt: skip
    from ember_opencl.codegen import FusedProgram

    prog = FusedProgram(
        (("float32", "tensor"),) * 3,
        (
            ("mul", "float32", (0, 1)),
            ("add", "float32", (3, 2)),
            ("gelu", "float32", (4,)),
            ("sigmoid", "float32", (0,)),
            ("mul", "float32", (5, 6)),
        ),
        (7,),
    )
    be = dev.backend
    ms = median_ms(lambda: be.run_fused(prog, [x._data, a._data, b._data], shape=(n,)), dev)
    emit(workload="W6", variant="one generated kernel", device=str(dev), n=n, median_ms=round(ms, 3),
         gbps=round(16 * n / (ms * 1e-3) / 1e9, 1))  # fmt: skip


def first_result(device: str, gpu: bool) -> None:
    """Run in a child: the time from process start to the first W2 loss on the host."""
    import ember as em

    dev = em.Device(device)
    batch, hidden = (4096, 4096) if gpu else (128, 1024)
    loss = mlp(em, dev, batch, hidden)()
    value = float(loss.item())
    cache = dev.memory_stats()["extra"]["kernel_cache"]
    emit(first_result_s=round(time.perf_counter() - T0, 3), loss=value, builds=cache["builds"],
         disk_loads=cache["disk_loads"])  # fmt: skip


def start(device: str, gpu: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, EMBER_CACHE_DIR=tmp)
        # the drivers keep caches of their own: start those empty too, and share them between the runs
        env.update(POCL_CACHE_DIR=os.path.join(tmp, "pocl"), CUDA_CACHE_PATH=os.path.join(tmp, "nv"))
        for label in ("cold", "warm"):
            cmd = [sys.executable, __file__, "--device", device, "--first-result"] + (["--gpu"] if gpu else [])
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            emit(workload="W2 first result", start=label, device=device, **result)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--gpu", action="store_true", help="GPU sizes (W2 batch/hidden 4096, W5 8192^3, W6 2^26)")
    ap.add_argument("--only", default="W2,W5,W6")
    ap.add_argument("--tilings", default="", help="comma-separated matmul tilings to time for W5 (see matmul.TILINGS)")
    ap.add_argument("--start", action="store_true", help="also time cold and warm starts to the first W2 result")
    ap.add_argument("--no-pool", action="store_true", help="allocate every buffer from the driver (no reuse)")
    ap.add_argument("--first-result", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.first_result:
        first_result(args.device, args.gpu)
        return
    import ember as em

    dev = em.Device(args.device)
    if args.no_pool:
        dev.backend.rt.pool.cache_limit = 0  # every freed buffer goes back to the driver
        dev.backend.empty_cache()
    emit(device=str(dev), describe=dev.describe(), pool=not args.no_pool)
    only = set(args.only.split(","))
    if "W2" in only:
        w2(em, dev, args.gpu)
    if "W5" in only:
        w5(em, dev, args.gpu)
        for t in filter(None, args.tilings.split(",")):
            w5(em, dev, args.gpu, t)
    if "W6" in only:
        w6(em, dev, args.gpu)
    if args.start:
        start(args.device, args.gpu)
    emit(memory=dev.memory_stats())


if __name__ == "__main__":
    main()
