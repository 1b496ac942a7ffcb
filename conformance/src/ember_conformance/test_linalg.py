"""matmul and contractions, diagonals, sorting and top-k against numpy."""

from __future__ import annotations

import pytest

from .runner import run_forward
from .specs.base import forward_params
from .specs.linalg import LINALG, SORTING


@pytest.mark.parametrize("spec,dtype,case", forward_params(LINALG))
def test_linalg(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)


@pytest.mark.parametrize("spec,dtype,case", forward_params(SORTING))
def test_sorting(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)
