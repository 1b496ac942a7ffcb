"""Creation functions and host round trips for every dtype: values, dtype defaults, shapes."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

from .checks import assert_close, require_dtype
from .inputs import Domain, draw, rng_for
from .specs.base import ALL, FLOAT

SHAPES = {"2d": (2, 3), "0d": (), "empty": (0, 4)}


def _extremes(dtype: em.DType) -> np.ndarray:
    """Values at the edges of ``dtype``: its limits, zeros, infinities and NaN for floats."""
    if dtype.kind == "b":
        return np.array([True, False])
    if dtype.kind in "iu":
        info = np.iinfo(dtype.numpy)
        return np.array([info.min, info.max, 0, 1, info.max - 1], dtype=dtype.numpy)
    info = em.finfo(dtype)
    vals = [info.max, info.min, info.smallest_normal, info.eps, 0.0, -0.0]
    vals += [np.inf, -np.inf, np.nan, 1.0 / 3.0]
    return np.array(vals, dtype=np.float64).astype(dtype.numpy)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_roundtrip_extremes(dtype, device):
    """tensor(a).numpy() returns a's exact bits, limits and special values included."""
    require_dtype(device, dtype)
    host = _extremes(dtype)
    t = em.tensor(host, device=device)
    assert t.dtype is dtype
    got = t.numpy()
    assert got.dtype == dtype.numpy and got.shape == host.shape
    assert got.tobytes() == host.tobytes(), f"{dtype}: {got!r} != {host!r}"


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_tolist_item(dtype, device):
    """tolist(), item(), int/float/bool conversions give Python scalars of the right kind."""
    require_dtype(device, dtype)
    host = draw(rng_for("tolist", dtype), (2, 3), dtype, Domain(ilo=0, ihi=9))
    t = em.tensor(host, device=device)
    py = t.tolist()
    assert np.array_equal(np.array(py, dtype=np.float64), host.astype(np.float64))
    one = t[1, 2].item()
    kind = bool if dtype.kind == "b" else int if dtype.kind in "iu" else float
    assert isinstance(one, kind), f"item() gave {type(one).__name__}, expected {kind.__name__}"
    assert one == kind(host[1, 2])
    assert np.array_equal(np.asarray(t), host)


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("shape", list(SHAPES), ids=str)
def test_fill(shape, dtype, device):
    """zeros / ones / full / empty and their *_like forms."""
    require_dtype(device, dtype)
    shp = SHAPES[shape]
    value = True if dtype.kind == "b" else 7 if dtype.kind in "iu" else -2.5
    assert_close(em.zeros(shp, dtype=dtype, device=device), np.zeros(shp, dtype.numpy), dtype, what="zeros")
    assert_close(em.ones(shp, dtype=dtype, device=device), np.ones(shp, dtype.numpy), dtype, what="ones")
    assert_close(em.full(shp, value, dtype=dtype, device=device), np.full(shp, value, dtype.numpy), dtype, what="full")
    e = em.empty(shp, dtype=dtype, device=device)
    assert e.shape == shp and e.dtype is dtype and e.device == device
    base = em.full(shp, value, dtype=dtype, device=device)
    assert_close(em.zeros_like(base), np.zeros(shp, dtype.numpy), dtype, what="zeros_like")
    assert_close(em.ones_like(base), np.ones(shp, dtype.numpy), dtype, what="ones_like")
    assert_close(em.full_like(base, value), np.full(shp, value, dtype.numpy), dtype, what="full_like")
    assert em.empty_like(base).shape == shp


def test_default_dtypes(device):
    """Python floats -> float32, ints -> int64, bools -> bool; numpy arrays keep their dtype."""
    d = device
    assert em.tensor([1.5, 2.0], device=d).dtype is em.float32
    assert em.tensor([[1, 2]], device=d).dtype is em.int64
    assert em.tensor([True, False], device=d).dtype is em.bool_
    assert em.tensor(3.0, device=d).shape == ()
    assert em.zeros((2,), device=d).dtype is em.float32
    assert em.full((2,), 3, device=d).dtype is em.int64
    assert em.full((2,), 0.5, device=d).dtype is em.float32
    assert em.full((2,), False, device=d).dtype is em.bool_
    assert em.arange(5, device=d).dtype is em.int64
    assert em.arange(0.0, 1.0, 0.25, device=d).dtype is em.float32
    assert em.tensor(np.zeros(2, np.int16), device=d).dtype is em.int16
    if d.capabilities.supports(em.float64):
        assert em.tensor(np.zeros(2, np.float64), device=d).dtype is em.float64


ARANGES = {
    "stop": ((7,), {}),
    "start_stop": ((2, 9), {}),
    "step": ((1, 20, 3), {}),
    "negative_step": ((10, -3, -4), {}),
    "empty": ((5, 2), {}),
    "float": ((0.5, 3.0, 0.25), {}),
    "float_negative": ((1.0, -1.0, -0.3), {}),
}


@pytest.mark.parametrize("name", sorted(ARANGES))
def test_arange(name, device):
    args, kwargs = ARANGES[name]
    got = em.arange(*args, device=device, **kwargs)
    want = np.arange(*args)
    dt = em.float32 if want.dtype.kind == "f" else em.int64
    assert_close(got, want, dt, what=f"arange{args}")


@pytest.mark.parametrize("dtype", [d for d in ALL if d.kind != "b"], ids=str)
def test_arange_dtype(dtype, device):
    require_dtype(device, dtype)
    assert_close(em.arange(1, 11, 2, dtype=dtype, device=device), np.arange(1, 11, 2), dtype, what="arange")


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
def test_linspace(dtype, device):
    require_dtype(device, dtype, em.int64)
    assert_close(em.linspace(-1.0, 2.0, 7, dtype=dtype, device=device), np.linspace(-1.0, 2.0, 7), dtype)
    assert_close(
        em.linspace(0.0, 1.0, 4, dtype=dtype, device=device, endpoint=False),
        np.linspace(0.0, 1.0, 4, endpoint=False),
        dtype,
    )
    assert em.linspace(0.0, 1.0, 0, dtype=dtype, device=device).shape == (0,)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_eye(dtype, device):
    require_dtype(device, dtype, em.int64)
    assert_close(em.eye(3, dtype=dtype, device=device), np.eye(3, dtype=dtype.numpy), dtype, what="eye(3)")
    assert_close(em.eye(3, 5, k=1, dtype=dtype, device=device), np.eye(3, 5, 1, dtype=dtype.numpy), dtype)
    assert_close(em.eye(4, 2, k=-2, dtype=dtype, device=device), np.eye(4, 2, -2, dtype=dtype.numpy), dtype)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_asarray_from_numpy_dlpack(dtype, device):
    """asarray returns the same tensor when nothing changes; from_numpy / from_dlpack copy."""
    require_dtype(device, dtype)
    host = draw(rng_for("asarray", dtype), (3, 2), dtype, Domain(ilo=0, ihi=9))
    t = em.from_numpy(host, device=device)
    assert_close(t, host.astype(np.float64) if dtype.kind == "f" else host, dtype, what="from_numpy")
    assert em.asarray(t) is t
    assert em.asarray(t, dtype=dtype) is t
    copied = em.asarray(t, copy=True)
    assert copied is not t and np.array_equal(copied.numpy(), t.numpy())
    if dtype.name == "bfloat16":
        return  # numpy's DLPack has no bfloat16
    host2 = host.copy()
    d = em.from_dlpack(host2, device=device)
    host2[...] = host2[0, 0]  # a later change to the producer must not show
    assert np.array_equal(d.numpy(), host)
    if t.__dlpack_device__()[0] == 1:  # kDLCPU: numpy reads the memory as it is
        back = np.from_dlpack(t)
    elif np.lib.NumpyVersion(np.__version__) >= "2.1.0":  # numpy asks a device producer for a host copy
        back = np.from_dlpack(t, device="cpu")
    else:
        return  # an older numpy cannot ask for host memory from a device tensor
    assert np.array_equal(back, host)


def test_to_dtype_and_device(device):
    """to(dtype), to(device) (no copy on the same device) and astype agree."""
    t = em.tensor([1.5, -2.5], device=device)
    assert t.to(device) is t or np.array_equal(t.to(device).numpy(), t.numpy())
    for dt in (em.float64, em.float16):
        if device.capabilities.supports(dt):
            assert_close(t.to(dt), np.array([1.5, -2.5]), dt)
    assert_close(t.to("int32"), np.array([1, -2]), em.int32)
