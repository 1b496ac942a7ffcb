"""cross_entropy with integer targets reads them back once (range check and the count of ignored
ones, so the mean divides by a number) and its gradient masks rows only when some target is
ignored: these check both roads against a float64 numpy reference, ignore_index inside and
outside the class range, 2-D and 3-D logits."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember as em
from ember.errors import EmberIndexError


def _reference(logits: np.ndarray, target: np.ndarray, ignore: int) -> tuple[float, np.ndarray]:
    """Mean loss over the targets not ignored and its gradient w.r.t. the logits (class axis 1)."""
    z = np.moveaxis(logits.astype(np.float64), 1, -1)  # (..., C)
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    valid = target != ignore
    safe = np.where(valid, target, 0)
    picked = np.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
    count = valid.sum()
    loss = -(picked * valid).sum() / count
    hot = np.eye(logits.shape[1])[safe]
    grad = (np.exp(logp) - hot) * (valid / count)[..., None]
    return loss, np.moveaxis(grad, -1, 1)


def _ember(logits: np.ndarray, target: np.ndarray, ignore: int) -> tuple[float, np.ndarray]:
    dev = em.Device("cpu").autodiff()
    x = em.tensor(logits, device=dev).requires_grad_()
    loss = em.cross_entropy(x, em.tensor(target, device=dev), ignore_index=ignore)
    loss.backward()
    return float(loss.item()), x.grad.numpy()


@pytest.mark.parametrize("ignore", [2, -100, 7])
@pytest.mark.parametrize("some_ignored", [True, False])
@pytest.mark.parametrize("shape", [(6, 5), (2, 5, 3)])
def test_loss_and_gradient_match_float64(ignore: int, some_ignored: bool, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=shape).astype(np.float32)
    tshape = (shape[0],) + shape[2:]
    target = rng.integers(0, shape[1], size=tshape)
    if 0 <= ignore < shape[1]:
        target[target == ignore] = (ignore + 1) % shape[1]  # none ignored unless placed below
    if some_ignored:
        target.flat[[0, 3]] = ignore
    want_loss, want_grad = _reference(logits, target, ignore)
    loss, grad = _ember(logits, target, ignore)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)


def test_every_target_ignored_gives_nan_and_zero_gradient() -> None:
    logits = np.ones((3, 4), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 0 / 0, as PyTorch's NaN
        loss, grad = _ember(logits, np.full(3, -100), -100)
    assert np.isnan(loss)
    np.testing.assert_array_equal(grad, np.zeros((3, 4), np.float32))


def test_out_of_range_target_still_names_the_class() -> None:
    with pytest.raises(EmberIndexError, match=r"cross_entropy: target holds class 9, outside 0\.\.3"):
        em.cross_entropy(em.ones((2, 4)), em.asarray([9, -100]))
    with pytest.raises(EmberIndexError, match="class -3"):
        em.cross_entropy(em.ones((2, 4)), em.asarray([-3, 1]))
