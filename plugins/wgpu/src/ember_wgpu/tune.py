"""GEMM tuning: time candidate :class:`~.kernels.matmul.Config` s on the adapter, cache the fastest.

The shape classes, timing loop, store and CLI are core's (:mod:`ember.tuning`); this module adds the
wgpu part: the config family, the adapter-limit filter, and how a product is run and read back. A
choice is kept per (adapter, driver, dtype, shape class) in a :class:`ember.kernel_cache.KernelCache`
named ``wgpu-tuning`` (``ember.config.cache_dir() / "wgpu-tuning" / <device folder>``), so writes are
atomic and a torn or corrupt entry reads as "not tuned". Candidates that break the adapter's limits
(workgroup storage, invocations, workgroup size) are never tried. The shape class buckets each of M,
N and K as small (< 128), medium (< 2048) or large. ``python -m ember_wgpu.tune`` tunes from the
command line; a large GEMM (M N K >= 2**30) on a GPU adapter with no cached choice is tuned on
first use within ``EMBER_AUTOTUNE_BUDGET`` seconds (default 20) unless ``EMBER_AUTOTUNE=0``.
Every candidate is checked against numpy on an odd shape before it is timed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from ember.tuning import AUTOTUNE_FLOPS as AUTOTUNE_FLOPS
from ember.tuning import GemmTuner
from ember.tuning import shape_class as shape_class

from . import adapters
from .kernels.matmul import Config, fits, matmul
from .runtime import Runtime

__all__ = ["LARGE", "shape_class", "candidates", "lookup", "record", "tune", "forget", "store_for", "main"]

#: the family searched: (bm, bn, bk, tm, tn, vec, split, pf[, sw]); `fits` drops what an adapter cannot
#: run. First (what a first-use tune within its budget reaches): the layouts fast SGEMMs use at
#: 4096-8192 (128x128 tile, 8x8 or 8x16 per thread, strided vec4 blocks, register prefetch into two
#: shared buffers); :data:`LARGE` is the sweep's subset, with the previous "deep" and "large".
_FAMILY = [
    (128, 128, 8, 8, 8, True, True, True),
    (128, 128, 16, 8, 8, True, True, True),
    (128, 128, 8, 8, 8, True, True, False),
    (128, 128, 16, 8, 8, True, True, False),
    (128, 256, 8, 8, 16, True, True, True),
    (256, 128, 8, 16, 8, True, True, True),
    (128, 128, 8, 8, 16, True, True, True),
    # the first and the 128x256 walking the tiles in bands (sw: L2 reuse between resident workgroups)
    (128, 128, 8, 8, 8, True, True, True, 8),
    (128, 256, 8, 8, 16, True, True, True, 8),
    (64, 128, 8, 8, 8, True, True, True),
    (128, 64, 8, 8, 8, True, True, True),
    (128, 128, 16, 8, 4, True, True, True),
    (128, 128, 32, 8, 8, True, True, False),
    (64, 64, 16, 4, 4, True, True, True),
    (128, 128, 16, 8, 8, True),
    (128, 128, 8, 8, 8, True),
    (128, 128, 32, 8, 8, True),
    (128, 128, 16, 8, 8, False),
    (128, 64, 16, 8, 8, True),
    (64, 128, 16, 8, 8, True),
    (128, 256, 8, 8, 16, True),
    (256, 128, 8, 16, 8, True),
    (128, 128, 16, 8, 4, True),
    (128, 128, 16, 4, 8, True),
    (64, 64, 16, 4, 4, True),
    (64, 64, 32, 8, 8, True),
    (64, 64, 16, 4, 4, False),
    (32, 32, 16, 4, 4, True),
]
#: the candidates the H200 sweep (benchmarks/gemm_sweep.py) times at 2048-8192
LARGE = _FAMILY[:16]


class _WgpuTuner(GemmTuner[Runtime, Config]):
    """The wgpu part of the GEMM tuner: configs, the adapter-limit filter, run and read back."""

    backend = "wgpu"
    device_kind = "wgpu adapter"
    device_help = "adapter index (as in wgpu:N)"
    config_type = Config
    family = _FAMILY

    def fits(self, rt: Runtime, c: Config, dt: str) -> bool:
        return fits(rt, c)  # the adapter's limits do not depend on the dtype

    def identity(self, rt: Runtime) -> tuple[str, str]:
        return adapters.cache_identity(rt.adapter)

    def is_cpu(self, rt: Runtime) -> bool:
        return str(rt.adapter.info.get("adapter_type", "")).lower() == "cpu"

    def matmul(self, rt: Runtime, a: Any, b: Any, c: Config) -> Any:
        return matmul(rt, a, b, c)

    def sync(self, rt: Runtime) -> None:
        rt.synchronize()

    def download(self, rt: Runtime, arr: Any) -> np.ndarray:
        return rt.read([arr])[0]

    def transposed(self, rt: Runtime, arr: Any) -> Any:
        rows, cols = arr.shape
        return arr.with_layout((cols, rows), (1, cols), arr.offset)

    def check_shape(self, c: Config) -> tuple[int, int, int]:
        return c.bm + 3, 36, c.bn + 4

    def label(self, rt: Runtime, args: argparse.Namespace) -> str:
        return f"wgpu:{args.device} ({rt.name})"

    def runtime(self, args: argparse.Namespace) -> Runtime:
        return Runtime(args.device)

    def record(self, rt: Runtime, dt: str, cls: str, c: Config, gflops: float | None = None) -> bool:
        """Store the choice, and drop ``rt``'s launch plans: a matmul plan holds the choice it was made with."""
        rt.plans.clear()
        return super().record(rt, dt, cls, c, gflops)

    def forget(self, rt: Runtime) -> None:
        rt.plans.clear()
        super().forget(rt)


_TUNER = _WgpuTuner()
store_for = _TUNER.store_for
_key = _TUNER.key
forget = _TUNER.forget
lookup = _TUNER.lookup
record = _TUNER.record
tune = _TUNER.tune
main = _TUNER.main


def candidates(rt: Runtime) -> list[Config]:
    """The configs worth timing on ``rt`` (those within its limits)."""
    return _TUNER.candidates(rt, "float32")


if __name__ == "__main__":
    sys.exit(main())
