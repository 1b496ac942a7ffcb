"""The checked backend enforces the backend contract, and composites make it complete."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.backend import REQUIRED_PRIMITIVES
from ember_checked import CheckedArray, ContractError


@pytest.fixture
def backend():
    return em.Device("checked:0").backend


def _h(backend, values, dtype="float32"):
    return backend.from_numpy(np.asarray(values, dtype=dtype))


# -- complete with the required primitives alone --------------------------------------------


def test_implements_every_required_primitive(backend):
    assert backend.missing_primitives() == []


def test_implements_nothing_but_the_required_primitives(backend):
    assert backend.capabilities.native_ops <= REQUIRED_PRIMITIVES
    for composite in ("softmax", "mean", "var", "relu", "gelu", "layer_norm", "take", "clone", "logsumexp"):
        assert backend.implementation(composite) is None


COMPOSITES = {
    "softmax": lambda x: em.softmax(x, axis=-1),
    "log_softmax": lambda x: em.log_softmax(x, axis=0),
    "logsumexp": lambda x: em.logsumexp(x, axis=1),
    "mean_var_std": lambda x: em.stack([x.mean(), x.var(), x.std()]),
    "gelu_silu_sigmoid": lambda x: em.gelu(x) + em.silu(x) + em.sigmoid(x),
    "layer_norm": lambda x: em.layer_norm(x, (x.shape[-1],)),
    "cross_entropy": lambda x: em.cross_entropy(x, em.tensor([1, 0, 3], device=x.device)),
    "take": lambda x: em.take(x, em.tensor([2, 0], device=x.device), axis=1),
    "tril_topk": lambda x: em.tril(x).sum() + em.topk(x.reshape((-1,)), 3)[0].sum(),
    "einsum": lambda x: em.einsum("ij,kj->ik", x, x),
}


@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composites_match_the_cpu_backend(name):
    data = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    fn = COMPOSITES[name]
    ours = np.asarray(fn(em.tensor(data, device="checked")).numpy())
    cpu = np.asarray(fn(em.tensor(data, device="cpu")).numpy())
    np.testing.assert_allclose(ours, cpu, rtol=1e-5, atol=1e-6)


def test_training_step_matches_the_cpu_backend():
    rng = np.random.default_rng(1)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 4), (4, 16), (16, 3)))
    labels = rng.integers(0, 3, 8)
    grads = {}
    for kind in ("cpu", "checked"):
        dev = em.Device(kind).autodiff()
        p1 = em.tensor(w1, device=dev, requires_grad=True)
        p2 = em.tensor(w2, device=dev, requires_grad=True)
        logits = em.relu(em.tensor(x, device=dev) @ p1) @ p2
        loss = em.cross_entropy(logits, em.tensor(labels, device=dev))
        loss.backward()
        grads[kind] = (loss.item(), p1.grad.numpy(), p2.grad.numpy())
    assert grads["checked"][0] == pytest.approx(grads["cpu"][0], rel=1e-6)
    for ours, cpu in zip(grads["checked"][1:], grads["cpu"][1:]):
        np.testing.assert_allclose(ours, cpu, rtol=1e-5, atol=1e-6)


# -- handles ---------------------------------------------------------------------------------


def test_handles_are_read_only(backend):
    t = em.tensor([1.0, 2.0], device="checked")
    with pytest.raises(ValueError, match="read-only"):
        t.numpy()[0] = 5.0
    with pytest.raises(ValueError, match="read-only"):
        t._data.array[0] = 5.0
    with pytest.raises(AttributeError):
        t._data.array = np.zeros(2)


def test_from_numpy_copies_its_input(backend):
    src = np.arange(3.0)
    h = backend.from_numpy(src)
    src[0] = 99.0
    assert backend.to_numpy(h)[0] == 0.0


def test_outputs_are_fresh_handles_of_this_device(backend):
    h = _h(backend, [[1, 2], [3, 4]])
    out = backend.reshape(h, shape=(2, 2))
    assert type(out) is CheckedArray and out is not h and out.owner is backend
    assert not out.array.flags.writeable


def test_reading_a_handle_with_numpy_directly_is_refused(backend):
    with pytest.raises(ContractError, match="to_numpy"):
        np.asarray(_h(backend, [1.0]))


# -- arguments -------------------------------------------------------------------------------


def test_contract_errors_are_assertion_errors_not_user_errors():
    assert issubclass(ContractError, AssertionError)
    assert not issubclass(ContractError, (TypeError, ValueError))


def test_foreign_handles_are_refused(backend):
    with pytest.raises(ContractError, match="handle of this backend"):
        backend.neg(np.ones(3, dtype=np.float32))
    other = em.Device("checked:1").backend
    with pytest.raises(ContractError, match="belongs to"):
        backend.neg(_h(other, [1.0]))


def test_tensors_on_two_checked_devices_do_not_mix():
    a = em.tensor([1.0], device="checked:0")
    b = em.tensor([1.0], device="checked:1")
    with pytest.raises(em.DeviceMismatchError, match="checked:1"):
        a + b
    assert (a + b.to("checked:0")).tolist() == [2.0]


@pytest.mark.parametrize(
    "call",
    [
        lambda be: be.add(_h(be, [1.0]), _h(be, [1], "int32")),  # operands of two dtypes
        lambda be: be.exp(_h(be, [1], "int64")),  # a float op on integers
        lambda be: be.logical_and(_h(be, [1.0]), _h(be, [1.0])),  # a boolean op on floats
        lambda be: be.add(_h(be, [1.0]), 1),  # an int scalar with a float array
        lambda be: be.add(_h(be, [1], "int8"), 300),  # a scalar that does not fit
        lambda be: be.where(_h(be, [1.0]), _h(be, [1.0]), _h(be, [2.0])),  # a float condition
        lambda be: be.gather(_h(be, [1.0, 2.0]), _h(be, [0], "int32"), axis=0),  # int32 indices
        lambda be: be.cast(_h(be, [1.0]), dtype="int32"),  # a dtype name instead of a DType
    ],
)
def test_dtypes_the_params_imply_are_checked(backend, call):
    with pytest.raises(ContractError):
        call(backend)


@pytest.mark.parametrize(
    "call",
    [
        lambda be: be.sum(_h(be, [[1.0]]), axes=[0], keepdims=False),  # a list, not a tuple
        lambda be: be.sum(_h(be, [[1.0]]), axes=(1, 0), keepdims=False),  # unsorted
        lambda be: be.sum(_h(be, [[1.0]]), axes=(-1,), keepdims=False),  # not normalised
        lambda be: be.sum(_h(be, [[1.0]]), axes=(0,), keepdims=1),  # not a bool
        lambda be: be.reshape(_h(be, [1.0, 2.0]), shape=(3,)),  # the wrong size
        lambda be: be.slice(_h(be, [1.0, 2.0]), starts=(0,), stops=(2,), steps=(0,)),  # step 0
        lambda be: be.pad(_h(be, [1.0]), pads=((1, -1),), value=0.0),  # a negative pad
        lambda be: be.gather(_h(be, [1.0, 2.0]), _h(be, [2], "int64"), axis=0),  # out of range
        lambda be: be.full(shape=[2], value=0.0, dtype=em.float32),  # a list shape
        lambda be: be.full(shape=(2,), value=np.float32(0), dtype=em.float32),  # a numpy scalar
        lambda be: be.random_bits(key=(2**32, 0), counter=0, size=4),  # a key word over 32 bits
        lambda be: be.argmax(_h(be, [[1.0]]), axis=2, keepdims=False),  # no such axis
    ],
)
def test_params_have_the_documented_types(backend, call):
    with pytest.raises(ContractError):
        call(backend)


# -- dtypes ----------------------------------------------------------------------------------


def test_bfloat16_is_refused_with_the_backends_reason():
    with pytest.raises(em.DTypeError, match="numpy has no bfloat16"):
        em.zeros((2,), dtype="bfloat16", device="checked")
    assert "bfloat16" in em.Device("checked").capabilities.unsupported_dtypes


def test_results_keep_the_contract_dtype():
    h = em.tensor([1.0, 2.0, 3.0], dtype="float16", device="checked")
    assert h.sum().dtype == em.float16
    assert (h @ h).dtype == em.float16
    assert em.erf(h).dtype == em.float16
    i = em.tensor([1, 2, 3], dtype="int8", device="checked")
    assert (i + 1).dtype == em.int8 and (i < 2).dtype == em.bool_
