"""The op-spec record and the dtype groups the tables use."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

import ember as em
from ember.dtypes import ALL_DTYPES, DType

from ..inputs import DEFAULT, Arg, Case, Domain

__all__ = [
    "OpSpec",
    "ALL",
    "BOOL",
    "INT",
    "UINT",
    "SINT",
    "FLOAT",
    "NUMERIC",
    "INT_OR_BOOL",
    "NUMERIC_OR_BOOL",
    "forward_params",
    "grad_params",
    "reject_params",
    "same",
    "const",
]

ALL: tuple[DType, ...] = tuple(ALL_DTYPES)
BOOL = (em.bool_,)
SINT = (em.int8, em.int16, em.int32, em.int64)
UINT = (em.uint8, em.uint16, em.uint32, em.uint64)
INT = SINT + UINT
FLOAT = (em.float16, em.bfloat16, em.float32, em.float64)
NUMERIC = INT + FLOAT
INT_OR_BOOL = BOOL + INT
NUMERIC_OR_BOOL = BOOL + NUMERIC


def same(dtype: DType) -> DType:
    """Result dtype rule: the input's dtype."""
    return dtype


def const(result: DType | str) -> Callable[[DType], DType]:
    """Result dtype rule: always ``result``."""
    dt = em.dtypes.as_dtype(result)
    return lambda _dtype: dt


@dataclass(frozen=True, eq=False)
class OpSpec:
    """One row of a conformance table.

    ``fn`` calls ember, ``ref`` computes the same thing with numpy (float64 for floating
    inputs, the native dtype otherwise). ``ops`` names the dispatch ops (``ember.dispatch.OPS``)
    the row exercises; the coverage test checks every registered op is named somewhere.
    """

    name: str
    fn: Callable[..., Any]
    ref: Callable[..., Any]
    dtypes: Sequence[DType]
    cases: Sequence[Case]
    ops: Sequence[str] | None = None
    domain: Domain | tuple[Domain, ...] = DEFAULT
    out_dtype: Callable[[DType], Any] = same
    #: check first derivatives against finite differences (cases marked ``grad``)
    grad: bool = False
    #: which result to differentiate when the op returns several
    grad_output: int | None = None
    #: tolerance multiplier for every case of this row
    tol: float = 1.0
    #: check that dtypes outside ``dtypes`` raise DTypeError (elementwise rows)
    reject: bool = False
    #: extra dtypes a test needs the device to hold (index dtypes, result dtypes)
    needs: Sequence[str] = field(default_factory=tuple)
    #: a skip reason when the function is missing from this ember (ops added later)
    available: Callable[[], str | None] | None = None

    def __post_init__(self) -> None:
        if self.ops is None:
            object.__setattr__(self, "ops", (self.name,))

    def __str__(self) -> str:
        return self.name

    def grad_cases(self) -> list[Case]:
        marked = [c for c in self.cases if c.grad]
        return marked or [self.cases[0]]


def _mark(spec: OpSpec, dtype: DType | None, case: Case | None, pid: str) -> Any:
    return pytest.param(spec, dtype, case, id=pid)


def forward_params(specs: Iterable[OpSpec]) -> list[Any]:
    """(spec, dtype, case) for every dtype of each spec and every case that applies to it."""
    out = []
    for spec in specs:
        for dt in spec.dtypes:
            for case in spec.cases:
                if case.applies_to(dt):
                    out.append(_mark(spec, dt, case, f"{spec.name}-{dt}-{case.name}"))
    return out


def grad_params(specs: Iterable[OpSpec]) -> list[Any]:
    """(spec, dtype, case) for gradient checks: float64 and float32, the spec's grad cases."""
    out = []
    for spec in specs:
        if not spec.grad:
            continue
        for dt in (em.float64, em.float32):
            if dt not in spec.dtypes:
                continue
            for case in spec.grad_cases():
                out.append(_mark(spec, dt, case, f"{spec.name}-{dt}-{case.name}"))
    return out


def reject_params(specs: Iterable[OpSpec]) -> list[Any]:
    """(spec, dtype, case) for every dtype a ``reject`` spec does not accept."""
    out = []
    for spec in specs:
        if not spec.reject:
            continue
        for dt in ALL:
            if dt not in spec.dtypes:
                out.append(_mark(spec, dt, spec.cases[0], f"{spec.name}-{dt}"))
    return out


def x(shape: tuple[int, ...], layout: str = "contig", domain: Domain | None = None) -> Arg:
    """Shorthand: a tensor argument of the tested dtype."""
    return Arg(shape, layout=layout, domain=domain)
