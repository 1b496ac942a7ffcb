"""What is specific to the ember-linalg distribution: how it plugs in, its errors, its conventions.
The numerical cases are conformance cases (ember_linalg.conformance), run on every device."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
import ember_linalg
from ember.cli import main
from ember.plugins import get_registry


def test_seen_as_em_linalg():
    assert em.linalg is ember_linalg


def test_plugin_registers_ops_and_conformance_module():
    registry = get_registry()
    assert "ember_linalg.conformance" in registry.conformance_modules()
    info = registry.plugins["linalg"]
    assert info.status == "ok", info.error
    assert set(info.extensions) == {op.name for op in ember_linalg.EXTENSION_OPS}


def test_ember_plugins_lists_the_ops(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "ember-linalg" in out and "linalg_eigh" in out


def test_every_op_has_a_cpu_kernel_a_vjp_and_a_sample():
    for op in ember_linalg.EXTENSION_OPS:
        if op.name == "linalg_eig":  # forward only, cpu only: no reference to compare a kernel with
            assert "cpu" in op.kernels and not op.has_vjp and op.sample is None
            continue
        assert "cpu" in op.kernels, op.name
        assert op.has_vjp, op.name
        assert op.sample is not None, op.name


def test_singular_matrix_raises_linalg_error_on_cpu():
    with pytest.raises(ember_linalg.LinAlgError, match="solve"):
        ember_linalg.inv(em.zeros((3, 3)))
    with pytest.raises(ValueError):  # LinAlgError is a ValueError, as numpy's
        ember_linalg.cholesky(-em.eye(2))


def test_singular_matrix_has_zero_determinant():
    sign, logabs = ember_linalg.slogdet(em.zeros((2, 2), dtype="float64"))
    assert float(sign.numpy()) == 0.0 and np.isneginf(float(logabs.numpy()))
    assert float(ember_linalg.det(em.zeros((2, 2), dtype="float64")).numpy()) == 0.0


def test_bad_arguments_name_the_argument():
    with pytest.raises(em.errors.InvalidArgumentError, match="mode"):
        ember_linalg.qr(em.eye(2), mode="raw")
    with pytest.raises(em.errors.ArgumentTypeError, match="n must be an int"):
        ember_linalg.matrix_power(em.eye(2), 1.5)
    with pytest.raises(em.errors.ShapeError, match="length 3"):
        ember_linalg.cross(em.ones((2,)), em.ones((2,)))
    with pytest.raises(em.errors.InvalidArgumentError, match="ord"):
        ember_linalg.matrix_norm(em.eye(2), ord=3)


def test_signs_are_canonical():
    """Each eigenvector's largest-magnitude entry is positive; QR's R has a non-negative diagonal."""
    a = em.tensor([[2.0, -1.0, 0.0], [-1.0, 2.0, -1.0], [0.0, -1.0, 2.0]], dtype="float64")
    v = ember_linalg.eigh(a).eigenvectors.numpy()
    top = np.take_along_axis(v, np.argmax(np.abs(v), axis=0)[None, :], axis=0)
    assert (top > 0).all()
    r = ember_linalg.qr(-a).R.numpy()
    assert (np.diagonal(r) >= 0).all()


def test_conformance_case_fails_on_a_wrong_result():
    """The conformance case's checks fail (pytest's failure, with the shapes) on a backend whose
    outer product comes back transposed: they are not bare asserts, so they also run under python -O."""
    import dataclasses

    from ember_linalg import conformance

    outer = next(case for case in conformance.CASES if case.name == "outer")
    wrong = dataclasses.replace(outer, fn=lambda a, b: ember_linalg.outer(b, a))
    with pytest.raises(pytest.fail.Exception, match=r"outer result 0: shape \(4, 3\), numpy \(3, 4\)"):
        conformance.test_em_linalg(wrong, em.float64, em.Device.cpu())
