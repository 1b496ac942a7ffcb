"""``@backend_extension``: user-defined ops with a reference and per-backend native kernels.

>>> import ember as em
>>> @em.backend_extension("scaled_tanh_demo")
... def scaled_tanh_demo(x, scale=2.0):
...     return x.tanh() * scale
>>> scaled_tanh_demo(em.tensor([0.0, 1.0]))  # doctest: +ELLIPSIS
tensor([0. , 1.5...], dtype=float32, device=cpu:0)

The reference (written in ember Tensor ops) runs on every backend and defines the gradient
unless a ``vjp`` is given. ``@op.kernel("cpu")`` adds a native kernel for one device kind: it
receives the backend and the input handles, returns a result handle, and must agree with the
reference (the conformance suite checks that on every backend).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .dispatch import KERNELS, OPS, apply, define
from .errors import InvalidArgumentError

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

    def __init__(self, name: str, reference: Callable[..., Any], elementwise: bool) -> None:
        self.name = name
        self.reference = reference
        self.elementwise = elementwise
        self._vjp: Callable[..., Any] | None = None
        self.op = define(name, composite=self._composite)
        functools.update_wrapper(self, reference)

    def _composite(self, *inputs: Any, **params: Any) -> Any:
        return self.reference(*inputs, **params)

    def kernel(self, kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a native kernel ``fn(backend, *handles, **params) -> handle`` for ``kind``."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            KERNELS[(self.name, kind)] = fn
            from .device import _STATES

            for (k, _), state in _STATES.items():
                if k == kind:
                    state.impls.pop(self.name, None)
            return fn

        return register

    def vjp(self, fn: Callable[[VjpContext, Any], Any]) -> Callable[[VjpContext, Any], Any]:
        """Register ``fn(ctx, grad) -> gradients (one per tensor input)``."""

        def rule(g: Any, out: Any, *inputs: Any, **params: Any) -> tuple[Any, ...]:
            grads = fn(VjpContext(inputs, out, params), g)
            return tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)

        self._vjp = fn
        self.op.vjp = rule
        return fn

    def __call__(self, *args: Any, **params: Any) -> Any:
        from .creation import asarray
        from .tensor import Tensor

        if not args:
            raise TypeError(f"{self.name}: needs at least one tensor argument")
        first = next((a for a in args if isinstance(a, Tensor)), None)
        inputs = tuple(
            a if isinstance(a, Tensor) else asarray(a, device=None if first is None else first.device) for a in args
        )
        dev = inputs[0].device
        if dev._impls[self.name] is None:
            return apply(self.op, inputs, params, None, inputs[0].dtype)
        return _apply_kernel(self, inputs, params)

    def __repr__(self) -> str:
        return f"<ember extension {self.name}>"


def _apply_kernel(ext: Extension, inputs: tuple[Any, ...], params: dict[str, Any]) -> Any:
    from .autodiff.graph import Node
    from .autodiff.mode import _STATE as GRAD
    from .device import common_device
    from .dtypes import as_dtype
    from .tensor import make_tensor

    dev = common_device(ext.name, [t.device for t in inputs])
    record = GRAD.enabled and any(t._rg for t in inputs)
    if record and ext.op.vjp is None:
        return ext.reference(*inputs, **params)  # differentiate through the reference
    handle = dev._impls[ext.name](*[t._data for t in inputs], **params)
    shape, dtype = dev.backend.handle_meta(handle)  # the result's metadata comes from the kernel's output
    out = make_tensor(handle, tuple(shape), as_dtype(dtype), dev)
    if record and out.dtype.is_floating:
        out._node = Node(ext.op, inputs, params)
        out._rg = True
    return out


def backend_extension(name: str, *, elementwise: bool = False) -> Callable[[Callable[..., Any]], Extension]:
    """Decorator: turn a reference function of tensors into a dispatched ember op."""
    if name in OPS:
        raise InvalidArgumentError(f"backend_extension: an op named {name!r} already exists")

    def wrap(reference: Callable[..., Any]) -> Extension:
        ext = Extension(name, reference, elementwise)
        EXTENSIONS[name] = ext
        return ext

    return wrap
