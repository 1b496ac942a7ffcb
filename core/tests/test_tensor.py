"""Tensor basics: creation, value semantics, interop, indexing against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em


def test_python_data_defaults():
    assert em.tensor([1.0, 2.0]).dtype is em.float32
    assert em.tensor([1, 2]).dtype is em.int64
    assert em.tensor([True]).dtype is em.bool_
    assert em.tensor(np.zeros(2, dtype=np.float64)).dtype is em.float64
    with pytest.raises(em.ShapeError, match="ragged"):
        em.tensor([[1, 2], [3]])


def test_tensors_are_values():
    x = em.tensor([1.0, 2.0, 3.0])
    y = x[1:]
    x[1] = 10.0
    assert y.tolist() == [2.0, 3.0]
    assert x.tolist() == [1.0, 10.0, 3.0]
    arr = x.numpy()
    with pytest.raises(ValueError):
        arr[0] = 5.0


def test_source_array_changes_do_not_leak_in():
    a = np.arange(3.0)
    x = em.tensor(a)
    a[0] = 99
    assert x.tolist() == [0.0, 1.0, 2.0]


def test_dlpack_round_trip():
    x = em.arange(6).reshape((2, 3))
    np.testing.assert_array_equal(np.from_dlpack(x), np.arange(6).reshape(2, 3))
    y = em.from_dlpack(np.arange(4.0))
    assert y.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_scalar_conversions():
    x = em.tensor([3.5])
    assert float(x) == 3.5 and int(em.tensor(7)) == 7 and x.item() == 3.5
    with pytest.raises(ValueError, match="ambiguous"):
        bool(em.ones(2))


KEYS = [
    (1,), (slice(None, None, -1),), (slice(1, None, 2), Ellipsis), (None, 0), (Ellipsis, None),
    ([0, 2],), ((0, 1), (2, 3)), (slice(None), [3, 0, 1]), ([[0], [2]], [1, 3]), (Ellipsis, 1),
    (0, slice(None), [1, 2]), (-1, -2),
]  # fmt: skip


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_getitem_matches_numpy(key):
    a = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    np_key = tuple(np.array(k) if isinstance(k, list) else k for k in key)
    np.testing.assert_array_equal(em.tensor(a)[key].numpy(), a[np_key])


def test_boolean_mask_and_setitem_match_numpy():
    a = np.arange(12.0).reshape(3, 4)
    x = em.tensor(a)
    np.testing.assert_array_equal(x[x > 5].numpy(), a[a > 5])
    x[x > 5] = 0.0
    a[a > 5] = 0.0
    np.testing.assert_array_equal(x.numpy(), a)
    x[:, [0, 2]] = em.tensor([7.0, 8.0])
    a[:, [0, 2]] = [7.0, 8.0]
    np.testing.assert_array_equal(x.numpy(), a)


def test_index_errors_are_clear():
    x = em.zeros((2, 3))
    with pytest.raises(IndexError, match="out of bounds"):
        x[5]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="out of bounds"):
        x[em.tensor([0, 9])]


def test_shape_errors_name_the_shapes():
    with pytest.raises(em.ShapeError, match=r"\(2, 3\).*\(4,\)"):
        em.ones((2, 3)) + em.ones(4)
    with pytest.raises(em.ShapeError, match="cannot reshape"):
        em.ones(6).reshape((4, 2))


def test_repr_shows_dtype_device_and_grad():
    r = repr(em.tensor([1.0], device=em.Device.cpu().autodiff(), requires_grad=True) * 2)
    assert "float32" in r and "cpu:0" in r and "grad_fn=mul" in r


def test_to_moves_dtype_and_device():
    x = em.tensor([1.5, -2.5])
    assert x.to(em.int32).tolist() == [1, -2]
    assert x.to("float64").dtype is em.float64
    assert x.to("cpu") is x


def test_tensor_cannot_be_subclassed():
    with pytest.raises(TypeError, match="cannot be subclassed"):

        class Sub(em.Tensor):
            pass
