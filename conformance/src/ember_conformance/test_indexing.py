"""Indexing with numpy semantics for every dtype: ints, slices (negative steps), None, ...,
boolean masks, integer arrays; ``x[key] = v``; and the gather/scatter ops."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

from .checks import assert_close, require_dtype, widest_float
from .inputs import Domain, draw, rng_for
from .runner import run_forward
from .specs.base import ALL, forward_params
from .specs.indexing import GET_KEYS, INDEXING, SET_KEYS

_SHAPE = (4, 5, 6)


@pytest.mark.parametrize("spec,dtype,case", forward_params(INDEXING))
def test_indexing(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)


def _keys(key, device):
    """(ember key, numpy key): ("array", a) and ("mask", m) entries become tensors for ember."""
    if isinstance(key, tuple) and len(key) == 2 and key[0] in ("array", "mask") and isinstance(key[1], np.ndarray):
        return em.tensor(key[1], device=device), key[1]
    if isinstance(key, tuple):
        pairs = [_keys(k, device) for k in key]
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    return key, key


def _host(dtype, seed):
    return draw(rng_for("index", dtype, seed), _SHAPE, dtype, Domain(ilo=-50, ihi=50))


def _ref(arr):
    return arr.astype(np.float64) if arr.dtype.kind in "fV" else arr


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("name", sorted(GET_KEYS))
def test_getitem(name, dtype, device):
    """``x[key]`` equals numpy's ``a[key]`` (a copy: later changes to x do not show)."""
    require_dtype(device, dtype, em.int64)
    host = _host(dtype, name)
    t = em.tensor(host, device=device)
    ekey, nkey = _keys(GET_KEYS[name], device)
    out = t[ekey]
    assert_close(out, _ref(host)[nkey], dtype, what=f"x[{name}]")


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("name", sorted(SET_KEYS))
def test_setitem(name, dtype, device):
    """``x[key] = value`` equals numpy's assignment; tensors taken from x before keep their values."""
    require_dtype(device, dtype, em.int64)
    host = _host(dtype, name)
    t = em.tensor(host, device=device)
    before = t[1:3]
    key, shape = SET_KEYS[name]
    ekey, nkey = _keys(key, device)
    rng = rng_for("setitem", dtype, name)
    if shape == "scalar":
        value = draw(rng, (), dtype, Domain(ilo=-50, ihi=50))
        evalue = bool(value) if dtype.kind == "b" else int(value) if dtype.kind in "iu" else float(value)
        nvalue = value
    else:
        nvalue = draw(rng, shape, dtype, Domain(ilo=-50, ihi=50))
        evalue = em.tensor(nvalue, device=device)
    t[ekey] = evalue
    expected = host.copy()
    expected[nkey] = nvalue
    assert_close(t, _ref(expected), dtype, what=f"x[{name}] = value")
    assert_close(before, _ref(host)[1:3], dtype, what="a tensor sliced from x before the assignment")


def test_setitem_value_cast(device):
    """A value of another dtype is cast to the tensor's dtype."""
    t = em.zeros((3,), dtype="float32", device=device)
    t[em.tensor([0, 2], device=device)] = em.tensor([1, 2], dtype="int64", device=device)
    assert_close(t, np.array([1.0, 0.0, 2.0]), em.float32)


def test_getitem_grad(ad_device):
    """Gradients flow through basic and advanced indexing (repeated indices add up)."""
    x = em.tensor(np.arange(12.0).reshape(3, 4), dtype=widest_float(ad_device), device=ad_device, requires_grad=True)
    y = x[::-1, 1::2].sum() + x[em.tensor([0, 0, 2], device=ad_device)].sum() + x[x > 5.5].sum()
    y.backward()
    expected = np.zeros((3, 4))
    expected[:, 1::2] += 1
    expected[[0, 2]] += [[2.0], [1.0]]
    expected[np.arange(12.0).reshape(3, 4) > 5.5] += 1
    assert_close(x.grad, expected, widest_float(ad_device), what="x.grad")
