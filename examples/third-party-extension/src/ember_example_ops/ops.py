"""The extension ops: each reference is written in ember Tensor ops, so it runs on every backend;
native kernels (kernels_cpu, kernels_opencl) replace it on the device kinds that have one."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember as em
from ember.errors import ShapeError

__all__ = ["EXTENSION_OPS", "squared_relu", "swiglu"]

_FLOATS = ("float32", "float64")


def _same_shape(a: Any, b: Any) -> None:
    """swiglu's kernels are one work item per element: its two inputs must have one shape."""
    if tuple(a.shape) != tuple(b.shape):
        raise ShapeError(f"example_swiglu: a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")


def _swiglu_sample(rng: np.random.Generator, dtype: str) -> list[tuple[tuple[np.ndarray, ...], dict[str, Any]]]:
    """Inputs for the conformance suite's automatic kernel-vs-reference and gradient checks."""
    return [
        ((rng.uniform(-4.0, 4.0, size=(3, 5)), rng.uniform(-2.0, 2.0, size=(3, 5))), {}),
        ((rng.uniform(-30.0, 30.0, size=(17,)), rng.uniform(-1.0, 1.0, size=(17,))), {}),  # saturated sigmoid
    ]


def _squared_relu_sample(rng: np.random.Generator, dtype: str) -> list[tuple[tuple[np.ndarray, ...], dict[str, Any]]]:
    # values kept 0.05 away from the kink, where central differences straddle it
    x = rng.uniform(0.05, 3.0, size=(4, 6)) * rng.choice([-1.0, 1.0], size=(4, 6))
    return [((x,), {})]


@em.backend_extension("example_swiglu", dtypes=_FLOATS, check=_same_shape, sample=_swiglu_sample)
def swiglu(a: Any, b: Any) -> Any:
    """silu(a) * b = a * sigmoid(a) * b, elementwise; a and b of one shape and float dtype."""
    return a * a.sigmoid() * b


@swiglu.vjp
def _swiglu_vjp(ctx: em.extension.VjpContext, g: Any) -> tuple[Any, Any]:
    """d/da = b * s * (1 + a * (1 - s)) and d/db = a * s, with s = sigmoid(a): one sigmoid, no
    graph of the reference kept, and it runs the forward's kernel even when gradients are recorded."""
    a, b = ctx.inputs
    s = a.sigmoid()
    return g * b * s * (1.0 + a * (1.0 - s)), g * a * s


@em.backend_extension("example_squared_relu", elementwise=True, dtypes=_FLOATS, sample=_squared_relu_sample)
def squared_relu(x: Any) -> Any:
    """relu(x) ** 2, elementwise. No vjp: gradients flow through this reference (2 * relu(x))."""
    r = x.relu()
    return r * r


EXTENSION_OPS = (swiglu, squared_relu)
