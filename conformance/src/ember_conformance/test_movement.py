"""Shape and movement ops for every dtype: values move unchanged, so results are exact."""

from __future__ import annotations

import pytest

from .runner import run_forward
from .specs.base import forward_params
from .specs.movement import MOVEMENT


@pytest.mark.parametrize("spec,dtype,case", forward_params(MOVEMENT))
def test_movement(spec, dtype, case, device):
    run_forward(spec, dtype, case, device)
