"""Random streams are identical on every backend.

The device's ``random_bits`` words equal the host reference ``ember.random.philox_words`` bit
for bit (counters crossing 2**32 included); the reference itself passes Random123's
known-answer vectors; ``rand`` is bit-identical to a numpy reimplementation of ember's
documented float construction; ``randn`` matches to a few ulps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember.random import philox_words

from .checks import assert_close, require_dtype

#: Random123 known-answer vectors for Philox 4x32-10: (counter words, key words, output words)
KNOWN_ANSWERS = {
    "zeros": ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    "ones": ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    "pi": (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
}

KEYS = {"k0": (0, 0), "kbeef": (0xDEADBEEF, 0x12345678), "kmax": (0xFFFFFFFF, 0xFFFFFFFF)}
COUNTERS = {"c0": 0, "c5": 5, "c2^32-3": 2**32 - 3, "c2^33+7": 2**33 + 7, "c2^64-2": 2**64 - 2}


def _philox_full(counter: tuple[int, ...], key: tuple[int, int]) -> tuple[int, ...]:
    """Philox 4x32-10 of one full 4-word counter block."""
    c = [np.array([w], dtype=np.uint64) for w in counter]
    out = em.random.philox4x32_rounds(c[0], c[1], c[2], c[3], key[0], key[1])
    return tuple(int(w) for w in np.asarray(out).reshape(-1))


@pytest.mark.parametrize("name", sorted(KNOWN_ANSWERS))
def test_philox_known_answers(name):
    counter, key, expected = KNOWN_ANSWERS[name]
    got = _philox_full(counter, key)
    assert got == expected, f"philox4x32 {name}: got {[hex(w) for w in got]}, expected {[hex(w) for w in expected]}"


def test_philox_layout():
    """Word i of a stream is word i % 4 of block counter + i // 4 (counter split into lo, hi)."""
    words = philox_words(7, 9, 2**32 - 1, 8)
    for block in range(2):
        ctr = 2**32 - 1 + block
        expected = _philox_full((ctr & 0xFFFFFFFF, ctr >> 32, 0, 0), (7, 9))
        assert tuple(int(w) for w in words[4 * block : 4 * block + 4]) == expected


@pytest.mark.parametrize("key", sorted(KEYS))
@pytest.mark.parametrize("counter", list(COUNTERS))
def test_random_bits(counter, key, device):
    """The backend's random_bits primitive equals the host reference bit for bit."""
    require_dtype(device, em.uint32)
    k0, k1 = KEYS[key]
    ctr = COUNTERS[counter]
    backend = device.backend
    for size in (1, 37, 4099):
        got = np.asarray(backend.to_numpy(backend.random_bits(key=(k0, k1), counter=ctr, size=size)))
        want = philox_words(k0, k1, ctr, size)
        assert got.dtype == np.uint32, f"random_bits returned {got.dtype}, expected uint32"
        assert got.shape == (size,), f"random_bits returned shape {got.shape}, expected ({size},)"
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (
            f"size {size}: {bad.size} words differ, first at {bad[0]}: {got[bad[0]]:#x} != {want[bad[0]]:#x}"
        )


def test_random_bits_api(device):
    """``em.random.random_bits`` draws from a key's counter and advances it by whole blocks."""
    require_dtype(device, em.uint32)
    key = em.random.Key(11, 22, counter=2**32 - 2)
    out = em.random.random_bits((3, 5), device=device, key=key)
    assert out.dtype is em.uint32 and out.shape == (3, 5)
    assert np.array_equal(out.numpy().reshape(-1), philox_words(11, 22, 2**32 - 2, 15))
    assert key.counter == 2**32 - 2 + 4


_MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24}


def reference_rand(k0: int, k1: int, counter: int, n: int, dtype: em.DType) -> np.ndarray:
    """ember's documented construction: float64 from 27 + 26 bits of two words, the others
    from the top mantissa bits of one word, all exact multiples of 2**-mantissa."""
    if dtype is em.float64:
        w = philox_words(k0, k1, counter, 2 * n).astype(np.uint64).reshape(n, 2)
        return ((w[:, 0] >> np.uint64(5)).astype(np.float64) * 2.0**26 + (w[:, 1] >> np.uint64(6))) * 2.0**-53
    m = _MANTISSA[dtype.name]
    w = philox_words(k0, k1, counter, n)
    return ((w >> np.uint32(32 - m)).astype(np.float64) * 2.0**-m).astype(dtype.numpy)


FLOATS = (em.float16, em.bfloat16, em.float32, em.float64)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (0, 4)], ids=str)
def test_rand_bits_identical(shape, dtype, device):
    """em.rand is bit-identical to the numpy reimplementation; two draws use consecutive blocks."""
    require_dtype(device, dtype, em.uint32)
    key = em.random.Key(0x1234, 0x5678, counter=2**32 - 1)
    n = math.prod(shape)
    first = em.rand(shape, dtype=dtype, device=device, key=key)
    second = em.rand(shape, dtype=dtype, device=device, key=key)
    words = 2 * n if dtype is em.float64 else n
    for i, got in enumerate((first, second)):
        ctr = 2**32 - 1 + i * -(-words // 4)
        want = reference_rand(0x1234, 0x5678, ctr, n, dtype).reshape(shape)
        assert got.dtype is dtype and got.shape == shape
        have = got.numpy()
        assert have.tobytes() == np.ascontiguousarray(want.astype(dtype.numpy)).tobytes(), f"draw {i} differs"
        assert n == 0 or (0.0 <= have.astype(np.float64).min() and have.astype(np.float64).max() < 1.0)


def test_seed_reproducible(device):
    """em.seed(n) restarts the global stream: the same numbers again, equal to key(n)'s stream."""
    em.seed(1234)
    a = em.rand((6,), device=device)
    b = em.rand((6,), device=device)
    em.seed(1234)
    assert np.array_equal(a.numpy(), em.rand((6,), device=device).numpy())
    assert np.array_equal(b.numpy(), em.rand((6,), device=device).numpy())
    key = em.random.key(1234)
    assert np.array_equal(a.numpy(), em.rand((6,), device=device, key=key).numpy())


def reference_randn(key: em.random.Key, n: int, dtype: em.DType) -> np.ndarray:
    """Box-Muller over the uniform construction, in float64."""
    work = em.float64 if dtype is em.float64 else em.float32
    half = -(-n // 2)
    u = reference_rand(key.k0, key.k1, key.counter, 2 * half, work).astype(np.float64).reshape(2, half)
    r = np.sqrt(-2.0 * np.log(1.0 - u[0]))
    theta = u[1] * (2.0 * math.pi)
    return np.concatenate([r * np.cos(theta), r * np.sin(theta)])[:n]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_randn(dtype, device):
    """em.randn equals Box-Muller over the reference uniforms (to a few ulps of log/cos/sin)."""
    require_dtype(device, dtype, em.uint32)
    key = em.random.key(99)
    want = reference_randn(em.random.key(99), 1001, dtype)
    got = em.randn((7, 143), dtype=dtype, device=device, key=key)
    scale = 1e3 if dtype is em.float64 else 16.0  # float32 log/cos/sin near their zeros
    assert_close(got, want.reshape(7, 143), dtype, scale=scale, what="randn")


def test_randn_matches_cpu(device):
    """randn on the device equals randn on the CPU backend to a few ulps."""
    if device.kind == "cpu":
        pytest.skip("the device under test is the CPU reference itself")
    try:
        cpu = em.Device.cpu()
        cpu.synchronize()  # loads the backend
    except Exception as exc:  # the cpu plugin is optional for third-party backends
        pytest.skip(f"no CPU backend to compare with: {exc}")
    got = em.randn((4096,), device=device, key=em.random.key(5)).numpy().astype(np.float64)
    want = em.randn((4096,), device=cpu, key=em.random.key(5)).numpy().astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("dtype", (em.int8, em.uint8, em.int32, em.int64, em.uint64), ids=str)
def test_randint(dtype, device):
    """randint: low + (word % span), cast to the dtype."""
    require_dtype(device, dtype, em.uint32, em.int64)
    low, high = (0, 200) if dtype.kind == "u" else (-100, 27)
    got = em.randint(low, high, (5, 9), dtype=dtype, device=device, key=em.random.key(3))
    want = (philox_words(3, 0, 0, 45).astype(np.int64) % (high - low) + low).reshape(5, 9)
    assert_close(got, want.astype(dtype.numpy), dtype, what="randint")


def test_uniform_normal_bernoulli_permutation(device):
    """The derived samplers are the documented affine maps / comparisons of rand, randn, words."""
    require_dtype(device, em.float32, em.uint32, em.int64)
    u = em.uniform(-2.0, 3.0, (50,), device=device, key=em.random.key(8))
    ref_u = reference_rand(8, 0, 0, 50, em.float32).astype(np.float64) * 5.0 - 2.0
    assert_close(u, ref_u, em.float32, what="uniform")
    nrm = em.normal(1.0, 0.5, (64,), device=device, key=em.random.key(9))
    assert_close(nrm, reference_randn(em.random.key(9), 64, em.float32) * 0.5 + 1.0, em.float32, scale=16.0)
    b = em.bernoulli(0.3, (200,), device=device, key=em.random.key(10))
    assert_close(b, reference_rand(10, 0, 0, 200, em.float32) < 0.3, em.bool_, what="bernoulli")
    perm = em.random.permutation(37, device=device, key=em.random.key(12))
    assert_close(perm, np.argsort(philox_words(12, 0, 0, 37), kind="stable"), em.int64, what="permutation")


@pytest.mark.parametrize("dtype", (em.float32, em.float64), ids=str)
def test_dropout(dtype, device):
    """dropout keeps x / (1 - p) where rand(x.shape) >= p (the same mask on every backend)."""
    require_dtype(device, dtype, em.uint32)
    host = np.linspace(-1.0, 1.0, 60).reshape(6, 10)
    x = em.tensor(host, dtype=dtype, device=device)
    got = em.dropout(x, 0.25, key=em.random.key(21))
    keep = reference_rand(21, 0, 0, 60, dtype).reshape(6, 10) >= 0.25
    want = np.where(keep, host.astype(dtype.numpy).astype(np.float64) / 0.75, 0.0)
    assert_close(got, want, dtype, what="dropout")
    assert_close(em.dropout(x, 0.25, training=False), host, dtype, what="dropout(training=False)")
    assert_close(em.dropout(x, 0.0), host, dtype, what="dropout(p=0)")
