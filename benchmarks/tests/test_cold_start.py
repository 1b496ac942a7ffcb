"""benchmarks.cold_start's road of inputs made on the device (``--inputs ember``): the inputs it
makes and W2's step over them, checked against numpy's float64 step (w2_mlp's by-hand one)."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from benchmarks import cold_start, w2_mlp

SIZE = w2_mlp.SIZES["check"]


def _host(t: em.Tensor) -> np.ndarray:
    return t.numpy()


@pytest.mark.parametrize("spec", ["cpu", "opencl:0"])
def test_ember_inputs_and_step_match_numpy(spec: str) -> None:
    try:
        dev = em.Device(spec)
        dev.synchronize()
    except Exception as exc:  # no OpenCL platform here
        pytest.skip(f"{spec}: {exc}")
    x, y, params = cold_start.ember_inputs(dev, SIZE)
    n, h = SIZE["batch"], SIZE["hidden"]
    assert x.shape == (n, w2_mlp.IN_FEATURES) and x.dtype == em.float32
    assert params["w2"].shape == (h, h) and params["b3"].shape == (w2_mlp.CLASSES,)
    assert all(p.requires_grad for p in params.values())
    labels = _host(y)
    assert labels.min() >= 0 and labels.max() < w2_mlp.CLASSES
    w2 = _host(params["w2"]).astype(np.float64)
    assert np.abs(w2).max() <= h**-0.5 and abs(w2.std() * np.sqrt(3 * h) - 1.0) < 0.05  # nn.Linear's +-1/sqrt(fan_in)
    # the same values on a second call: one stream of a fixed seed
    x_again = cold_start.ember_inputs(dev, SIZE)[0]
    np.testing.assert_array_equal(_host(x), _host(x_again))

    ref = {k: _host(v).astype(np.float64) for k, v in params.items()}
    x64 = _host(x).astype(np.float64)
    want, _ = w2_mlp._numpy_step(np, x64, labels, ref)
    case = cold_start.w2_case(dev, x, y, params)
    got = case.step().item()
    np.testing.assert_allclose(got, want, rtol=1e-4)
    # the step updated the parameters as numpy's did (ref was updated in place by _numpy_step)
    np.testing.assert_allclose(_host(params["w3"]), ref["w3"], rtol=1e-3, atol=1e-5)
