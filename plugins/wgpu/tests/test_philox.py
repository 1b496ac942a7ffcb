"""random_bits on the device is bit-identical to ember.random.philox_words (the reference)."""

from __future__ import annotations

import numpy as np
import pytest

from ember.random import philox_words
from ember_wgpu.kernels.random import random_bits


@pytest.mark.parametrize(
    "key, counter, size",
    [
        ((0, 0), 0, 1),
        ((0x12345678, 0x9ABCDEF0), 0, 4097),
        ((1, 2), 2**32 - 3, 41),  # block counters cross 2**32: the carry reaches the high word
        ((0xFFFFFFFF, 0xFFFFFFFF), 2**64 - 2, 17),  # and wrap around 2**64
        ((7, 11), 123456789, 3),
    ],
)
def test_bit_identical_to_reference(rt, key, counter, size):
    got = rt.read([random_bits(rt, key, counter, size)])[0]
    np.testing.assert_array_equal(got, philox_words(key[0], key[1], counter, size))


def test_seeded_streams_match_cpu(dev):
    import ember as em

    em.seed(1234)
    a = em.random.randint(0, 1000, (257,), device=dev).numpy()
    u = em.rand((33,), device=dev).numpy()
    em.seed(1234)
    b = em.random.randint(0, 1000, (257,), device="cpu").numpy()
    v = em.rand((33,), device="cpu").numpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(u, v)
