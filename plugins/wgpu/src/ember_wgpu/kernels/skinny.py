"""Skinny GEMMs: ``a @ b`` with few output columns (N <= :data:`MAX_N`) and a large A, read once.

The tiled family (:mod:`.matmul`) spends a 64-wide tile on N = 10 columns and reaches few
workgroups: W2's last layer, (4096, 4096) @ (4096, 10) and its weight gradient hᵀ @ g, ran at
0.6 ms each on an H100's Vulkan where reading A's 64 MiB takes ~0.025 ms. Two kernels, by A's
layout, each reading A once with neighbouring invocations on neighbouring addresses:

* ``rows`` (A's K axis contiguous, or any other layout): a workgroup of :data:`WG` invocations
  owns ``rows`` rows of C; invocations stride over K, each keeps ``rows x N`` partial sums in
  registers, then the workgroup adds them up through workgroup memory (laid out so that neither
  the writes nor the reads collide on a bank).
* ``cols`` (A's M axis contiguous: a transposed view such as hᵀ): an invocation per row of C,
  its N sums over a slice of K (B's row is the same for the whole workgroup: one broadcast
  load); with several slices the partial (slices, M, N) products are summed by the reduction.

float32 only (other dtypes keep the tiled path), operands read through their strides (non-negative),
C contiguous. ``CALLS`` counts the launches by kernel (tests read it to see this path ran).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ember.dtypes import float32

from ..handle import WgpuArray
from ..runtime import Runtime
from .common import ParamBlock, ceil_div, compile_kernel
from .reduce import reduce

__all__ = ["CALLS", "MAX_N", "applies", "plan", "run"]

#: launches by kernel ("rows", "cols")
CALLS: Counter[str] = Counter()
#: the widest C this path takes: up to 16 columns the rows kernel keeps rows x N sums in registers;
#: past that the tiled kernel's tiles are no longer mostly empty
MAX_N = 16
#: the smallest M x K worth a kernel of its own (below it the product is launch-bound either way)
MIN_MK = 1 << 16
#: invocations per workgroup; rows of C per workgroup of the rows kernel (fewer when the
#: adapter's workgroup memory cannot hold rows x N x WG partial sums)
WG, ROWS = 64, 4
#: the cols kernel's target number of invocations (slices of K multiply M's), and a slice's least depth
COLS_INVOCATIONS, SLICE_K = 1 << 16, 128

_PARAMS = ParamBlock(
    [("m", "u32"), ("n", "u32"), ("k", "u32"), ("a_off", "u32"), ("b_off", "u32")]
    + [("sam", "u32"), ("sak", "u32"), ("sbk", "u32"), ("sbn", "u32"), ("ks", "u32")]
)
_BINDINGS = ("r", "r", "w")


def applies(a: WgpuArray, b: WgpuArray) -> bool:
    """Whether ``a @ b`` is a 2-D float32 product this path takes."""
    if len(a.shape) != 2 or len(b.shape) != 2 or a.dtype is not float32 or b.dtype is not float32:
        return False
    (m, k), n = a.shape, b.shape[1]
    return 0 < n <= MAX_N and m > 0 and k > 0 and m * k >= MIN_MK and min(a.strides + b.strides) >= 0


def _rows_source(n: int, rows: int) -> tuple[str, ParamBlock, tuple[str, ...]]:
    rn = rows * n
    stride = rn | 1  # odd: invocation t's sums start t * stride apart, so neither pass shares a bank
    acc = [f"var s{r}_{j} = 0.0;" for r in range(rows) for j in range(n)]
    loads_b = [f"let b{j} = B[P.b_off + kk * P.sbk + {j}u * P.sbn];" for j in range(n)]
    body = []
    for r in range(rows):
        body.append(f"let a{r} = A[P.a_off + m{r} * P.sam + kk * P.sak];")
        body += [f"s{r}_{j} = fma(a{r}, b{j}, s{r}_{j});" for j in range(n)]
    rows_at = [f"let m{r} = min(r0 + {r}u, P.m - 1u);" for r in range(rows)]
    spill = [f"red[li * {stride}u + {r * n + j}u] = s{r}_{j};" for r in range(rows) for j in range(n)]
    nl = "\n  "
    source = f"""@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read_write> C: array<f32>;
var<workgroup> red: array<f32, {WG * stride}>;
@compute @workgroup_size({WG})
fn main(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {{
  let r0 = (wg.y * nw.x + wg.x) * {rows}u;
  {nl.join(rows_at)}
  {nl.join(acc)}
  for (var kk = li; kk < P.k; kk = kk + {WG}u) {{
    {(nl + "  ").join(loads_b + body)}
  }}
  {nl.join(spill)}
  workgroupBarrier();
  if (li < {rn}u) {{
    var total = 0.0;
    for (var t = 0u; t < {WG}u; t = t + 1u) {{ total = total + red[t * {stride}u + li]; }}
    let m = r0 + li / {n}u;
    if (m < P.m) {{ C[m * {n}u + li % {n}u] = total; }}
  }}
}}"""
    return source, _PARAMS, _BINDINGS


def _cols_source(n: int) -> tuple[str, ParamBlock, tuple[str, ...]]:
    acc = [f"var s{j} = 0.0;" for j in range(n)]
    step = ["let a = A[P.a_off + m * P.sam + kk * P.sak];"]
    step += [f"s{j} = fma(a, B[P.b_off + kk * P.sbk + {j}u * P.sbn], s{j});" for j in range(n)]
    store = [f"C[base + {j}u] = s{j};" for j in range(n)]
    nl = "\n  "
    source = f"""@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read_write> C: array<f32>;
@compute @workgroup_size({WG})
fn main(@builtin(global_invocation_id) g: vec3<u32>) {{
  let m = g.x;
  if (m >= P.m) {{ return; }}
  let k0 = g.y * P.ks;
  let k1 = min(k0 + P.ks, P.k);
  {nl.join(acc)}
  for (var kk = k0; kk < k1; kk = kk + 1u) {{
    {(nl + "  ").join(step)}
  }}
  let base = (g.y * P.m + m) * {n}u;
  {nl.join(store)}
}}"""
    return source, _PARAMS, _BINDINGS


class Plan:
    """One skinny product's launch: its kernel, parameter bytes, grid and K slices (1: C directly)."""

    __slots__ = ("kind", "pipe", "params", "groups", "slices", "shape")

    def __init__(self, kind: str, pipe: Any, params: bytes, groups: tuple[int, int, int], slices: int, shape: Any):
        self.kind, self.pipe, self.params, self.groups, self.slices, self.shape = (
            kind,
            pipe,
            params,
            groups,
            slices,
            shape,
        )


def _rows_per_group(rt: Runtime, n: int) -> int:
    """:data:`ROWS`, or fewer where the adapter's workgroup memory cannot hold the partial sums."""
    rows = ROWS
    while rows > 1 and WG * ((rows * n) | 1) * 4 > rt.shared_bytes:
        rows //= 2
    return rows


def plan(rt: Runtime, a: WgpuArray, b: WgpuArray) -> Plan:
    """The launch of ``a @ b`` (:func:`applies` is true)."""
    (m, k), n = a.shape, b.shape[1]
    (sam, sak), (sbk, sbn) = a.strides, b.strides
    values = {"m": m, "n": n, "k": k, "a_off": a.offset, "b_off": b.offset}
    values.update(sam=sam, sak=sak, sbk=sbk, sbn=sbn)
    if sam == 1 and sak != 1 and m > 1:  # M contiguous: an invocation per row, slices of K
        slices = max(1, min(ceil_div(COLS_INVOCATIONS, m), k // SLICE_K))
        ks = ceil_div(k, slices)
        slices = ceil_div(k, ks)
        values["ks"] = ks
        pipe, params = compile_kernel(rt, ("skinny_cols", n), lambda: _cols_source(n), "skinny_cols")
        return Plan("cols", pipe, params.pack(values), (ceil_div(m, WG), slices, 1), slices, (m, n))
    rows = _rows_per_group(rt, n)
    groups = ceil_div(m, rows)
    gx = min(groups, rt.max_groups)
    pipe, params = compile_kernel(rt, ("skinny_rows", n, rows), lambda: _rows_source(n, rows), "skinny_rows")
    return Plan("rows", pipe, params.pack(values), (gx, ceil_div(groups, gx), 1), 1, (m, n))


def run(rt: Runtime, p: Plan, a: WgpuArray, b: WgpuArray) -> WgpuArray:
    """Launch ``p`` on ``a`` and ``b``: C, or the K slices' partial products and their sum."""
    CALLS[p.kind] += 1
    out = rt.empty(p.shape if p.slices == 1 else (p.slices, *p.shape), float32)
    rt.dispatch(p.pipe, p.params, [a.storage.raw, b.storage.raw, out.storage.raw], p.groups, f"skinny_{p.kind}")
    return out if p.slices == 1 else reduce(rt, out, "sum", (0,), False)
