"""Counter-based random numbers (Philox 4x32-10) that are identical on every backend.

A stream is a 64-bit key plus a 64-bit block counter. Word ``i`` of a request is word
``i % 4`` of ``philox(counter + i // 4, key)``; backends produce those words through their
``random_bits`` primitive, and every distribution below is built from them with exact
integer and power-of-two float arithmetic, so ``uniform`` is bit-identical everywhere.
``normal`` goes through log/cos/sin and so matches to the last few ulps of those functions.

``em.seed(n)`` resets the global stream; ``key=em.random.key(n)`` gives a stream of its own.
"""

from __future__ import annotations

import math
import os
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from .device import device_arg
from .dispatch import create, define, is_tensor
from .dtypes import DType, as_dtype, default_float, default_int, float32, float64, uint32
from .errors import ArgumentTypeError, DTypeError, InvalidArgumentError
from .ops.movement import concat
from .shapes import as_shape, numel

if TYPE_CHECKING:  # annotations only: ember.tensor imports this module through ops.nn (a cycle)
    from .tensor import Tensor

__all__ = [
    "Key", "key", "seed", "get_state", "set_state", "philox4x32", "philox4x32_rounds", "philox_words",
    "random_bits", "rand", "uniform", "randn", "normal", "randint", "bernoulli", "permutation",
    "PHILOX_M", "PHILOX_W",
]  # fmt: skip

PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_MASK = 0xFFFFFFFF


def philox4x32(counter_lo: np.ndarray, counter_hi: np.ndarray, k0: int, k1: int) -> np.ndarray:
    """Philox 4x32-10 of counter blocks ``(lo, hi, 0, 0)``; returns uint32 words, shape (n, 4).

    This is the reference implementation (checked against Random123's known-answer vectors);
    backends may use it or generate the same words natively.
    """
    c0 = counter_lo.astype(np.uint64)
    c1 = counter_hi.astype(np.uint64)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    return philox4x32_rounds(c0, c1, c2, c3, k0, k1)


def philox4x32_rounds(c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, k0: int, k1: int) -> np.ndarray:
    """Philox 4x32-10 of full 4-word counters (uint64 arrays holding 32-bit values), shape (n, 4)."""
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    mask = np.uint64(_MASK)
    shift = np.uint64(32)
    for r in range(10):
        if r:
            k0 = (k0 + PHILOX_W[0]) & _MASK
            k1 = (k1 + PHILOX_W[1]) & _MASK
        p0 = c0 * m0
        p1 = c2 * m1
        c0, c1, c2, c3 = (
            (p1 >> shift) ^ c1 ^ np.uint64(k0),
            p1 & mask,
            (p0 >> shift) ^ c3 ^ np.uint64(k1),
            p0 & mask,
        )
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def philox_words(k0: int, k1: int, counter: int, size: int) -> np.ndarray:
    """``size`` uint32 words of the stream (key, counter) on the host, in ember's layout."""
    blocks = -(-size // 4)
    idx = np.arange(blocks, dtype=np.uint64) + np.uint64(counter & 0xFFFFFFFFFFFFFFFF)
    lo = idx & np.uint64(_MASK)
    hi = idx >> np.uint64(32)
    return philox4x32(lo, hi, k0, k1).reshape(-1)[:size]


class Key:
    """An independent random stream: a 64-bit key with its own counter."""

    __slots__ = ("k0", "k1", "counter")

    def __init__(self, k0: int, k1: int, counter: int = 0) -> None:
        self.k0 = k0 & _MASK
        self.k1 = k1 & _MASK
        self.counter = counter

    def split(self, num: int = 2) -> list[Key]:
        """``num`` new keys derived from this one (its own stream is untouched)."""
        words = philox_words(self.k0 ^ 0x5851F42D, self.k1 ^ 0x4C957F2D, 0, 2 * num)
        return [Key(int(words[2 * i]), int(words[2 * i + 1])) for i in range(num)]

    def _take(self, words: int) -> int:
        start = self.counter
        self.counter += -(-words // 4)
        return start

    def __repr__(self) -> str:
        return f"Key(0x{self.k1:08x}{self.k0:08x}, counter={self.counter})"


def key(seed: int) -> Key:
    """A stream of its own for ``seed`` (pass as ``key=`` to any sampling function)."""
    if isinstance(seed, bool) or not hasattr(seed, "__index__"):
        raise ArgumentTypeError(f"seed: the seed must be an int, got {seed!r} ({type(seed).__name__})")
    s = int(seed) & 0xFFFFFFFFFFFFFFFF
    return Key(s & _MASK, s >> 32)


class _Global:
    """The process-wide stream (shared by all threads, guarded by a lock)."""

    def __init__(self) -> None:
        self.key = key(int.from_bytes(os.urandom(8), "little"))


_GLOBAL = _Global()
_LOCK = threading.Lock()

RANDOM_BITS = define("random_bits", kind="random", primitive=True, differentiable=False)


def seed(n: int) -> None:
    """Reset the global stream: the same seed gives the same numbers on every backend."""
    _GLOBAL.key = key(n)


def get_state() -> dict[str, int]:
    """The global stream's position (for checkpoints)."""
    k = _GLOBAL.key
    return {"k0": k.k0, "k1": k.k1, "counter": k.counter}


def set_state(state: dict[str, int]) -> None:
    """Restore a position saved by :func:`get_state`."""
    _GLOBAL.key = Key(int(state["k0"]), int(state["k1"]), int(state["counter"]))


def _bits(n: int, device: Any, key_: Key | None) -> Tensor:
    """``n`` uint32 words from ``key_`` (or the global stream) on ``device``."""
    k = key_ if key_ is not None else _GLOBAL.key
    with _LOCK:
        counter = k._take(n)
    dev = device_arg(device)
    return create(RANDOM_BITS, dev, (), {"key": (k.k0, k.k1), "counter": counter, "size": n}, (n,), uint32)


def random_bits(shape: Any, device: Any = None, key: Key | None = None) -> Tensor:
    """Raw uint32 Philox words of ``shape``."""
    shp = as_shape(shape, "shape", "random_bits")
    return _bits(numel(shp), device, key).reshape(shp)


_MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24}


def _float_dtype(dtype: Any, op: str) -> DType:
    dt = default_float() if dtype is None else as_dtype(dtype)
    if dt.kind != "f":
        raise DTypeError(f"{op}: dtype must be floating-point, got {dt}")
    return dt


def _unit(n: int, dt: DType, device: Any, key_: Key | None) -> Tensor:
    """``n`` floats uniform on [0, 1), exact multiples of 2**-mantissa."""
    if dt is float64:
        w = _bits(2 * n, device, key_).reshape((n, 2))
        hi = (w[:, 0] // 32).astype(float64)  # 27 bits
        lo = (w[:, 1] // 64).astype(float64)  # 26 bits
        return (hi * 67108864.0 + lo) * (2.0**-53)
    m = _MANTISSA[dt.name]
    w = _bits(n, device, key_)
    u = (w // (1 << (32 - m))).astype(float32) * (2.0**-m)
    return u if dt is float32 else u.astype(dt)


def rand(shape: Any, dtype: Any = None, device: Any = None, key: Key | None = None) -> Tensor:
    """Uniform samples on [0, 1)."""
    shp = as_shape(shape, "shape", "rand")
    dt = _float_dtype(dtype, "rand")
    return _unit(numel(shp), dt, device, key).reshape(shp)


def _check_range(low: Any, high: Any, op: str) -> None:
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ArgumentTypeError(f"{op}: {name} must be a number, got {v!r} ({type(v).__name__})")
    if not low <= high:
        raise InvalidArgumentError(f"{op}: low={low!r} must be <= high={high!r}")


def uniform(
    low: float = 0.0, high: float = 1.0, shape: Any = (), dtype: Any = None, device: Any = None, key: Key | None = None
) -> Tensor:
    """Uniform samples on [low, high)."""
    _check_range(low, high, "uniform")
    return rand(shape, dtype, device, key) * float(high - low) + float(low)


def randn(shape: Any, dtype: Any = None, device: Any = None, key: Key | None = None) -> Tensor:
    """Standard normal samples (Box-Muller over Philox words)."""
    shp = as_shape(shape, "shape", "randn")
    dt = _float_dtype(dtype, "randn")
    n = numel(shp)
    work = float64 if dt is float64 else float32
    half = -(-n // 2)
    u = _unit(2 * half, work, device, key).reshape((2, half))
    u1 = 1.0 - u[0]  # (0, 1]: log is finite
    r = (-2.0 * u1.log()).sqrt()
    theta = u[1] * (2.0 * math.pi)
    z = concat([r * theta.cos(), r * theta.sin()])[:n]
    z = z if dt is work else z.astype(dt)
    return z.reshape(shp)


def normal(
    mean: float = 0.0, std: float = 1.0, shape: Any = (), dtype: Any = None, device: Any = None, key: Key | None = None
) -> Tensor:
    """Normal samples with the given mean and standard deviation."""
    for name, v in (("mean", mean), ("std", std)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidArgumentError(f"normal: {name} must be a number, got {v!r} ({type(v).__name__})")
    if not std >= 0:
        raise InvalidArgumentError(f"normal: std must be >= 0 (a standard deviation), got {std!r}")
    return randn(shape, dtype, device, key) * float(std) + float(mean)


def randint(
    low: int, high: int | None = None, shape: Any = (), dtype: Any = None, device: Any = None, key: Key | None = None
) -> Tensor:
    """Integers uniform on [low, high) (modulo reduction of 32-bit words; bias < range / 2**32)."""
    if high is None:
        low, high = 0, low
    span = int(high) - int(low)
    if span <= 0:
        raise InvalidArgumentError(f"randint: high ({high}) must be greater than low ({low})")
    if span > 2**32:
        raise InvalidArgumentError(f"randint: the range {span} exceeds 2**32; split the draw")
    shp = as_shape(shape, "shape", "randint")
    dt = default_int() if dtype is None else as_dtype(dtype)
    if dt.kind not in "iu":
        raise DTypeError(f"randint: dtype must be an integer type, got {dt}")
    w = _bits(numel(shp), device, key)
    if span == 2**32:
        r = w.astype("int64")
    else:
        r = (w % span).astype("int64")
    return (r + int(low)).astype(dt).reshape(shp)


def bernoulli(p: Any, shape: Any = None, device: Any = None, key: Key | None = None) -> Tensor:
    """Booleans that are True with probability ``p`` (a float or a tensor of probabilities)."""
    if is_tensor(p):
        u = rand(p.shape, dtype=p.dtype, device=p.device, key=key)
        return u < p
    shp = as_shape(() if shape is None else shape, "shape", "bernoulli")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise InvalidArgumentError(f"bernoulli: p must be a probability in [0, 1] (or a tensor of them), got {p!r}")
    return rand(shp, device=device, key=key) < float(p)


def permutation(n: int, device: Any = None, key: Key | None = None) -> Tensor:
    """A random permutation of ``0..n-1`` (argsort of random words; ties broken by position)."""
    if isinstance(n, bool) or not hasattr(n, "__index__") or int(n) < 0:
        raise InvalidArgumentError(f"permutation: n must be an int >= 0 (the number of items), got {n!r}")
    w = _bits(int(n), device, key)
    return w.argsort()
