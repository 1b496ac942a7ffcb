"""Reductions and scans against numpy: axes, keepdims, 0-d, empty axes, non-contiguous
inputs, NaN/inf, large sizes."""

from __future__ import annotations

import pytest

from .runner import run_forward
from .specs.base import forward_params
from .specs.reduction import REDUCTIONS, SCANS


@pytest.mark.parametrize("spec,dtype,case", forward_params(REDUCTIONS))
def test_reduction(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)


@pytest.mark.parametrize("spec,dtype,case", forward_params(SCANS))
def test_scan(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)
