"""Test inputs: value domains, argument kinds, memory layouts.

Every input is drawn once on the host and given to both sides: the ember tensor on the device
under test and the numpy reference. Floating-point values are rounded to the tested dtype
first, and the reference sees those rounded values in float64, so the only difference left
between the two sides is the device's arithmetic.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import ember as em
from ember.dtypes import DType

__all__ = ["Domain", "Arg", "Case", "Inputs", "make_inputs", "rng_for", "draw", "SPECIAL_VALUES", "LAYOUTS"]

#: injected into floating-point inputs by cases marked ``special``
SPECIAL_VALUES = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0)

#: how an input tensor is laid out in the device's memory before the op sees it
LAYOUTS = {
    "contig": "a fresh tensor",
    "noncontig": "a transposed view (permute of a fresh tensor)",
    "strided": "every second element of a larger tensor (slice with step 2)",
    "flipped": "a fresh tensor reversed along every axis (negative-step slice)",
}


@dataclass(frozen=True)
class Domain:
    """Where input values come from.

    Floats are uniform on ``[lo, hi]`` (``signed``: magnitudes on ``[lo, hi]`` with random
    signs); integers are uniform on ``[ilo, ihi]`` clipped to the dtype (``full_int``: the
    dtype's whole range); booleans are fair coins.
    """

    lo: float = -3.0
    hi: float = 3.0
    signed: bool = False
    ilo: int = -10
    ihi: int = 10
    full_int: bool = False
    #: round floats to multiples of ``step`` (creates ties for comparisons and sorting)
    step: float | None = None
    #: keep floats away from integers and half-integers (floor, round: no discontinuity nearby)
    avoid_int: bool = False
    #: fraction of elements set to zero
    zeros: float = 0.0
    #: integers on ``[0, bits - 1]`` of the dtype (shift amounts)
    shift: bool = False


DEFAULT = Domain()


@dataclass(frozen=True)
class Arg:
    """One positional argument of an op call.

    kind ``x``: a tensor of the tested dtype; ``index``: int64 tensor on ``[lo, hi)``
    (``unique``: 1-D, without repeats);
    ``mask``: bool tensor; ``scalar``: a Python scalar of the tested dtype's kind;
    ``fixed``: a tensor of dtype ``dtype`` whatever the tested dtype; ``value``: ``value``
    itself, passed unchanged to both sides; ``special_grid``: the square grid of every pair of
    special values (the value varies along axis ``lo``), for floating-point dtypes.
    """

    shape: tuple[int, ...] = ()
    kind: str = "x"
    lo: int = 0
    hi: int = 0
    layout: str = "contig"
    domain: Domain | None = None
    dtype: str | None = None
    value: Any = None


@dataclass(frozen=True, eq=False)
class Case:
    """One call of an op: its arguments, keyword parameters and what it exercises."""

    name: str
    args: tuple[Arg, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: inject NaN/inf/±0 into floating-point ``x`` inputs
    special: bool = False
    #: only these dtype names (None: every dtype of the spec)
    only: frozenset[str] | None = None
    #: also used by the finite-difference gradient test
    grad: bool = False
    #: tolerance multiplier for this case
    tol: float = 1.0

    def applies_to(self, dtype: DType) -> bool:
        if self.special and dtype.kind != "f":
            return False
        return self.only is None or dtype.name in self.only


def rng_for(*parts: object) -> np.random.Generator:
    """A generator seeded from the test's identity, so every run draws the same values."""
    return np.random.default_rng(zlib.crc32("/".join(str(p) for p in parts).encode()))


def draw(rng: np.random.Generator, shape: tuple[int, ...], dtype: DType, domain: Domain) -> np.ndarray:
    """Values of ``dtype`` (as a numpy array of ``dtype.numpy``) from ``domain``."""
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype.numpy)
        if domain.full_int:
            out = rng.integers(info.min, info.max, size=shape, dtype=dtype.numpy, endpoint=True)
        elif domain.shift:
            out = rng.integers(0, dtype.bits, size=shape).astype(dtype.numpy)
        else:
            lo, hi = max(domain.ilo, info.min), min(domain.ihi, info.max)
            out = rng.integers(lo, hi + 1, size=shape).astype(dtype.numpy)
            if domain.signed and dtype.kind == "i":
                out = out * rng.choice(np.array([-1, 1], dtype=dtype.numpy), size=shape)
        if domain.zeros:
            out[rng.random(shape) < domain.zeros] = 0
        return out
    x = rng.uniform(domain.lo, domain.hi, size=shape)
    if domain.signed:
        x = x * rng.choice(np.array([-1.0, 1.0]), size=shape)
    if domain.step:
        x = np.round(x / domain.step) * domain.step
    if domain.avoid_int:
        x = np.floor(x) + rng.choice(np.array([0.15, 0.65]), size=shape) + 0.2 * rng.random(shape)
    if domain.zeros:
        x[rng.random(shape) < domain.zeros] = 0.0
    return np.asarray(x).astype(dtype.numpy)


def _inject_specials(rng: np.random.Generator, arr: np.ndarray) -> np.ndarray:
    out = arr.copy()
    flat = out.reshape(-1)
    n = min(flat.size, 2 * len(SPECIAL_VALUES))
    where = rng.permutation(flat.size)[:n]
    for k, pos in enumerate(where):
        flat[pos] = SPECIAL_VALUES[k % len(SPECIAL_VALUES)]
    return out


def _layout(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: DType, domain: Domain, layout: str, special: bool
) -> tuple[np.ndarray, Any]:
    """(host values of the view, function turning a tensor of the base into the view)."""
    nd = len(shape)
    if layout == "contig" or nd == 0:
        base = draw(rng, shape, dtype, domain)
        return (_inject_specials(rng, base) if special else base), None
    if layout == "noncontig":
        perm = tuple(reversed(range(nd)))
        base = draw(rng, tuple(reversed(shape)), dtype, domain)
        if special:
            base = _inject_specials(rng, base)
        return base, lambda t, a: (t.permute(perm), a.transpose(perm))
    if layout == "strided":
        base = draw(rng, tuple(2 * d + 1 for d in shape), dtype, domain)
        if special:
            base = _inject_specials(rng, base)
        key = (slice(1, None, 2),) * nd
        return base, lambda t, a: (t[key], a[key])
    if layout == "flipped":
        base = draw(rng, shape, dtype, domain)
        if special:
            base = _inject_specials(rng, base)
        key = (slice(None, None, -1),) * nd
        return base, lambda t, a: (t[key], a[key])
    raise ValueError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")


@dataclass
class Inputs:
    """The same arguments for both sides."""

    ember: list[Any]
    numpy: list[Any]
    #: positions of the ``x`` arguments (the ones the gradient test differentiates)
    x_positions: list[int]


def _as_reference(a: np.ndarray) -> np.ndarray:
    """Floating-point values in float64 for the reference; others unchanged."""
    return a.astype(np.float64) if a.dtype.kind in "fV" else a


def make_inputs(
    case: Case,
    dtype: DType,
    device: em.Device,
    domain: Domain | tuple[Domain, ...],
    rng: np.random.Generator,
    *,
    requires_grad: bool = False,
) -> Inputs:
    """Draw ``case``'s arguments for ``dtype`` and build them on ``device`` and for numpy."""
    ember_args: list[Any] = []
    numpy_args: list[Any] = []
    xs: list[int] = []
    for i, arg in enumerate(case.args):
        dom = arg.domain or (domain[min(i, len(domain) - 1)] if isinstance(domain, tuple) else domain)
        if arg.kind == "value":
            ember_args.append(arg.value)
            numpy_args.append(arg.value)
            continue
        if arg.kind == "scalar":
            value = draw(rng, (), dtype, dom)
            py = bool(value) if dtype.kind == "b" else int(value) if dtype.kind in "iu" else float(value)
            ember_args.append(py)
            numpy_args.append(_as_reference(np.asarray(value, dtype=dtype.numpy)))
            continue
        if arg.kind in ("index", "unique"):
            if arg.kind == "unique":
                arr = (rng.permutation(arg.hi - arg.lo)[: arg.shape[0]] + arg.lo).astype(np.int64)
            else:
                arr = rng.integers(arg.lo, arg.hi, size=arg.shape).astype(np.int64)
            t = em.tensor(arr, dtype=arg.dtype or "int64", device=device)
            ember_args.append(t)
            numpy_args.append(arr.astype(arg.dtype or "int64"))
            continue
        if arg.kind == "mask":
            arr = rng.random(arg.shape) < 0.5
            ember_args.append(em.tensor(arr, dtype=em.bool_, device=device))
            numpy_args.append(arr)
            continue
        if arg.kind == "special_grid":
            # every pair of special values: argument ``lo`` varies along axis ``lo`` of a square grid
            values = np.array(SPECIAL_VALUES, dtype=np.float64)
            grid = np.broadcast_to(values.reshape((-1, 1) if arg.lo == 0 else (1, -1)), (len(values),) * 2)
            host = np.ascontiguousarray(grid).astype(dtype.numpy)
            ember_args.append(em.tensor(host, dtype=dtype, device=device))
            numpy_args.append(_as_reference(host))
            xs.append(i)
            continue
        dt = em.dtypes.as_dtype(arg.dtype) if arg.kind == "fixed" else dtype
        if arg.kind not in ("x", "fixed"):
            raise ValueError(f"unknown argument kind {arg.kind!r}")
        base, view = _layout(rng, arg.shape, dt, dom, arg.layout, case.special and dt.kind == "f")
        t = em.tensor(base, dtype=dt, device=device)
        a = base
        if view is not None:
            t, a = view(t, a)
        if arg.kind == "x" and requires_grad and dt.kind == "f":
            t = t.requires_grad_()  # a view made without autodiff is still a leaf
        if arg.kind == "x":
            xs.append(i)
        ember_args.append(t)
        numpy_args.append(_as_reference(np.asarray(a)))
    return Inputs(ember_args, numpy_args, xs)
