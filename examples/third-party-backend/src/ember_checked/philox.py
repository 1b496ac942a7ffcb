"""Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011).

Written from the algorithm, independently of ``ember.random``, so that comparing this
backend's stream with the CPU backend's is a real cross-check of both.

One block: a counter of four 32-bit words ``c`` and a key of two, ``k``. Each of the ten
rounds multiplies ``c0`` and ``c2`` by two constants, keeps both 32-bit halves of the
products, and mixes them with ``c1``, ``c3`` and the key::

    hi0, lo0 = mulhilo(M0, c0)
    hi1, lo1 = mulhilo(M1, c2)
    c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)

and between rounds the key is bumped by the Weyl constants ``(W0, W1)``.

ember's stream layout: word ``i`` of ``random_bits(key, counter, size)`` is word ``i % 4`` of
the block whose counter is ``((counter + i // 4) mod 2**64)`` split into its low and high
32-bit halves, followed by two zero words.
"""

from __future__ import annotations

import numpy as np

__all__ = ["philox4x32_10", "stream"]

M0, M1 = 0xD2511F53, 0xCD9E8D57  # round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # key schedule: golden ratio and sqrt(3) - 1, as 32-bit fractions
ROUNDS = 10
_LOW = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)


def _mulhilo(m: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """High and low 32-bit halves of the 64-bit products ``m * x`` (``x`` holds 32-bit values)."""
    product = np.uint64(m) * x  # < 2**64: exact in uint64
    return product >> _32, product & _LOW


def philox4x32_10(counter: tuple[np.ndarray, ...], key: tuple[int, int]) -> np.ndarray:
    """Philox 4x32-10 of blocks ``counter = (c0, c1, c2, c3)`` (uint32 arrays of one length).

    Returns uint32 words of shape ``(n, 4)``.
    """
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint32).astype(np.uint64) for c in counter)
    k0, k1 = int(key[0]), int(key[1])
    for r in range(ROUNDS):
        if r > 0:
            k0 = (k0 + W0) & 0xFFFFFFFF
            k1 = (k1 + W1) & 0xFFFFFFFF
        hi0, lo0 = _mulhilo(M0, c0)
        hi1, lo1 = _mulhilo(M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def stream(key: tuple[int, int], counter: int, size: int) -> np.ndarray:
    """``size`` uint32 words of the stream ``(key, counter)`` in ember's layout."""
    blocks = (size + 3) // 4
    index = np.arange(blocks, dtype=np.uint64) + np.uint64(counter % 2**64)  # wraps mod 2**64
    zeros = np.zeros(blocks, dtype=np.uint32)
    lo = (index & _LOW).astype(np.uint32)
    hi = (index >> _32).astype(np.uint32)
    return philox4x32_10((lo, hi, zeros, zeros), key).reshape(-1)[:size]
