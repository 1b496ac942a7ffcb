"""Elementwise ops against numpy: every dtype the op accepts, broadcasting, 0-d, empty,
non-contiguous inputs, NaN/inf, a large size; and the dtypes each op must refuse."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

from .checks import assert_close, require_dtype
from .inputs import rng_for
from .runner import run_forward, run_reject
from .specs.base import ALL, forward_params, reject_params
from .specs.elementwise import BINARY, TERNARY, UNARY


@pytest.mark.parametrize("spec,dtype,case", forward_params(UNARY))
def test_unary(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)


@pytest.mark.parametrize("spec,dtype,case", forward_params(BINARY))
def test_binary(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)


@pytest.mark.parametrize("spec,dtype,case", forward_params(TERNARY))
def test_ternary(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)


@pytest.mark.parametrize("spec,dtype,case", reject_params(UNARY + BINARY))
def test_rejects_dtype(spec, dtype, case, device):
    run_reject(spec, dtype, case, device)


def _cast_domain(src, dst):
    """Values every cast from ``src`` to ``dst`` defines exactly (no overflow, no NaN)."""
    lo = 0 if "u" in (src.kind, dst.kind) or "b" in (src.kind, dst.kind) else -100
    return lo, 100


@pytest.mark.parametrize("src,dst", [pytest.param(s, d, id=f"{s}-{d}") for s in ALL for d in ALL], ids=str)
def test_astype(src, dst, device):
    """``astype`` between every pair: float -> int truncates toward zero, nonzero -> True."""
    require_dtype(device, src, dst)
    rng = rng_for("astype", src, dst)
    lo, hi = _cast_domain(src, dst)
    if src.kind == "b":
        host = rng.random((5, 7)) < 0.5
    elif src.kind == "f":
        host = rng.uniform(lo, hi, size=(5, 7)).astype(src.numpy)
        host[0, :3] = np.array([0.0, 1.5, -0.0]).astype(src.numpy) if lo < 0 else np.array([0.0, 1.5, 2.75])
    else:
        host = rng.integers(lo, hi + 1, size=(5, 7)).astype(src.numpy)
    t = em.tensor(host, dtype=src, device=device)
    out = t.astype(dst)
    if dst.kind == "b":
        expected = host != 0
    elif src.kind == "f" and dst.kind in "iu":
        expected = np.trunc(host.astype(np.float64)).astype(dst.numpy)
    else:
        expected = host.astype(np.float64) if dst.kind == "f" else host.astype(dst.numpy)
    assert_close(out, expected, dst, what=f"astype({src} -> {dst})")
    # a transposed input casts the same
    assert_close(t.mT.astype(dst), np.swapaxes(expected, 0, 1), dst, what=f"astype({src} -> {dst}) of x.mT")
