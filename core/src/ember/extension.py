"""``@backend_extension``: user-defined ops with a reference and per-backend native kernels.

>>> import ember as em
>>> @em.backend_extension("scaled_tanh_demo")
... def scaled_tanh_demo(x, scale=2.0):
...     return x.tanh() * scale
>>> scaled_tanh_demo(em.tensor([0.0, 1.0]))  # doctest: +ELLIPSIS
tensor([0. ..., 1.52...], dtype=float32, device=cpu:0)

The reference (written in ember Tensor ops) runs on every backend and defines the gradient
unless a ``vjp`` is given. ``@op.kernel("cpu")`` adds a native kernel for one device kind: it
receives the backend and the input handles, returns a result handle, and must agree with the
reference (the conformance suite checks that on every backend).

Optional declarations, all keyword arguments of the decorator: ``dtypes`` (the dtypes the tensor
inputs may have), ``check`` (``fn(*tensors, **params)`` raising an ``ember.errors`` error for a
bad shape or value, run before dispatch), ``sample`` (``fn(rng, dtype_name) -> [(arrays, params),
...]``: small host inputs the conformance suite runs every kernel and the gradient on) and
``tolerance`` (a scale on the conformance suite's dtype tolerances for this op).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backend import EXTENSION_KERNELS
from .creation import asarray
from .device import invalidate
from .dispatch import OPS, apply, define, is_tensor
from .dtypes import DType, as_dtype
from .errors import ArgumentTypeError, DTypeError, InvalidArgumentError

__all__ = ["backend_extension", "Extension", "VjpContext", "EXTENSIONS"]

#: every extension op defined in this process, by name
EXTENSIONS: dict[str, Extension] = {}


@dataclass
class VjpContext:
    """What an extension's vjp receives besides the output gradient."""

    inputs: tuple[Any, ...]
    output: Any
    params: dict[str, Any]


class Extension:
    """A registered extension op; call it like a function of tensors and keyword params."""

    def __init__(
        self,
        name: str,
        reference: Callable[..., Any],
        elementwise: bool,
        *,
        dtypes: frozenset[DType] | None = None,
        check: Callable[..., None] | None = None,
        sample: Callable[..., list[tuple[tuple[Any, ...], dict[str, Any]]]] | None = None,
        tolerance: float = 1.0,
    ) -> None:
        self.name = name
        self.reference = reference
        self.elementwise = elementwise
        self.dtypes = dtypes
        self.check = check
        self.sample = sample
        self.tolerance = tolerance
        self._vjp: Callable[..., Any] | None = None
        self.op = define(
            name,
            kind="elementwise_unary" if elementwise else "other",
            native=f"{name}(*handles, **params) -> handle  # @{name}.kernel(kind): fn(backend, *handles, **params)",
            composite=self._composite,
            extension=True,
        )
        functools.update_wrapper(self, reference)

    def _composite(self, *inputs: Any, **params: Any) -> Any:
        return self.reference(*inputs, **params)

    def kernel(self, kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a native kernel ``fn(backend, *handles, **params) -> handle`` for ``kind``."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            EXTENSION_KERNELS[(self.name, kind)] = fn
            invalidate(kind, self.name)
            return fn

        return register

    @property
    def kernels(self) -> tuple[str, ...]:
        """The device kinds that have a native kernel for this op (the others run the reference)."""
        return tuple(sorted(kind for (op, kind) in EXTENSION_KERNELS if op == self.name))

    @property
    def has_vjp(self) -> bool:
        """Whether a custom gradient is registered (otherwise gradients flow through the reference)."""
        return self._vjp is not None

    def vjp(self, fn: Callable[[VjpContext, Any], Any]) -> Callable[[VjpContext, Any], Any]:
        """Register ``fn(ctx, grad) -> gradients (one per tensor input)``."""

        def rule(g: Any, out: Any, *inputs: Any, **params: Any) -> tuple[Any, ...]:
            grads = fn(VjpContext(inputs, out, params), g)
            return tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)

        self._vjp = fn
        self.op.vjp = rule
        return fn

    def __call__(self, *args: Any, **params: Any) -> Any:
        if not args:
            raise ArgumentTypeError(f"{self.name}: needs at least one tensor argument")
        first = next((a for a in args if is_tensor(a)), None)
        device = None if first is None else first.device
        inputs = tuple(a if is_tensor(a) else asarray(a, device=device) for a in args)
        if self.dtypes is not None:
            for i, t in enumerate(inputs):
                if t.dtype not in self.dtypes:
                    allowed = ", ".join(sorted(d.name for d in self.dtypes))
                    raise DTypeError(f"{self.name}: argument {i} has dtype {t.dtype}; expected one of {allowed}")
        if self.check is not None:
            self.check(*inputs, **params)
        # a native kernel's result describes itself (shape=None); the reference's dtype otherwise
        return apply(self.op, inputs, params, None, inputs[0].dtype)

    def __repr__(self) -> str:
        return f"<ember extension {self.name}>"


def backend_extension(
    name: str,
    *,
    elementwise: bool = False,
    dtypes: Any = None,
    check: Callable[..., None] | None = None,
    sample: Callable[..., list[tuple[tuple[Any, ...], dict[str, Any]]]] | None = None,
    tolerance: float = 1.0,
) -> Callable[[Callable[..., Any]], Extension]:
    """Decorator: turn a reference function of tensors into a dispatched ember op.

    ``dtypes``, ``check``, ``sample`` and ``tolerance`` are optional (see the module docstring).
    """
    if name in OPS:
        raise InvalidArgumentError(f"backend_extension: an op named {name!r} already exists")
    if check is not None and not callable(check):
        raise ArgumentTypeError(f"backend_extension {name!r}: check must be callable, got {check!r}")
    if sample is not None and not callable(sample):
        raise ArgumentTypeError(f"backend_extension {name!r}: sample must be callable, got {sample!r}")
    allowed = None if dtypes is None else frozenset(as_dtype(d, f"backend_extension {name!r}") for d in dtypes)

    def wrap(reference: Callable[..., Any]) -> Extension:
        ext = Extension(
            name, reference, elementwise, dtypes=allowed, check=check, sample=sample, tolerance=float(tolerance)
        )
        EXTENSIONS[name] = ext
        return ext

    return wrap
