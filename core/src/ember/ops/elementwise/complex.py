"""Complex parts: ``conj``, ``real``, ``imag``, and ``_cj``, the conjugate every vjp rule applies
to its derivative factor. A backend that holds complex tensors computes these natively."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...creation import full_like
from ...dispatch import is_tensor
from ...dtypes import NUMERIC_OR_COMPLEX
from ...errors import NotImplementedOpError
from ._define import _unary, _zero_grad, unary_op

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ...tensor import Tensor

__all__ = ["conj", "real", "imag"]


def _cj(v: Any) -> Any:
    """The conjugate of a derivative factor, for the vjp rules: complex tensors and Python
    complex numbers are conjugated, real ones pass unchanged (no extra op on a real graph).

    Gradients follow PyTorch's convention (docs/architecture.md): for a real loss L of z = x + iy,
    ``z.grad = dL/dx + 1j * dL/dy``, so a holomorphic f gives ``grad_in = grad_out * conj(f'(z))``.
    """
    if is_tensor(v):
        return conj(v) if v._dtype.kind == "c" else v
    if isinstance(v, complex):
        return v.conjugate()
    return v


def _complex_part(name: str, real_input: Any) -> Any:
    """The composite of ``conj``/``real``/``imag``: ``real_input(x)`` for real tensors. A complex
    tensor reaches it only on a backend that holds complex dtypes without computing this op."""

    def composite(x: Tensor) -> Tensor:
        if x._dtype.kind != "c":
            return real_input(x)
        raise NotImplementedOpError(
            f"{x._device.backend.name} backend holds {x._dtype} tensors but does not implement {name!r}; "
            f"a backend with complex dtypes declares conj, real and imag natively"
        )

    return composite


def _imag_vjp(g: Tensor, y: Tensor, x: Tensor) -> tuple[Any]:
    # imag(x + iy) = y: dL/dy = g, so the gradient is 1j * g (zero for a real input)
    return (g * 1j,) if x._dtype.kind == "c" else _zero_grad(g, y, x)


# conj(z): the gradient is conj(g); real(z): g itself (a real g, made complex by the graph)
CONJ = unary_op("conj", NUMERIC_OR_COMPLEX, composite=_complex_part("conj", lambda x: x), vjp=lambda g, y, x: (_cj(g),))
REAL = unary_op("real", NUMERIC_OR_COMPLEX, composite=_complex_part("real", lambda x: x), vjp=lambda g, y, x: (g,))
IMAG = unary_op("imag", NUMERIC_OR_COMPLEX, composite=_complex_part("imag", lambda x: full_like(x, 0)), vjp=_imag_vjp)


def conj(x: Any, /) -> Tensor:
    """The complex conjugate, elementwise (real tensors are returned as they are)."""
    return _unary(CONJ, x)


def real(x: Any, /) -> Tensor:
    """The real part, elementwise, as the real dtype of ``x`` (``complex64`` -> ``float32``)."""
    return _unary(REAL, x)


def imag(x: Any, /) -> Tensor:
    """The imaginary part, elementwise, as the real dtype of ``x`` (zeros for real tensors)."""
    return _unary(IMAG, x)
