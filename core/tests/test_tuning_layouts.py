"""A GEMM with transposed operands gets its own tuned choice: the row-major class is tuned first (the
whole family), then the layout among that choice and the family's leaders, timed on operands in
that layout; a backend without transposed views keeps one choice per class."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from ember.tuning import LEADERS, REFINE, RETIME_ROUNDS, GemmTuner, TuningNotice, shape_class


@dataclasses.dataclass(frozen=True)
class _Cfg:
    name: str

    def valid(self) -> bool:
        return True

    def as_dict(self) -> dict:
        return {"name": self.name}


class _Host:
    """A 'device' whose arrays are numpy arrays (a transposed view is numpy's own)."""

    def upload(self, arr, dtype):  # noqa: ANN001, ANN201
        return np.array(arr)


#: seconds a config takes by operand layout: "fast_tb" loses on row-major operands, wins with B transposed
COST = {"": {"rowmajor": 1.0, "fast_tb": 2.0}, "tB": {"rowmajor": 3.0, "fast_tb": 1.5}}


class _Tuner(GemmTuner):
    backend = "fake"
    config_type = _Cfg
    family = [("rowmajor",), ("fast_tb",)] + [(f"c{i}",) for i in range(REFINE + 3)]

    def __init__(self, views: bool = True) -> None:
        super().__init__()
        self.views = views
        self.timed: list[tuple[str, str]] = []  # (config, layout the operands came in)

    def identity(self, rt):  # noqa: ANN001, ANN201
        return ("Fake GPU", "1.0")

    def is_cpu(self, rt) -> bool:  # noqa: ANN001
        return False

    def fits(self, rt, c, dt) -> bool:  # noqa: ANN001
        return True

    def matmul(self, rt, a, b, c):  # noqa: ANN001, ANN201
        return a.astype(np.float64) @ b

    def sync(self, rt) -> None:  # noqa: ANN001
        pass

    def download(self, rt, arr):  # noqa: ANN001, ANN201
        return np.asarray(arr)

    def transposed(self, rt, arr):  # noqa: ANN001, ANN201
        if not self.views:
            raise NotImplementedError
        return arr.T

    def check_shapes(self, c):  # noqa: ANN001, ANN201
        return [(5, 3, 4)]

    def time(self, rt, c, a, b, reps):  # noqa: ANN001, ANN201
        layout = ("tA" if not a.flags.c_contiguous else "") + ("tB" if not b.flags.c_contiguous else "")
        self.timed.append((c.name, layout))
        return COST.get(layout, {}).get(c.name, 5.0)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):  # noqa: ANN001, ANN202
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMBER_AUTOTUNE", raising=False)
    monkeypatch.setenv("EMBER_AUTOTUNE_BUDGET", "60")


def test_shape_class_names_the_layout() -> None:
    assert shape_class(4096, 4096, 4096) == "lll"
    assert shape_class(784, 4096, 4096, "tA") == "mll/tA"


def test_a_transposed_b_gets_its_own_choice() -> None:
    tuner, rt = _Tuner(), _Host()
    with pytest.warns(TuningNotice):
        got = tuner.lookup(rt, "float32", 2048, 2048, 2048, "tB")
    assert got == _Cfg("fast_tb")
    # the row-major class first (every candidate, plain operands), then the layout on few candidates
    plain = [name for name, layout in tuner.timed if layout == ""]
    with_tb = [name for name, layout in tuner.timed if layout == "tB"]
    n = len(tuner.family)
    assert len(plain) == n + LEADERS * RETIME_ROUNDS and set(plain[:n]) == {spec[0] for spec in tuner.family}
    assert plain[n:] == ["rowmajor", "fast_tb", "c0", "c1"][:LEADERS] * RETIME_ROUNDS  # the fastest, again in turn
    assert with_tb[:REFINE] == ["rowmajor", "fast_tb"] + [f"c{i}" for i in range(REFINE - 2)]  # choice, leaders
    assert tuner.read(rt, "float32", "lll") == _Cfg("rowmajor")
    assert tuner.read(rt, "float32", "lll/tB") == _Cfg("fast_tb")
    tuner.timed.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TuningNotice)
        assert tuner.lookup(rt, "float32", 4096, 4096, 4096, "tB") == _Cfg("fast_tb")  # stored: no tuning
        assert tuner.lookup(rt, "float32", 4096, 4096, 4096) == _Cfg("rowmajor")
    assert tuner.timed == []


def test_layout_refinement_times_the_leaders_only() -> None:
    """A layout's tuning times the class's choice and the family's first REFINE candidates, not the
    family (it costs seconds at first use)."""
    tuner, rt = _Tuner(), _Host()
    tuner.family = [("rowmajor",)] + [(f"c{i}",) for i in range(REFINE + 5)] + [("fast_tb",)]
    with pytest.warns(TuningNotice):
        got = tuner.lookup(rt, "float32", 2048, 2048, 2048, "tB")
    with_tb = [name for name, layout in tuner.timed if layout == "tB"]
    assert with_tb[:REFINE] == ["rowmajor"] + [f"c{i}" for i in range(REFINE - 1)]
    assert set(with_tb[REFINE:]) <= set(with_tb[:REFINE])  # then only leaders, again
    assert got == _Cfg("rowmajor")  # fast_tb is past the leaders: not timed under the layout


def test_a_backend_without_views_keeps_the_class_choice() -> None:
    tuner, rt = _Tuner(views=False), _Host()
    with pytest.warns(TuningNotice):
        assert tuner.lookup(rt, "float32", 2048, 2048, 2048, "tB") == _Cfg("rowmajor")
    assert all(layout == "" for _, layout in tuner.timed)
    tuner.timed.clear()
    assert tuner.lookup(rt, "float32", 2048, 2048, 2048, "tB") == _Cfg("rowmajor")  # not asked again
    assert tuner.timed == []


def test_no_layout_tuning_when_switched_off(monkeypatch) -> None:  # noqa: ANN001
    tuner, rt = _Tuner(), _Host()
    tuner.record(rt, "float32", "lll", _Cfg("rowmajor"))
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")
    assert tuner.lookup(rt, "float32", 4096, 4096, 4096, "tA") == _Cfg("rowmajor")
    assert tuner.timed == []


def test_no_layout_tuning_on_a_cpu_device_or_a_small_product() -> None:
    """As for row-major classes: a CPU device and a product under AUTOTUNE_FLOPS are never tuned on
    first use, so a transposed operand runs the stored row-major choice there."""
    tuner, rt = _Tuner(), _Host()
    tuner.record(rt, "float32", "sss", _Cfg("rowmajor"))
    assert tuner.lookup(rt, "float32", 64, 64, 64, "tB") == _Cfg("rowmajor")  # 2^18 flops: small
    tuner.record(rt, "float32", "lll", _Cfg("rowmajor"))
    tuner.is_cpu = lambda rt: True  # type: ignore[method-assign]
    assert tuner.lookup(rt, "float32", 4096, 4096, 4096, "tB") == _Cfg("rowmajor")
    assert tuner.timed == []


class _ColdTuner(_Tuner):
    """A GPU whose clocks ramp up: a product runs 3x slower until ``ramp`` products have run, and one
    candidate ("lucky") times fast once by chance, so a single pass picks wrongly."""

    def __init__(self, ramp: int) -> None:
        super().__init__()
        self.ramp, self.runs, self.lucky_once = ramp, 0, True
        self.steady = {"rowmajor": 1.0, "fast_tb": 1.2, "lucky": 1.5}

    def matmul(self, rt, a, b, c):  # noqa: ANN001, ANN201
        self.runs += 1
        return super().matmul(rt, a, b, c)

    def time(self, rt, c, a, b, reps):  # noqa: ANN001, ANN201
        self.timed.append((c.name, ""))
        self.runs += reps
        sec = self.steady.get(c.name, 5.0) * (3.0 if self.runs <= self.ramp else 1.0)
        if c.name == "lucky" and self.lucky_once:
            self.lucky_once = False
            return 0.5
        return sec


def test_the_choice_survives_cold_clocks_and_a_lucky_timing(monkeypatch) -> None:  # noqa: ANN001
    """The first candidate timed while the clocks ramp up and a candidate's one lucky timing do
    not decide: the product warms first, and the pass's leaders are timed again in turn."""
    import ember.tuning as tuning

    tuner, rt = _ColdTuner(ramp=10**9), _Host()
    tuner.family = [("rowmajor",), ("fast_tb",), ("lucky",), ("c0",)]
    monkeypatch.setattr(tuning, "WARM_S", 0.0)  # clocks that never ramp up: all slow alike, lucky wins once
    monkeypatch.setattr(tuning, "WARM_EACH_S", 0.0)
    best, rows = tuner.tune(rt, "float32", 256, 256, 256, save=False)
    assert best == _Cfg("rowmajor")  # the second timings (all 3x) still order them right
    assert {"rowmajor", "fast_tb", "lucky"} <= {r["config"]["name"] for r in rows if "retimed" in r}
    # clocks up after 4 runs: unwarmed, the first candidate's pass timing is slow and it misses the
    # leaders (one leader fewer here, so the later ones fill them); warmed at the start or before each
    # candidate's timing, it does not
    monkeypatch.setattr(tuning, "LEADERS", 3)
    for warm_s, warm_each_s, want in ((0.0, 0.0, "fast_tb"), (0.01, 0.0, "rowmajor"), (0.0, 0.01, "rowmajor")):
        tuner = _ColdTuner(ramp=4)
        tuner.steady["c1"] = 1.3
        tuner.family = [("rowmajor",), ("fast_tb",), ("lucky",), ("c1",)]
        monkeypatch.setattr(tuning, "WARM_S", warm_s)
        monkeypatch.setattr(tuning, "WARM_EACH_S", warm_each_s)
        best, _ = tuner.tune(rt, "float32", 256, 256, 256, save=False)
        assert best == _Cfg(want), (warm_s, warm_each_s)
