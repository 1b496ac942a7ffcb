"""A product with a transposed operand runs the config tuned for that operand layout (the tuner's
``class/tB`` choice, ember.tuning), a row-major one its class's choice; both against numpy float64."""

from __future__ import annotations

import numpy as np
import pytest

from ember import dtypes as D
from ember_conformance.tuning_checks import check_layout_choice_runs
from ember_wgpu import tune
from ember_wgpu.kernels import matmul

PLAIN = matmul.Config(32, 32, 16, 4, 4, True)
FOR_TB = matmul.Config(64, 32, 16, 4, 4, True)


@pytest.fixture
def stored(rt, tmp_path, monkeypatch):
    """Choices stored in ``tmp_path`` (no tuning: EMBER_AUTOTUNE=0), forgotten afterwards."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")
    tune.forget(rt)
    yield rt
    tune.forget(rt)


def _ran(rt, cfg):
    return any(isinstance(k, tuple) and k[:1] == ("matmul",) and k[3] == cfg for k in rt.kernels)


def test_a_transposed_operand_runs_its_layouts_choice(stored):
    rt = stored
    for key in [k for k in rt.kernels if isinstance(k, tuple) and k[:1] == ("matmul",)]:
        del rt.kernels[key]

    def product(a, b, transposed):
        bv = rt.upload(np.ascontiguousarray(b.T), D.float32).permute((1, 0)) if transposed else rt.upload(b, D.float32)
        return rt.read([matmul.matmul(rt, rt.upload(a, D.float32), bv)])[0]

    check_layout_choice_runs(tune, rt, PLAIN, FOR_TB, product, lambda cfg: _ran(rt, cfg))


def test_the_tuner_times_transposed_views(stored):
    """A layout's tuning runs the candidates on transposed views and checks them against numpy."""
    rt = stored
    best, rows = tune.tune(rt, "float32", 40, 72, 36, choices=[PLAIN, FOR_TB], budget_s=60, reps=1, layout="tAtB")
    assert best in (PLAIN, FOR_TB) and all("gflops" in r for r in rows), rows
    assert tune.lookup(rt, "float32", 40, 72, 36, "tAtB") == best
