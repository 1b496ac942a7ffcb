"""Integer ``arange`` written by a kernel: no host array, no upload.

An upload inside a step (``one_hot``'s class indices, every step of a classifier's loss) takes
a range of the step plan that the open batch may still use, so it submits the batch first; a
kernel writing the values is recorded in the batch like any other launch. The values are
computed in i32 (WGSL wraps on overflow, so ``start + i * step`` is exact whenever the value
itself fits): the kernel runs when every value fits in int32 and in the dtype, else the
backend computes on the host as before.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ember.dtypes import DType

from ..handle import WgpuArray
from ..runtime import Runtime
from .common import GROUP_ID, ParamBlock, ceil_div, compile_kernel, grid, launch

__all__ = ["arange", "fits"]

WG = 256
_I32 = (-(1 << 31), (1 << 31) - 1)


def fits(start: Any, step: Any, size: int, dtype: DType) -> bool:
    """Whether the kernel computes this arange exactly: integer dtype, start and step, every value
    within int32 and the dtype's range."""
    if dtype.kind not in "iu":
        return False
    try:
        start, step = operator.index(start), operator.index(step)
    except TypeError:
        return False
    if size <= 0:
        return False
    lo, hi = sorted((start, start + (size - 1) * step))
    info = np.iinfo(dtype.numpy)
    return max(_I32[0], int(info.min)) <= lo and hi <= min(_I32[1], int(info.max))


def _build(storage: str):  # type: ignore[no-untyped-def]
    params = ParamBlock([("n", "u32"), ("start", "i32"), ("step", "i32")])
    if storage == "i32":
        store = "v"
    elif storage == "u32":
        store = "u32(v)"
    else:  # vec2<u32>: the low word, then the sign's
        store = "vec2<u32>(u32(v), select(0u, 0xffffffffu, v < 0))"
    body = f"""@group(0) @binding(1) var<storage, read_write> Y: array<{storage}>;
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let e = gid_lin * {WG}u + t;
  if (e >= P.n) {{ return; }}
  let v = P.start + i32(e) * P.step;
  Y[e] = {store};
}}"""
    return body, params, ("w",)


def arange(rt: Runtime, start: int, step: int, size: int, dtype: DType) -> WgpuArray:
    """``start + step * i`` for i < ``size`` in ``dtype`` (call only where :func:`fits`)."""
    out = rt.empty((size,), dtype)
    storage = rt.types[dtype].storage
    kernel = compile_kernel(rt, ("arange", storage), lambda: _build(storage), "arange")
    values = {"n": size, "start": operator.index(start), "step": operator.index(step)}
    launch(rt, kernel, values, [out.storage.raw], grid(ceil_div(size, WG)), "arange")
    return out
