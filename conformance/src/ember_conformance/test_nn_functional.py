"""Neural-network functions (softmax, normalisation, cross-entropy, attention) against numpy.
The activations run with the elementwise ops; nn modules are in test_nn_modules."""

from __future__ import annotations

import pytest

from .runner import run_forward
from .specs.base import forward_params
from .specs.nn import NN


@pytest.mark.parametrize("spec,dtype,case", forward_params(NN))
def test_nn_functional(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)
