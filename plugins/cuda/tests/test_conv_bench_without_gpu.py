"""``scripts/conv_bench.py`` run through once without a GPU, so the lead's one run on an H100 does
not stop at a slip: its kernels on the CPU (``conv_on_cpu.FakeCupy``) at batch 2, torch hidden,
events and the spin kernel stand-ins. Checks every case ran and no case failed; the times are
meaningless here."""

from __future__ import annotations

import importlib
import os
import sys
from types import SimpleNamespace
from typing import Any

import conv_on_cpu
import numpy as np
import pytest

import ember as em

pytestmark = pytest.mark.skipif(not conv_on_cpu.available(), reason="g++ is not installed")

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "scripts")


class _Stream:
    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def synchronize(self) -> None:
        return None


class _Event:
    def record(self, stream: Any = None) -> None:
        return None

    def synchronize(self) -> None:
        return None


def _fake_cupy() -> conv_on_cpu.FakeCupy:
    cp = conv_on_cpu.FakeCupy(sms=2)
    cp.float32 = np.float32
    cp.abs = np.abs
    cp.cuda.Device = lambda: SimpleNamespace(attributes={"MultiProcessorCount": 2, "ClockRate": 1000})
    cp.cuda.Event = _Event
    cp.cuda.get_elapsed_time = lambda a, b: 1.0
    cp.cuda.runtime = SimpleNamespace(getDeviceProperties=lambda i: {"name": b"a stand-in"})
    cp.RawKernel = lambda code, name: lambda grid, block, args: None  # the spin kernel

    class _Random:
        def __init__(self, seed: int) -> None:
            self.rng = np.random.default_rng(seed)

        def standard_normal(self, shape: Any, dtype: Any = np.float64) -> Any:
            return cp.asarray(self.rng.standard_normal(shape).astype(dtype))

    cp.random = SimpleNamespace(default_rng=_Random)
    return cp


def test_the_bench_runs_every_case(monkeypatch, capsys) -> None:  # noqa: ANN001
    cp = _fake_cupy()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a shared kernel was called")

    table = {"matmul": cp.matmul}
    backend = SimpleNamespace(
        cp=cp, stream=_Stream(), synchronize=lambda: None, implementation=lambda op: table.get(op, refuse)
    )
    monkeypatch.setattr(em.Device, "cuda", staticmethod(lambda index=0: SimpleNamespace(backend=backend)))
    monkeypatch.setenv("CONV_BENCH_BATCH", "2")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    monkeypatch.syspath_prepend(SCRIPTS)
    sys.modules.pop("conv_bench", None)
    bench = importlib.import_module("conv_bench")
    try:
        bench.main()
    finally:
        sys.modules.pop("conv_bench", None)
    out = capsys.readouterr().out
    assert "FAILED" not in out and "LARGE DIFFERENCES" not in out, out
    assert "torch is not installed" in out and "no W3 step section" in out
    assert "old" not in out, out  # the previous kernels are gone from the bench
    # without torch each layout is checked against the default one (implicit GEMM): 2 forward, 2
    # weight-grad and 2 input-grad column layouts of conv2, 4 of conv1 and its implicit weight gradient
    assert "max|ember - default|/max|default|" in out and "results against default: 11 within 1e-4" in out, out
    cases = ["conv1 im2col", "conv2 col2im", "swap01", "pool2 max_pool_backward", "conv2 input grad, columns, swap"]
    cases += ["conv1 weight grad, columns, per-sample partials", "conv2 forward, columns, one GEMM"]
    cases += ["conv1 forward, columns, by sample", "conv1 weight grad, implicit GEMM"]
    cases += ["conv2 input grad, columns, by sample", "sum of the ops", "conv launches: {"]
    for case in cases:
        assert case in out, (case, out)
    # every kernel of conv.py ran
    ran = {name.removesuffix("_float") for name in cp.launches}
    assert {"ember_im2col", "ember_col2im", "ember_swap01v", "ember_max_pool", "ember_max_pool_backward_tiled",
            "ember_pack_weight", "ember_im2col3x3", "ember_col2im3x3",
            "ember_max_pool_backward_tiled2x2", "ember_igemm_conv32", "ember_igemm_conv64", "ember_igemm_transpose32",
            "ember_igemm_wgrad64", "ember_igemm_sum"} <= ran, ran  # fmt: skip
