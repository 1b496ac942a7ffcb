"""Fingerprint every GEMM kernel source the OpenCL plugin emits, to prove a refactor changed none.

Two sweeps: the generator called directly (:func:`~ember_opencl.gemm_source.gemm_source` and the CPU
vector kernel over every tiling the defaults, the tuner, conv and the tests name, every dtype, batch
rank, index width, transpose, vector width, alignment, bias, the generic form and conv's gathers),
and the entry points (matmul, conv, conv_transpose, conv_weight_grad) on a Runtime whose ``kernel``
and ``launch`` only record what they are asked for: each kernel's key, source, name and argument
types, each launch's sizes and scalar arguments, on the CPU device as is and as two emulated GPUs.
Every record is a SHA-256; ``--save FILE`` writes them, ``--check FILE`` compares (exit 1 on any
difference). Needs an OpenCL device (PoCL will do) for the second sweep; nothing is compiled.

    python plugins/opencl/scripts/gemm_sources.py --save /tmp/before.json   # before the change
    python plugins/opencl/scripts/gemm_sources.py --check /tmp/before.json  # after
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

os.environ["EMBER_AUTOTUNE"] = "0"  # no tuning on first use (it would read results back)
os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-gemm-sources-")  # no cached choices

import numpy as np  # noqa: E402

from ember import dtypes as D  # noqa: E402
from ember_opencl import conv, matmul, tune  # noqa: E402
from ember_opencl.gemm_source import (  # noqa: E402
    FDIV_INT,
    FDIV_LONG,
    LAYOUT_BITS,
    ColumnMap,
    Tiling,
    gemm_source,
    local_bytes,
    magic,
    vector_source,
)
from ember_opencl.runtime import Runtime  # noqa: E402

_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64"]
_DTYPES += ["uint8", "uint16", "uint32", "uint64", "bool"]
_VECTOR = {"float32", "float64", "int32", "int64", "uint32", "uint64"}

#: tilings named by tests and scripts besides the defaults, the tuner's family and conv's
_EXTRA = [
    Tiling(64, 128, 16, 8, 8, vw=4, chunk=4, db=True),
    Tiling(16, 128, 16, 4, 8, vw=4, chunk=4, db=True),
    Tiling(32, 24, 16, 4, 8),
    Tiling(32, 32, 8, 2, 4, vw=2, chunk=1, db=True),
    Tiling(32, 64, 16, 4, 4, vw=4, chunk=4, db=True),
    Tiling(32, 128, 8, 4, 8, vw=4, chunk=4, db=True, rp=True),
    Tiling(64, 64, 16, 4, 4, vw=4, chunk=4, db=True),
    Tiling(64, 96, 16, 8, 8, vw=4, chunk=4, db=True),
    Tiling(32, 64, 8, 4, 8, vw=2, chunk=1, rp=True),
]


def _tilings() -> list[Tiling]:
    found = list(matmul.TILINGS.values()) + [Tiling(*spec) for spec in tune._GPU_FAMILY]
    found += [t for _, t in conv._GPU_CONV_TILINGS + conv._GPU_NARROW_TILINGS] + _EXTRA
    return [t for t in dict.fromkeys(found) if t.valid()]


def _text(x: Any) -> str:
    """A stable repr: no object addresses."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(x))


def _digest(*parts: Any) -> str:
    return hashlib.sha256("\x00".join(_text(p) for p in parts).encode()).hexdigest()


def _call(f: Any, *args: Any, **kw: Any) -> Any:
    """f's result, or the error it raises (raising the same error is behaviour too)."""
    try:
        return f(*args, **kw)
    except Exception as e:  # noqa: BLE001
        return f"raised {type(e).__name__}: {e}"


def generator_records() -> Iterator[tuple[str, str]]:
    """(label, digest) of the generator's outputs over the sweep."""
    tilings = _tilings()
    bools = (False, True)
    for t, dt, rb, idx, ak, bn, bias in itertools.product(
        tilings, _DTYPES, (0, 1, 2), ("int", "long"), bools, bools, bools
    ):
        v = t.vw if dt in _VECTOR else 1
        for al in ((False,) * 3, (True,) * 3):
            out = _call(gemm_source, dt, t, rb, idx, ak, bn, v, v, bias=bias, aligned=al)
            yield f"strided {t} {dt} rb={rb} {idx} {ak} {bn} v={v} bias={bias} {al}", _digest(out)
    for t, dt, ak, bn in itertools.product(tilings, ("float32", "float64", "float16"), bools, bools):
        vws = (1, t.vw) if dt in _VECTOR else (1,)
        for va, vb, al in itertools.product(vws, vws, itertools.product(bools, bools, bools)):
            out = _call(gemm_source, dt, t, 1, "int", ak, bn, va, vb, aligned=al, name="ember_k")
            yield f"layout {t} {dt} {ak} {bn} {va} {vb} {al}", _digest(out)
    for t, dt, rb, idx, bias in itertools.product(tilings, _DTYPES, (0, 1, 2, 3), ("int", "long"), bools):
        out = _call(gemm_source, dt, t, rb, idx, True, True, 1, 1, bias=bias, generic=True)
        yield f"generic {t} {dt} rb={rb} {idx} bias={bias}", _digest(out)
    npi = {"int": np.dtype(np.int32), "long": np.dtype(np.int64)}
    for t, dt, nd, idx in itertools.product(
        tilings, ("float32", "float64", "float16", "bfloat16"), (1, 2, 3), ("int", "long")
    ):
        va = t.vw if dt in ("float32", "float64") else 1
        cmap = ColumnMap(conv._COLUMNS.code, conv._COLUMNS.params, (npi[idx], npi[idx]))
        for kind, inner, bias in itertools.product(("conv", "transpose"), bools, bools):
            gather = conv._gather(kind, dt, nd, idx, inner)
            spec = (dt, t, 1, idx, True, True, va, 1, None, gather, bias)
            out = _call(gemm_source, *spec, name=f"ember_{kind}_igemm", c_map=cmap)
            yield f"gather {kind} {t} {dt} nd={nd} {idx} inner={inner} bias={bias}", _digest(out)
        spec = (dt, t, 2, idx, True, False, va, 1, None, conv._gather("wgrad", dt, nd, idx), False)
        yield f"gather wgrad {t} {dt} nd={nd} {idx}", _digest(_call(gemm_source, *spec, name="ember_wgrad_igemm"))
    for dt, shape, rb, idx in itertools.product(
        _DTYPES, ((16, 2, 12), (8, 2, 6), (4, 2, 6)), (0, 1, 2, 3), ("int", "long")
    ):
        yield f"vector {dt} {shape} rb={rb} {idx}", _digest(_call(vector_source, dt, shape, rb, idx))
    for t, dt in itertools.product(tilings, _DTYPES):
        yield f"local_bytes {t} {dt}", _digest(local_bytes(t, dt))
    devices = [
        SimpleNamespace(max_wg=w, local_mem=m) for w in (256, 1024, 4096) for m in (16384, 32768, 49152, 1 << 20)
    ]
    for dev in devices:
        yield f"fits {dev}", _digest([matmul.fits(dev, t, dt) for t in tilings for dt in _DTYPES])  # type: ignore[arg-type]
        yield f"head_start {dev}", _digest(matmul.head_start_sources(dev))  # type: ignore[arg-type]
    for floats in (0, 1, 2, 4, 8, 16, "broken"):
        dev = SimpleNamespace(device=SimpleNamespace(preferred_vector_width_float=floats))
        yield f"vector_shape {floats}", _digest([matmul.vector_shape(dev, dt) for dt in _DTYPES])  # type: ignore[arg-type]
    divisors = [*range(0, 4100), *(2**k + e for k in range(12, 31) for e in (-1, 0, 1))]
    yield "magic", _digest([magic(d) for d in divisors])
    yield "constants", _digest(FDIV_INT, FDIV_LONG, sorted(LAYOUT_BITS.items()), matmul.GENERIC_AFTER_FIRST_RESULT)


class _Recorder:
    """Stands in for a Runtime's kernel and launch: records each request, compiles and runs nothing."""

    def __init__(self, rt: Runtime) -> None:
        self.rt, self.records = rt, []

    def kernel(self, key: Any, make: Any, family: Any = None) -> tuple[Any, int]:
        token = _digest(key)
        if family is None:  # (a family's source: elementwise's, not the GEMM's)
            source, name, types = make()
            self.records.append(("kernel", _text(key), _digest(key, source, name, types)))
        return token, self.rt.max_wg

    def launch(self, knl: Any, gsize: Any, lsize: Any, args: Any) -> None:
        scalars = [a if isinstance(a, (int, float, np.generic, type(None))) else type(a).__name__ for a in args]
        self.records.append(("launch", "", _digest(knl, tuple(gsize), lsize and tuple(lsize), scalars)))


def _emulations(rt: Runtime) -> Iterator[str]:
    """Set ``rt`` up as its own device, then as two GPUs (a large one and a small one)."""
    own = (rt.is_cpu, rt.compute_units, rt.max_wg, rt.local_mem)
    for label, setting in (("own", own), ("gpu132", (False, 132, 1024, 49152)), ("gpu4", (False, 4, 256, 32768))):
        rt.is_cpu, rt.compute_units, rt.max_wg, rt.local_mem = setting
        yield label
    rt.is_cpu, rt.compute_units, rt.max_wg, rt.local_mem = own


def _operands(rt: Runtime, dt: Any) -> Iterator[tuple[str, Any, Any]]:
    """(label, a, b) over shapes and layouts: transposes, broadcast batches, offsets, K = 0."""
    raw = np.arange(1 << 16) % 7
    up = rt.upload(raw.astype(dt.numpy), dt)

    def view(shape: tuple[int, ...], strides: tuple[int, ...], offset: int = 0) -> Any:
        return up.with_layout(shape, strides, offset)

    for M, N, K in ((1, 1, 1), (5, 7, 3), (64, 64, 64), (100, 36, 17), (33, 200, 8), (1, 129, 40), (256, 130, 0)):
        yield f"{M}x{N}x{K}", view((M, K), (K, 1)), view((K, N), (N, 1))
        yield f"{M}x{N}x{K} aT", view((M, K), (1, M)), view((K, N), (N, 1))
        yield f"{M}x{N}x{K} bT", view((M, K), (K, 1)), view((K, N), (1, K))
        yield f"{M}x{N}x{K} off", view((M, K), (K, 1), 3), view((K, N), (N, 1), 4)
        yield f"{M}x{N}x{K} batch", view((3, M, K), (M * K, K, 1)), view((K, N), (N, 1))
        yield f"{M}x{N}x{K} bcast", view((2, 1, M, K), (M * K, 0, K, 1)), view((1, 3, K, N), (0, K * N, N, 1))


def entry_records(device: int) -> Iterator[tuple[str, str]]:
    """(label, digest) of the kernels and launches matmul and the convolutions ask a Runtime for."""
    rt = Runtime(device)
    rec = _Recorder(rt)
    rt.kernel, rt.launch = rec.kernel, rec.launch  # type: ignore[method-assign]
    given = [None, *matmul.TILINGS.values()]
    for emu in _emulations(rt):
        for read_backs, after in itertools.product((0, 1), (False, True)):
            rt.read_backs, matmul.GENERIC_AFTER_FIRST_RESULT = read_backs, after
            for dt in (D.float32, D.float64, D.float16, D.int32):
                for label, a, b in _operands(rt, dt):
                    for t in given:
                        for _ in range(2):  # the second: from the plan
                            _call(matmul.matmul, rt, a, b, t)
                        yield from _drain(rec, f"matmul {emu} rb={read_backs} after={after} {dt} {label} {t}")
        matmul.GENERIC_AFTER_FIRST_RESULT, rt.read_backs = False, 0
        yield from _conv_records(rt, rec, emu)


def _conv_records(rt: Runtime, rec: _Recorder, emu: str) -> Iterator[tuple[str, str]]:
    os.environ["EMBER_OPENCL_IMPLICIT_CONV"] = "1"
    given = [None, matmul.TILINGS["odd"], matmul.TILINGS["gpu_rp"], Tiling(64, 96, 16, 8, 8, vw=4, chunk=4, db=True)]
    geometries = [  # (n, cin, cout, size, kernel, stride, pad, dilation, groups)
        (2, 3, 8, (9,), (3,), (1,), ((1, 1),), (1,), 1),
        (2, 4, 6, (7, 8), (3, 3), (2, 1), ((1, 0), (1, 1)), (1, 2), 2),
        (1, 16, 32, (6, 5), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
        (1, 2, 4, (4, 5, 3), (2, 2, 2), (1, 2, 1), ((0, 0), (1, 1), (0, 1)), (1, 1, 1), 1),
    ]
    for dt in (D.float32, D.float16):
        for geo in geometries:
            n, cin, cout, size, kernel, stride, pad, dil, groups = geo
            x = rt.upload(np.ones((n, cin, *size), dt.numpy), dt)
            w = rt.upload(np.ones((cout, cin // groups, *kernel), dt.numpy), dt)
            bias = rt.upload(np.ones(cout, dt.numpy), dt)
            for t, with_bias in itertools.product(given, (False, True)):
                for _ in range(2):
                    y = _call(conv.conv, rt, x, w, bias if with_bias else None, stride, pad, dil, groups, t)
                yield from _drain(rec, f"conv {emu} {dt} {geo} {t} {with_bias}")
                if isinstance(y, str):
                    continue
                wt = rt.upload(np.ones((cout, cin // groups, *kernel), dt.numpy), dt)
                bt = rt.upload(np.ones(cin, dt.numpy), dt)
                for _ in range(2):
                    _call(conv.conv_transpose, rt, y, wt, bt if with_bias else None, size, stride, pad, dil, groups, t)
                yield from _drain(rec, f"transpose {emu} {dt} {geo} {t} {with_bias}")
                for _ in range(2):
                    _call(conv.conv_weight_grad, rt, y, x, kernel, stride, pad, dil, groups, t)
                yield from _drain(rec, f"wgrad {emu} {dt} {geo} {t}")
    del os.environ["EMBER_OPENCL_IMPLICIT_CONV"]


def _drain(rec: _Recorder, label: str) -> Iterator[tuple[str, str]]:
    for i, (what, key, digest) in enumerate(rec.records):
        yield f"{label} #{i} {what} {key}", digest
    rec.records.clear()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save", help="write the records to this JSON file")
    ap.add_argument("--check", help="compare with the records of this JSON file")
    ap.add_argument("--device", type=int, default=0, help="OpenCL device index for the entry-point sweep")
    args = ap.parse_args()
    records = [*generator_records(), *entry_records(args.device)]
    kernels = {d for label, d in records if " kernel " in label}
    print(f"{len(records)} records, {len(set(d for _, d in records))} distinct; entry points asked for "
          f"{sum(' kernel ' in lb for lb, _ in records)} kernels ({len(kernels)} distinct)")  # fmt: skip
    if args.save:
        with open(args.save, "w") as f:
            json.dump(records, f)
    if args.check:
        with open(args.check) as f:
            want = [tuple(r) for r in json.load(f)]
        bad = [(w, g) for w, g in itertools.zip_longest(want, records) if w != g]
        print(f"against {args.check} ({len(want)} records): {len(bad)} differ")
        for w, g in bad[:10]:
            print(f"  was {w}\n  now {g}")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
