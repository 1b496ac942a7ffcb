"""The error hierarchy's promises and the silent acceptances it replaced."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.errors import ArgumentTypeError, DeviceUnavailableError, EmberError, EmberIndexError, InvalidArgumentError
from ember.nn import functional as F


def test_errors_keep_their_builtin_so_plain_except_still_works():
    with pytest.raises(ValueError):
        em.optim.SGD([])
    with pytest.raises(TypeError):
        em.zeros((2.5,))
    with pytest.raises(IndexError):
        F.one_hot(em.asarray([7]), 3)
    with pytest.raises(KeyError) as info:
        nn.Module().register_parameter("a.b", None)
    assert str(info.value).startswith("Module.register_parameter:")  # not KeyError's quoted repr


@pytest.mark.parametrize("shape", [(2.5,), (2, 3.0), "ab", 2.0, (True,), None])
def test_fractional_or_non_int_shapes_are_refused(shape):
    with pytest.raises(ArgumentTypeError, match=r"zeros: shape must be an int or a sequence of ints"):
        em.zeros(shape)


def test_integer_numpy_scalars_are_shapes():
    assert em.zeros((np.int64(2), np.int32(3))).shape == (2, 3)
    assert em.ones(np.int64(4)).reshape((np.int64(2), -1)).shape == (2, 2)


def test_one_hot_out_of_range_is_an_error():
    with pytest.raises(EmberIndexError, match=r"one_hot: indices holds class 7, outside 0\.\.2 for 3 classes"):
        F.one_hot(em.asarray([0, 7]), 3)
    with pytest.raises(EmberIndexError, match="class -1"):
        em.one_hot(em.asarray([-1]), 3)
    np.testing.assert_array_equal(em.one_hot(em.asarray([2, 0]), 3).numpy(), [[0, 0, 1], [1, 0, 0]])


def test_cross_entropy_target_range_is_checked_and_ignore_index_is_exempt():
    logits = em.ones((3, 3))
    with pytest.raises(EmberIndexError, match=r"cross_entropy: target holds class 7, outside 0\.\.2") as info:
        F.cross_entropy(logits, em.asarray([7, 0, 1]))
    assert "ignore_index=-100" in str(info.value)
    loss = F.cross_entropy(logits, em.asarray([-100, 0, 1]))
    assert loss.item() == pytest.approx(np.log(3.0))
    assert F.cross_entropy(logits, em.asarray([5, 0, 5]), ignore_index=5).item() == pytest.approx(np.log(3.0))
    with pytest.raises(EmberIndexError, match="nll_loss: target holds class 3"):
        F.nll_loss(logits, em.asarray([3, 0, 1]))


def test_class_range_checks_skip_the_readback_on_queueing_backends(twin, monkeypatch):
    """Like the gather bounds check: on a GPU (cheap_readback False) no value is read back."""
    logits = em.ones((2, 3), device=twin)
    target = em.asarray([1, 0], device=twin)
    monkeypatch.setattr(twin.backend, "cheap_readback", False)

    def no_readback(self):
        raise AssertionError("a value was read back to the host")

    monkeypatch.setattr(em.Tensor, "item", no_readback)
    F.cross_entropy(logits, target, reduction="none")
    em.one_hot(target, 3)


def test_matmul_of_vectors_names_the_shapes_passed():
    with pytest.raises(em.ShapeError, match=r"1-D operands of shapes \(3,\) and \(4,\)"):
        em.ones(3) @ em.ones(4)
    with pytest.raises(em.ShapeError, match=r"inner dimensions differ: \(3,\) @ \(4, 2\)"):
        em.ones(3) @ em.ones((4, 2))


def test_a_bad_ember_device_is_named(monkeypatch):
    monkeypatch.setenv("EMBER_DEVICE", "cpu:x")
    with pytest.raises(InvalidArgumentError, match=r"EMBER_DEVICE='cpu:x' is not a device spec.*or unset it"):
        em.Device.default()
    monkeypatch.setenv("EMBER_DEVICE", "nosuchkind")
    dev = em.Device.default()  # naming a kind is fine until it is used
    with pytest.raises(DeviceUnavailableError, match=r"EMBER_DEVICE='nosuchkind' names this device"):
        em.zeros(2, device=dev)
    monkeypatch.setenv("EMBER_DEVICE", "cpu:5")
    with pytest.raises(DeviceUnavailableError, match=r"cpu:5 does not exist.*EMBER_DEVICE='cpu:5' names this device"):
        em.zeros(2, device=em.Device.default())
    monkeypatch.delenv("EMBER_DEVICE")
    with pytest.raises(DeviceUnavailableError) as info:
        em.zeros(2, device="cpu:5")
    assert "EMBER_DEVICE" not in str(info.value)


def test_integer_division_by_zero_follows_the_array_api():
    """Implementation-defined for integers (no error, no readback); IEEE 754 for floats."""
    a, b = em.asarray([7, -7, 3]), em.asarray([0, 0, 2])
    with np.errstate(all="ignore"):
        assert (a // b).tolist()[2] == 1 and (a % b).tolist()[2] == 1
        f = (em.asarray([1.0, -1.0]) / em.asarray([0.0, 0.0])).tolist()
    assert f == [float("inf"), float("-inf")]


def test_operands_that_are_not_numbers_name_the_op():
    with pytest.raises(em.DTypeError, match=r"add: an operand 'a' \(str\) is not a tensor"):
        em.ones(2) + "a"
    with pytest.raises(EmberError, match=r"index: 'a' \(str\) is not a valid index"):
        em.ones(2)["a"]


def test_zero_sized_layers_initialise_without_dividing_by_zero():
    assert nn.Linear(0, 2).weight.shape == (2, 0)
