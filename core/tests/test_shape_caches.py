"""The memo tables behind reshape and permute_dims (kept for ops a model repeats every step) give
the answers and the errors of the uncached checks, whatever was looked up before."""

import numpy as np
import pytest

import ember as em
from ember.errors import ArgumentTypeError, ShapeError


def test_reshape_repeated_matches_numpy():
    ref = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    x = em.tensor(ref)
    for shape in [(6, 4), (6, 4), (-1, 4), (4, -1), (2, 12), (-1, 4)]:
        np.testing.assert_array_equal(x.reshape(shape).numpy(), ref.reshape(shape))


@pytest.mark.parametrize("bad", [(6, 4.0), (6.0, 4), (True, 24), (24, True)])
def test_reshape_refuses_non_ints_after_the_int_shape_was_seen(bad):
    x = em.tensor(np.zeros((24,), dtype=np.float32))
    x.reshape(tuple(int(v) for v in bad))  # the same key, as plain ints, is now remembered
    with pytest.raises(ArgumentTypeError, match="reshape"):
        x.reshape(bad)


def test_reshape_errors_are_not_remembered():
    x = em.tensor(np.zeros((2, 3), dtype=np.float32))
    for _ in range(2):
        with pytest.raises(ShapeError, match="cannot reshape"):
            x.reshape((4, 2))


def test_reshape_numpy_int_entries():
    x = em.tensor(np.arange(6, dtype=np.float32))
    assert x.reshape((np.int64(2), np.int64(3))).shape == (2, 3)


@pytest.mark.parametrize("axes", [(2, 0, 1), [2, 0, 1], (-1, 0, 1), (2, -3, 1)])
def test_permute_repeated_matches_numpy(axes):
    ref = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    x = em.tensor(ref)
    for _ in range(2):
        np.testing.assert_array_equal(em.permute_dims(x, axes).numpy(), np.transpose(ref, axes))


def test_permute_same_axes_on_another_rank_is_checked():
    em.permute_dims(em.tensor(np.zeros((2, 3), dtype=np.float32)), (1, 0))
    with pytest.raises(ShapeError, match="permutation"):
        em.permute_dims(em.tensor(np.zeros((2, 3, 4), dtype=np.float32)), (1, 0))
    with pytest.raises(ShapeError, match="permutation"):
        em.permute_dims(em.tensor(np.zeros((2, 3), dtype=np.float32)), (1, 1))


def test_swapaxes_and_matrix_transpose():
    ref = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    x = em.tensor(ref)
    np.testing.assert_array_equal(em.swapaxes(x, 0, 2).numpy(), np.swapaxes(ref, 0, 2))
    np.testing.assert_array_equal(em.swapaxes(x, 1, -2).numpy(), ref)
    np.testing.assert_array_equal(em.matrix_transpose(x).numpy(), np.swapaxes(ref, -1, -2))


def test_matmul_fast_path_broadcasts_and_checks():
    a = np.random.default_rng(0).standard_normal((2, 1, 3, 4))
    b = np.random.default_rng(1).standard_normal((5, 4, 2))
    np.testing.assert_allclose((em.tensor(a) @ em.tensor(b)).numpy(), a @ b, rtol=1e-12)
    with pytest.raises(ShapeError, match="inner dimensions"):
        em.tensor(a) @ em.tensor(a)


def test_split_chunk_unstack_roll_match_numpy():
    ref = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    x = em.tensor(ref)
    for got, want in zip(em.split(x, 5, axis=-1), np.split(ref, 5, axis=-1)):
        np.testing.assert_array_equal(got.numpy(), want)
    for got, want in zip(em.split(x, [1, 3], axis=1), np.split(ref, [1, 3], axis=1)):
        np.testing.assert_array_equal(got.numpy(), want)
    (whole,) = em.split(x, 1, axis=0)
    assert whole is x
    for got, want in zip(em.chunk(x, 2, axis=2), np.array_split(ref, [3], axis=2)):
        np.testing.assert_array_equal(got.numpy(), want)
    for got, want in zip(em.unstack(x, axis=1), [ref[:, i] for i in range(4)]):
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(em.roll(x, 2, axis=2).numpy(), np.roll(ref, 2, axis=2))


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (2, 0), ()])
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_and_mean_repeated_match_numpy(axis, keepdims):
    ref = np.arange(24, dtype=np.float64).reshape(2, 3, 4) + 1
    x = em.tensor(ref)
    for _ in range(2):
        np.testing.assert_allclose(
            em.sum(x, axis=axis, keepdims=keepdims).numpy(), ref.sum(axis=axis, keepdims=keepdims)
        )
        np.testing.assert_allclose(
            em.mean(x, axis=axis, keepdims=keepdims).numpy(), ref.mean(axis=axis, keepdims=keepdims)
        )


@pytest.mark.parametrize("bad", [(0, 1.0), (True,), 1.0, True])
def test_reduction_refuses_non_int_axes_after_the_int_axes_were_seen(bad):
    x = em.tensor(np.ones((2, 3), dtype=np.float32))
    em.sum(x, axis=(0, 1))
    em.sum(x, axis=1)
    with pytest.raises(em.errors.EmberError):
        em.sum(x, axis=bad)


def test_reduction_axis_errors_are_not_remembered():
    x = em.tensor(np.ones((2, 3), dtype=np.float32))
    for _ in range(2):
        with pytest.raises(em.errors.EmberError, match="twice"):
            em.sum(x, axis=(0, 0))
        with pytest.raises(em.errors.EmberError, match="out of range"):
            em.mean(x, axis=2)


def test_broadcast_pairs_repeated_and_errors():
    a = np.ones((4, 1, 3))
    b = np.arange(2.0).reshape(2, 1)
    for _ in range(2):
        np.testing.assert_array_equal((em.tensor(a) + em.tensor(b)).numpy(), a + b)
        assert em.broadcast_shapes((4, 1, 3), (2, 1)) == np.broadcast_shapes((4, 1, 3), (2, 1))
        with pytest.raises(ShapeError, match="do not broadcast"):
            em.broadcast_shapes((2, 3), (4, 3))
