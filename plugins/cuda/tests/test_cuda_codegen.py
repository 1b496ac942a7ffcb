"""The CUDA kernel generator without a GPU: launch layouts (collapse, modes, index type, float4),
argument packing, exact literals, the generated text, and the expression table's semantics
(bodies compiled for the CPU by g++, compared with numpy). NVRTC compiles of every op x dtype
are in test_without_gpu.py."""

from __future__ import annotations

import ctypes
import math
import warnings

import cpu_body
import numpy as np
import pytest
from ember_cuda import codegen
from ember_cuda.codegen import Layout, literal, source
from ember_cuda.fusion import INT32_LIMIT, argument_types, pack, plan, scalar_value

from ember.lazy.program import Const, FusedProgram

# -- layouts ----------------------------------------------------------------------------------


def _c(shape: tuple[int, ...], addr: int = 256) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    strides = tuple(math.prod(shape[d + 1 :]) for d in range(len(shape)))
    return shape, strides, addr


def test_contiguous_operands_collapse_to_one_dimension() -> None:
    p = plan((4, 5, 6), [_c((4, 5, 6)), _c((4, 5, 6))])
    assert p.layout == Layout(("c", "c"), 0, "int", False)
    assert (p.n, p.shape) == (120, (120,))


def test_a_broadcast_element_is_mode_z_and_a_row_is_strided() -> None:
    p = plan((8, 16), [_c((8, 16)), _c(()), _c((1, 1)), _c((16,))])
    assert p.layout.modes == ("c", "z", "z", "s")
    assert p.layout.rank == 2 and p.shape == (8, 16)
    assert p.strides[3] == (0, 1)


def test_unit_dimensions_drop_and_walked_in_step_dimensions_merge() -> None:
    # a (2, 1, 3, 4) operand broadcast along its unit axis over (2, 5, 3, 4): the last two merge
    p = plan((2, 5, 3, 4), [_c((2, 5, 3, 4)), _c((2, 1, 3, 4))])
    assert p.layout.modes == ("c", "s")
    assert p.shape == (2, 5, 12)
    assert p.strides[1] == (12, 0, 1)


def test_transposed_and_reversed_views_are_strided_with_their_strides() -> None:
    p = plan((3, 4), [((3, 4), (1, 3), 0), ((3, 4), (4, -1), 0)])
    assert p.layout.modes == ("s", "s")
    assert p.strides == ((1, 3), (4, -1))


def test_the_index_type_widens_past_int32() -> None:
    assert plan((2**20,), [_c((2**20,))]).layout.index == "int"
    assert plan((INT32_LIMIT + 4,), [_c((INT32_LIMIT + 4,))]).layout.index == "long long"
    # a small iteration shape whose operand reaches far (a huge stride) widens too
    assert plan((2, 2), [((2, 2), (2**31, 1), 0)]).layout.index == "long long"


def test_the_float4_path_needs_alignment_a_multiple_of_4_and_float32() -> None:
    f32 = (True, True)
    assert plan((1024,), [_c((1024,)), _c(())], f32).layout.vec4
    assert not plan((1024,), [_c((1024,)), _c(())], None).layout.vec4  # an output is not float32
    assert not plan((1022,), [_c((1022,)), _c(())], f32).layout.vec4
    assert not plan((1024,), [_c((1024,), addr=260), _c(())], f32).layout.vec4
    assert not plan((1024,), [_c((1024,)), _c((1024,))], (True, False)).layout.vec4  # a float16 input
    assert plan((1024,), [_c((1024,)), _c((), addr=2)], (True, False)).layout.vec4  # one element: any type
    assert not plan((32, 32), [_c((32, 32)), ((32, 32), (1, 32), 0)], f32).layout.vec4  # strided


def test_empty_and_zero_dimensional_iterations() -> None:
    assert plan((0, 3), [_c((0, 3))]).n == 0
    p = plan((), [_c(()), _c(())])
    assert p.n == 1 and p.layout.modes == ("c", "c")


def test_every_elementwise_op_is_fused_or_says_why() -> None:
    from ember.dispatch import OPS

    elementwise = {name for name, op in OPS.items() if op.kind.startswith("elementwise")}
    assert codegen.FUSION_OPS - elementwise == {"copy"}  # the program form's own
    assert elementwise - codegen.FUSION_OPS == set(codegen.NOT_FUSED)


# -- arguments --------------------------------------------------------------------------------

_CHAIN = FusedProgram(
    (("float32", "tensor"), ("float16", "scalar"), ("float32", "tensor")),
    (("cast", "float32", (1,)), ("mul", "float32", (0, 3)), ("add", "float32", (4, 2))),
    (5, 4),
)


def test_packed_values_match_the_declared_parameters() -> None:
    p = plan((3, 4), [_c((3, 4), 512), ((3, 4), (1, 3), 1024)])
    values = pack(_CHAIN, p, ["A", 0.1, "B"], [512, 1024], [2048, 4096])
    types = argument_types(_CHAIN, p.layout)
    assert len(values) == len(types)
    assert values == [12, 3, 4, 512, float(np.float16(0.1)), 1024, 1, 3, 2048, 4096]
    assert types[0] is ctypes.c_int and types[4] is ctypes.c_float
    declared = source(_CHAIN, p.layout).split("ember_fused(")[1].split(")")[0].split(", ")
    assert len(declared) == len(types)


def test_scalars_are_rounded_to_their_dtype() -> None:
    assert scalar_value(0.1, "float16") == float(np.float16(0.1))
    assert scalar_value(1 + 2**-9, "bfloat16") == 1.0  # ties to even
    assert scalar_value(1 + 3 * 2**-9, "bfloat16") == 1 + 2**-7
    assert scalar_value(3.7, "int32") == 3 and scalar_value(2, "bool") is True


def test_literals_are_exact_and_need_no_headers() -> None:
    f32, f64 = codegen.ctype("float32"), codegen.ctype("float64")
    assert literal(float("inf"), f32) == "__int_as_float(2139095040)"
    assert literal(float("-inf"), f64) == "__longlong_as_double(-4503599627370496LL)"
    assert "__int_as_float" in literal(float("nan"), f32)
    assert literal(0.1, f32) == f"({float(np.float32(0.1))!r}f)"
    assert literal(-0.0, f64) == "(-0.0)"
    assert literal(-(2**63), codegen.ctype("int64")) == "(-9223372036854775807LL - 1)"
    assert literal(1e39, f32) == "__int_as_float(2139095040)"  # rounds to float32's infinity
    assert literal(70000.0, codegen.ctype("float16")) == "__int_as_float(2139095040)"


def test_generated_text_per_layout() -> None:
    prog = FusedProgram((("float32", "tensor"), ("float32", "tensor")), (("add", "float32", (0, 1)),), (2,))
    vec = source(prog, Layout(("c", "z"), 0, "long long", True))
    assert "const float4* __restrict__ in0" in vec and "float4* __restrict__ out0" in vec
    assert "in1[0]" in vec and "n4 = n >> 2" in vec
    strided = source(prog, Layout(("c", "s"), 3, "int"))
    assert "in1_s2" in strided and "c2 * in1_s2" in strided and "sh2" in strided
    assert "INFINITY" not in strided and "#include" not in strided
    with pytest.raises(ValueError, match="float4"):
        source(prog, Layout(("c", "s"), 2, "long long", True))
    half = FusedProgram((("float16", "tensor"),), (("exp", "float16", (0,)),), (1,))
    text = source(half, Layout(("c",)))
    assert "ember_h2f(ember_f2h(expf(v0)))" in text  # computed in float, rounded to 16 bits


def test_an_op_that_does_not_apply_is_a_value_error() -> None:
    prog = FusedProgram((("int32", "tensor"),), (("exp", "int32", (0,)),), (1,))
    with pytest.raises(ValueError, match="exp needs floating-point"):
        source(prog, Layout(("c",)))


# -- semantics: the bodies on the CPU, against numpy -------------------------------------------

_SPECIAL = [-math.inf, -7.0, -3.5, -2.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 1.5, 2.5, 3.0, 7.0, math.inf, math.nan]
_GRID = {
    "float32": _SPECIAL + [1e-3, 100.0, 1e30],
    "float64": _SPECIAL + [1e-300, 1e300],
    "float16": _SPECIAL + [1e-3, 100.0, 60000.0],
    "int32": [-(2**31), -7, -2, -1, 0, 1, 2, 3, 7, 2**31 - 1],
    "int64": [-(2**63), -7, -2, -1, 0, 1, 2, 3, 7, 2**63 - 1],
    "uint8": [0, 1, 2, 3, 7, 128, 255],
    "int8": [-128, -7, -2, -1, 0, 1, 2, 3, 7, 127],
    "int16": [-(2**15), -7, -1, 0, 1, 3, 7, 2**15 - 1],
    "uint64": [0, 1, 2, 3, 7, 2**63, 2**64 - 1],
    "bool": [False, True],
}

_erf = np.vectorize(math.erf, otypes=[float])
_erfc = np.vectorize(math.erfc, otypes=[float])
_REFERENCE = {
    "floordiv": np.floor_divide, "remainder": np.remainder, "maximum": np.maximum, "minimum": np.minimum,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "pow": np.power,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "atan2": np.arctan2, "hypot": np.hypot, "logaddexp": np.logaddexp, "copysign": np.copysign,
    "signbit": np.signbit,
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil, "round": np.round,
    "trunc": np.trunc, "reciprocal": np.reciprocal, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "logical_not": np.logical_not, "bitwise_not": np.invert, "exp2": np.exp2, "expm1": np.expm1, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "square": np.square, "rsqrt": lambda x: 1 / np.sqrt(x), "relu": lambda x: np.where(x < 0, 0, x),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x.astype(np.float64))),
    "silu": lambda x: x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64))),
    "gelu": lambda x: 0.5 * x.astype(np.float64) * _erfc(-x.astype(np.float64) / math.sqrt(2)),
    # 0.5 x (1 + tanh z) as x / (1 + exp(-2z)): float64 cancels in 1 + tanh(z) for negative x too
    "gelu_tanh": lambda x: x / (1 + np.exp(-1.5957691216057308 * (x + 0.044715 * x.astype(np.float64) ** 3))),
    "softplus": lambda x: np.logaddexp(x.astype(np.float64), 0.0),
    "erf": lambda x: _erf(x.astype(np.float64)),
}  # fmt: skip
#: ops whose result is correctly rounded in both (IEEE), so the comparison is exact
_EXACT = frozenset(
    "floordiv remainder maximum minimum add sub mul div eq ne lt le gt ge logical_and logical_or logical_xor "
    "bitwise_and bitwise_or bitwise_xor neg abs sign floor ceil round trunc reciprocal isnan isinf isfinite "
    "logical_not bitwise_not square relu sqrt cast chain copysign signbit".split()
)
#: ops where numpy fixes the sign of a zero result
_SIGNED_ZERO = frozenset("floordiv remainder neg abs floor ceil round trunc copysign".split())


def _pairs(dt: str, binary: bool) -> list[np.ndarray]:
    g = _GRID[dt]
    if not binary:
        return [np.array(g, dtype=object)]
    return [np.array([a for a in g for _ in g], dtype=object), np.array([b for _ in g for b in g], dtype=object)]


def _cases() -> list[tuple[str, str]]:
    out = []
    for dt in _GRID:
        for op in sorted(codegen.UNARY_OPS | codegen.BINARY_OPS):
            out.append((op, dt))
    return out


def _numpy_dtype(dt: str) -> np.dtype:
    return np.dtype(np.bool_) if dt == "bool" else np.dtype(dt)


@pytest.mark.skipif(not cpu_body.available(), reason="g++ is not installed (it compiles the bodies for the CPU)")
@pytest.mark.parametrize("dt", sorted(_GRID))
def test_every_op_follows_numpy_on_special_values(dt: str) -> None:
    """Per dtype, every op the generator takes for it: one multi-output program (so one g++ run),
    compared with numpy on a grid of special values (signed zeros, infinities, NaN, extremes)."""
    npdt = _numpy_dtype(dt)
    kind = npdt.kind if dt != "bool" else "b"
    unary, binary = [], []
    for op in sorted(codegen.UNARY_OPS | codegen.BINARY_OPS):
        if op not in _REFERENCE:
            continue
        b = op in codegen.BINARY_OPS
        a = [(f"v{0}", codegen.ctype(dt))] * (2 if b else 1)
        try:
            codegen.expression(op, a, codegen.ctype(dt), {})
        except ValueError:
            continue
        if kind == "b" and op in ("sub", "neg", "div", "floordiv", "remainder", "pow", "sign", "atan2"):
            continue  # numpy refuses these on bool (and so does ember's dtype table)
        (binary if b else unary).append(op)
    checked = 0
    for ops, is_binary in ((unary, False), (binary, True)):
        cols = _pairs(dt, is_binary)
        inputs = tuple((dt, "tensor") for _ in cols)
        instructions = []
        for op in ops:
            args = (0, 1) if is_binary else (0,)
            out_dt = "bool" if op in ("eq ne lt le gt ge isnan isinf isfinite signbit logical_not logical_and "
                                      "logical_or logical_xor").split() else dt  # fmt: skip
            instructions.append((op, out_dt, args))
        n = len(inputs)
        prog = FusedProgram(inputs, tuple(instructions), tuple(range(n, n + len(ops))))
        got = cpu_body.run(prog, cols)
        arrays = [np.array(list(c), dtype=npdt) for c in cols]
        for op, value in zip(ops, got):
            if op == "pow" and kind in "iu":
                keep = (arrays[1] >= 0) & (arrays[1] <= 3)
            else:
                keep = np.ones(len(arrays[0]), dtype=bool)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if op in ("floor", "ceil", "round", "trunc") and kind != "f":
                    want = arrays[0]
                else:
                    want = np.asarray(_REFERENCE[op](*[a[keep] for a in arrays]))
            if kind == "f" and want.dtype != np.bool_:
                want = want.astype(npdt).astype(np.float64)  # the reference rounded to the dtype
            _compare(op, dt, np.asarray(value)[keep], want, [c[keep] for c in cols])
            checked += 1
    assert checked >= (12 if kind in "iub" else 60)


def _compare(op: str, dt: str, got: np.ndarray, want: np.ndarray, cols: list[np.ndarray]) -> None:
    where = f"{op} on {dt}"
    if want.dtype == np.bool_ or got.dtype == np.bool_:
        bad = np.nonzero(got.astype(bool) != want.astype(bool))[0]
    elif want.dtype.kind in "iu":
        bad = np.nonzero(
            np.array([int(g) for g in got], dtype=object) != np.array([int(w) for w in want], dtype=object)
        )[0]
    else:
        got = got.astype(np.float64)
        want = want.astype(np.float64)
        same_nan = np.isnan(got) == np.isnan(want)
        if op in _EXACT:
            close = (got == want) | (np.isnan(got) & np.isnan(want))
        else:
            rtol = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-13}[dt]
            if op == "gelu_tanh":  # exp(-2z) multiplies z's rounding error by |2z| (34 at x = -7)
                rtol *= 10
            with np.errstate(all="ignore"):
                close = np.isclose(got, want, rtol=rtol, atol=0, equal_nan=True) | (got == want)
        if op in _SIGNED_ZERO:
            close &= (want != 0) | (np.signbit(got) == np.signbit(want))
        bad = np.nonzero(~(close & same_nan))[0]
    if len(bad):
        rows = [f"({', '.join(repr(c[i]) for c in cols)}) -> {got[i]!r}, numpy {want[i]!r}" for i in bad[:6]]
        raise AssertionError(f"{where}: {len(bad)} of {len(got)} differ: " + "; ".join(rows))


@pytest.mark.skipif(not cpu_body.available(), reason="g++ is not installed (it compiles the bodies for the CPU)")
def test_casts_follow_numpy() -> None:
    """Every cast between the dtypes on values they hold; float16 results rounded once, as numpy."""
    values = {
        "float64": [-2.5, -1.0, -0.0, 0.0, 0.5, 1.5, 2.5, 100.0, 1 + 2**-11 + 2**-30, math.inf, math.nan],
        "float32": [-2.5, -1.0, 0.0, 0.5, 1.5, 100.0, math.inf, math.nan],
        "float16": [-2.5, -1.0, 0.0, 0.5, 1.5, 100.0, math.inf],
        "int32": [-3, 0, 1, 7, 100],
        "int64": [-3, 0, 1, 7, 100],
        "uint8": [0, 1, 7, 100, 255],
        "bool": [False, True],
    }
    targets = ["float64", "float32", "float16", "int32", "int64", "uint8", "bool"]
    for src, vals in values.items():
        dsts = [d for d in targets if not (src.startswith("float") and d in ("int32", "int64", "uint8"))]
        prog = FusedProgram(((src, "tensor"),), tuple(("cast", d, (0,)) for d in dsts), tuple(range(1, 1 + len(dsts))))
        got = cpu_body.run(prog, [np.array(vals, dtype=object)])
        arr = np.array(vals, dtype=_numpy_dtype(src))
        for d, value in zip(dsts, got):
            with np.errstate(all="ignore"):
                want = arr.astype(_numpy_dtype(d))
            if want.dtype.kind == "f":
                want = want.astype(np.float64)
            _compare("cast", f"{src}->{d}", np.asarray(value), want, [arr])


@pytest.mark.skipif(not cpu_body.available(), reason="g++ is not installed (it compiles the bodies for the CPU)")
def test_a_chain_with_constants_and_where_follows_numpy() -> None:
    """where(x > 0.5, floordiv(x * s, -inf-clipped y), cast(x < y)) with Const literals, float32."""
    g = _GRID["float32"]
    cols = [np.array([a for a in g for _ in g], dtype=object), np.array([b for _ in g for b in g], dtype=object),
            np.array([1.5] * len(g) ** 2, dtype=object)]  # fmt: skip
    prog = FusedProgram(
        (("float32", "tensor"), ("float32", "tensor"), ("float32", "scalar")),
        (
            ("mul", "float32", (0, 2)),  # 3
            ("maximum", "float32", (1, Const(-math.inf, "float32"))),  # 4
            ("floordiv", "float32", (3, 4)),  # 5
            ("gt", "bool", (0, Const(0.5, "float32"))),  # 6
            ("lt", "bool", (0, 1)),  # 7
            ("cast", "float32", (7,)),  # 8
            ("where", "float32", (6, 5, 8)),  # 9
        ),
        (9, 6),
    )
    got, cond = cpu_body.run(prog, cols)
    x, y, s = (np.array(list(c), dtype=np.float32) for c in cols)
    with np.errstate(all="ignore"):
        want = np.where(x > 0.5, np.floor_divide(x * s, np.maximum(y, -np.inf)), (x < y).astype(np.float32))
    _compare("chain", "float32", got, want.astype(np.float64), [x, y])
    assert (cond == (x > 0.5)).all()


# -- the runner and the single-op path, with numpy standing in for CuPy ------------------------


class _HostArray(np.ndarray):
    """A numpy array that answers ``.data.ptr`` as a CuPy array does."""

    @property
    def data(self) -> object:  # type: ignore[override]
        return type("Mem", (), {"ptr": self.ctypes.data})()


class _FakeCupy:
    """What FusedKernels and _single_op touch of CuPy, over host memory."""

    def __init__(self) -> None:
        runtime = type("rt", (), {"getDeviceProperties": staticmethod(lambda i: {"multiProcessorCount": 4})})
        self.cuda = type("cuda", (), {"runtime": runtime, "Device": staticmethod(lambda: type("d", (), {"id": 0}))})
        self.sources: list[str] = []

    def empty(self, shape: tuple[int, ...], dtype: object) -> np.ndarray:
        return np.full(shape, 77, dtype=dtype).view(_HostArray)

    def RawKernel(self, text: str, name: str, options: tuple[str, ...]) -> object:  # noqa: N802 - CuPy's name
        self.sources.append(text)
        return text

    broadcast_to = staticmethod(np.broadcast_to)
    array = staticmethod(np.array)
    full = staticmethod(np.full)


class _Recorder:
    launches: list[tuple[tuple[object, ...], list[object]]] = []

    def __init__(self, cp: object, kernel: object, types: tuple[object, ...]) -> None:
        self.types = types

    def __call__(self, blocks: int, threads: int, *values: object) -> None:
        assert blocks >= 1 and threads == 256
        for t, v in zip(self.types, values, strict=True):
            t(v)  # each value fits its ctypes slot (a float in an int slot raises)
        _Recorder.launches.append((self.types, list(values)))


def _read(addr: int, dtype: np.dtype) -> object:
    return np.frombuffer(ctypes.string_at(addr, dtype.itemsize), dtype=dtype)[0]


def test_the_runner_addresses_every_operand_through_its_layout() -> None:
    """Decode the launch arguments as the kernel would (per mode: i, 0, or coordinates x strides)
    and read host memory at those addresses: every element is the broadcast operand's."""
    from ember_cuda.fusion import FusedKernels

    cp = _FakeCupy()
    kernels = FusedKernels(cp)
    kernels._launcher = _Recorder
    base = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5).view(_HostArray)
    row = np.arange(5, dtype=np.float64).view(_HostArray)
    ops = [base[:, ::2, :], base[1:2, 0:1, 2:3], row, base.transpose(0, 2, 1)[:, :, 1:4].transpose(0, 2, 1), 2.5]
    prog = FusedProgram(
        (("float32", "tensor"), ("float32", "tensor"), ("float64", "tensor"), ("float32", "tensor"))
        + (("float32", "scalar"),),
        (("add", "float32", (0, 1)), ("mul", "float32", (5, 3)), ("cast", "float64", (6,)))
        + (("sub", "float64", (7, 2)),),
        (8, 5),
    )
    shape = (4, 3, 5)
    _Recorder.launches.clear()
    outs = kernels.run(prog, ops, shape)
    assert [o.shape for o in outs] == [shape, shape] and outs[0].dtype == np.float64
    (key,) = kernels._cache
    layout = key[1]
    assert layout.modes == ("s", "z", "s", "s") and layout.index == "int"
    types, values = _Recorder.launches[-1]
    n, rank = values[0], layout.rank
    cshape = values[1 : 1 + rank]
    assert n == 60 and math.prod(cshape) == 60
    pos = 1 + rank
    for j, (_, kind) in enumerate(prog.inputs):
        if kind == "scalar":
            assert values[pos] == 2.5
            pos += 1
            continue
        addr = values[pos]
        mode = layout.modes[prog.tensor_inputs.index(j)]
        strides = values[pos + 1 : pos + 1 + rank] if mode == "s" else []
        pos += 1 + len(strides)
        want = np.broadcast_to(np.asarray(ops[j]), shape).reshape(-1)
        for i in range(n):
            coords, rest = [], i
            for e in reversed(cshape):
                coords.append(rest % e)
                rest //= e
            coords.reverse()
            off = {"c": i, "z": 0, "s": sum(c * s for c, s in zip(coords, strides))}[mode]
            assert _read(addr + off * want.dtype.itemsize, want.dtype) == want[i], (j, i)
    assert values[pos:] == [outs[0].ctypes.data, outs[1].ctypes.data]
    assert "ember_fused(" in cp.sources[0]


def test_the_runner_takes_the_float4_path_and_skips_empty_shapes() -> None:
    from ember_cuda.fusion import FusedKernels

    cp = _FakeCupy()
    kernels = FusedKernels(cp)
    kernels._launcher = _Recorder
    prog = FusedProgram(
        (("float32", "tensor"), ("float32", "tensor")), (("mul", "float32", (0, 1)), ("exp", "float32", (2,))), (3,)
    )
    x = np.zeros(1024, np.float32).view(_HostArray)
    one = np.zeros((1, 1), np.float32).view(_HostArray)
    _Recorder.launches.clear()
    kernels.run(prog, [x.reshape(32, 32), one], (32, 32))
    (key,) = kernels._cache
    assert key[1].vec4 and key[1].modes == ("c", "z")
    assert "float4" in cp.sources[0]
    assert len(_Recorder.launches[-1][1]) == 4  # n, two inputs, one output
    kernels.run(prog, [np.zeros((0, 3), np.float32).view(_HostArray), one], (0, 3))
    assert len(_Recorder.launches) == 1  # nothing to launch


def test_an_in_place_run_stores_into_the_operand_through_unrestricted_pointers() -> None:
    """``out=`` (the lazy layer's in-place offer): the launch's output address is the operand's, no
    new array is made, and the kernel is its own compile with no ``__restrict__`` pointer (the
    output aliases an input); NVRTC compiles it where the wheel is installed."""
    from ember_cuda.fusion import COMPILE_OPTIONS, FusedKernels

    cp = _FakeCupy()
    kernels = FusedKernels(cp)
    kernels._launcher = _Recorder
    prog = FusedProgram(
        (("float32", "tensor"), ("float32", "tensor"), ("float32", "scalar")),
        (("mul", "float32", (1, 2)), ("sub", "float32", (0, 3))),
        (4,),
    )
    p = np.arange(1024, dtype=np.float32).reshape(32, 32).view(_HostArray)
    g = np.ones((32, 32), np.float32).view(_HostArray)
    _Recorder.launches.clear()
    fresh = kernels.run(prog, [p, g, 0.5], (32, 32))
    assert fresh[0] is not p and "__restrict__" in cp.sources[-1]
    outs = kernels.run(prog, [p, g, 0.5], (32, 32), p)
    assert outs == [p]
    assert _Recorder.launches[-1][1][-1] == p.ctypes.data  # the output address: the operand's own
    assert len(cp.sources) == 2 and "__restrict__" not in cp.sources[-1]
    assert cp.sources[-1] == cp.sources[0].replace("__restrict__ ", "")
    kernels.run(prog, [p, g, 0.5], (32, 32), p)
    assert len(cp.sources) == 2  # compiled once per (program, layout, in place)
    try:
        from nvrtc import compile_log, library
    except ImportError:  # pragma: no cover - the helper sits beside this file
        return
    lib = library()
    if lib is not None:
        ok, log = compile_log(lib, cp.sources[-1], options=COMPILE_OPTIONS)
        assert ok, log


def test_a_single_op_program_calls_the_ops_own_kernel() -> None:
    """One instruction goes to the native table with eager's arguments: a tensor, the right
    operand of a binary op as a Python number, anything else as a 0-d array; the result is
    broadcast to the iteration shape, contiguous, new and of the program's dtype."""
    from types import SimpleNamespace

    from ember_cuda.backend import CudaBackend

    calls = []

    def impl(op: str) -> object:
        fn = {"add": np.add, "exp": np.exp, "where": np.where, "copy": None}.get(op)
        if fn is None:
            return None
        return lambda *a, **k: calls.append((op, a)) or fn(*a)

    fake = SimpleNamespace(cp=np, implementation=impl, handle_meta=CudaBackend.handle_meta)
    fake.full = lambda **k: CudaBackend.full(fake, **k)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    run = CudaBackend._single_op
    add = FusedProgram((("float32", "tensor"), ("float32", "scalar")), (("add", "float32", (0, 1)),), (2,))
    np.testing.assert_array_equal(run(fake, add, [x, 2.0], (2, 3)), x + 2)
    assert type(calls[-1][1][1]) is float
    radd = FusedProgram((("float32", "scalar"), ("float32", "tensor")), (("add", "float32", (0, 1)),), (2,))
    run(fake, radd, [2.0, x], (2, 3))
    assert isinstance(calls[-1][1][0], np.ndarray) and calls[-1][1][0].shape == ()
    full = FusedProgram((("float32", "scalar"),), (("exp", "float32", (0,)),), (1,))
    got = run(fake, full, [0.0], (4, 5))
    assert got.shape == (4, 5) and got.flags.c_contiguous and (got == 1).all()
    two = FusedProgram((("float32", "tensor"),), (("exp", "float32", (0,)), ("exp", "float32", (1,))), (2,))
    assert run(fake, two, [x], (2, 3)) is None  # more than one op: the generator's
    konst = FusedProgram((("float32", "tensor"),), (("add", "float32", (0, Const(1.0, "float32"))),), (1,))
    assert run(fake, konst, [x], (2, 3)) is None  # literals are the generator's too
    copy = FusedProgram((("float32", "tensor"),), (("copy", "float32", (0,)),), (1,))
    assert run(fake, copy, [x], (2, 3)) is None  # no native kernel: the generator's
    t = run(fake, add, [x.T, 0.0], (3, 2))
    assert t.flags.c_contiguous


class _HostLauncher:
    """Launches a generated kernel on the host: the source built by g++ (cpu_body.KernelLibrary)."""

    tmp = ""

    def __init__(self, cp: _FakeCupy, kernel: str, types: tuple[object, ...]) -> None:
        from ember_cuda.codegen import KERNEL_NAME

        self.fn = cpu_body.KernelLibrary(kernel, _HostLauncher.tmp).function(KERNEL_NAME, types)

    def __call__(self, blocks: int, threads: int, *values: object) -> None:
        self.fn(*values)


def _host(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(_HostArray)


def _host_case(case: str, rng: np.random.Generator) -> tuple[FusedProgram, tuple[int, ...], list, list]:
    """(program, shape, operands, numpy's outputs) of one end-to-end case."""
    x = _host(rng.standard_normal((6, 8, 12)).astype(np.float32))
    y = _host(rng.standard_normal((6, 8, 12)).astype(np.float32))
    f32 = (("float32", "tensor"),) * 3
    if case in ("contiguous", "float4"):
        body = (("mul", "float32", (0, 2)), ("sub", "float32", (3, 1)), ("exp", "float32", (4,)))
        prog = FusedProgram(f32[:2] + (("float32", "scalar"),), body, (5, 3))
        first = x
        if case == "contiguous":  # contiguous but 4 bytes past an aligned address: no float4
            first = _host(np.zeros(x.size + 1, np.float32))[1:].reshape(x.shape)
            first[...] = x
        x64 = np.asarray(x, np.float64)
        return prog, x.shape, [first, y, 0.75], [np.exp(x64 * 0.75 - y), x64 * 0.75]
    if case == "broadcast":
        row, one = _host(rng.standard_normal(12).astype(np.float32)), _host(np.array([[2.5]], np.float32))
        body = (("add", "float32", (0, 1)), ("maximum", "float32", (3, 2)))
        want = np.maximum(np.asarray(x, np.float64) + row, 2.5)
        return FusedProgram(f32, body, (4,)), x.shape, [x, row, one], [want]
    if case == "strided":
        a, b = x.transpose(2, 0, 1)[::2], y[::-1].transpose(2, 0, 1)[1::2]
        body = (("floordiv", "float32", (0, 1)), ("remainder", "float32", (0, 1)))
        with np.errstate(all="ignore"):
            wants = [np.floor_divide(np.asarray(a), np.asarray(b)), np.remainder(np.asarray(a), np.asarray(b))]
        return FusedProgram(f32[:2], body, (2, 3)), a.shape, [a, b], wants
    if case == "half":
        h = _host(rng.standard_normal((5, 7)).astype(np.float16))
        body = (("mul", "float16", (0, 1)), ("sigmoid", "float16", (2,)), ("cast", "float32", (3,)))
        prog = FusedProgram((("float16", "tensor"), ("float16", "scalar")), body, (4, 2))
        prod = np.asarray(h) * np.float16(0.1)
        sig = (1 / (1 + np.exp(-prod.astype(np.float64)))).astype(np.float16).astype(np.float32)
        return prog, h.shape, [h, 0.1], [sig, prod]
    i = _host(rng.integers(-5, 5, (9, 4)).astype(np.int32))
    body = (("gt", "bool", (0, 1)), ("logical_not", "bool", (2,)))
    return FusedProgram((("int32", "tensor"), ("int32", "scalar")), body, (3,)), i.shape, [i, 0], [~(np.asarray(i) > 0)]


@pytest.mark.skipif(not cpu_body.available(), reason="g++ is not installed (it builds the kernels for the CPU)")
@pytest.mark.parametrize("case", ["contiguous", "float4", "broadcast", "strided", "wide", "half", "bool"])
def test_whole_kernels_run_on_the_host_give_numpys_values(case: str, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The runner end to end (layout, packed arguments, the kernel's index arithmetic and float4
    path), each generated kernel built for the CPU by g++ and run over host memory."""
    from ember_cuda import fusion
    from ember_cuda.fusion import FusedKernels

    if case == "wide":  # the strided case with 64-bit indices (as past 2^31 elements)
        monkeypatch.setattr(fusion, "INT32_LIMIT", 8)
    _HostLauncher.tmp = str(tmp_path)
    kernels = FusedKernels(_FakeCupy())
    kernels._launcher = _HostLauncher
    prog, shape, ops, wants = _host_case("strided" if case == "wide" else case, np.random.default_rng(3))
    outs = kernels.run(prog, ops, shape)
    (key,) = kernels._cache
    assert key[1].vec4 == (case == "float4")
    modes = {"broadcast": ("c", "s", "z"), "strided": ("s", "s"), "wide": ("s", "s"), "half": ("c",), "bool": ("c",)}
    assert key[1].modes == modes.get(case, ("c", "c"))
    assert key[1].index == ("long long" if case in ("wide", "float4") else "int")
    for got, want in zip(outs, wants, strict=True):
        got = np.asarray(got)
        assert got.shape == tuple(shape)
        if want.dtype.kind == "f" and case not in ("strided", "wide"):
            assert got.dtype == (np.float16 if want.dtype == np.float16 else np.float32)
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-6 if got.dtype == np.float32 else 1e-3)
        else:
            np.testing.assert_array_equal(got, want)
