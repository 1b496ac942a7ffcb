"""Conformance cases of ember-fused, added to the ember conformance suite through the
``ember_conformance_modules`` hook: each fused op against a numpy float64 formula on the device
under test (float32, and float64 where the device has it; strided inputs; batch broadcasting;
causal attention with more and fewer keys than queries), the native kernel seen to run where the
device kind has one (its calls counted), gradients against central differences of the numpy
formula, and the argument checks.

The suite's automatic extension tests (ember_conformance.test_extensions) separately compare each
native kernel with the op's reference on the ops' samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import ember as em
import ember_fused as fused
from ember_conformance.checks import assert_close, check, check_gradients, require_dtype
from ember_conformance.test_extensions import counting

EMBER_CONFORMANCE = True

DTYPES = [em.float32, em.float64]


# -- numpy float64 references -------------------------------------------------------------------------
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _act(y: np.ndarray, activation: str) -> np.ndarray:
    if activation == "relu":
        return np.maximum(y, 0.0)
    if activation == "gelu":
        return 0.5 * y * (1.0 + _erf(y / np.sqrt(2.0)))
    if activation == "gelu_tanh":
        return 0.5 * y * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (y + 0.044715 * y**3)))
    if activation == "silu":
        return y / (1.0 + np.exp(-y))
    if activation == "tanh":
        return np.tanh(y)
    if activation == "sigmoid":
        return 1.0 / (1.0 + np.exp(-y))
    return y


def _linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, activation: str = "none") -> np.ndarray:
    y = x @ w.T
    return _act(y if b is None else y + b, activation)


def _lnr(
    x: np.ndarray, r: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5
) -> tuple[np.ndarray, np.ndarray]:
    h = x + r
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    return (h - mu) / np.sqrt(var + eps) * w + b, h


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None, *,
               is_causal: bool = False, scale: float) -> np.ndarray:  # fmt: skip
    s = q @ np.swapaxes(k, -1, -2) * scale
    n, m = s.shape[-2:]
    if is_causal:
        s = np.where(np.arange(m)[None, :] <= np.arange(n)[:, None] + (m - n), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(-1, keepdims=True)) @ v


# -- helpers -----------------------------------------------------------------------------------
def _host(dtype: em.DType, *arrays: np.ndarray) -> list[np.ndarray]:
    """The inputs rounded to ``dtype`` and back, so the reference sees what ember sees."""
    return [np.asarray(a).astype(dtype.numpy).astype(np.float64) for a in arrays]


def _put(dtype: em.DType, device: em.Device, *arrays: np.ndarray, grad: bool = False) -> list[Any]:
    return [em.tensor(a, dtype=dtype, device=device, requires_grad=grad) for a in arrays]


@contextmanager
def _native(op: Any, device: em.Device) -> Iterator[None]:
    """Where ``device``'s kind has a native kernel for ``op``, require that it ran in the block."""
    if device.kind not in op.kernels:
        yield
        return
    with counting(op.name, device.kind) as calls:
        yield
    check(calls[0] >= 1, f"{op.name}: the native {device.kind} kernel did not run (called {calls[0]} times)")


# -- fused_linear --------------------------------------------------------------------------------
@pytest.mark.parametrize("activation", ["none", "relu", "gelu", "gelu_tanh", "silu", "tanh", "sigmoid"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_linear(dtype: em.DType, activation: str, device: em.Device) -> None:
    require_dtype(device, dtype)
    rng = np.random.default_rng(0)
    x, w, b = _host(dtype, rng.uniform(-2, 2, (2, 5, 19)), rng.uniform(-1, 1, (33, 19)), rng.uniform(-1, 1, 33))
    tx, tw, tb = _put(dtype, device, x, w, b)
    with _native(fused.ops.FUSED_LINEAR, device):
        got = fused.fused_linear(tx, tw, tb, activation=activation)
    assert_close(got, _linear(x, w, b, activation), dtype, scale=4.0, what=f"fused_linear {activation}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_linear_layouts(dtype: em.DType, device: em.Device) -> None:
    """No bias; a transposed weight and a sliced input: the kernels read through the layout."""
    require_dtype(device, dtype)
    rng = np.random.default_rng(1)
    x, wt, b = _host(dtype, rng.uniform(-1, 1, (7, 12)), rng.uniform(-1, 1, (12, 9)), rng.uniform(-1, 1, 18))
    tx, twt, tb = _put(dtype, device, x, wt, b)
    with _native(fused.ops.FUSED_LINEAR, device):
        assert_close(fused.fused_linear(tx, twt.mT), _linear(x, wt.T), dtype, scale=4.0, what="no bias, w.T")
        got = fused.fused_linear(tx[::2, 1:], twt[1:].mT, tb[::2], activation="relu")
    assert_close(got, _linear(x[::2, 1:], wt[1:].T, b[::2], "relu"), dtype, scale=4.0, what="strided")


# -- fused_layer_norm_residual -------------------------------------------------------------------
# rows x width: short rows and long ones (past 8 x 256, which wgpu keeps in registers), few rows
# (a work-group per row on PoCL too) and many
@pytest.mark.parametrize(
    "shape", [(3, 2, 1), (3, 2, 7), (3, 2, 256), (3, 2, 1000), (1, 1000), (3, 513), (2, 2100)], ids=str
)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_layer_norm_residual(dtype: em.DType, shape: tuple[int, ...], device: em.Device) -> None:
    require_dtype(device, dtype)
    rng = np.random.default_rng(2)
    width = shape[-1]
    args = _host(dtype, rng.normal(size=shape), rng.normal(3.0, 1.0, size=shape),
                 rng.uniform(0.5, 2.0, width), rng.normal(size=width))  # fmt: skip
    tensors = _put(dtype, device, *args)
    with _native(fused.ops.FUSED_LAYER_NORM_RESIDUAL, device):
        out, h = fused.fused_layer_norm_residual(*tensors, eps=1e-5)
    want_out, want_h = _lnr(*args, eps=1e-5)
    assert_close(h, want_h, dtype, what="new residual")
    assert_close(out, want_out, dtype, scale=4.0, what="layer norm of x + residual")


def test_fused_layer_norm_residual_strided(device: em.Device) -> None:
    rng = np.random.default_rng(3)
    x, r, w, b = _host(em.float32, rng.normal(size=(9, 8)), rng.normal(size=(8, 9)), rng.uniform(0.5, 2, 8),
                       rng.normal(size=8))  # fmt: skip
    tx, tr, tw, tb = _put(em.float32, device, x, r, w, b)
    out, h = fused.fused_layer_norm_residual(tx[1::2], tr.mT[1::2], tw, tb)
    want_out, want_h = _lnr(x[1::2], r.T[1::2], w, b)
    assert_close(h, want_h, em.float32, what="new residual")
    assert_close(out, want_out, em.float32, scale=4.0, what="strided inputs")


# -- fused_attention -----------------------------------------------------------------------------
ATTENTION_CASES = [
    # (q shape, k shape, v head size, is_causal)
    ((2, 3, 17, 16), (2, 3, 17, 16), 16, False),
    ((2, 3, 17, 16), (2, 3, 17, 16), 16, True),
    ((1, 70, 32), (1, 150, 32), 32, True),  # more keys than queries: the causal band is offset
    ((2, 1, 9, 64), (1, 4, 40, 64), 64, False),  # batch axes that broadcast
    ((3, 5, 24), (3, 11, 24), 40, False),  # v of another head size
]


@pytest.mark.parametrize("case", ATTENTION_CASES, ids=lambda c: f"{c[0]}x{c[1]}v{c[2]}{'c' if c[3] else ''}")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_attention(dtype: em.DType, case: tuple[Any, ...], device: em.Device) -> None:
    require_dtype(device, dtype)
    qs, ks, dv, causal = case
    rng = np.random.default_rng(4)
    q, k, v = _host(dtype, rng.normal(size=qs), rng.normal(size=ks), rng.normal(size=ks[:-1] + (dv,)))
    tq, tk, tv = _put(dtype, device, q, k, v)
    scale = 1.0 / np.sqrt(qs[-1])
    with _native(fused.ops.FUSED_ATTENTION, device):
        got = fused.fused_attention(tq, tk, tv, is_causal=causal)
    assert_close(got, _attention(q, k, v, is_causal=causal, scale=scale), dtype, scale=4.0, what="fused_attention")


def test_fused_attention_masks(device: em.Device) -> None:
    """An explicit mask (boolean or additive) is honoured: the kernels hand it to the backend's attention."""
    rng = np.random.default_rng(5)
    q, k, v = _host(em.float32, rng.normal(size=(2, 6, 8)), rng.normal(size=(2, 10, 8)), rng.normal(size=(2, 10, 8)))
    keep = rng.uniform(size=(6, 10)) < 0.7
    keep[:, 0] = True
    add = rng.normal(size=(6, 10))
    tq, tk, tv = _put(em.float32, device, q, k, v)
    for mask in (keep, add):
        tm = em.tensor(mask, dtype=em.bool_ if mask.dtype == np.bool_ else em.float32, device=device)
        got = fused.fused_attention(tq, tk, tv, tm, scale=0.4)
        assert_close(got, _attention(q, k, v, mask, scale=0.4), em.float32, scale=4.0, what=f"{mask.dtype} mask")


# -- gradients -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradients(dtype: em.DType, ad_device: em.Device) -> None:
    require_dtype(ad_device, dtype)
    rng = np.random.default_rng(6)
    x, w, b = _host(dtype, rng.uniform(-1, 1, (2, 3, 5)), rng.uniform(-1, 1, (4, 5)), rng.uniform(-1, 1, 4))
    check_gradients(lambda *a: fused.fused_linear(*a, activation="gelu"), lambda *a: _linear(*a, activation="gelu"),
                    _put(dtype, ad_device, x, w, b, grad=True), [x, w, b], (0, 1, 2), {}, rng, scale=4.0)  # fmt: skip
    args = _host(dtype, rng.normal(size=(3, 6)), rng.normal(size=(3, 6)), rng.uniform(0.5, 2, 6), rng.normal(size=6))
    check_gradients(fused.fused_layer_norm_residual, _lnr, _put(dtype, ad_device, *args, grad=True), args,
                    (0, 1, 2, 3), {}, rng, scale=4.0)  # fmt: skip
    q, k, v = _host(dtype, rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 7, 4)), rng.normal(size=(2, 7, 3)))
    check_gradients(fused.fused_attention, _attention, _put(dtype, ad_device, q, k, v, grad=True), [q, k, v],
                    (0, 1, 2), {"is_causal": True, "scale": 0.5}, rng, scale=4.0)  # fmt: skip


# -- argument checks -----------------------------------------------------------------------------
def test_argument_checks(device: em.Device) -> None:
    ones = lambda *s, dtype=em.float32: em.ones(s, dtype=dtype, device=device)  # noqa: E731
    with pytest.raises(em.errors.ShapeError, match="fused_linear: x .* and weight"):
        fused.fused_linear(ones(2, 3), ones(4, 5))
    with pytest.raises(em.errors.ShapeError, match="fused_linear: bias must have shape"):
        fused.fused_linear(ones(2, 3), ones(4, 3), ones(3))
    with pytest.raises(em.errors.InvalidArgumentError, match="fused_linear: activation must be one of"):
        fused.fused_linear(ones(2, 3), ones(4, 3), activation="swish")
    with pytest.raises(em.errors.DTypeError, match="fused_linear"):
        fused.fused_linear(ones(2, 3, dtype=em.int32), ones(4, 3, dtype=em.int32))
    with pytest.raises(em.errors.ShapeError, match="fused_layer_norm_residual: x .* and residual"):
        fused.fused_layer_norm_residual(ones(2, 3), ones(3, 2), ones(3), ones(3))
    with pytest.raises(em.errors.ShapeError, match="fused_layer_norm_residual: weight and bias"):
        fused.fused_layer_norm_residual(ones(2, 3), ones(2, 3), ones(2), ones(3))
    with pytest.raises(em.errors.InvalidArgumentError, match="eps must be positive"):
        fused.fused_layer_norm_residual(ones(2, 3), ones(2, 3), ones(3), ones(3), eps=0.0)
    with pytest.raises(em.errors.ShapeError, match="fused_attention: q"):
        fused.fused_attention(ones(2, 4, 8), ones(2, 5, 6), ones(2, 5, 6))
    with pytest.raises(em.errors.ShapeError, match="at least 2 dimensions"):
        fused.fused_attention(ones(8), ones(8), ones(8))
