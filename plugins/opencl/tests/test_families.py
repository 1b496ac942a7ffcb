"""Sibling kernels built as one program (runtime.Family): results unchanged, fewer builds, and the
family's binary stored once and loaded by the next process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ember.dtypes import as_dtype
from ember_opencl import reduce, runtime
from ember_opencl.cache import ProgramCache
from ember_opencl.elementwise import binary_program, run_program, unary_program

F32 = as_dtype("float32")
RNG = np.random.default_rng(10)
X = RNG.uniform(0.5, 2.0, (6, 9)).astype(np.float32)
Y = RNG.uniform(0.5, 2.0, (6, 9)).astype(np.float32)

UNARY = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "expm1": np.expm1, "log1p": np.log1p, "rsqrt": None}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum}


@pytest.fixture
def rt(dev, tmp_path):
    """A runtime of its own (no kernel built yet) whose program cache lives in ``tmp_path``."""
    fresh = runtime.Runtime(dev.index)
    fresh.programs = ProgramCache(fresh.context, fresh.device, fresh.label, directory=tmp_path)
    return fresh


def _unary(rt, op, a):
    return run_program(rt, unary_program(op, "float32", "float32"), [a], a.shape)[0]


def _binary(rt, op, a, b):
    return run_program(rt, binary_program(op, "float32", "float32", False), [a, b], a.shape)[0]


def _reference(op, x):
    fn = UNARY[op]
    return 1.0 / np.sqrt(x) if fn is None else fn(x)


@pytest.mark.parametrize("after", [0, 1])
def test_unary_family_matches_numpy_and_builds_once(rt, monkeypatch, after):
    monkeypatch.setattr(runtime, "FAMILY_AFTER", after)
    x64 = X.astype(np.float64)
    a = rt.upload(X, F32)
    builds = []
    for op in UNARY:
        got = rt.download(_unary(rt, op, a))
        np.testing.assert_allclose(got, _reference(op, x64), rtol=2e-6, atol=1e-7)
        builds.append(rt.programs.stats["builds"])
        assert ("ew", unary_program(op, "float32", "float32"), _layout(rt, op)) in rt._kernels  # its kernel ran
    # after=0: the first op builds the whole group; after=1: the first alone, the second the group
    assert builds == ([1] * len(UNARY) if after == 0 else [1] + [2] * (len(UNARY) - 1))


def _layout(rt, op):
    (key,) = [k for k in rt._kernels if k[0] == "ew" and k[1].instructions[0][0] == op]
    return key[2]


def test_binary_family_on_strided_operands(rt, monkeypatch):
    monkeypatch.setattr(runtime, "FAMILY_AFTER", 1)
    a = rt.upload(X, F32).permute((1, 0))  # strided views: the family of the strided layout
    b = rt.upload(Y, F32).permute((1, 0))
    for op, fn in BINARY.items():
        got = rt.download(_binary(rt, op, a, b))  # (a new contiguous result)
        np.testing.assert_allclose(got, fn(X.T.astype(np.float64), Y.T.astype(np.float64)), rtol=2e-7)
    layouts = {k[2] for k in rt._kernels if k[0] == "ew"}
    assert [lay.in_modes for lay in layouts] == [("s", "s")]
    # add alone, then sub builds the arithmetic group (mul, div and maximum come with it)
    assert rt.programs.stats["builds"] == 2


def test_without_families_each_kernel_builds_alone(rt, monkeypatch):
    monkeypatch.setattr(runtime, "FAMILIES", False)
    a = rt.upload(X, F32)
    for op in UNARY:
        _unary(rt, op, a)
    assert rt.programs.stats["builds"] == len(UNARY)
    for op in ("sum", "max", "min", "prod"):
        reduce.reduce(rt, op, a, (1,), False)
    assert rt.programs.stats["builds"] == len(UNARY) + 4


def test_reductions_come_in_pairs(rt):
    a = rt.upload(X, F32)
    x64 = X.astype(np.float64)
    builds = []
    for op, fn in (("sum", np.sum), ("max", np.max), ("min", np.min), ("prod", np.prod)):
        for axis in (0, 1):
            got = rt.download(reduce.reduce(rt, op, a, (axis,), False))
            np.testing.assert_allclose(got, fn(x64, axis=axis), rtol=2e-6)
        builds.append(rt.programs.stats["builds"])
    assert builds == [1, 2, 2, 2]  # sum with prod at once, then max with min


def test_a_family_that_fails_to_build_falls_back_to_single_kernels(rt, monkeypatch):
    monkeypatch.setattr(runtime, "FAMILY_AFTER", 0)
    source = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }"
    broken = runtime.Family("broken", lambda: ("__kernel void twice( {", [("twice", "twice", [None])]))
    knl, _ = rt.kernel("twice", lambda: (source, "twice", [None]), broken)
    assert knl.function_name == "twice"
    a = rt.upload(X.ravel(), F32)
    rt.launch(knl, (a.size,), None, [a.buf])  # (a background build: the fallback happens when it is needed)
    np.testing.assert_array_equal(rt.download(a), 2 * X.ravel())
    assert rt.programs.stats["builds"] == 2  # the family's failed build, then the kernel alone
    rt.kernel("other", lambda: (source, "twice", [None]), broken)  # a failed family is not tried again
    assert rt.programs.stats["builds"] == 2  # (same source: the program came from memory)


CHILD = textwrap.dedent(
    """
    import json
    import numpy as np
    import ember as em
    dev = em.Device("opencl:%d")
    x = em.tensor(np.linspace(0.5, 2.0, 24, dtype=np.float32).reshape(4, 6), device=dev)
    outs = [em.exp(x), em.log(x), em.sqrt(x), x + x, x * x, x - 1.0, x.sum(axis=0), x.max(axis=1)]
    cache = dev.memory_stats()["extra"]["kernel_cache"]
    print(json.dumps({"values": [o.numpy().tolist() for o in outs], "cache": cache}))
    """
)


def _child(index: int, cache: str) -> dict:
    env = dict(os.environ, EMBER_CACHE_DIR=cache, EMBER_FUSION="0")
    cmd = [sys.executable, "-c", CHILD % index]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_family_binaries_round_trip_through_the_disk_cache(dev, tmp_path):
    first = _child(dev.index, str(tmp_path))
    second = _child(dev.index, str(tmp_path))
    assert second["cache"]["builds"] == 0 and second["cache"]["disk_loads"] == first["cache"]["builds"]
    # exp alone then the exp group (sqrt in it); add alone then the arithmetic group (mul); x - 1.0
    # alone; sum with prod, max with min: 7 programs for 8 kernels
    assert first["cache"]["builds"] == 7, first["cache"]
    x = np.linspace(0.5, 2.0, 24).reshape(4, 6)
    want = [np.exp(x), np.log(x), np.sqrt(x), x + x, x * x, x - 1.0, x.sum(axis=0), x.max(axis=1)]
    for got, ref in zip(second["values"], want):
        np.testing.assert_allclose(np.asarray(got), ref, rtol=2e-6)
    assert second["values"] == first["values"]
