"""The lazy layer's in-place offer (``Backend.fusion_outs``): on a backend that takes it, a fused
region whose one output has an operand's shape and dtype, and whose operand nothing else holds,
writes into that operand, so ``p.copy_(p - lr * g)`` updates ``p``'s buffer as torch's ``sub_``.
Each case checks the values against numpy float64 and, through ``ember.lazy.stats``' ``in_place``
counter, whether the offer was taken; a backend that declines the offer skips with that reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember as em

from .checks import require_dtype


def _require_offer(device: em.Device) -> None:
    if not device.capabilities.fusion:
        pytest.skip(f"the {device.backend.name} backend does not fuse (capabilities.fusion is False)")
    if not em.lazy.fusion_enabled():
        pytest.skip("EMBER_FUSION=0: the lazy layer is off for this run")
    if not getattr(device.backend, "fusion_outs", False):
        pytest.skip(f"the {device.backend.name} backend declines the in-place offer (fusion_outs is False)")


def _shape(device: em.Device) -> tuple[int, int]:
    """Rows x 96, at least the backend's fusion_min_elements (smaller ops run at once, unfused)."""
    rows = max(64, -(-device.capabilities.fusion_min_elements // 96))
    return rows, 96


def _in_place(device: em.Device) -> int:
    return em.lazy.stats(device)["in_place"]


def _tensors(device: em.Device, seed: int) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    require_dtype(device, em.float32)
    gen = np.random.default_rng(seed)
    shape = _shape(device)
    p0 = gen.standard_normal(shape).astype(np.float32)
    g0 = gen.standard_normal(shape).astype(np.float32)
    return em.tensor(p0, device=device), em.tensor(g0, device=device), p0, g0


def test_an_sgd_update_is_written_into_the_parameter(device: em.Device) -> None:
    _require_offer(device)
    p, g, p0, g0 = _tensors(device, 11)
    p.copy_(p - 0.25 * g)  # the first result is a fresh buffer: the next updates can reuse it
    p.realize()
    before = _in_place(device)
    for _ in range(3):
        p.copy_(p - 0.25 * g)
        p.realize()
    assert _in_place(device) == before + 3, "the update did not take the parameter's buffer"
    want = p0.astype(np.float64) - 4 * 0.25 * g0.astype(np.float64)
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_kept_view_of_the_old_values_keeps_them(device: em.Device) -> None:
    """A row of ``p`` kept by the caller shares its buffer: no offer, and the row still reads the
    values it had."""
    _require_offer(device)
    p, g, p0, g0 = _tensors(device, 12)
    p.copy_(p * 1.0)
    p.realize()
    row = p[3]
    row_before = row.numpy().copy()
    before = _in_place(device)
    p.copy_(p - 0.5 * g)
    p.realize()
    assert _in_place(device) == before
    np.testing.assert_array_equal(row.numpy(), row_before)
    np.testing.assert_allclose(p.numpy(), p0 - 0.5 * g0, rtol=1e-6, atol=1e-6)


def test_a_value_a_later_region_recomputes_keeps_its_operand(device: em.Device) -> None:
    """``n = p * 2`` is read by ``q``'s pending region and by ``p``'s update: ``q`` recomputes it
    from ``p``'s old buffer later, so that buffer must keep its values (the bug that made gradient
    cases wrong when opencl first took the offer)."""
    _require_offer(device)
    p, _, p0, _ = _tensors(device, 13)
    n = p * 2.0
    q = n * 3.0
    p.copy_(p + n)
    del n
    p.realize()
    np.testing.assert_allclose(p.numpy(), p0.astype(np.float64) * 3.0, rtol=1e-6)
    np.testing.assert_allclose(q.numpy(), p0.astype(np.float64) * 6.0, rtol=1e-6)
