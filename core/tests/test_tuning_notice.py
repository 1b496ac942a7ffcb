"""A GEMM tuned on first use says so (TuningNotice), with the budget and how to skip it."""

from __future__ import annotations

import warnings

import pytest

from ember.tuning import AUTOTUNE_FLOPS, GemmTuner, TuningNotice


class _Tuner(GemmTuner):
    backend = "fake"

    def __init__(self) -> None:
        super().__init__()
        self.tuned: list[tuple[int, int, int]] = []

    def identity(self, rt):  # noqa: ANN001, ANN201
        return ("Fake GPU 9000", "1.0")

    def is_cpu(self, rt) -> bool:  # noqa: ANN001
        return False

    def tune(self, rt, dt, M, N, K, **kw):  # noqa: ANN001, ANN003, ANN201
        self.tuned.append((M, N, K))
        return None, []


class _Rt:
    pass


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):  # noqa: ANN001, ANN202
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMBER_AUTOTUNE", raising=False)
    monkeypatch.setenv("EMBER_AUTOTUNE_BUDGET", "7")


def test_first_use_tuning_is_announced() -> None:
    tuner, rt = _Tuner(), _Rt()
    with pytest.warns(TuningNotice, match=r"tuning float32 GEMM .* Fake GPU 9000 for up to 7 s.*EMBER_AUTOTUNE=0"):
        tuner.lookup(rt, "float32", 4096, 4096, 4096)
    assert tuner.tuned == [(4096, 4096, 4096)]


def test_no_notice_without_tuning(monkeypatch) -> None:  # noqa: ANN001
    tuner, rt = _Tuner(), _Rt()
    small = round(AUTOTUNE_FLOPS ** (1 / 3)) // 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", TuningNotice)
        tuner.lookup(rt, "float32", small, small, small)  # below the size that tunes
        monkeypatch.setenv("EMBER_AUTOTUNE", "0")
        tuner.lookup(rt, "float32", 4096, 4096, 4096)  # switched off
    assert tuner.tuned == []
