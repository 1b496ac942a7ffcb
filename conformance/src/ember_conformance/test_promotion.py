"""Dtype promotion: the Python Array API tables (written out here, independently of ember's
code), ember's bfloat16 rule (with float16 -> float32, as PyTorch), undefined mixes raising
DTypeError, and weakly typed Python scalars. Checked through ``result_type`` and through real
ops on the device."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

from .checks import assert_close, require_dtype
from .specs.base import ALL

_SHORT = {
    "b": "bool",
    "i1": "int8",
    "i2": "int16",
    "i4": "int32",
    "i8": "int64",
    "u1": "uint8",
    "u2": "uint16",
    "u4": "uint32",
    "u8": "uint64",
    "f2": "float16",
    "bf": "bfloat16",
    "f4": "float32",
    "f8": "float64",
}

# rows promote with columns; "-" is undefined (DTypeError)
_TABLE = """
    b   i1  i2  i4  i8  u1  u2  u4  u8  f2  bf  f4  f8
b   b   -   -   -   -   -   -   -   -   -   -   -   -
i1  -   i1  i2  i4  i8  i2  i4  i8  -   -   -   -   -
i2  -   i2  i2  i4  i8  i2  i4  i8  -   -   -   -   -
i4  -   i4  i4  i4  i8  i4  i4  i8  -   -   -   -   -
i8  -   i8  i8  i8  i8  i8  i8  i8  -   -   -   -   -
u1  -   i2  i2  i4  i8  u1  u2  u4  u8  -   -   -   -
u2  -   i4  i4  i4  i8  u2  u2  u4  u8  -   -   -   -
u4  -   i8  i8  i8  i8  u4  u4  u4  u8  -   -   -   -
u8  -   -   -   -   -   u8  u8  u8  u8  -   -   -   -
f2  -   -   -   -   -   -   -   -   -   f2  f4  f4  f8
bf  -   -   -   -   -   -   -   -   -   f4  bf  f4  f8
f4  -   -   -   -   -   -   -   -   -   f4  f4  f4  f8
f8  -   -   -   -   -   -   -   -   -   f8  f8  f8  f8
"""


def _parse() -> dict[tuple[str, str], str | None]:
    lines = [line.split() for line in _TABLE.strip().splitlines()]
    cols = lines[0]
    out = {}
    for row in lines[1:]:
        for col, cell in zip(cols, row[1:]):
            out[_SHORT[row[0]], _SHORT[col]] = None if cell == "-" else _SHORT[cell]
    return out


PROMOTION = _parse()


def _sample(dtype: em.DType) -> np.ndarray:
    return np.array([1, 0, 1] if dtype.kind == "b" else [1, 2, 3]).astype(dtype.numpy)


@pytest.mark.parametrize("b", ALL, ids=str)
@pytest.mark.parametrize("a", ALL, ids=str)
def test_promotion(a, b, device):
    """result_type(a, b) and the dtype of a + b (or a == b for bools) follow the table."""
    want = PROMOTION[a.name, b.name]
    x = _sample(a)
    y = _sample(b)
    if want is None:
        with pytest.raises(em.DTypeError) as info:
            em.result_type(a, b)
        assert str(a) in str(info.value) and str(b) in str(info.value)
    else:
        assert em.result_type(a, b).name == want
        assert em.can_cast(a, em.dtypes.as_dtype(want))
    require_dtype(device, a, b)
    ta, tb = em.tensor(x, device=device), em.tensor(y, device=device)
    op = em.logical_or if a.kind == "b" and b.kind == "b" else em.add
    if want is None:
        with pytest.raises(em.DTypeError):
            op(ta, tb)
        return
    dt = em.dtypes.as_dtype(want)
    require_dtype(device, dt)
    expected = np.logical_or(x, y) if op is em.logical_or else x.astype(np.float64) + y.astype(np.float64)
    assert_close(op(ta, tb), expected, dt, what=f"{a} + {b}")
    assert (ta == tb).dtype is em.bool_


def _scalar_rule(dtype: em.DType, kind: type) -> em.DType | None:
    """Python scalars are weak: they take the tensor's dtype when their kind fits it."""
    if kind is bool:
        return dtype
    if kind is int:
        return dtype if dtype.kind in "iuf" else None
    return dtype if dtype.kind == "f" else None


@pytest.mark.parametrize("kind", [bool, int, float], ids=lambda k: k.__name__)
@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_scalar_promotion(dtype, kind, device):
    """tensor * Python scalar keeps the tensor's dtype, or raises DTypeError for a mix of kinds."""
    require_dtype(device, dtype)
    t = em.tensor(_sample(dtype), device=device)
    value = kind(1)
    want = _scalar_rule(dtype, kind)
    op = (lambda u, v: u & v) if dtype.kind == "b" else (lambda u, v: u * v)
    if want is None:
        with pytest.raises(em.DTypeError) as info:
            op(t, value)
        assert str(dtype) in str(info.value)
        return
    out = op(t, value)
    assert out.dtype is want
    assert (t == value).dtype is em.bool_
    assert_close(op(value, t), np.asarray(out.numpy()).astype(np.float64), want, what="scalar on the left")
