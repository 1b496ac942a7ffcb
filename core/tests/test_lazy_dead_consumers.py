"""A deferred value whose only consumer died unrealized (the loss's ``sum``, which backward never
reads) is still realized by ``synchronize`` when a tensor holds it, and its region's operands are
released then, not when the tensor goes (W4's ``out``: it held two activations into the next
step, where the device pool's step plan no longer fit its headroom on wgpu)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
from test_lazy import _device, arr

import ember as em


def _lazyreduce() -> em.Device:
    return _device("lazyreduce")


def test_sync_realizes_a_value_whose_reduction_was_dropped():
    d = _lazyreduce()
    with em.lazy.fusion(True, d):
        x = em.tensor(arr(4, 5), device=d)
        y = x * 2.0 + 1.0
        s = y.sum()
        assert s._data.real is None, "the test needs a deferred reduction"
        del s
        d.synchronize()
        assert y._data.real is not None, "a value a tensor holds stayed pending through synchronize()"
        np.testing.assert_allclose(y.numpy(), arr(4, 5).astype(np.float64) * 2.0 + 1.0, rtol=1e-6, atol=1e-6)


def test_sync_releases_the_operands_of_such_a_value():
    d = _lazyreduce()
    with em.lazy.fusion(True, d):
        x = em.tensor(arr(4, 5), device=d)
        w = em.tensor(arr(5, 3, seed=1), device=d)
        a = x @ w  # a computed handle: the region's operand
        handle = weakref.ref(a._data)
        y = a + 1.0
        y.sum()  # dropped at once, never read
        del a
        d.synchronize()
        gc.collect()
        assert handle() is None, "the operand of a held value stayed alive after synchronize()"
        expected = arr(4, 5).astype(np.float64) @ arr(5, 3, seed=1).astype(np.float64) + 1.0
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5)


def test_a_training_step_output_is_realized_by_sync():
    d = _lazyreduce().autodiff()
    with em.lazy.fusion(True, d):
        x = em.tensor(arr(3, 4), device=d).requires_grad_()
        out = x * 3.0 + 2.0
        out.sum().backward()
        d.synchronize()
        assert out._data.real is not None
        np.testing.assert_allclose(x.grad.numpy(), np.full((3, 4), 3.0), rtol=0)
        np.testing.assert_allclose(out.numpy(), arr(3, 4).astype(np.float64) * 3.0 + 2.0, rtol=1e-6, atol=1e-6)


def test_live_consumers_still_keep_their_operands_in_registers():
    """The recount leaves alone a value that only live unrealized nodes hold: it is not written out."""
    d = _lazyreduce()
    with em.lazy.fusion(True, d):
        x = em.tensor(arr(6), device=d)
        b = (x * 2.0) + 1.0  # x * 2.0 is held by b's node only
        d.synchronize()
        ((program, _),) = d.backend.programs
        assert len(program.outputs) == 1
        assert b._data.real is not None
