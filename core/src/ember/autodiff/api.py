"""The user-facing autodiff API: ``Tensor.backward``, ``em.grad``, ``em.value_and_grad``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from math import prod
from typing import TYPE_CHECKING, Any

from ..creation import FULL, zeros_like
from ..dispatch import create, is_tensor
from ..errors import ArgumentTypeError, AutodiffError
from ..lazy.jit import _ACTIVE as _CAPTURES
from .graph import run_backward
from .mode import _STATE as _GRAD
from .mode import enable_grad

_new = object.__new__

if TYPE_CHECKING:  # annotations only: ember.tensor imports this module (a runtime import is a cycle)
    from ..tensor import Tensor

__all__ = ["backward", "grad", "value_and_grad"]


def _seed(out: Tensor, grad: Any, what: str) -> Tensor:

    if grad is None:
        if out._dtype.kind == "c":
            raise AutodiffError(
                f"{what}: the output is complex ({out.dtype}); a gradient can be implied only for a real "
                f"output. Differentiate a real loss of it (e.g. em.abs(z).sum() or em.real(z).sum()), "
                f"or pass grad= (PyTorch's convention: grad is dL/d(re) + 1j * dL/d(im) of a real L)."
            )
        if prod(out._shape) != 1:  # out.size, without the property's frame (every backward)
            raise AutodiffError(
                f"{what}: the output has shape {out.shape}; gradients can be implied only for "
                f"a single-element output. Pass grad= with the output's shape, or reduce it "
                f"first (e.g. loss.sum())."
            )
        # ones_like(out), one create: the seed of every training step's backward
        dt = out._dtype
        value = 1.0 if dt.kind == "f" else 1
        return create(FULL, out._device, (), {"shape": out._shape, "value": value, "dtype": dt}, out._shape, dt)
    if not is_tensor(grad):
        raise ArgumentTypeError(f"{what}: grad must be a Tensor, got {type(grad).__name__}")
    if grad.shape != out.shape:
        raise AutodiffError(f"{what}: grad has shape {grad.shape} but the output has shape {out.shape}")
    return grad


def _check_recorded(out: Tensor, what: str) -> None:
    if out._rg:
        return
    dev = out.device
    if not dev.autodiff_enabled:
        raise AutodiffError(
            f"{what}: the tensor lives on {dev.kind}:{dev.index}, which has autodiff off, so no "
            f"graph was recorded. Create the model and inputs on "
            f"Device({str(dev)!r}).autodiff()."
        )
    raise AutodiffError(
        f"{what}: the tensor does not depend on any tensor with requires_grad=True (or was "
        f"computed under no_grad), so there is nothing to differentiate."
    )


def backward(
    out: Tensor, grad: Tensor | None = None, *, retain_graph: bool | None = None, create_graph: bool = False
) -> None:
    """Accumulate d(out)/d(leaf) into ``leaf.grad`` for every leaf that requires grad."""
    _check_recorded(out, "backward")
    seed = _seed(out, grad, "backward")
    results = run_backward([out], [seed], create_graph=create_graph, retain_graph=retain_graph)

    previous = _GRAD.enabled  # set_grad_enabled(create_graph), its state set here (run_backward checked the flag)
    _GRAD.enabled = bool(create_graph)
    try:
        for leaf, g in results.values():
            if not create_graph:  # g.detach() (make_tensor, inline: once per parameter per step)
                d = _new(type(g))
                d._data = g._data
                d._shape = g._shape
                d._dtype = g._dtype
                d._device = g._device
                d._node = None
                d._rg = False
                d._grad = None
                g = d
                d = None
            g = g if leaf._grad is None else leaf._grad + g
            if _CAPTURES:  # set_grad, inline: a running em.jit capture sees the assignment
                _CAPTURES[0].assigned(leaf, "_grad")
            leaf._grad = g
    finally:
        _GRAD.enabled = previous


def _prepare(args: Sequence[Any], argnums: tuple[int, ...], what: str) -> tuple[list[Any], bool]:

    args = list(args)
    nested = False
    for i in argnums:
        if i >= len(args):
            raise ArgumentTypeError(f"{what}: argnums={i} but only {len(args)} positional argument(s) were given")
        x = args[i]
        if not is_tensor(x):
            raise ArgumentTypeError(f"{what}: argument {i} must be a Tensor to differentiate, got {type(x).__name__}")
        if x.dtype.kind not in "fc":
            raise AutodiffError(
                f"{what}: argument {i} has dtype {x.dtype}; only floating-point and complex tensors have gradients"
            )
        if x._rg:
            nested = True  # an outer grad is tracing: differentiate through x itself
        else:
            args[i] = x._with_device(x.device.autodiff()).requires_grad_()
    return args, nested


def value_and_grad(
    fn: Callable[..., Any], argnums: int | Sequence[int] = 0, *, has_aux: bool = False
) -> Callable[..., tuple[Any, Any]]:
    """Return ``f(*args) -> (value, gradient)`` of a function with a single-element output.

    >>> import ember as em
    >>> f = lambda x: (x * x).sum()
    >>> em.value_and_grad(f)(em.tensor([1.0, 2.0]))[1].tolist()
    [2.0, 4.0]
    """
    multi = not isinstance(argnums, int)
    nums = tuple(argnums) if multi else (argnums,)  # type: ignore[arg-type]

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> tuple[Any, Any]:

        prepared, nested = _prepare(args, nums, "grad")
        with enable_grad():
            result = fn(*prepared, **kwargs)
        value, aux = result if has_aux else (result, None)

        if not is_tensor(value):
            raise ArgumentTypeError(f"grad: the function must return a Tensor, got {type(value).__name__}")
        wrt = [prepared[i] for i in nums]
        if not value._rg:
            grads = [zeros_like(w) for w in wrt]
        else:
            seed = _seed(value, None, "grad")
            results = run_backward([value], [seed], wrt=wrt, create_graph=nested, retain_graph=nested)

            grads = [results[id(w)][1] if id(w) in results else zeros_like(w) for w in wrt]
        if not nested:
            value = value.detach()
            grads = [g.detach() for g in grads]
        out = tuple(grads) if multi else grads[0]
        return ((value, aux), out) if has_aux else (value, out)

    return wrapped


def grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, *, has_aux: bool = False) -> Callable[..., Any]:
    """Return ``f(*args) -> gradient`` of ``fn`` (single-element output) w.r.t. ``argnums``.

    Nests: ``em.grad(em.grad(f))`` gives second derivatives.

    >>> import ember as em
    >>> em.grad(lambda x: (x ** 3).sum())(em.tensor([2.0])).tolist()
    [12.0]
    """
    vg = value_and_grad(fn, argnums, has_aux=has_aux)

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        value, g = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapped
