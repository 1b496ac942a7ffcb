"""The checked backend's Philox 4x32-10 against Random123's answers and ember's CPU stream."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember_checked.philox import philox4x32_10, stream

M = 0xFFFFFFFF

# Random123 kat_vectors, philox4x32 with 10 rounds: counter words, key words, expected words
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M, M, M, M), (M, M), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize(("counter", "key", "expected"), KNOWN_ANSWERS)
def test_known_answer_vectors(counter, key, expected):
    words = philox4x32_10(tuple(np.array([c], dtype=np.uint32) for c in counter), key)
    assert words.dtype == np.uint32
    assert [int(w) for w in words[0]] == list(expected)


def test_stream_layout_word_i_is_word_i_mod_4_of_block_counter_plus_i_div_4():
    key, counter = (0x01234567, 0x89ABCDEF), 2**32 - 2  # crosses into the counter's high word
    words = stream(key, counter, 14)
    for i, word in enumerate(words):
        block = counter + i // 4
        lo, hi = block & M, block >> 32
        one = philox4x32_10(tuple(np.array([c], dtype=np.uint32) for c in (lo, hi, 0, 0)), key)
        assert int(word) == int(one[0, i % 4])


def _words(device: str, key: tuple[int, int], counter: int, size: int) -> np.ndarray:
    backend = em.Device(device).backend
    return np.asarray(backend.to_numpy(backend.random_bits(key=key, counter=counter, size=size)))


@pytest.mark.parametrize(
    ("key", "counter", "size"),
    [((0, 0), 0, 1), ((1, 2), 0, 13), ((M, M), 7, 4096), ((0xDEADBEEF, 3), 2**32 - 3, 37), ((5, 6), 2**64 - 2, 21)],
)
def test_words_match_the_cpu_backend(key, counter, size):
    ours = _words("checked", key, counter, size)
    cpu = _words("cpu", key, counter, size)
    assert ours.dtype == cpu.dtype == np.uint32
    np.testing.assert_array_equal(ours, cpu)


@pytest.mark.parametrize("seed", [0, 1, 2**40 + 17])
def test_seeded_samples_match_the_cpu_backend(seed):
    for sample in (
        lambda dev: em.random.random_bits((3, 5), device=dev, key=em.random.key(seed)),
        lambda dev: em.rand((1001,), device=dev, key=em.random.key(seed)),
        lambda dev: em.rand((7,), dtype="float64", device=dev, key=em.random.key(seed)),
        lambda dev: em.randint(-5, 9, (64,), device=dev, key=em.random.key(seed)),
        lambda dev: em.permutation(50, device=dev, key=em.random.key(seed)),
    ):
        np.testing.assert_array_equal(sample("checked").numpy(), sample("cpu").numpy())
    ours = em.randn((513,), device="checked", key=em.random.key(seed)).numpy()
    cpu = em.randn((513,), device="cpu", key=em.random.key(seed)).numpy()
    np.testing.assert_allclose(ours, cpu, rtol=1e-6, atol=1e-6)


def test_global_seed_gives_the_same_stream_on_both_backends():
    em.seed(1234)
    a = em.rand((10,), device="checked").numpy()
    em.seed(1234)
    b = em.rand((10,), device="cpu").numpy()
    np.testing.assert_array_equal(a, b)
