"""First derivatives of every differentiable op against central differences of its numpy
reference, in float64 and in float32 (the fallback for devices without float64; compared at
float32 tolerance). The differences are always taken on numpy in float64, never on ember."""

from __future__ import annotations

import pytest

from .runner import run_grad
from .specs import ALL_SPECS
from .specs.base import grad_params


@pytest.mark.parametrize("spec,dtype,case", grad_params(ALL_SPECS))
def test_grad(spec, dtype, case, ad_device):
    run_grad(spec, dtype, case, ad_device)
