"""The Python Array API standard's namespace on this device: the version and inspection API,
``__array_namespace__``, ``to_device``, the constants and dtype helpers, and the functions and
signatures the standard adds beyond the op rows (unique_*, searchsorted, cumulative_* keywords...),
each checked against numpy float64 references."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em

from .checks import assert_close, require_dtype, widest_float
from .runner import run_forward
from .specs.base import forward_params
from .specs.searching import SEARCHING


# -- namespace facts ---------------------------------------------------------------------------
def test_array_namespace_is_ember(device):
    x = em.ones((2,), device=device)
    assert x.__array_namespace__() is em
    assert x.__array_namespace__(api_version=em.__array_api_version__) is em
    with pytest.raises(ValueError, match="api_version='1999.01' is not a revision ember follows"):
        x.__array_namespace__(api_version="1999.01")


def test_inspection_info(device):
    info = em.__array_namespace_info__()
    assert device.without_autodiff() in info.devices()
    held = info.dtypes(device=device)
    assert set(held.values()) == {dt for dt in device.capabilities.dtypes if dt.name not in ("float16", "bfloat16")}
    assert all(name == dt.name for name, dt in held.items())
    floats = info.dtypes(device=device, kind="real floating")
    assert set(floats) == {n for n, dt in held.items() if dt.kind == "f"}
    ints = info.dtypes(device=device, kind=("signed integer", "unsigned integer"))
    assert set(ints) == {n for n, dt in held.items() if dt.kind in "iu"}
    defaults = info.default_dtypes(device=device)
    assert defaults["real floating"] is em.float32 and defaults["indexing"] is em.int64
    assert info.capabilities()["boolean indexing"] is True
    with pytest.raises(ValueError, match="kind='floats' is not a dtype kind"):
        info.dtypes(kind="floats")


def test_to_device_roundtrip(device):
    x = em.tensor([1.0, 2.0, 3.0], device="cpu")
    y = x.to_device(device)
    assert y.device == device
    assert_close(y.to_device("cpu"), np.array([1.0, 2.0, 3.0]), em.float32)
    with pytest.raises(ValueError, match="to_device: stream must be None"):
        x.to_device(device, stream=1)


def test_constants_and_bool():
    assert (em.e, em.pi) == (math.e, math.pi)
    assert em.inf == math.inf and math.isnan(em.nan) and em.newaxis is None
    assert em.bool is em.bool_


@pytest.mark.parametrize(
    "kind, members",
    [
        ("bool", {"bool"}),
        ("signed integer", {"int8", "int16", "int32", "int64"}),
        ("unsigned integer", {"uint8", "uint16", "uint32", "uint64"}),
        ("integral", {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}),
        ("real floating", {"float16", "bfloat16", "float32", "float64"}),
        ("complex floating", {"complex64", "complex128"}),
        (
            "numeric",
            {
                "int8",
                "int16",
                "int32",
                "int64",
                "uint8",
                "uint16",
                "uint32",
                "uint64",
                "float16",
                "bfloat16",
                "float32",
                "float64",
                "complex64",
                "complex128",
            },
        ),
        (("bool", "real floating"), {"bool", "float16", "bfloat16", "float32", "float64"}),
    ],
)
def test_isdtype(kind, members):
    from ember.dtypes import EVERY_DTYPE

    assert {dt.name for dt in EVERY_DTYPE if em.isdtype(dt, kind)} == members


def test_isdtype_errors():
    assert em.isdtype(em.int8, em.int8) and not em.isdtype(em.int8, em.int16)
    with pytest.raises(TypeError, match="isdtype: kind='float' is not a dtype"):
        em.isdtype(em.float32, "float")
    with pytest.raises(TypeError, match="isdtype: dtype must be an ember dtype"):
        em.isdtype("float32", "real floating")


@pytest.mark.parametrize("shapes", [((2, 1), (3,)), ((), (4, 1, 2), (5, 1)), ((0,), (1,)), ((3,),), ()])
def test_broadcast_shapes(shapes):
    assert em.broadcast_shapes(*shapes) == np.broadcast_shapes(*shapes)


def test_broadcast_shapes_error():
    with pytest.raises(ValueError, match=r"broadcast_shapes: shapes \(2,\) and \(3,\) do not broadcast"):
        em.broadcast_shapes((2,), (3,))


def test_result_type_with_python_scalars():
    assert em.result_type(em.float32, 1.0) is em.float32
    assert em.result_type(em.int8, 1, em.int16) is em.int16
    assert em.result_type(em.uint8, True) is em.uint8
    with pytest.raises(TypeError, match="result_type: at least one dtype or tensor is required"):
        em.result_type(1, 2.0)
    with pytest.raises(TypeError, match="cannot combine a int32 tensor with the Python float"):
        em.result_type(em.int32, 1.5)


def test_tuples_from_meshgrid_and_broadcast_arrays(device):
    a, b = em.arange(3, device=device), em.arange(4, device=device)
    grids = em.meshgrid(a, b)
    pair = em.broadcast_arrays(a[:, None], b)
    assert type(grids) is tuple and type(pair) is tuple
    want = [*np.meshgrid(np.arange(3), np.arange(4)), *np.broadcast_arrays(np.arange(3)[:, None], np.arange(4))]
    for got, ref in zip(grids + pair, want):
        np.testing.assert_array_equal(got.numpy(), ref)


@pytest.mark.parametrize("axis", [(), 0, -1, (0, 2), (-1, 0)])
def test_expand_dims_axes(device, axis):
    x = np.arange(6.0).reshape(2, 3)
    got = em.expand_dims(em.tensor(x, dtype=em.float32, device=device), axis=axis)
    assert got.shape == np.expand_dims(x, axis).shape
    assert_close(got, np.expand_dims(x, axis), em.float32)


def test_expand_dims_repeated_axis(device):
    with pytest.raises(ValueError, match="expand_dims: axis=\\(0, 0\\) names one position twice"):
        em.expand_dims(em.ones((2,), device=device), axis=(0, 0))


def test_reshape_shape_keyword(device):
    x = em.arange(6, device=device)
    assert em.reshape(x, shape=(2, 3)).shape == (2, 3)
    np.testing.assert_array_equal(em.reshape(x, shape=(3, -1)).numpy(), np.arange(6).reshape(3, -1))


# -- the searching and set functions: the SEARCHING rows ------------------------------------------
@pytest.mark.parametrize("spec,dtype,case", forward_params(SEARCHING))
def test_searching(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)


def test_unique_nan_distinct(device):
    """Every NaN is its own unique value (NaN != NaN), as the standard says."""
    dt = widest_float(device)
    x = em.tensor([1.0, math.nan, 1.0, math.nan], dtype=dt, device=device)
    values, counts = em.unique_counts(x)
    assert values.shape == (3,) and counts.tolist() == [2, 1, 1]


def test_searching_errors(device):
    x = em.arange(4, device=device)
    with pytest.raises(ValueError, match="searchsorted: side must be 'left' or 'right', got 'middle'"):
        em.searchsorted(x, x, side="middle")
    with pytest.raises(ValueError, match=r"searchsorted: x1 must be 1-D \(a sorted sequence\), got shape \(2, 2\)"):
        em.searchsorted(x.reshape(2, 2), x)
    with pytest.raises(ValueError, match="diff: n must be a non-negative int, got -1"):
        em.diff(x, n=-1)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_nextafter_exact(device, dtype):
    """nextafter moves exactly one representable step, bit for bit as numpy's (normal numbers,
    powers of two from both sides, zeros, infinities, NaN)."""
    dt = em.dtypes.as_dtype(dtype)
    require_dtype(device, dt)
    info = np.finfo(dt.numpy)
    a = np.array([1, 1, -1, 2, 2, 0.75, 3e-3, 0, -0.0, np.inf, -np.inf, np.nan, 5, info.max, info.smallest_normal * 4])
    b = np.array([2, 0, -2, 0, 3, -1, 1, 1, -1, 0, 0, 1, 5, np.inf, 0])
    a, b = a.astype(dt.numpy), b.astype(dt.numpy)
    got = em.nextafter(em.tensor(a, device=device), em.tensor(b, device=device)).numpy()
    with np.errstate(all="ignore"):
        want = np.nextafter(a, b)
        step = np.abs(want.astype(np.float64) - a.astype(np.float64))
    tiny = float(info.smallest_normal)
    if _flushes_subnormals(device, dt):
        # the composite computes the step in floating point: on a device that flushes subnormal
        # numbers to zero (NVIDIA's Vulkan driver for f32), a result or a step below the smallest
        # normal number cannot be represented; every other case must still be exact
        keep = ~((np.abs(want) < tiny) | (step < tiny)) | np.isnan(want) | np.isinf(a)
        got, want = got[keep], want[keep]
    np.testing.assert_array_equal(got, want)


def _flushes_subnormals(device, dt) -> bool:
    """Whether ``device`` computes a subnormal ``dt`` number times one as zero."""
    tiny = np.array([np.finfo(dt.numpy).smallest_subnormal], dtype=dt.numpy)
    return bool((em.tensor(tiny, device=device) * 1.0).numpy()[0] == 0)


# -- signatures: astype(device=), from_dlpack(copy=), __dlpack__(max_version=) --------------------
def test_astype_to_device(device):
    x = em.tensor([1.5, -2.5, 3.0], device="cpu")
    y = x.astype(em.int32, device=device)
    assert y.device == device and y.dtype is em.int32
    np.testing.assert_array_equal(y.numpy(), np.array([1, -2, 3], dtype=np.int32))
    assert em.astype(x, em.float32, device=device).device == device


def test_from_dlpack_copy(device):
    host = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    t = em.from_dlpack(host, device=device, copy=True)
    host[0, 0] = 100.0  # ember holds its own copy
    assert_close(t, np.arange(6.0).reshape(2, 3), em.float32)
    assert em.from_dlpack(t, copy=False) is t
    with pytest.raises(ValueError, match="from_dlpack: copy=False asks to share ndarray's memory"):
        em.from_dlpack(host, device=device, copy=False)


def test_dlpack_max_version():
    x = em.arange(6, device="cpu").reshape(2, 3)
    assert x.__dlpack__(max_version=(1, 0)) is not None
    np.testing.assert_array_equal(np.from_dlpack(x), np.arange(6).reshape(2, 3))


# -- complex dtypes: on devices that hold them (others skip with their stated reason) --------------
_COMPLEX = ("complex64", "complex128")
_CX_RTOL = {"complex64": 2e-6, "complex128": 1e-12}


def _cx(shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-2, 2, size=shape) + 1j * rng.uniform(-2, 2, size=shape)


def _check_complex(got: em.Tensor, want: np.ndarray, dtype: str, what: str) -> None:
    want = np.asarray(want)
    kinds = {"c": dtype, "f": em.dtypes.real_dtype(em.dtypes.as_dtype(dtype)).name, "b": "bool"}
    assert got.dtype.name == kinds[want.dtype.kind], f"{what}: dtype {got.dtype}, expected {kinds[want.dtype.kind]}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    have = got.numpy()
    if want.dtype.kind == "b":
        np.testing.assert_array_equal(have, want, err_msg=what)
    else:
        np.testing.assert_allclose(have, want, rtol=_CX_RTOL[dtype], atol=_CX_RTOL[dtype], err_msg=what)


_CX_UNARY = [
    ("negative", em.negative, np.negative),
    ("positive", em.positive, np.positive),
    ("abs", em.abs, np.abs),
    ("sign", em.sign, lambda z: z / np.abs(z)),
    ("exp", em.exp, np.exp),
    ("log", em.log, np.log),
    ("sqrt", em.sqrt, np.sqrt),
    ("sin", em.sin, np.sin),
    ("cos", em.cos, np.cos),
    ("tanh", em.tanh, np.tanh),
    ("square", em.square, np.square),
    ("reciprocal", em.reciprocal, np.reciprocal),
    ("conj", em.conj, np.conj),
    ("real", em.real, np.real),
    ("imag", em.imag, np.imag),
    ("angle", em.angle, np.angle),
    ("isnan", em.isnan, np.isnan),
    ("isfinite", em.isfinite, np.isfinite),
    ("sum", lambda z: em.sum(z, axis=1), lambda z: np.sum(z, axis=1)),
    ("prod", lambda z: em.prod(z, axis=0), lambda z: np.prod(z, axis=0)),
    ("mean", em.mean, np.mean),
    ("round", lambda z: em.round(z * 3), lambda z: np.round(z * 3)),
    ("cumulative_sum", lambda z: em.cumulative_sum(z, axis=1), lambda z: np.cumsum(z, axis=1)),
    ("unique_values", lambda z: em.unique_values(em.concat([z, z])), lambda z: np.unique(np.concatenate([z, z]))),
]


@pytest.mark.parametrize("dtype", _COMPLEX)
@pytest.mark.parametrize("name, fn, ref", _CX_UNARY, ids=[row[0] for row in _CX_UNARY])
def test_complex_unary(device, dtype, name, fn, ref):
    dt = em.dtypes.as_dtype(dtype)
    require_dtype(device, dt)
    z = _cx((3, 4), 1).astype(dt.numpy)
    _check_complex(fn(em.tensor(z, device=device)), ref(z.astype(np.complex128)), dtype, name)


_CX_BINARY = [
    ("add", em.add, np.add),
    ("subtract", em.subtract, np.subtract),
    ("multiply", em.multiply, np.multiply),
    ("divide", em.divide, np.divide),
    ("equal", em.equal, np.equal),
    ("not_equal", em.not_equal, np.not_equal),
]


@pytest.mark.parametrize("dtype", _COMPLEX)
@pytest.mark.parametrize("name, fn, ref", _CX_BINARY, ids=[row[0] for row in _CX_BINARY])
def test_complex_binary(device, dtype, name, fn, ref):
    dt = em.dtypes.as_dtype(dtype)
    require_dtype(device, dt)
    a, b = _cx((3, 4), 2).astype(dt.numpy), _cx((4,), 3).astype(dt.numpy)
    b[1] = a[0, 1]  # one equal pair for the comparisons
    ea, eb = em.tensor(a, device=device), em.tensor(b, device=device)
    _check_complex(fn(ea, eb), ref(a.astype(np.complex128), b.astype(np.complex128)), dtype, name)
    _check_complex(fn(ea, 1.5), ref(a.astype(np.complex128), 1.5), dtype, f"{name} with a Python float")
    _check_complex(fn(ea, 0.5 - 2j), ref(a.astype(np.complex128), 0.5 - 2j), dtype, f"{name} with a Python complex")


def test_complex_promotion_and_creation(device):
    require_dtype(device, em.complex64, em.complex128, em.float64)
    assert em.result_type(em.complex64, em.float64) is em.complex128
    assert em.result_type(em.float16, em.complex64) is em.complex64
    assert em.result_type(em.float32, 1j) is em.complex64
    with pytest.raises(TypeError, match="cannot combine int32 and complex64 tensors"):
        em.result_type(em.int32, em.complex64)
    z = em.tensor([1 + 2j, -3j], device=device)
    assert z.dtype is em.complex64 and complex(z[0]) == 1 + 2j
    wide = z + em.ones((2,), dtype=em.float64, device=device)
    assert wide.dtype is em.complex128
    np.testing.assert_allclose(wide.numpy(), np.array([2 + 2j, 1 - 3j]))
    assert (em.tensor([1.0, 2.0], device=device) * 1j).dtype is em.complex64
    full = em.full((2,), 2 - 1j, device=device)
    assert full.dtype is em.complex64 and full.tolist() == [2 - 1j, 2 - 1j]
    back = em.astype(z, em.complex128)
    np.testing.assert_array_equal(back.numpy(), np.array([1 + 2j, -3j]))
    assert em.__array_namespace_info__().default_dtypes()["complex floating"] is em.complex64
    assert em.finfo(em.complex128).dtype is em.float64


def test_complex_unsupported_says_why(device):
    """A backend without complex dtypes refuses them with its stated reason."""
    caps = device.capabilities
    for dt in (em.complex64, em.complex128):
        if caps.supports(dt):
            continue
        reason = caps.unsupported_dtypes.get(dt.name)
        assert reason, f"{device} lacks {dt} without saying why in unsupported_dtype_reasons"
        with pytest.raises(TypeError, match=dt.name):
            em.zeros((2,), dtype=dt, device=device)


@pytest.mark.parametrize("dtype", _COMPLEX)
def test_complex_matmul_vecdot_tensordot(device, dtype):
    dt = em.dtypes.as_dtype(dtype)
    require_dtype(device, dt)
    a, b = _cx((3, 4), 4).astype(dt.numpy), _cx((4, 2), 5).astype(dt.numpy)
    ea, eb = em.tensor(a, device=device), em.tensor(b, device=device)
    a64, b64 = a.astype(np.complex128), b.astype(np.complex128)
    _check_complex(ea @ eb, a64 @ b64, dtype, "matmul")
    _check_complex(em.vecdot(ea, em.tensor(a[::-1].copy(), device=device)), np.vecdot(a64, a64[::-1]), dtype, "vecdot")
    _check_complex(em.tensordot(ea, eb, axes=1), np.tensordot(a64, b64, axes=1), dtype, "tensordot")


def test_tensordot_empty_contraction(device):
    z = em.zeros((0, 0), device=device)
    assert em.tensordot(z, z, axes=((), ())).shape == (0, 0, 0, 0)
    assert em.tensordot(em.ones((2, 0), device=device), em.ones((0, 3), device=device), axes=1).shape == (2, 3)


def test_asarray_large_uint64_exact(device):
    """Python ints past int64 keep every digit when a uint64 dtype is given (found by Hypothesis)."""
    require_dtype(device, em.uint64)
    big = 2**63 + 1
    assert em.asarray([big, 0], dtype=em.uint64, device=device).tolist() == [big, 0]


# -- edge cases the standard's suite found with more examples -------------------------------------
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
def test_right_shift_past_the_width(device, dtype):
    """x >> n for n at or past the bit width is what shifting bit by bit gives: the sign (0 or -1)."""
    dt = em.dtypes.as_dtype(dtype)
    require_dtype(device, dt)
    bits = dt.bits
    values = [-8, 8, 1, -1, 100, -100] if dt.kind == "i" else [200, 8, 1, 255]
    a = np.array(values, dtype=dt.numpy)
    for n in (bits - 1, bits, bits + 3):
        got = em.tensor(a, device=device) >> em.tensor(np.full(a.shape, n, dtype=dt.numpy), device=device)
        want = [int(v) >> n for v in a.tolist()]
        assert got.tolist() == want, (dtype, n, got.tolist(), want)


def test_axis_out_of_range_is_an_index_error(device):
    x = em.ones((3,), device=device)
    with pytest.raises(IndexError, match="expand_dims: axis=2 is out of range"):
        em.expand_dims(x, axis=2)
    with pytest.raises(ValueError, match="expand_dims: axis=2 is out of range"):  # and still a ValueError
        em.expand_dims(x, axis=2)


def test_empty_edge_cases(device):
    empty = em.zeros((0,), dtype=em.bool, device=device)
    assert empty[em.tensor(False, device=device)].shape == np.zeros((0,), dtype=bool)[np.False_].shape
    assert em.eye(0, k=2**63, device=device).shape == (0, 0)
    # a mask axis of length 0 selects nothing, whatever the axis it indexes (the standard's suite)
    assert em.zeros((0, 1), device=device)[em.zeros((0, 0), dtype=em.bool, device=device)].shape == (0,)
    assert em.ones((2, 3), device=device)[em.zeros((0, 3), dtype=em.bool, device=device)].shape == (0,)
    assert em.eye(2, 3, k=-7, device=device).tolist() == np.eye(2, 3, k=-7).tolist()


def test_searchsorted_python_scalar(device):
    require_dtype(device, em.uint32)
    pool = em.tensor([1, 2, 2, 5], dtype=em.uint32, device=device)
    assert em.searchsorted(pool, 2).tolist() == int(np.searchsorted(np.array([1, 2, 2, 5]), 2))
    assert em.searchsorted(pool, 2, side="right").tolist() == 3
