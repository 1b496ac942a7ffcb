"""Shared plumbing of the templated kernels: parameter blocks, compile-once, launch, grids."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from ..codegen.wgsl_lib import with_helpers
from ..runtime import Pipeline, Runtime

__all__ = ["ParamBlock", "compile_kernel", "launch", "grid", "GRID_X", "prod", "ceil_div", "header"]

#: workgroups along x of a 2-D grid (y takes the rest); within every adapter's 65535 limit
GRID_X = 32768


def prod(values: Sequence[int]) -> int:
    n = 1
    for v in values:
        n *= v
    return n


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class ParamBlock:
    """A uniform struct of 4-byte scalars: its WGSL declaration and its packer."""

    _FMT = {"u32": "I", "i32": "i", "f32": "f"}

    def __init__(self, fields: Sequence[tuple[str, str]]) -> None:
        self.fields = list(fields) or [("unused", "u32")]
        self.names = [n for n, _ in self.fields]
        self.fmt = "<" + "".join(self._FMT[t] for _, t in self.fields)
        self.nbytes = ceil_div(len(self.fields) * 4, 16) * 16
        # the fields, then zero bytes up to the block's size
        self._struct = struct.Struct(f"{self.fmt}{self.nbytes - len(self.fields) * 4}x")

    def wgsl(self) -> str:
        members = ", ".join(f"{n}: {t}" for n, t in self.fields)
        return f"struct Params {{ {members} }}\n@group(0) @binding(0) var<uniform> P: Params;"

    def pack(self, values: dict[str, Any]) -> bytes:
        get = values.get
        return self._struct.pack(*[get(n, 0) for n in self.names])


def header(f16: bool) -> str:
    return "enable f16;\n" if f16 else ""


def compile_kernel(
    rt: Runtime, key: Any, build: Callable[[], tuple[str, ParamBlock, tuple[str, ...]]], name: str
) -> tuple[Pipeline, ParamBlock]:
    """Build (once per ``key``) a kernel from ``build() -> (body, params, bindings)``.

    ``body`` is WGSL after the parameter block; helpers it calls are appended automatically.
    """
    found = rt.kernels.get(key)
    if found is None:
        body, params, bindings = build()
        source = params.wgsl() + "\n" + with_helpers(body) + "\n" + body
        if "enable f16;" in body:
            source = "enable f16;\n" + source.replace("enable f16;\n", "")
        found = (rt.pipeline(name, source, bindings), params)
        rt.kernels[key] = found
    return found


def launch(
    rt: Runtime,
    kernel: tuple[Pipeline, ParamBlock],
    values: dict[str, Any],
    buffers: Sequence[Any],
    groups: tuple[int, int, int],
    name: str = "",
) -> None:
    pipe, params = kernel
    rt.dispatch(pipe, params.pack(values), buffers, groups, name)


def grid(workgroups: int) -> tuple[int, int, int]:
    """A 2-D grid of at least ``workgroups`` workgroups (linear id = x + y * GRID_X)."""
    if workgroups <= GRID_X:
        return (max(workgroups, 0), 1, 1)
    return (GRID_X, ceil_div(workgroups, GRID_X), 1)


#: WGSL computing the linear workgroup id of a :func:`grid` launch
GROUP_ID = "let gid_lin = wid.x + wid.y * 32768u;"
