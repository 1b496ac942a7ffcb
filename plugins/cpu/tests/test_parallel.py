"""Fused elementwise kernels split over threads (ember_cpu.parallel): every chunk runs once, the
caller never waits for a chunk nobody took, errors reach the caller, and a split kernel gives
exactly the serial kernel's values (and float64's within float32 rounding) for contiguous,
strided, broadcast, reversed and in-place operands; the counters show the split path ran."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ember.errors import InvalidArgumentError
from ember.lazy.program import FusedProgram

pytest.importorskip("numba", reason="the numba kernels need numba (pip install 'ember-cpu[numba]')")

from ember_cpu import fusion, parallel  # noqa: E402 - after the skip
from ember_cpu.backend import FUSED  # noqa: E402


@pytest.fixture(autouse=True)
def _small_parts(monkeypatch, tmp_path):
    """Split from 2^12 elements in chunks of 2^9, so that small arrays make many parts."""
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(parallel, "MIN_SPLIT_ELEMENTS", 1 << 12)
    monkeypatch.setattr(parallel, "MIN_SPLIT_ARITHMETIC", 1 << 12)
    monkeypatch.setattr(fusion, "CHUNK_ELEMENTS", 1 << 9)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))


def _with(threads: int, fn):
    """``fn()`` with FUSED's kernels split over ``threads`` threads (1: the serial kernel)."""
    saved = FUSED.splitter
    FUSED.splitter = parallel.Splitter(threads)
    try:
        return fn(), FUSED.splitter.counts
    finally:
        FUSED.splitter = saved


def test_every_chunk_runs_once_and_the_caller_runs_what_no_helper_took():
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def call(lo, hi):
        with lock:
            seen.append((lo, hi))

    s = parallel.Splitter(3)
    s.run(call, 1000, 64)
    assert sorted(seen) == [(lo, min(1000, lo + 64)) for lo in range(0, 1000, 64)]
    assert s.counts["split"] == 1
    seen.clear()
    s.run(call, 10, 64)  # one chunk: the caller alone
    assert seen == [(0, 10)] and s.counts["split"] == 1


def test_a_helper_takes_chunks_while_the_caller_runs_one():
    """The caller's first chunk waits (up to 10 s, never expected) until another thread has run one."""
    helped = threading.Event()
    caller = threading.get_ident()

    def call(lo, hi):
        if threading.get_ident() == caller:
            helped.wait(10)
        else:
            helped.set()

    s = parallel.Splitter(2)
    s.run(call, 8, 1)
    assert helped.is_set() and s.counts["helper_chunks"] >= 1


def test_a_chunks_error_reaches_the_caller():
    def call(lo, hi):
        if lo <= 500 < hi:
            raise ValueError("chunk 500")

    with pytest.raises(ValueError, match="chunk 500"):
        parallel.Splitter(2).run(call, 1000, 10)


def test_the_thread_setting_is_checked(monkeypatch):
    monkeypatch.setattr(parallel, "PARALLEL", False)
    monkeypatch.setenv("EMBER_CPU_FUSED_THREADS", "3")
    assert parallel._threads() == 3
    monkeypatch.setenv("EMBER_CPU_FUSED_THREADS", "")
    assert parallel._threads() == parallel._cores()
    monkeypatch.setenv("EMBER_CPU_FUSED_THREADS", "0")
    with pytest.raises(InvalidArgumentError, match="EMBER_CPU_FUSED_THREADS='0': expected threads"):
        parallel._threads()
    monkeypatch.setenv("EMBER_CPU_FUSED_THREADS", "4")
    monkeypatch.setattr(parallel, "PARALLEL", True)  # numba's own parallel loops: nothing split
    assert parallel._threads() == 1


def _chain() -> FusedProgram:
    """``gelu((x + bias) * col + t - rev) * sigmoid(x)`` and the sum before gelu."""
    inputs = tuple(("float32", "tensor") for _ in range(5))
    body = (
        ("add", "float32", (0, 1)),  # 5
        ("mul", "float32", (5, 2)),  # 6
        ("add", "float32", (6, 3)),  # 7
        ("sub", "float32", (7, 4)),  # 8
        ("gelu", "float32", (8,)),  # 9
        ("sigmoid", "float32", (0,)),  # 10
        ("mul", "float32", (9, 10)),  # 11
    )
    return FusedProgram(inputs, body, (11, 8))


def _reference(x, bias, col, t, rev):
    from math import erf

    v = (x.astype(np.float64) + bias) * col + t - rev
    gelu = 0.5 * v * (1 + np.vectorize(erf)(v / np.sqrt(2)))
    return gelu / (1 + np.exp(-x.astype(np.float64))), v


@pytest.mark.parametrize(
    "layout",
    ["contiguous", "strided"],
)
def test_a_split_kernel_matches_the_serial_kernel_bit_for_bit(layout):
    gen = np.random.default_rng(7)
    shape = (37, 3, 129)  # 14319 elements: parts of 2^9 elements, a ragged last one
    x = gen.standard_normal(shape).astype(np.float32)
    if layout == "contiguous":  # one flat loop: every input c, or z (one element)
        operands = [x, *(gen.standard_normal(shape).astype(np.float32) for _ in range(2))]
        operands += [gen.standard_normal(shape).astype(np.float32), np.full((1, 1, 1), 0.25, np.float32)]
        modes = ("c", "c", "c", "c", "z")
    else:  # a loop nest: r (bias), b (a column), f (a transposed view), s (a reversed view)
        operands = [
            x,
            gen.standard_normal(129).astype(np.float32),
            gen.standard_normal((37, 3, 1)).astype(np.float32),
            gen.standard_normal((129, 3, 37)).astype(np.float32).T,
            gen.standard_normal(shape).astype(np.float32)[::-1],
        ]
        modes = ("c", "r", "b", "f", "s")
    prog = _chain()
    assert fusion.plan(shape, operands)[0].modes == modes
    serial, counts1 = _with(1, lambda: FUSED.run(prog, operands, shape))
    split, counts2 = _with(2, lambda: FUSED.run(prog, operands, shape))
    assert counts1["split"] == 0 and counts2["split"] == 1, "the kernel was not split"
    for s, p in zip(serial, split):
        np.testing.assert_array_equal(p, s)
    y, v = _reference(*operands)
    np.testing.assert_allclose(split[1], v, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(split[0], y, rtol=1e-5, atol=1e-6)


def test_a_split_kernel_writes_its_operand_in_place():
    gen = np.random.default_rng(8)
    shape = (100, 64)
    inputs = (("float32", "tensor"), ("float32", "tensor"), ("float32", "scalar"))
    prog = FusedProgram(inputs, (("mul", "float32", (1, 2)), ("sub", "float32", (0, 3))), (4,))
    p = gen.standard_normal(shape).astype(np.float32)
    g = gen.standard_normal(shape).astype(np.float32)
    want = p.astype(np.float64) - np.float32(0.5) * g.astype(np.float64)
    in_place = FUSED.counts["in_place"]
    got, counts = _with(2, lambda: FUSED.run(prog, [p, g, 0.5], shape, outs=[p]))
    assert counts["split"] == 1 and FUSED.counts["in_place"] == in_place + 1 and got[0] is p
    np.testing.assert_allclose(p, want, rtol=1e-6, atol=1e-6)


def test_a_kernel_is_left_whole_while_other_processes_hold_the_cores():
    s = parallel.Splitter(2)
    s.load = parallel.Load()
    s.load.cores, s.load.others, s.load._next = 2, 1.5, float("inf")  # measured: 1.5 cores busy elsewhere
    seen = []
    s.run(lambda lo, hi: seen.append((lo, hi)), 100, 10)
    assert seen == [(0, 100)] and s.counts["busy"] == 1 and s.counts["split"] == 0
    s.load.others = 0.2
    s.run(lambda lo, hi: seen.append((lo, hi)), 100, 10)
    assert s.counts["split"] == 1


def test_arithmetic_alone_splits_only_from_a_larger_size(monkeypatch):
    """A kernel of arithmetic alone (memory-bound) splits from MIN_SPLIT_ARITHMETIC elements, one
    with a transcendental op from MIN_SPLIT_ELEMENTS."""
    monkeypatch.setattr(parallel, "MIN_SPLIT_ARITHMETIC", 1 << 14)
    gen = np.random.default_rng(9)
    shape = (64, 128)  # 2^13 elements
    x = gen.standard_normal(shape).astype(np.float32)
    inputs = (("float32", "tensor"),)
    arith = FusedProgram(inputs, (("mul", "float32", (0, 0)), ("add", "float32", (1, 0))), (2,))
    heavy = FusedProgram(inputs, (("sigmoid", "float32", (0,)),), (1,))
    (got,), counts = _with(2, lambda: FUSED.run(arith, [x], shape))
    assert counts["split"] == 0
    np.testing.assert_allclose(got, x.astype(np.float64) ** 2 + x, rtol=1e-6, atol=1e-6)
    (got,), counts = _with(2, lambda: FUSED.run(heavy, [x], shape))
    assert counts["split"] == 1
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6, atol=1e-7)
