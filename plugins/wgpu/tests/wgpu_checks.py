"""Checks the ember-wgpu tests share."""

from __future__ import annotations

from typing import Any

import pytest

import ember as em
from ember_wgpu.errors import WgpuValidationError


def check_unchecked_dispatch_is_validation_error(rt: Any, name: str) -> None:
    """A dispatch of kernel ``name`` over more workgroups than the adapter allows, with the
    runtime's own check lifted, is refused by wgpu at the flush: a WgpuValidationError naming it."""
    out = rt.empty((4,), em.float32)
    pipe = rt.pipeline(
        name, "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
        "@compute @workgroup_size(1) fn main() { y[0] = 1.0; }", ("w",)
    )  # fmt: skip
    rt.max_groups, limit = 10**9, rt.max_groups
    try:
        rt.dispatch(pipe, bytes(16), [out.buffer], (limit + 1, 1, 1), name)
        with pytest.raises(WgpuValidationError, match=name):
            rt.flush()
    finally:
        rt.max_groups = limit
