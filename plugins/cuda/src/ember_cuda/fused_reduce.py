"""Fused programs with a trailing reduction (``FusedProgram.reduce``) on CUDA: one kernel computes
the elementwise program and reduces its value, so the full-size value never reaches memory.

The iteration shape splits into the kept axes (collapsed over every tensor: ``M`` rows) and the
reduced axes (collapsed: ``K`` elements a row). A block of :data:`THREADS` threads takes a row,
or one of ``G`` chunks of a row when rows are few and long (so that the GPU has blocks to run):
its threads stride the row, each folding the program's value (computed by the program's
``__device__`` body, :func:`ember_cuda.codegen.device_source`) into a register, then a
shared-memory tree combines them. When the kept axes are the contiguous ones (a bias gradient:
a sum over the batch axis), a row's elements lie a whole row apart, so a block instead takes
:data:`COLS` neighbouring rows: a warp reads 32 neighbours of each reduced index (coalesced) and
the block's 8 warps split the reduced axis. A chunked row's partials (in the accumulator type:
float for 16-bit floats) are combined by a second small kernel, a thread per row. Tensors are
read, and full-size outputs written, at ``offset + sum(o_d * os_d) + sum(q_d * is_d)`` with
every extent and stride an argument, so one compiled kernel serves every shape of the same
collapsed ranks.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.dtypes import as_dtype
from ember.lazy.program import FusedProgram
from ember.views import collapse

from .codegen import CType, ctype, device_source, literal
from .fusion import _SCALAR_CTYPES, COMPILE_OPTIONS, scalar_value

__all__ = ["FUSION_REDUCTIONS", "COUNTS", "THREADS", "FusedReductions", "reduce_source", "finish_source"]

#: reductions a program may end with on this backend
FUSION_REDUCTIONS = frozenset({"sum", "prod", "max", "min", "mean"})

#: threads of a block, striding its row
THREADS = 256

#: rows a block takes in the column layout (a warp's width), and its warps splitting the reduced axis
COLS = 32
_COL_WARPS = THREADS // COLS

#: launches: a block per row, or per chunk of a row then the combining kernel; ``cols``: of those,
#: the ones in the column layout (tests check what ran)
COUNTS = {"row": 0, "chunked": 0, "cols": 0}

_NAME = "ember_fused_reduce"
_FINISH = "ember_fused_reduce_finish"
_BODY = "ember_fr"

_I = ctypes.c_longlong
_P = ctypes.c_void_p


def accumulator(c: CType) -> CType:
    """The type ``c``'s values accumulate in: float for 16-bit floats, else ``c`` itself."""
    return ctype("float32") if c.half else c


def _identity(op: str, acc: CType) -> str:
    if op in ("sum", "mean"):
        return literal(0, acc)
    if op == "prod":
        return literal(1, acc)
    if acc.kind == "f":
        return literal(-math.inf if op == "max" else math.inf, acc)
    info = np.iinfo(np.dtype(acc.name))
    return literal(int(info.min) if op == "max" else int(info.max), acc)


def _fold(op: str, acc: str, v: str, is_float: bool) -> str:
    """Statement folding ``v`` into ``acc`` (max/min: a NaN wins, as numpy's)."""
    if op in ("sum", "mean"):
        return f"{acc} += {v};"
    if op == "prod":
        return f"{acc} *= {v};"
    cmp = ">" if op == "max" else "<"
    nan = f" || {v} != {v}" if is_float else ""
    return f"if ({v} {cmp} {acc}{nan}) {acc} = {v};"


def reduce_source(
    prog: FusedProgram, modes: tuple[str, ...], ro: int, ri: int, partial: bool, cols: bool = False
) -> str:
    """CUDA C of kernel ``ember_fused_reduce`` for ``prog``: ``modes`` a letter per tensor input
    (``z`` one element, ``s`` strided), ``ro``/``ri`` the collapsed kept/reduced ranks;
    ``partial``: write accumulators (a chunk's), not results; ``cols``: the column layout (a
    block takes :data:`COLS` neighbouring rows)."""
    r = prog.reduce
    if r is None:
        raise ValueError("reduce_source() compiles a program with a trailing reduction")
    prog.check()
    # the body computes the full-size outputs and, last, the reduced value
    body_prog = FusedProgram(prog.inputs, prog.instructions, (*prog.outputs, r.value))
    types = [ctype(d) for d in prog.value_dtypes()]
    cval = types[r.value]
    cacc = accumulator(cval)
    A = cacc.compute
    fold = "sum" if r.op == "mean" else r.op
    is_float = cacc.kind == "f"
    params = ["const long long M", "const long long K", "const long long chunk", "const long long G"]
    params += [f"const long long osh{d}" for d in range(ro)] + [f"const long long ish{d}" for d in range(ri)]
    head: list[str] = []
    loads: list[str] = []
    bases: list[str] = []

    def strided(name: str, c: CType, const: bool) -> None:
        params.append(f"{'const ' if const else ''}{c.storage}* __restrict__ {name}")
        params.append(f"const long long {name}_off")
        params.extend(f"const long long {name}_os{d}" for d in range(ro))
        params.extend(f"const long long {name}_is{d}" for d in range(ri))

    tensor_modes = iter(modes)
    for j, (_, kind) in enumerate(prog.inputs):
        c = types[j]
        if kind == "scalar":
            params.append(f"const {c.compute} in{j}")
            head.append(f"const {c.compute} v{j} = in{j};")
            continue
        strided(f"in{j}", c, const=True)
        if next(tensor_modes) == "z":
            head.append(f"const {c.compute} v{j} = {c.load(f'in{j}', f'in{j}_off')};")
        else:
            bases.append(f"in{j}")
            at = " + ".join([f"in{j}_b"] + [f"q{d} * in{j}_is{d}" for d in range(ri)])
            loads.append(f"const {c.compute} v{j} = {c.load(f'in{j}', at)};")
    for k, o in enumerate(prog.outputs):
        strided(f"out{k}", types[o], const=False)
        bases.append(f"out{k}")
    cred = cacc if partial else cval
    params.append(f"{cred.storage}* __restrict__ red")
    row_bases = [
        f"const long long {b}_b = " + " + ".join([f"{b}_off"] + [f"o{d} * {b}_os{d}" for d in range(ro)]) + ";"
        for b in bases
    ]
    n_out = len(prog.outputs)
    results = [f"{types[o].compute} r{k};" for k, o in enumerate(body_prog.outputs)]
    call = f"{_BODY}_body(" + ", ".join(
        [f"v{j}" for j in range(len(prog.inputs))] + [f"r{k}" for k in range(n_out + 1)]
    )
    stores = []
    for k, o in enumerate(prog.outputs):
        at = " + ".join([f"out{k}_b"] + [f"q{d} * out{k}_is{d}" for d in range(ri)])
        stores.append(f"out{k}[{at}] = {types[o].store(f'r{k}')};")
    lines = [device_source(body_prog, _BODY), f'extern "C" __global__ void {_NAME}(' + ", ".join(params) + ") {"]
    lines += [f"  __shared__ {A} sv[{THREADS}];", "  const long long g = blockIdx.x;"]
    if cols:  # lane tx: row (g / G) * COLS + tx; warp ty: reduced indices ty, ty + warps, ...
        lines += [
            f"  const int tx = threadIdx.x % {COLS}, ty = threadIdx.x / {COLS};",
            f"  const long long row = (g / G) * {COLS} + tx, part = g % G;",
            "  const bool live = row < M;",
        ]
        first, step, guard = "part * chunk + ty", str(_COL_WARPS), "live && "
    else:
        lines.append("  const long long row = g / G, part = g % G;")
        first, step, guard = "part * chunk + threadIdx.x", "blockDim.x", ""
    lines.append("  long long orest = row;")
    for d in range(ro - 1, -1, -1):
        lines.append(f"  const long long o{d} = orest % osh{d}; orest /= osh{d};")
    lines += ["  " + s for s in head + row_bases]
    lines += [
        f"  {A} acc = {_identity(fold, cacc)};",
        "  const long long k1 = min(K, (part + 1) * chunk);",
        f"  for (long long k = {first}; {guard}k < k1; k += {step}) {{",
        "    long long qrest = k;",
    ]
    for d in range(ri - 1, 0, -1):
        lines.append(f"    const long long q{d} = qrest % ish{d}; qrest /= ish{d};")
    if ri:  # k < K: what is left is the outermost index (no 64-bit division per element for one axis)
        lines.append("    const long long q0 = qrest;")
    lines += ["    " + s for s in loads + results]
    lines.append(f"    {call});")
    lines += ["    " + s for s in stores]
    lines.append(f"    const {A} x = ({A})r{n_out};")
    lines.append("    " + _fold(fold, "acc", "x", is_float))
    # the tree: over all threads (a row's block), or over the warps of each lane (columns)
    top, stride, done, where, total = (
        (_COL_WARPS // 2, COLS, "ty == 0 && live", "row * G + part", "sv[tx]")
        if cols
        else (THREADS // 2, 1, "threadIdx.x == 0", "g", "sv[0]")
    )
    lines += [
        "  }",
        "  sv[threadIdx.x] = acc;",
        "  __syncthreads();",
        f"  for (int s = {top}; s > 0; s >>= 1) {{",
        f"    if (threadIdx.x < s * {stride}) {{",
        f"      const {A} x = sv[threadIdx.x + s * {stride}];",
        "      acc = sv[threadIdx.x];",
        "      " + _fold(fold, "acc", "x", is_float),
        "      sv[threadIdx.x] = acc;",
        "    }",
        "    __syncthreads();",
        "  }",
    ]
    result = f"{total} / ({A})K" if r.op == "mean" and not partial else total
    lines += [f"  if ({done}) red[{where}] = {cred.store(result)};", "}", ""]
    return "\n".join(lines)


def finish_source(op: str, value_dtype: str) -> str:
    """CUDA C of kernel ``ember_fused_reduce_finish``: a thread per row folds the row's ``G``
    partials (accumulator type) and stores the result as ``value_dtype`` (a mean divided by ``K``)."""
    cval = ctype(value_dtype)
    cacc = accumulator(cval)
    A = cacc.compute
    fold = "sum" if op == "mean" else op
    result = f"acc / ({A})K" if op == "mean" else "acc"
    pre = device_source(FusedProgram(((value_dtype, "tensor"),), (("copy", value_dtype, (0,)),), (1,)), "unused")
    return "\n".join(
        [
            pre,
            f'extern "C" __global__ void {_FINISH}(const long long M, const long long G, const long long K, '
            f"const {cacc.storage}* __restrict__ part, {cval.storage}* __restrict__ red) {{",
            "  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
            "  if (row >= M) return;",
            f"  {A} acc = {_identity(fold, cacc)};",
            "  for (long long j = 0; j < G; j++) {",
            f"    const {A} x = part[row * G + j];",
            "    " + _fold(fold, "acc", "x", cacc.kind == "f"),
            "  }",
            f"  red[row] = {cval.store(result)};",
            "}",
            "",
        ]
    )


def _collapse(shape: tuple[int, ...], axes: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[Any, ...]:
    kept = [d for d in range(len(shape)) if d not in axes]
    osh, ost = collapse(tuple(shape[d] for d in kept), [tuple(st[d] for d in kept) for st in strides])
    ish, ist = collapse(tuple(shape[d] for d in axes), [tuple(st[d] for d in axes) for st in strides])
    return osh, ost, ish, ist


def _columns(modes: tuple[str, ...], ost: list[Any], ist: list[Any], ro: int, ri: int) -> bool:
    """Whether the column layout reads the strided inputs coalesced and the row layout does not:
    more of them step 1 along the innermost kept axis than along the innermost reduced one."""
    if not ro or not ri:
        return False
    strided = [k for k, m in enumerate(modes) if m == "s"]
    along_kept = sum(abs(ost[k][ro - 1]) == 1 for k in strided)
    along_reduced = sum(abs(ist[k][ri - 1]) == 1 for k in strided)
    return along_kept > along_reduced


class FusedReductions:
    """Compiled fused-reduction kernels of one device, by (program, layout); runs them."""

    def __init__(self, cp: Any, sms: int) -> None:
        from .kernels import Launcher  # noqa: PLC0415 - kernels imports CuPy-facing code only

        self.cp = cp
        self.sms = sms
        self._launcher = Launcher
        self._cache: dict[Any, Any] = {}
        #: (program, shape, operand layouts) -> the launch plan of :meth:`run`
        self._plans: dict[Any, tuple[Any, ...]] = {}
        self._lock = threading.Lock()

    def _compiled(self, key: Any, make: Any, name: str, argtypes: tuple[Any, ...]) -> Any:
        found = self._cache.get(key)
        if found is None:
            with self._lock:
                found = self._cache.get(key)
                if found is None:
                    kernel = self.cp.RawKernel(make(), name, options=COMPILE_OPTIONS)
                    found = self._cache[key] = self._launcher(self.cp, kernel, argtypes)
        return found

    def run(self, prog: FusedProgram, operands: Sequence[Any], shape: tuple[int, ...]) -> list[Any]:
        """Run ``prog`` (with ``prog.reduce`` set) over ``shape``: its full-size outputs, then the reduced value."""
        if prog.reduce is None:
            raise ValueError("FusedReductions.run() runs a program with a trailing reduction")
        # a repeated reduction (a step's bias gradients, its loss) finds its whole launch by one
        # dict lookup: layout, kernels, grid and the geometry arguments depend only on these
        key = (prog, shape, *[(x.shape, x.strides) for (_, kind), x in zip(prog.inputs, operands) if kind == "tensor"])
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(prog, operands, shape)
        launch, grid, head, inputs, out_geo, out_dts, red_len, red_dt, finish, out_shape, cols = plan
        cp = self.cp
        outs = [cp.empty(shape, dtype=dt) for dt in out_dts]
        red = cp.empty((red_len,), dtype=red_dt)
        values = list(head)
        for (dt, geo), x in zip(inputs, operands):
            if geo is None:
                values.append(scalar_value(x, dt))
            else:
                values.append(x.data.ptr)
                values += geo
        for o, geo in zip(outs, out_geo):
            values.append(o.data.ptr)
            values += geo
        values.append(red.data.ptr)
        launch(grid, THREADS, *values)
        COUNTS["cols"] += cols
        if finish is None:
            COUNTS["row"] += 1
            return [*outs, red.reshape(out_shape)]
        COUNTS["chunked"] += 1
        m, g, k, vdt = head[0], head[3], head[1], finish[1]
        final = cp.empty((m,), dtype=vdt)
        finish[0](-(-m // THREADS), THREADS, m, g, k, red.data.ptr, final.data.ptr)
        return [*outs, final.reshape(out_shape)]

    def _plan(self, prog: FusedProgram, operands: Sequence[Any], shape: tuple[int, ...]) -> tuple[Any, ...]:
        """What :meth:`run` needs to launch ``prog`` over ``shape`` with operands of these layouts:
        (launcher, grid, leading arguments, per input (dtype, geometry or None for a scalar),
        per output geometry, output dtypes, partial buffer length and dtype, (finisher, dtype) or
        None, reduced shape, whether the column layout); compiles the kernels on first use."""
        r = prog.reduce
        assert r is not None
        dts = prog.value_dtypes()
        rank = len(shape)
        tensors = [x for (_, kind), x in zip(prog.inputs, operands) if kind == "tensor"]
        out_dts = [as_dtype(dts[o]).numpy for o in prog.outputs]
        strides: list[tuple[int, ...]] = []
        # the outputs are new C-contiguous arrays of ``shape``
        layouts = [(t.shape, t.strides, t.itemsize) for t in tensors]
        for dt in out_dts:
            item = np.dtype(dt).itemsize
            layouts.append((shape, tuple(int(v) for v in _c_strides(shape, item)), item))
        for tshape, tstrides, item in layouts:
            pad = rank - len(tshape)
            own = [0 if tshape[d] == 1 else tstrides[d] // item for d in range(len(tshape))]
            strides.append(tuple([0] * pad + own[max(0, -pad) :]))
        osh, ost, ish, ist = _collapse(shape, r.axes, strides)
        n_in = len(tensors)
        modes = tuple("z" if not any(ost[k] + ist[k]) else "s" for k in range(n_in))
        M, K = math.prod(osh), math.prod(ish)
        target = self.sms * 8  # blocks enough to fill the GPU
        cols = _columns(modes, ost, ist, len(osh), len(ish))
        blocks, per_block = (-(-M // COLS), _COL_WARPS) if cols else (M, THREADS)
        G = max(1, min(-(-target // blocks), K // (4 * per_block))) if blocks < target else 1
        partial = G > 1
        ro, ri = len(osh), len(ish)
        argtypes: list[Any] = [_I] * (4 + ro + ri)
        per = [_P, _I] + [_I] * (ro + ri)
        for dt, kind in prog.inputs:
            argtypes += [_SCALAR_CTYPES[ctype(dt).compute]] if kind == "scalar" else per
        argtypes += per * len(prog.outputs) + [_P]
        launch = self._compiled(
            ("reduce", prog, modes, ro, ri, partial, cols),
            lambda: reduce_source(prog, modes, ro, ri, partial, cols),
            _NAME,
            tuple(argtypes),
        )
        vdt = as_dtype(dts[r.value]).numpy
        cval = ctype(dts[r.value])
        acc_np = np.dtype(np.float32) if cval.half else vdt
        head = (M, K, -(-K // G), G, *osh, *ish)
        geo = iter(zip(ost, ist))
        inputs = []
        for dt, kind in prog.inputs:
            if kind == "scalar":
                inputs.append((dt, None))
            else:
                a, b = next(geo)
                inputs.append((dt, (0, *a, *b)))
        out_geo = [(0, *a, *b) for a, b in zip(ost[n_in:], ist[n_in:])]
        finish = None
        if partial:
            fin = self._compiled(
                ("finish", r.op, dts[r.value]), lambda: finish_source(r.op, dts[r.value]), _FINISH, (_I, _I, _I, _P, _P)
            )
            finish = (fin, vdt)
        return (launch, blocks * G, head, inputs, out_geo, out_dts, M * G, acc_np if partial else vdt, finish,
                r.shape(shape), int(cols))  # fmt: skip


def _c_strides(shape: tuple[int, ...], item: int) -> list[int]:
    """Byte strides of a C-contiguous array of ``shape``."""
    out, step = [], item
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return out[::-1]
