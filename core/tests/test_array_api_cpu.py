"""What the cpu backend does beyond the composites every backend shares (issue 14): the sign
bit of NaN read natively, floor_divide's special cases with infinities, and the complex special
cases of expm1 and tanh, each as the Array API standard lists them."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em


def test_signbit_of_negative_nan():
    x = em.tensor(np.array([-np.nan, np.nan, -0.0, 0.0], dtype=np.float32))
    assert em.signbit(x).tolist() == [True, False, True, False]
    assert em.signbit(em.copysign(em.tensor([np.nan]), -1.0)).tolist() == [True]


@pytest.mark.parametrize(
    "a, b, want",
    [
        (math.inf, 2.0, math.inf),
        (math.inf, -2.0, -math.inf),
        (-math.inf, 2.0, -math.inf),
        (-math.inf, -2.0, math.inf),
        (math.inf, math.inf, math.nan),
        (1.0, 0.0, math.inf),
        (-1.0, 0.0, -math.inf),
        (0.0, 0.0, math.nan),
        (1.0, -math.inf, -0.0),
        (-1.0, math.inf, -0.0),
        (-1.0, -math.inf, 0.0),
        (7.0, 2.0, 3.0),
        (-7.0, 2.0, -4.0),
    ],
)
def test_floor_divide_special_cases(a, b, want):
    for dt in (em.float32, em.float64):
        got = (em.tensor([a], dtype=dt) // em.tensor([b], dtype=dt)).item()
        scalar = (em.tensor([a], dtype=dt) // b).item()
        for value in (got, scalar):
            same = value == want and math.copysign(1, value) == math.copysign(1, want)
            assert (math.isnan(value) and math.isnan(want)) or same, (a, b, value, want)


@pytest.mark.parametrize(
    "fn, z, want",
    [
        (em.expm1, complex(math.inf, 0.0), complex(math.inf, 0.0)),
        (em.expm1, complex(-math.inf, math.inf), complex(-1.0, 0.0)),
        (em.expm1, complex(-math.inf, math.nan), complex(-1.0, 0.0)),
        (em.tanh, complex(math.inf, 1.0), complex(1.0, 0.0)),
        (em.tanh, complex(-math.inf, 2.0), complex(-1.0, 0.0)),
        (em.tanh, complex(math.inf, -2.0), complex(1.0, -0.0)),
        (em.expm1, complex(-0.0, 0.0), complex(0.0, 0.0)),
    ],
)
def test_complex_special_cases(fn, z, want):
    got = fn(em.tensor([z], dtype=em.complex128)).item()
    assert got == want and math.copysign(1, got.imag) == math.copysign(1, want.imag), (z, got, want)
