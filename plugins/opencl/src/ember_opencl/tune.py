"""GEMM tuning: time candidate :class:`~.gemm_source.Tiling` s on the device, cache the fastest.

The shape classes, timing loop, store and CLI are core's (:mod:`ember.tuning`); this module adds the
OpenCL part: the tiling family, the work-group and local-memory filter, and how a product is run and
read back. A choice is kept per (device, driver, dtype, shape class) in a
:class:`ember.kernel_cache.KernelCache` named ``opencl-tuning`` (``ember.config.cache_dir() /
"opencl-tuning" / <device folder>``), so writes are atomic and a torn or corrupt entry reads as "not
tuned". The shape class buckets each of M, N and K as small (< 128), medium (< 2048) or large.
``python -m ember_opencl.tune`` tunes from the command line; a large GEMM (M N K >= 2**30) on a GPU
with no cached choice is tuned within ``EMBER_AUTOTUNE_BUDGET`` seconds (default 20) unless
``EMBER_AUTOTUNE=0``: at its first use after the runtime's first read-back, so a new process's
first result (a first training step's loss) is not held up by the tuner's builds (on an H100, W2's
cold first step took 30.5 s with 53 candidate builds, 3.4 s without): GEMMs before it run the
untuned choice. Every candidate is checked against numpy on an odd shape before it is
timed, so a miscompiled one is never chosen.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from ember.tuning import AUTOTUNE_FLOPS as AUTOTUNE_FLOPS
from ember.tuning import GemmTuner
from ember.tuning import shape_class as shape_class

from .cache import device_name
from .gemm_source import Tiling
from .matmul import as_tuned_runs, fits, tuning_changed
from .runtime import Runtime

__all__ = ["LARGE", "shape_class", "candidates", "lookup", "record", "tune", "forget", "store_for", "main"]

#: the family searched on GPUs: (tm, tn, tk, wm, wn, vw, chunk, db, rp[, sw]); `fits` drops what a device
#: cannot run. First (what a first-use tune within its budget reaches): the layouts fast NVIDIA
#: SGEMMs use at 4096-8192 (128x128 tile, 8x8 or 8x16 per item, k-step 8/16, float4 loads and local
#: reads, A transposed in local memory, register prefetch); :data:`LARGE` is the sweep's subset.
_GPU_FAMILY = [
    (128, 128, 8, 8, 8, 4, 4, True, True),
    (128, 128, 16, 8, 8, 4, 4, True, True),
    (128, 128, 8, 8, 8, 4, 4, False, True),
    (128, 128, 16, 8, 8, 4, 4, False, True),
    (128, 256, 8, 8, 16, 4, 4, True, True),
    (256, 128, 8, 16, 8, 4, 4, True, True),
    # the same two and the first walking the tiles in bands (sw: L2 reuse between concurrent groups)
    (128, 256, 8, 8, 16, 4, 4, True, True, 8),
    (256, 128, 8, 16, 8, 4, 4, True, True, 4),
    (128, 128, 8, 8, 8, 4, 4, True, True, 8),
    (128, 128, 8, 8, 16, 4, 4, True, True),
    (128, 128, 32, 8, 8, 4, 4, False, True),
    (128, 128, 16, 8, 4, 4, 4, True, True),
    (128, 64, 8, 8, 8, 4, 4, True, True),
    (64, 128, 8, 8, 8, 4, 4, True, True),
    (128, 128, 16, 8, 8, 4, 1, False, False),
    (128, 128, 8, 8, 8, 4, 1, False, False),
    (128, 128, 16, 8, 8, 4, 4, False, False),
    (128, 128, 16, 8, 8, 4, 4, True, False),
    (128, 128, 8, 8, 8, 4, 4, True, False),
    (128, 128, 32, 8, 8, 4, 4, False, False),
    (128, 128, 16, 8, 4, 4, 4, True, False),
    (128, 64, 16, 8, 8, 4, 4, True, False),
    (64, 128, 16, 8, 8, 4, 4, True, False),
    (128, 256, 8, 8, 8, 4, 4, True, False),
    (256, 128, 8, 8, 8, 4, 4, True, False),
    (64, 64, 16, 4, 4, 4, 1, False, False),
    (64, 64, 16, 4, 4, 4, 4, True, False),
    (64, 64, 16, 4, 4, 4, 4, True, True),
    (64, 64, 32, 8, 8, 4, 4, True, False),
    (32, 32, 16, 2, 2, 2, 1, False, False),
    (16, 16, 16, 1, 1, 1, 1, False, False),
]
#: the candidates the H200 sweep (benchmarks/gemm_sweep.py) times at 2048-8192: the new register-
#: prefetch layouts, and the previous best (no prefetch) and default (chunk 1) to compare against
LARGE = _GPU_FAMILY[:16]


class _OpenCLTuner(GemmTuner[Runtime, Tiling]):
    """The OpenCL part of the GEMM tuner: tilings, the device filter, run and read back."""

    backend = "opencl"
    device_kind = "OpenCL device"
    device_help = "OpenCL device index (as in opencl:N)"
    config_type = Tiling
    family = _GPU_FAMILY
    entry = "tiling"
    version = 2  # (2: deep products of few tiles timed in their K slices, as_tuned_runs)

    def fits(self, rt: Runtime, c: Tiling, dt: str) -> bool:
        return fits(rt, c, dt)

    def identity(self, rt: Runtime) -> tuple[str, str]:
        return device_name(rt.device), rt.device.driver_version

    def is_cpu(self, rt: Runtime) -> bool:
        return bool(rt.is_cpu)

    def matmul(self, rt: Runtime, a: Any, b: Any, c: Tiling) -> Any:
        return as_tuned_runs(rt, a, b, c)  # (K slices where a plan with c would cut them)

    def lookup(self, rt: Runtime, dt: str, M: int, N: int, K: int, layout: str = "") -> Tiling | None:
        """The cached choice; tuning on first use waits for ``rt``'s first read-back (see above)."""
        if not rt.read_backs:
            own = self.read(rt, dt, shape_class(M, N, K, layout)) if layout else None
            return own or self.read(rt, dt, shape_class(M, N, K))
        return super().lookup(rt, dt, M, N, K, layout)

    def record(self, rt: Runtime, dt: str, cls: str, c: Tiling, gflops: float | None = None) -> bool:
        tuning_changed()  # (matmul's plans made before say which tiling ran until now)
        return super().record(rt, dt, cls, c, gflops)

    def forget(self, rt: Runtime) -> None:
        tuning_changed()
        super().forget(rt)

    def sync(self, rt: Runtime) -> None:
        rt.finish()

    def download(self, rt: Runtime, arr: Any) -> np.ndarray:
        from .elementwise import contiguous  # noqa: PLC0415

        return rt.download(contiguous(rt, arr))

    def transposed(self, rt: Runtime, arr: Any) -> Any:
        (rows, cols) = arr.shape
        return arr.with_layout((cols, rows), (1, cols), arr.offset)

    def check_shape(self, c: Tiling) -> tuple[int, int, int]:
        return c.tm + 3, 37, c.tn + 5

    def check_shapes(self, c: Tiling) -> list[tuple[int, int, int]]:
        # unaligned rows (vload, scalar tails) and aligned ones (the vector-pointer kernel big GEMMs run)
        return [self.check_shape(c), (c.tm + 4, 40, c.tn + 4)]

    def host_dtype(self, dt: str) -> np.dtype:
        return np.dtype(dt) if dt != "bfloat16" else np.dtype(np.float32)

    def label(self, rt: Runtime, args: argparse.Namespace) -> str:
        return rt.label

    def runtime(self, args: argparse.Namespace) -> Runtime:
        return Runtime(args.device)

    def add_arguments(self, ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--include-cpu", action="store_true", help="tune the tiled kernels on a CPU device too")

    def skip(self, rt: Runtime, args: argparse.Namespace) -> str | None:
        if rt.is_cpu and not args.include_cpu:
            return f"{rt.label} is a CPU device: matmul uses the vector kernel there (--include-cpu to tune anyway)"
        return None


_TUNER = _OpenCLTuner()
candidates = _TUNER.candidates
store_for = _TUNER.store_for
_key = _TUNER.key
forget = _TUNER.forget
lookup = _TUNER.lookup
record = _TUNER.record
tune = _TUNER.tune
main = _TUNER.main


if __name__ == "__main__":
    sys.exit(main())
