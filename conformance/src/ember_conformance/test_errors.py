"""Error behaviour: each row makes ember fail in one documented way and checks the error's
class and that its message names what is wrong (op, shapes, dtypes, devices) and how to fix it.

Where ember deliberately differs from numpy (Array API promotion: int + float raises, ``/``
on integers raises), the row checks ember's behaviour.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import ember as em

from .fakes import FAKE_KIND, fake_device


@dataclass(frozen=True)
class ErrorRow:
    name: str
    make: Callable[[em.Device], Any]
    error: type[BaseException]
    words: tuple[str, ...]
    #: also an ember.EmberError (the one hierarchy)
    ember_error: bool = True


def _t(d, shape, dtype="float32"):
    return em.zeros(shape, dtype=dtype, device=d)


def _backward_twice(d):
    x = em.ones((2,), device=d.autodiff(), requires_grad=True)
    y = (x * x).sum()
    y.backward()
    y.backward()


def _setitem_grad(d):
    x = em.ones((3,), device=d.autodiff(), requires_grad=True)
    x[0] = 2.0


ROWS = (
    ErrorRow("broadcast", lambda d: _t(d, (3, 4)) + _t(d, (5,)), em.ShapeError, ("add", "(3, 4)", "(5,)", "broadcast")),
    ErrorRow("broadcast_where", lambda d: em.where(_t(d, (2, 3), "bool"), _t(d, (4,)), 0.0), em.ShapeError, ("where",)),
    ErrorRow("matmul_inner", lambda d: _t(d, (3, 4)) @ _t(d, (5, 2)), em.ShapeError, ("matmul", "(3, 4)", "(5, 2)")),
    ErrorRow("matmul_0d", lambda d: em.matmul(_t(d, ()), _t(d, (2,))), em.ShapeError, ("matmul",)),
    ErrorRow("reshape_size", lambda d: _t(d, (3, 4)).reshape((5,)), em.ShapeError, ("reshape", "(3, 4)", "(5,)")),
    ErrorRow("reshape_two_unknown", lambda d: _t(d, (3, 4)).reshape((-1, -1)), em.ShapeError, ("reshape", "-1")),
    ErrorRow("concat_shapes", lambda d: em.concat([_t(d, (2, 3)), _t(d, (2, 4))], axis=0), em.ShapeError, ("concat",)),
    ErrorRow("stack_shapes", lambda d: em.stack([_t(d, (2, 3)), _t(d, (3, 2))]), em.ShapeError, ("stack", "(3, 2)")),
    ErrorRow("broadcast_to", lambda d: em.broadcast_to(_t(d, (3,)), (4, 2)), em.ShapeError, ("broadcast_to",)),
    ErrorRow("axis_range", lambda d: em.sum(_t(d, (2, 3)), axis=2), em.ShapeError, ("sum", "axis=2")),
    ErrorRow("axis_twice", lambda d: em.sum(_t(d, (2, 3)), axis=(1, 1)), em.ShapeError, ("sum", "twice")),
    ErrorRow("permute", lambda d: em.permute_dims(_t(d, (2, 3)), (0, 0)), em.ShapeError, ("permute_dims",)),
    ErrorRow("squeeze", lambda d: em.squeeze(_t(d, (2, 3)), 0), em.ShapeError, ("squeeze", "axis 0")),
    ErrorRow("max_empty", lambda d: em.max(_t(d, (0, 3)), axis=0), em.ShapeError, ("max", "size 0")),
    ErrorRow("argmax_empty", lambda d: em.argmax(_t(d, (0, 3)), axis=0), em.ShapeError, ("argmax", "size 0")),
    ErrorRow("split", lambda d: em.split(_t(d, (5,)), 2), em.ShapeError, ("split", "5")),
    ErrorRow("pad_negative", lambda d: em.pad(_t(d, (2,)), ((-1, 0),)), em.ShapeError, ("pad",)),
    ErrorRow("topk_k", lambda d: em.topk(_t(d, (3,)), 5), em.ShapeError, ("topk", "k=5")),
    ErrorRow("layer_norm_shape", lambda d: em.layer_norm(_t(d, (2, 3)), (4,)), em.ShapeError, ("layer_norm", "(4,)")),
    ErrorRow(
        "cross_entropy_target",
        lambda d: em.cross_entropy(_t(d, (4, 3)), _t(d, (5,), "int64")),
        em.ShapeError,
        ("cross_entropy",),
    ),
    # dtype promotion the Array API leaves undefined
    ErrorRow(
        "int_plus_float",
        lambda d: _t(d, (2,), "int32") + _t(d, (2,), "float32"),
        em.DTypeError,
        ("add", "int32", "float32", "astype"),
    ),
    ErrorRow(
        "bool_plus_int", lambda d: _t(d, (2,), "bool") + _t(d, (2,), "int8"), em.DTypeError, ("add", "bool", "int8")
    ),
    ErrorRow(
        "uint64_int64",
        lambda d: _t(d, (2,), "uint64") * _t(d, (2,), "int64"),
        em.DTypeError,
        ("mul", "uint64", "int64"),
    ),
    ErrorRow("int_tensor_float_scalar", lambda d: _t(d, (2,), "int32") + 1.5, em.DTypeError, ("add", "int32", "1.5")),
    ErrorRow("bool_tensor_int_scalar", lambda d: _t(d, (2,), "bool") + 1, em.DTypeError, ("add", "bool")),
    ErrorRow("scalar_out_of_range", lambda d: _t(d, (2,), "uint8") + 300, em.DTypeError, ("300", "uint8")),
    ErrorRow("negative_scalar_uint", lambda d: _t(d, (2,), "uint16") * -1, em.DTypeError, ("-1", "uint16")),
    ErrorRow(
        "matmul_int_float",
        lambda d: _t(d, (2, 2), "int64") @ _t(d, (2, 2)),
        em.DTypeError,
        ("matmul", "int64", "float32"),
    ),
    ErrorRow(
        "concat_int_float", lambda d: em.concat([_t(d, (2,), "int8"), _t(d, (2,))]), em.DTypeError, ("int8", "float32")
    ),
    # wrong dtypes for an op
    ErrorRow(
        "int_true_divide",
        lambda d: _t(d, (2,), "int64") / _t(d, (2,), "int64"),
        em.DTypeError,
        ("div", "int64", "floating"),
    ),
    ErrorRow("exp_int", lambda d: em.exp(_t(d, (2,), "int32")), em.DTypeError, ("exp", "int32", "astype")),
    ErrorRow("sqrt_bool", lambda d: em.sqrt(_t(d, (2,), "bool")), em.DTypeError, ("sqrt", "bool")),
    ErrorRow("neg_bool", lambda d: -_t(d, (2,), "bool"), em.DTypeError, ("neg", "bool")),
    ErrorRow(
        "logical_and_float",
        lambda d: em.logical_and(_t(d, (2,)), _t(d, (2,))),
        em.DTypeError,
        ("logical_and", "float32"),
    ),
    ErrorRow("bitwise_float", lambda d: _t(d, (2,)) & _t(d, (2,)), em.DTypeError, ("bitwise_and", "float32")),
    ErrorRow("where_condition", lambda d: em.where(_t(d, (2,)), 1.0, 0.0), em.DTypeError, ("where", "bool")),
    ErrorRow("mean_int", lambda d: em.mean(_t(d, (2,), "int64")), em.DTypeError, ("mean", "int64")),
    ErrorRow("softmax_int", lambda d: em.softmax(_t(d, (2,), "int32")), em.DTypeError, ("softmax", "int32")),
    ErrorRow("take_float_index", lambda d: em.take(_t(d, (3,)), _t(d, (1,))), em.DTypeError, ("take", "float32")),
    ErrorRow(
        "unknown_dtype", lambda d: em.zeros(2, dtype="float128", device=d), em.DTypeError, ("float128", "float32")
    ),
    ErrorRow("ragged", lambda d: em.tensor([[1, 2], [3]], device=d), ValueError, ("tensor",)),
    ErrorRow("complex_with_int", lambda d: em.tensor([1, 2], device=d) + 1j, em.DTypeError, ("complex", "int64")),
    ErrorRow("rand_int_dtype", lambda d: em.rand((2,), dtype="int32", device=d), em.DTypeError, ("rand", "int32")),
    # indexing
    ErrorRow("index_range", lambda d: _t(d, (3, 4))[5], IndexError, ("5", "size 3")),
    ErrorRow("index_range_negative", lambda d: _t(d, (3, 4))[:, -5], IndexError, ("-5",)),
    ErrorRow("too_many_indices", lambda d: _t(d, (3,))[0, 0], IndexError, ("too many",)),
    ErrorRow("two_ellipses", lambda d: _t(d, (3, 3))[..., ...], IndexError, ("ellipsis",)),
    ErrorRow("float_index", lambda d: _t(d, (3,))[_t(d, (1,))], IndexError, ("float32",)),
    ErrorRow("mask_shape", lambda d: _t(d, (3, 4))[_t(d, (4,), "bool")], IndexError, ("mask", "(4,)")),
    ErrorRow("take_range", lambda d: em.take(_t(d, (3,)), em.tensor([7], device=d)), IndexError, ("7",)),
    # autodiff
    ErrorRow(
        "backward_without_autodiff", lambda d: (_t(d, (2,)) * 2).sum().backward(), em.AutodiffError, ("autodiff()",)
    ),
    ErrorRow("requires_grad_int", lambda d: _t(d, (2,), "int32").requires_grad_(), em.AutodiffError, ("int32",)),
    ErrorRow(
        "backward_non_scalar",
        lambda d: (em.ones((2,), device=d.autodiff(), requires_grad=True) * 2).backward(),
        em.AutodiffError,
        ("shape", "sum"),
    ),
    ErrorRow("backward_twice", _backward_twice, em.AutodiffError, ("retain_graph",)),
    ErrorRow("setitem_requires_grad", _setitem_grad, em.AutodiffError, ("no_grad",)),
    ErrorRow("grad_of_int", lambda d: em.grad(lambda t: t.sum())(_t(d, (2,), "int64")), em.AutodiffError, ("int64",)),
    # conversions and devices
    ErrorRow("item_many", lambda d: _t(d, (2,)).item(), ValueError, ("item", "2 elements")),
    ErrorRow("bool_ambiguous", lambda d: bool(_t(d, (2,))), ValueError, ("ambiguous",)),
    ErrorRow(
        "unknown_device_kind", lambda d: em.zeros(2, device="nosuchkind:0"), em.DeviceUnavailableError, ("nosuchkind",)
    ),
    ErrorRow(
        "device_index",
        lambda d: em.zeros(2, device=em.Device(d.kind, 4096)),
        em.DeviceUnavailableError,
        ("4096", "ember devices"),
    ),
    ErrorRow("device_spec", lambda d: em.Device("cpu:x"), ValueError, ("index",)),
)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_error(row: ErrorRow, device):
    if row.name == "take_range" and not device.backend.cheap_readback:
        pytest.skip(
            f"{device.kind} queues work (cheap_readback=False): tensor index ranges are not read back to the "
            f"host for a check, its kernels clamp instead"
        )
    with pytest.raises(row.error) as info:
        row.make(device)
    message = str(info.value)
    missing = [w for w in row.words if w not in message]
    assert not missing, f"the message does not mention {missing}: {message!r}"
    if row.ember_error:
        assert isinstance(info.value, em.EmberError), f"{type(info.value).__name__} is not an ember.EmberError"


_CROSS = {
    "add": lambda a, b: a + b,
    "matmul": lambda a, b: a.reshape((2, 1)) @ b.reshape((1, 2)),
    "where": lambda a, b: em.where(a > 0, a, b),
    "concat": lambda a, b: em.concat([a, b]),
    "maximum": lambda a, b: em.maximum(b, a),
}


@pytest.mark.parametrize("op", sorted(_CROSS))
def test_cross_device(op, device):
    """An op across devices raises DeviceMismatchError naming both devices and suggesting .to()."""
    other = fake_device()
    a = em.ones((2,), device=device)
    b = em.ones((2,), device=other)
    with pytest.raises(em.DeviceMismatchError) as info:
        _CROSS[op](a, b)
    message = str(info.value)
    for name in (f"{device.kind}:{device.index}", f"{FAKE_KIND}:0", ".to("):
        assert name in message, f"the message does not mention {name!r}: {message!r}"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("dtype", em.dtypes.ALL_DTYPES, ids=str)
def test_unsupported_dtype(dtype, device):
    """A dtype the device cannot hold is refused with the backend's reason; one it lists works."""
    caps = device.capabilities
    if caps.supports(dtype):
        assert em.zeros((2,), dtype=dtype, device=device).dtype is dtype
        return
    with pytest.raises(em.DTypeError) as info:
        em.zeros((2,), dtype=dtype, device=device)
    message = str(info.value)
    assert str(dtype) in message, message
    reason = caps.unsupported_dtypes.get(dtype.name)
    assert reason is None or reason in message, f"the backend's reason {reason!r} is not in {message!r}"
