"""Batched matmul: which GEMM kernel runs, its launch plans, and the launch.

The kernels' OpenCL C is :mod:`.gemm_source`'s (a parameterised family of tiled local-memory
kernels, and a CPU vector kernel); this module picks a member: the tuner's :class:`Tiling` for the
device, dtype and shape class (:mod:`.tune`), else a heuristic (:data:`TILINGS`), or the vector
kernel on CPU devices. Implicit-GEMM convolution (:mod:`.conv`) launches the same family through
:func:`tiled_launch`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.shapes import numel
from ember.tuning import AUTOTUNE_FLOPS, layout_of
from ember.views import collapse, contiguous_strides, fold_shared_b

from . import skinny
from .array import CLArray
from .cltypes import NP_OF_C, ctype
from .elementwise import contiguous, copy_into
from .gemm_source import LAYOUT_BITS, Tiling, gemm_source, local_bytes, vector_source
from .reduce import reduce
from .runtime import Runtime
from .skinny import SkinnyPlan

__all__ = ["matmul", "TILINGS", "fits", "head_start_sources"]

_VECTOR_DTYPES = frozenset(["float32", "float64", "int32", "int64", "uint32", "uint64"])

TILINGS = {
    "gpu_large": Tiling(128, 128, 16, 8, 8, vw=4),
    "gpu_k8": Tiling(128, 128, 8, 8, 8, vw=4),
    "gpu_c4db": Tiling(128, 128, 16, 8, 8, vw=4, chunk=4, db=True),
    "gpu_small": Tiling(64, 64, 16, 4, 4, vw=4),
    "cpu": Tiling(64, 64, 16, 4, 4),
    "tiny": Tiling(16, 16, 16, 1, 1),
    "odd": Tiling(32, 64, 8, 4, 8, vw=2, chunk=4, db=True),
    #: what fast NVIDIA SGEMMs use at 4096-8192: 128x128x8, 8x8 per item, float4 loads and local
    #: reads, A transposed in local memory, two local buffers, the next slice prefetched to registers
    "gpu_rp": Tiling(128, 128, 8, 8, 8, vw=4, chunk=4, db=True, rp=True),
    "odd_rp": Tiling(32, 64, 8, 4, 8, vw=2, chunk=4, db=True, rp=True),
}


def fits(rt: Runtime, t: Tiling, dt: str) -> bool:
    """Whether ``t`` runs on ``rt``'s device for ``dt``: work-group size and local memory."""
    rtn, rtm = t.threads
    return t.valid() and rtn * rtm <= rt.max_wg and local_bytes(t, dt) <= rt.local_mem


#: whether a GPU runs the generic untuned GEMM after the process's first read-back too. Before it (a
#: cold first step) one program per tiling saves builds; after it untuned GEMMs are specialised per
#: layout, as NVIDIA ran the generic kernel at 1.35-1.75x the specialised one's time on W2's large
#: products (H100, 2026-12-06, benchmarks.gemm_generic). CPU devices keep it (PoCL: 0.74-1.08x, and
#: a build there takes seconds).
GENERIC_AFTER_FIRST_RESULT = False

#: the CPU vector kernel's (VW, WN, WM) (:func:`.gemm_source.vector_source`: a work item per
#: work-group computes WM rows x WN vectors of VW columns) by vector register width: 16 floats suit
#: AVX-512 (32 registers), 8 AVX2.
_VECTOR_SHAPES = {16: (16, 2, 12), 8: (8, 2, 6), 4: (4, 2, 6)}


def vector_shape(rt: Runtime, dt: str) -> tuple[int, int, int]:
    """(VW, WN, WM) of the CPU kernel for ``dt`` on this device."""
    try:
        floats = int(rt.device.preferred_vector_width_float) or 8
    except Exception:
        floats = 8
    lanes = max(4, min(16, floats * 4 // ctype(dt).itemsize))
    return _VECTOR_SHAPES[lanes if lanes in _VECTOR_SHAPES else 8]


def _make_vector(*spec: Any) -> tuple[str, str, list[Any]]:
    source, types = vector_source(*spec)
    return source, "ember_matmul_vec", types


def _pick(rt: Runtime, M: int, N: int) -> Tiling:
    """The untuned choice: by device kind and how many tiles the output makes."""
    if rt.is_cpu:
        return TILINGS["cpu"] if M * N >= 64 * 64 else TILINGS["tiny"]
    big = TILINGS["gpu_large"]
    tiles = -(-M // big.tm) * -(-N // big.tn)
    if tiles >= 2 * rt.compute_units:
        return big
    return TILINGS["gpu_small"] if M * N >= 64 * 64 * 4 else TILINGS["tiny"]


def _tuned(rt: Runtime, dt: str, M: int, N: int, K: int, layout: str = "") -> Tiling | None:
    """The tuned tiling for this device, dtype, shape class and operand layout if one is cached (and fits)."""
    from . import tune  # noqa: PLC0415  (tune imports this module)

    found = tune.lookup(rt, dt, M, N, K, layout)
    return found if found is not None and fits(rt, found, dt) else None


def choose(rt: Runtime, dt: str, M: int, N: int, K: int, layout: str = "") -> Tiling:
    """The tuned tiling for this device, dtype and shape class (and ``layout``: ``"tA"``, ``"tB"``,
    ``"tAtB"`` for transposed operands) if one is cached, else :func:`_pick`."""
    return _tuned(rt, dt, M, N, K, layout) or _pick(rt, M, N)


def _fast_axes(a: CLArray, b: CLArray) -> tuple[bool, bool]:
    """Whether A's (M, K) elements are nearest along K and B's (K, N) along N (row-major)."""
    M, K = a.shape[-2:]
    (a_rs, a_cs), (b_rs, b_cs) = a.strides[-2:], b.strides[-2:]
    return (abs(a_cs) <= abs(a_rs) if M > 1 else True), (abs(b_cs) <= abs(b_rs) if K > 1 else True)


def _layout(a: CLArray, b: CLArray) -> str:
    """The tuner's name for the operands' layout: which of A and B are column-major (transposed views)."""
    a_kfast, b_nfast = _fast_axes(a, b)
    return layout_of(not a_kfast, not b_nfast)


def head_start_sources(rt: Runtime) -> list[str]:
    """The programs most GPU work needs first, for a cold process to build while its host makes
    inputs (:meth:`Runtime._warm_up`): the generic float32 GEMMs of the untuned large and small
    tilings, 2-D (what a 2-D ``a @ b`` of either size class builds: the same source, so the
    step's request finds the program built or under way)."""
    picks = (TILINGS["gpu_large"], TILINGS["gpu_small"])
    return [
        gemm_source("float32", t, 1, "int", True, True, 1, 1, generic=True)[0] for t in picks if fits(rt, t, "float32")
    ]


def _aligned(dt: str, vw: int, offset: int, strides: list[int]) -> bool:
    """Whether ``vw``-wide loads of a 4-byte ``dt`` at offset + multiples of ``strides`` are
    ``vw``-aligned (buffers start 16-byte aligned: the pool's minimum), so a vector pointer is legal."""
    if vw == 1 or NP_OF_C[ctype(dt).storage].itemsize != 4 or dt not in _VECTOR_DTYPES:
        return False
    return offset % vw == 0 and all(s % vw == 0 for s in strides)


def _index_type(out: CLArray, views: list[CLArray]) -> str:
    ext = max([out.size] + [v.offset + sum(abs(s) * (d - 1) for d, s in zip(v.shape, v.strides)) for v in views])
    return "int" if ext < 2**31 - 2**20 else "long"


def tiled_launch(
    rt: Runtime,
    t: Tiling,
    key: tuple[Any, ...],
    make: Callable[[], tuple[str, list[Any]]],
    name: str,
    M: int,
    N: int,
    batch: int,
) -> tuple[Any, tuple[int, int, int], tuple[int, int, int]]:
    """(kernel, global size, local size) of a tiled-family kernel over an M x N output per batch
    entry; the kernel is compiled once per key."""

    def build() -> tuple[str, str, list[Any]]:
        source, types = make()
        return source, name, types

    knl, _ = rt.kernel(key, build)
    rtn, rtm = t.threads
    return knl, (-(-N // t.tn) * rtn, -(-M // t.tm) * rtm, batch), (rtn, rtm, 1)


def launch_tiled(
    rt: Runtime,
    t: Tiling,
    key: tuple[Any, ...],
    make: Callable[[], tuple[str, list[Any]]],
    name: str,
    M: int,
    N: int,
    batch: int,
    args: list[Any],
) -> None:
    """Compile (once per key) and launch a tiled-family kernel over an M x N output per batch entry."""
    knl, gsize, lsize = tiled_launch(rt, t, key, make, name, M, N, batch)
    rt.launch(knl, gsize, lsize, args)


class _Plan:
    """What a matmul of one operand geometry launches, less its buffers: the output's shape, whether
    B is copied contiguous first (the CPU vector kernel), the kernel, its sizes, and its arguments
    with None where A's, B's and C's buffers go (:data:`_A`, :data:`_B`, :data:`_C`)."""

    __slots__ = ("shape", "copy_b", "knl", "gsize", "lsize", "args")

    def __init__(self, shape: tuple[int, ...], copy_b: bool, knl: Any, gsize: Any, lsize: Any, args: list[Any]) -> None:
        self.shape, self.copy_b, self.knl, self.gsize, self.lsize, self.args = shape, copy_b, knl, gsize, lsize, args


_A, _B, _C = 3, 7, 11  # (the positions of the buffers in a plan's arguments)
#: matmul plans by (runtime, operand geometry, what the choice of kernel depends on): a step's GEMMs
#: skip the layout analysis, the tuning lookup and the kernel lookup after their first call
_PLANS: dict[Any, _Plan | int | SkinnyPlan] = {}  # (an int: the K slices of a split product, :func:`_split_k`)
_MAX_PLANS = 2048
#: bumped when a tuning choice is recorded or forgotten (tune.py): plans made before are not used again
_TUNING = [0]


def tuning_changed() -> None:
    """A tuning choice changed: the plans made before no longer say which tiling runs."""
    _TUNING[0] += 1


#: a batch of products sharing one B ((..., M, K) @ (K, N): a linear layer over (batch, sequence,
#: features)) runs as one (batch * M, K) @ (K, N) product when A's batch axes step by whole rows:
#: one GEMM tiled and tuned for its real size instead of a batch of small ones (``ember.views.fold_shared_b``)
FOLD_BATCH = True

#: a 2-D GPU product with few output columns and a large A (``skinny.applies``: N <= 16, M*K >= 2**18)
#: runs :mod:`.skinny`'s kernel, bound by reading A once, instead of split-K over the tiled family
#: (W2 at batch 4096: its (4096, 4096) @ (4096, 10) products took 0.14 ms each on an H100, where
#: reading A takes 0.025 ms). False: the tiled family, for comparisons.
SKINNY = True


def _repeats(x: CLArray) -> bool:
    """Whether a matrix axis of ``x`` repeats one element (stride 0 over more than one: an expanded
    gradient such as ``sum()``'s ones): the tiled kernel's vector loads need a unit stride, so it
    is copied dense first, as PyTorch does (on an H100, W4's two such 137-GFLOP products went from
    3.72 and 3.47 ms to 3.25 and 3.10 ms with the copy)."""
    (r, c), (sr, sc) = x.shape[-2:], x.strides[-2:]
    return (sr == 0 and r > 1) or (sc == 0 and c > 1)


def matmul(rt: Runtime, a: CLArray, b: CLArray, tiling: Tiling | None = None) -> CLArray:
    """``a @ b`` for ``a`` (..., M, K) and ``b`` (..., K, N) with broadcast batch axes."""
    if tiling is None and not rt.is_cpu and (_repeats(a) or _repeats(b)):
        a = contiguous(rt, a) if _repeats(a) else a
        b = contiguous(rt, b) if _repeats(b) else b
    if FOLD_BATCH and tiling is None and len(a.shape) > 2:  # (no closure made for a 2-D product)
        folded = fold_shared_b(a, b, lambda x, y: matmul(rt, x, y))
        if folded is not None:
            return folded
    key = None
    if tiling is None:  # (a tiling given: the tuner's timed runs, not planned)
        key = (rt, a.dtype, a.shape, a.strides, a.offset, b.dtype, b.shape, b.strides, b.offset, rt.is_cpu,
               rt.compute_units, not rt.read_backs, GENERIC_AFTER_FIRST_RESULT, SKINNY, _TUNING[0])  # fmt: skip
        plan = _PLANS.get(key)
        if plan is not None:
            kind = type(plan)
            if kind is _Plan:
                return _run(rt, plan, a, b)  # type: ignore[arg-type]
            return _split_k(rt, plan, a, b) if kind is int else skinny.run(rt, plan, a, b)  # type: ignore[arg-type]
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    if not numel(batch + (M, N)):
        return rt.empty(batch + (M, N), a.dtype)
    if K == 0:
        out = rt.empty(batch + (M, N), a.dtype)
        zero = rt.upload(np.zeros(1, dtype=a.dtype.numpy), a.dtype)
        copy_into(rt, out, zero.with_layout((), (), 0))
        return out
    if key is not None and not batch and SKINNY and skinny.applies(rt, a, b):
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        found = _PLANS[key] = skinny.plan(rt, a, b)
        return skinny.run(rt, found, a, b)
    if key is not None and not batch:
        slices = _slices(rt, a.dtype.name, M, N, K, _layout(a, b))
        if slices:
            if len(_PLANS) >= _MAX_PLANS:
                _PLANS.clear()
            _PLANS[key] = slices
            return _split_k(rt, slices, a, b)
    plan, cacheable = _plan(rt, a, b, tiling, batch)
    if key is not None and cacheable:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    return _run(rt, plan, a, b)


#: split-K (:func:`_slices`): a GPU GEMM whose output makes at most this fraction of the compute units'
#: worth of tiles is cut along K into slices of at least :data:`SLICE_K`, run as one batch of
#: products and summed: W3's first linear layer at batch 512, (512, 3136) @ (3136, 128), is 16
#: tiles of 64 x 64 for 132 compute units otherwise, each 3136 deep
SPLIT_BELOW = 0.5
SLICE_K = 128
#: split-K for a large (tuned) GEMM whose tiles leave compute units idle (:func:`_deep_slices`): W4's
#: weight gradients (1024, 16384) @ (16384, 1024 | 3072) make 32 and 96 tiles of 128 x 256 for an
#: H100's 132 units, each 16384 deep. Slices of at least DEEP_SLICE_K, at most DEEP_SLICES of them,
#: taken when the model below says they save DEEP_GAIN of the time. The model counts waves of tiles
#: (a unit runs one large tile at a time) and prices the partial sums' memory traffic at
#: SUM_FLOPS_PER_BYTE of GEMM work (about an H100's fp32 GEMM rate over its memory bandwidth)
DEEP_SLICE_K, DEEP_SLICES, DEEP_GAIN, SUM_FLOPS_PER_BYTE = 1024, 16, 0.1, 18


def _slices(rt: Runtime, dt: str, M: int, N: int, K: int, layout: str = "") -> int:
    """How many K slices a 2-D float GEMM runs as (0: unsplit): for an untuned size, enough tiles
    for about two per compute unit and a slice count that divides K; a large one by :func:`_deep_slices`."""
    if rt.is_cpu or dt not in ("float32", "float64") or K < 2 * SLICE_K:
        return 0
    if M * N * K >= AUTOTUNE_FLOPS:
        return _deep_slices(rt, dt, M, N, K, layout)
    t = _pick(rt, M, N)
    tiles = -(-M // t.tm) * -(-N // t.tn)
    if tiles > SPLIT_BELOW * rt.compute_units:
        return 0
    for s in range(min(2 * rt.compute_units // tiles, K // SLICE_K), 1, -1):
        if K % s == 0:
            return s
    return 0


def _deep_slices(rt: Runtime, dt: str, M: int, N: int, K: int, layout: str) -> int:
    """The K slices of a large GEMM under its tuned tiling (0: unsplit or untuned): :func:`deep_slices`."""
    t = _tuned(rt, dt, M, N, K, layout)
    return 0 if t is None else deep_slices(rt, t, dt, M, N, K)


def deep_slices(rt: Runtime, t: Tiling, dt: str, M: int, N: int, K: int) -> int:
    """The K slices of a large GEMM with fewer tiles of ``t`` than compute units (0: unsplit): the
    divisor of K the wave model prices lowest, if it saves :data:`DEEP_GAIN`."""
    tiles, units = -(-M // t.tm) * -(-N // t.tn), rt.compute_units
    if tiles >= units:
        return 0
    item = 8 if dt == "float64" else 4

    def cost(s: int) -> float:
        waves = -(-tiles * s // units)
        sums = SUM_FLOPS_PER_BYTE * (s + 1) * M * N * item if s > 1 else 0
        return waves * units * 2.0 * t.tm * t.tn * (K // s) + sums

    whole = best = cost(1)
    chosen = 0
    for s in range(2, min(DEEP_SLICES, K // DEEP_SLICE_K) + 1):
        if K % s == 0 and cost(s) < best:
            best, chosen = cost(s), s
    return chosen if best <= (1 - DEEP_GAIN) * whole else 0


def as_tuned_runs(rt: Runtime, a: CLArray, b: CLArray, t: Tiling) -> CLArray:
    """``a @ b`` under tiling ``t`` as a plan with ``t`` tuned would run it: a large 2-D product of
    fewer tiles than compute units as :func:`deep_slices` K slices. The tuner times its candidates
    so: W4's (1024, 16384)^T @ (16384, 1024) weight gradient, timed whole, chose a small tiling that
    fills the units at 30 TFLOP/s, where a large one in K slices is what would run fastest."""
    if not rt.is_cpu and len(a.shape) == 2 and len(b.shape) == 2 and a.dtype.name in ("float32", "float64"):
        (M, K), N = a.shape, b.shape[1]
        if K >= 2 * SLICE_K and M * N * K >= AUTOTUNE_FLOPS:
            slices = deep_slices(rt, t, a.dtype.name, M, N, K)
            if slices:
                return _split_k(rt, slices, a, b, t)
    return matmul(rt, a, b, t)


def _split_k(rt: Runtime, slices: int, a: CLArray, b: CLArray, tiling: Tiling | None = None) -> CLArray:
    """``a @ b`` as ``slices`` products over K's slices, one batched GEMM into (slices, M, N)
    partials (under ``tiling`` when given), then their sum (in the operands' float type: as exact as
    one long K loop, or more)."""
    (M, K), N = a.shape, b.shape[1]
    ks = K // slices
    (a_rs, a_cs), (b_rs, b_cs) = a.strides, b.strides
    av = a.with_layout((slices, M, ks), (ks * a_cs, a_rs, a_cs), a.offset)
    bv = b.with_layout((slices, ks, N), (ks * b_rs, b_rs, b_cs), b.offset)
    return reduce(rt, "sum", matmul(rt, av, bv, tiling), (0,), False)


def _run(rt: Runtime, plan: _Plan, a: CLArray, b: CLArray) -> CLArray:
    out = rt.empty(plan.shape, a.dtype)
    if plan.copy_b:
        b = contiguous(rt, b)
    args = plan.args.copy()
    args[_A], args[_B], args[_C] = a.block.raw, b.block.raw, out.block.raw  # (non-empty: blocks)
    rt.launch(plan.knl, plan.gsize, plan.lsize, args)
    return out


def _plan(rt: Runtime, a: CLArray, b: CLArray, tiling: Tiling | None, batch: tuple[int, ...]) -> tuple[_Plan, bool]:
    """The launch of ``a @ b`` (a non-empty output, K > 0) from the operands' geometry, and whether it
    may be kept for the next product of the same geometry: not where a large untuned GPU GEMM may
    yet be tuned on first use (:func:`.tune.lookup`)."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    out_shape = batch + (M, N)
    out = CLArray(None, out_shape, None, 0, a.dtype)  # (its geometry: the buffer comes at each run)
    dt = a.dtype.name
    vector = tiling is None and rt.is_cpu and dt in _VECTOR_DTYPES
    copy_b = vector and b.strides[-1] != 1 and N > 1
    if copy_b:  # O(K N) copy so the O(M N K) loop reads B rows as vectors (at each run: see _run)
        b = b.with_layout(b.shape, contiguous_strides(b.shape), 0)
    av = a.expand(batch + (M, K))
    bv = b.expand(batch + (K, N))
    nb = len(batch)
    cstr = out.strides[:nb]
    bsh, (bsc, bsa, bsb) = collapse(batch, [cstr, av.strides[:nb], bv.strides[:nb]])
    a_rs, a_cs = av.strides[-2:]
    b_rs, b_cs = bv.strides[-2:]
    a_kfast, b_nfast = _fast_axes(av, bv)
    idx = _index_type(out, [av, bv])
    args = [M, N, K, None, av.offset, a_rs, a_cs, None, bv.offset, b_rs, b_cs, None]
    args += [*bsh, *bsa, *bsb, *bsc]
    if vector:
        shape = vector_shape(rt, dt)
        knl, _ = rt.kernel(("matmul_vec", dt, shape, len(bsh), idx), lambda: _make_vector(dt, shape, len(bsh), idx))
        vw, wn, wm = shape
        return _Plan(out_shape, copy_b, knl, (-(-N // (vw * wn)), -(-M // wm), numel(batch)), (1, 1, 1), args), True
    tuned = tiling or _tuned(rt, dt, M, N, K, layout_of(not a_kfast, not b_nfast))
    cacheable = tiling is None and (tuned is not None or rt.is_cpu or M * N * K < AUTOTUNE_FLOPS)
    # the untuned choice (a cold process's first steps, before tuning) reads the operands' layout as
    # an argument: one program for every transpose and alignment of a shape class; a tuned or given
    # tiling is specialised (what the tuner timed is what runs)
    generic = (
        tuned is None and (rt.is_cpu or GENERIC_AFTER_FIRST_RESULT or not rt.read_backs) and _aligned(dt, 4, 0, [])
    )
    t = tuned or _pick(rt, M, N)
    generic = generic and not t.rp
    vec_ok = dt in _VECTOR_DTYPES and t.vw > 1
    va = t.vw if vec_ok and (a_cs == 1 if a_kfast else a_rs == 1) else 1
    vb = t.vw if vec_ok and (b_rs == 1 if not b_nfast else b_cs == 1) else 1
    al = _aligned(dt, va, av.offset, [a_rs if a_kfast else a_cs, *bsa])
    bl = _aligned(dt, vb, bv.offset, [b_cs if not b_nfast else b_rs, *bsb])
    aligned = (al, bl, _aligned(dt, 4, 0, [N, *bsc]))
    spec = (dt, t, len(bsh), idx, a_kfast, b_nfast, va, vb)
    if generic:
        bits = dict(zip(("a_aligned", "b_aligned", "c_aligned"), aligned))
        bits.update(a_kfast=a_kfast, b_kfast=not b_nfast, a_vec=va > 1, b_vec=vb > 1)
        args.append(sum(LAYOUT_BITS[f] for f, on in bits.items() if on))
        spec = (dt, t, len(bsh), idx, True, True, 1, 1)  # (the layout is the argument's)

    def make() -> tuple[str, list[Any]]:
        return gemm_source(*spec, aligned=aligned, generic=generic)

    key = ("matmul", *spec, "generic" if generic else aligned)
    knl, gsize, lsize = tiled_launch(rt, t, key, make, "ember_matmul", M, N, numel(batch))
    return _Plan(out_shape, copy_b, knl, gsize, lsize, args), cacheable
