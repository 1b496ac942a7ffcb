"""Convolution, pooling, interpolation and unfold/fold against direct numpy loops."""

from __future__ import annotations

import pytest

from .runner import run_forward
from .specs.base import forward_params
from .specs.conv import CONV


@pytest.mark.parametrize("spec,dtype,case", forward_params(CONV))
def test_conv(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)
