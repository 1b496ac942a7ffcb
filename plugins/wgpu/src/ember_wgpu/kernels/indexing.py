"""gather / take, scatter_add and index_put.

All three walk an iteration shape (one thread per element), decode the coordinates once and
read integer indices through their strides (int64 indices are read from their low word; the
core has already wrapped negative ones and checked bounds). Adds that may collide use atomics:
``atomicAdd`` on i32/u32, a compare-exchange loop on the bits of f32, and for 64-bit integers
an add on the low word whose returned old value tells exactly when to carry into the high
word. float16/bfloat16 and narrow integers accumulate in their 32-bit type and are cast back.
``index_put`` without accumulation is deterministic: the last write of duplicates wins (as in
numpy), found with an ``atomicMax`` of the writer's position in a first pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.dtypes import DType, float32, int32, uint32

from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from .common import GROUP_ID, ParamBlock, ceil_div, compile_kernel, grid, header, launch, prod

__all__ = ["gather", "take", "scatter_add", "index_put"]

WG = 256


def _decode(rank: int) -> str:
    lines = ["var rem = e;"]
    for k in range(rank - 1, 0, -1):
        lines += [f"let k{k} = rem % P.d{k};", f"rem = rem / P.d{k};"]
    if rank:
        lines.append("let k0 = rem;")
    return "\n  ".join(lines)


def _index_read(t: WType, ref: str) -> str:
    """An integer index element as i32 (64-bit indices: the low word)."""
    if t.cls in "lL":
        return f"bitcast<i32>({ref}.x)"
    if t.cls == "u":
        return f"bitcast<i32>({ref})"
    return ref


def _sum(terms: Sequence[str]) -> str:
    return " + ".join(terms) if terms else "0"


# -- gather / take ---------------------------------------------------------------------------
def _gather_build(tx: WType, ti: WType, rank: int, axis: int, f16: bool):  # type: ignore[no-untyped-def]
    fields = [("n", "u32"), ("a_off", "u32"), ("i_off", "u32")]
    for k in range(rank):
        fields += [(f"d{k}", "u32"), (f"as{k}", "i32"), (f"is{k}", "i32")]
    params = ParamBlock(fields)
    iaddr = _sum([f"i32(k{k}) * P.is{k}" for k in range(rank)])
    aterms = [f"i32(k{k}) * P.as{k}" for k in range(rank) if k != axis] + [f"ix * P.as{axis}"]
    body = f"""{header(f16)}
@group(0) @binding(1) var<storage, read> X: array<{tx.storage}>;
@group(0) @binding(2) var<storage, read> I: array<{ti.storage}>;
@group(0) @binding(3) var<storage, read_write> Y: array<{tx.storage}>;
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let e = gid_lin * {WG}u + t;
  if (e >= P.n) {{ return; }}
  {_decode(rank)}
  let ix = {_index_read(ti, f"I[u32(i32(P.i_off) + {iaddr})]")};
  Y[e] = X[u32(i32(P.a_off) + {_sum(aterms)})];
}}"""
    return body, params, ("r", "r", "w")


def _gather_run(
    rt: Runtime, x: WgpuArray, index: WgpuArray, axis: int, shape: tuple[int, ...], istrides: tuple[int, ...]
) -> WgpuArray:
    out = rt.empty(shape, x.dtype)
    if out.size == 0:
        return out
    rank = len(shape)
    tx, ti = rt.types[x.dtype], rt.types[index.dtype]
    f16 = rt.types.uses_f16(x.dtype)
    kernel = compile_kernel(
        rt, ("gather", tx.name, ti.name, rank, axis), lambda: _gather_build(tx, ti, rank, axis, f16), "gather"
    )
    values = {"n": out.size, "a_off": x.offset, "i_off": index.offset}
    for k in range(rank):
        values[f"d{k}"], values[f"as{k}"], values[f"is{k}"] = shape[k], x.strides[k], istrides[k]
    launch(rt, kernel, values, [x.buffer, index.buffer, out.buffer], grid(ceil_div(out.size, WG)), "gather")
    return out


def gather(rt: Runtime, x: WgpuArray, index: WgpuArray, axis: int) -> WgpuArray:
    """numpy ``take_along_axis`` (index has x's rank; other axes already broadcast)."""
    return _gather_run(rt, x, index, axis, index.shape, index.strides)


def take(rt: Runtime, x: WgpuArray, indices: WgpuArray, axis: int) -> WgpuArray:
    """``x`` at 1-D ``indices`` along ``axis``."""
    shape = tuple(indices.shape[0] if i == axis else d for i, d in enumerate(x.shape))
    istrides = tuple(indices.strides[0] if i == axis else 0 for i in range(len(x.shape)))
    return _gather_run(rt, x, indices, axis, shape, istrides)


# -- atomic accumulation -----------------------------------------------------------------------
def _atomic_type(t: WType) -> str:
    return {"i": "atomic<i32>", "u": "atomic<u32>", "b": "atomic<u32>", "f": "atomic<u32>"}.get(t.cls, "atomic<u32>")


def _atomic_add(t: WType, target: str, value: str) -> str:
    if t.cls in "iu":
        return f"atomicAdd(&O[{target}], {value});"
    if t.cls == "b":
        return f"if ({value}) {{ atomicOr(&O[{target}], 1u); }}"
    if t.cls == "f":
        return f"""let tgt = {target};
  let add_v = {value};
  var old = atomicLoad(&O[tgt]);
  loop {{
    let r = atomicCompareExchangeWeak(&O[tgt], old, bitcast<u32>(bitcast<f32>(old) + add_v));
    if (r.exchanged) {{ break; }}
    old = r.old_value;
  }}"""
    if t.cls == "c":  # complex64: a float compare-and-swap loop on each part's word
        loops = []
        for part, lane in ((0, "x"), (1, "y")):
            word = f"&O[2u * tgt + {part}u]"
            loops.append(f"""var old{lane} = atomicLoad({word});
  loop {{
    let r{lane} = atomicCompareExchangeWeak({word}, old{lane}, bitcast<u32>(bitcast<f32>(old{lane}) + add_v.{lane}));
    if (r{lane}.exchanged) {{ break; }}
    old{lane} = r{lane}.old_value;
  }}""")
        return f"let tgt = {target};\n  let add_v = {value};\n  " + "\n  ".join(loops)
    return f"""let tgt = {target};
  let add_v = {value};
  let old = atomicAdd(&O[2u * tgt], add_v.x);
  atomicAdd(&O[2u * tgt + 1u], add_v.y + select(0u, 1u, old + add_v.x < old));"""


def _wide(dtype: DType) -> DType:
    """The dtype scatter accumulates in (32-bit float or integer, or the dtype itself)."""
    if dtype.name in ("float16", "bfloat16"):
        return float32
    if dtype.name in ("int8", "int16"):
        return int32
    if dtype.name in ("uint8", "uint16"):
        return uint32
    return dtype


def _scatter_build(tv: WType, index_types: tuple[WType, ...], rank: int, plan: tuple, mode: str):  # type: ignore[no-untyped-def]
    """Kernel over ``rank`` iteration coords; ``plan``: per index tensor the coords it uses.

    ``mode``: ``add`` (atomic accumulate), ``claim`` (atomicMax of position + 1), ``put``.
    """
    nidx = len(index_types)
    fields = [("n", "u32"), ("v_off", "u32")]
    for k in range(rank):
        fields += [(f"d{k}", "u32"), (f"vs{k}", "i32")]
    for m in range(nidx):
        fields += [(f"i{m}_off", "u32"), (f"os_i{m}", "u32")]
        fields += [(f"is{m}_{k}", "i32") for k in plan[m]]
    for k in range(rank):
        fields += [(f"os{k}", "u32")]
    params = ParamBlock(fields)
    lines = []
    target = []
    for m, ti in enumerate(index_types):
        iaddr = _sum([f"i32(k{k}) * P.is{m}_{k}" for k in plan[m]])
        lines.append(f"let ix{m} = {_index_read(ti, f'I{m}[u32(i32(P.i{m}_off) + {iaddr})]')};")
        target.append(f"u32(ix{m}) * P.os_i{m}")
    target += [f"k{k} * P.os{k}" for k in range(rank)]
    vaddr = f"u32(i32(P.v_off) + {_sum([f'i32(k{k}) * P.vs{k}' for k in range(rank)])})"
    if mode == "add":
        out_decl = f"array<{_atomic_type(tv)}>"
        action = _atomic_add(tv, "tgt0", tv.load(f"V[{vaddr}]"))
    elif mode == "claim":
        out_decl = "array<atomic<u32>>"
        action = "atomicMax(&O[tgt0], e + 1u);"
    else:
        out_decl = f"array<{tv.storage}>"
        action = f"if (W[tgt0] == e + 1u) {{ O[tgt0] = V[{vaddr}]; }}"
    binds = [f"@group(0) @binding(1) var<storage, read> V: array<{tv.storage}>;"]
    for m, ti in enumerate(index_types):
        binds.append(f"@group(0) @binding({m + 2}) var<storage, read> I{m}: array<{ti.storage}>;")
    b = nidx + 2
    binds.append(f"@group(0) @binding({b}) var<storage, read_write> O: {out_decl};")
    bindings = ("r",) * (nidx + 1) + ("w",)
    if mode == "put":
        binds.append(f"@group(0) @binding({b + 1}) var<storage, read> W: array<u32>;")
        bindings += ("r",)
    f16 = tv.storage == "f16"
    body = f"""{header(f16)}
{chr(10).join(binds)}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let e = gid_lin * {WG}u + t;
  if (e >= P.n) {{ return; }}
  {_decode(rank)}
  {chr(10).join("  " + ln for ln in lines).strip()}
  let tgt0 = {_sum(target)};
  {action}
}}"""
    return body, params, bindings


def _scatter_run(
    rt: Runtime,
    out: WgpuArray,
    values: WgpuArray,
    indices: Sequence[WgpuArray],
    plan: tuple[tuple[int, ...], ...],
    index_out_strides: Sequence[int],
    coord_out_strides: Sequence[int],
    mode: str,
    winner: WgpuArray | None = None,
) -> None:
    shape = values.shape
    rank = len(shape)
    n = prod(shape)
    if n == 0:
        return
    tv = rt.types[values.dtype]
    itypes = tuple(rt.types[i.dtype] for i in indices)
    key = ("scatter", mode, tv.name, tuple(t.name for t in itypes), rank, plan)
    kernel = compile_kernel(rt, key, lambda: _scatter_build(tv, itypes, rank, plan, mode), f"scatter_{mode}")
    vals = {"n": n, "v_off": values.offset}
    for k in range(rank):
        vals[f"d{k}"], vals[f"vs{k}"], vals[f"os{k}"] = shape[k], values.strides[k], coord_out_strides[k]
    for m, idx in enumerate(indices):
        vals[f"i{m}_off"], vals[f"os_i{m}"] = idx.offset, index_out_strides[m]
        for k in plan[m]:
            vals[f"is{m}_{k}"] = idx.strides[k]  # index tensors span the leading iteration coords
    buffers = [values.buffer] + [i.buffer for i in indices] + [out.buffer]
    if winner is not None:
        buffers.append(winner.buffer)
    launch(rt, kernel, vals, buffers, grid(ceil_div(n, WG)), f"scatter_{mode}")


def _accumulate_into(rt: Runtime, base: WgpuArray, dtype: DType) -> tuple[WgpuArray, DType]:
    """A fresh contiguous copy of ``base`` in the accumulation dtype."""
    wide = _wide(dtype)
    out = rt.empty(base.shape, wide)
    ew.copy_into(rt, base, out)
    return out, wide


def scatter_add(rt: Runtime, a: WgpuArray, index: WgpuArray, values: WgpuArray, axis: int) -> WgpuArray:
    """A copy of ``a`` with ``values`` added at ``index`` along ``axis``."""
    out, wide = _accumulate_into(rt, a, a.dtype)
    if values.dtype is not wide:
        v = rt.empty(values.shape, wide)
        ew.copy_into(rt, values, v)
        values = v
    rank = len(index.shape)
    strides = out.strides
    coord_strides = [0 if k == axis else strides[k] for k in range(rank)]
    plan = (tuple(range(rank)),)
    _scatter_run(rt, out, values, [index], plan, [strides[axis]], coord_strides, "add")
    return _narrow_back(rt, out, a.dtype)


def _narrow_back(rt: Runtime, out: WgpuArray, dtype: DType) -> WgpuArray:
    if out.dtype is dtype:
        return out
    final = rt.empty(out.shape, dtype)
    ew.copy_into(rt, out, final)
    return final


def index_put(
    rt: Runtime, a: WgpuArray, values: WgpuArray, indices: Sequence[WgpuArray], accumulate: bool
) -> WgpuArray:
    """A copy of ``a`` with ``a[indices] = values`` (or ``+=`` when ``accumulate``)."""
    nidx = len(indices)
    bshape = indices[0].shape if indices else ()
    nb = len(bshape)
    rank = len(values.shape)
    plan = tuple(tuple(range(nb)) for _ in indices)
    if accumulate:
        out, wide = _accumulate_into(rt, a, a.dtype)
        if values.dtype is not wide:
            v = rt.empty(values.shape, wide)
            ew.copy_into(rt, values, v)
            values = v
    else:
        out = rt.empty(a.shape, a.dtype)
        ew.copy_into(rt, a, out)
    strides = out.strides
    index_strides = [strides[m] for m in range(nidx)]
    coord_strides = [0] * nb + [strides[nidx + j] for j in range(rank - nb)]
    if accumulate:
        _scatter_run(rt, out, values, indices, plan, index_strides, coord_strides, "add")
        return _narrow_back(rt, out, a.dtype)
    winner = ew.fill(rt, (out.size,), 0, uint32)
    _scatter_run(rt, winner, values, indices, plan, index_strides, coord_strides, "claim")
    _scatter_run(rt, out, values, indices, plan, index_strides, coord_strides, "put", winner)
    return out
