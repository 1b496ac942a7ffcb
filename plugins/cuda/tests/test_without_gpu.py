"""What a machine without CuPy, a driver or a GPU sees: the plugin loads, finds no device, and
says what is missing. These run everywhere (CI has no GPU); each fakes one missing piece."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from ember_cuda import runtime


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Replace what runtime found with a fake CuPy (or none), clearing its caches around the test."""

    def use(module: object, reason: str = "") -> None:
        runtime._import.cache_clear()
        runtime._probe.cache_clear()
        monkeypatch.setattr(runtime, "_import", lambda: (module, reason))

    yield use
    runtime._probe.cache_clear()


class _FakeRuntime:
    def __init__(self, error: Exception | None, count: int = 0) -> None:
        self.error, self.count = error, count

    def getDeviceCount(self) -> int:  # noqa: N802 - CuPy's name
        if self.error:
            raise self.error
        return self.count


class _FakeCupy:
    def __init__(self, error: Exception | None, count: int = 0) -> None:
        self.cuda = type("cuda", (), {"runtime": _FakeRuntime(error, count)})()


def test_without_cupy_it_says_what_to_install(probe) -> None:  # noqa: ANN001
    probe(None, "CuPy is not installed (No module named 'cupy'): " + runtime.INSTALL_HINT)
    assert runtime.device_count() == 0
    assert 'pip install "ember[cuda13]"' in runtime.why_unavailable()


def test_an_old_driver_is_named(probe) -> None:  # noqa: ANN001
    probe(_FakeCupy(RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")))
    assert runtime.device_count() == 0
    assert "driver is older" in runtime.why_unavailable()


def test_no_gpu_is_named(probe) -> None:  # noqa: ANN001
    probe(_FakeCupy(RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")))
    assert "no NVIDIA GPU is visible" in runtime.why_unavailable()
    assert "CUDA_VISIBLE_DEVICES" in runtime.why_unavailable()


def test_a_gpu_is_counted(probe) -> None:  # noqa: ANN001
    probe(_FakeCupy(None, count=2))
    assert runtime.device_count() == 2
    assert runtime.why_unavailable() == ""


def test_doctor_prints_the_reason() -> None:
    """`ember doctor` in a fresh process, on whatever this machine has: a cuda line with the reason or the count."""
    out = subprocess.run([sys.executable, "-m", "ember.cli", "doctor"], capture_output=True, text=True, timeout=120)
    lines = [ln for ln in out.stdout.splitlines() if " cuda:" in ln]
    assert lines, out.stdout
    if runtime.device_count() == 0:
        assert lines[0].startswith("[none] cuda: the backend loaded but found no device: ")
        assert runtime.why_unavailable().split(":")[0] in lines[0]
    else:
        assert lines[0].startswith("[ ok ] cuda:")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not installed here")
@pytest.mark.parametrize("head", [32, 64, 96, 128])
@pytest.mark.parametrize("kind", ["forward", "stats", "backward"])
def test_the_attention_kernel_compiles_without_spills(head: int, kind: str, tmp_path) -> None:  # noqa: ANN001
    """ptxas must keep the flash kernels' tiles in registers (a spill costs them their speed):
    the forward, the backward's stats pass and its dK/dV and dQ kernels."""
    from ember_cuda import attention, attention_backward

    cu = tmp_path / f"fa{head}.cu"
    text = {"forward": attention.source(head), "stats": attention.source(head, stats=True)}
    cu.write_text(text[kind] if kind in text else attention_backward.source(head))
    done = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90", "--resource-usage", "-o", str(tmp_path / "fa.cubin"), str(cu)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "spill stores" in done.stderr, done.stderr
    assert all(" 0 bytes spill stores" in ln for ln in done.stderr.splitlines() if "spill stores" in ln), done.stderr


def _every_kernel_source() -> list[tuple[str, str]]:
    """(name, CUDA source) of every kernel ember-cuda compiles at run time."""
    from ember_cuda import attention, attention_backward, conv, kernels, quant, rows

    sources = [(f"attention_d{h}", attention.source(h)) for h in attention.HEAD_SIZES]
    sources += [(f"attention_stats_d{h}", attention.source(h, stats=True)) for h in attention.HEAD_SIZES]
    sources += [(f"attention_backward_d{h}", attention_backward.source(h)) for h in attention.HEAD_SIZES]
    sources += [(f"nf4_{c}", quant.source(c)) for c in ("float", "double")]
    sources += [(f"rows_{c}", rows.source(c)) for c in ("float", "double")]
    sources += [(f"conv_{c}", conv.source(c)) for c in ("float", "double")]
    for op, expr in {**kernels.BINARY, **kernels.UNARY}.items():
        forms = ("tt", "ts") if op in kernels.BINARY else ("t",)
        for dt, ctype in kernels._CTYPES.items():
            if op in kernels.UNARY and dt not in kernels._FLOATS:
                continue
            for form in forms:
                for vec in (False, True) if dt == "float32" else (False,):
                    name = f"{op}_{dt}_{form}_{vec}"
                    sources.append((name, kernels._source(name, ctype, expr, form, vec)))
    return sources


def test_every_kernel_compiles_under_nvrtc() -> None:
    """CuPy compiles RawKernels with NVRTC (no C headers): compile each source that way here."""
    from nvrtc import compile_log, library

    lib = library()
    if lib is None:
        pytest.skip("the nvidia-cuda-nvrtc wheel is not installed (pip install 'nvidia-cuda-nvrtc==13.*')")
    failed = {
        name: log for name, src in _every_kernel_source() if not (done := compile_log(lib, src))[0] for log in [done[1]]
    }
    assert not failed, failed


#: the dtype classes fused kernels are compiled for in the NVRTC test
_FUSED_DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "uint8", "bool")
#: the other integer types, compiled in the contiguous layout only (their C types differ, not their code)
_FUSED_MORE = ("int8", "int16", "uint16", "uint32", "uint64")


def _fused_sources() -> dict[str, list[tuple[str, str]]]:
    """Per dtype, (name, CUDA source) of a generated kernel for every op that applies to it, in
    contiguous, broadcast, strided, scalar-operand and (float32) float4 layouts, and every cast."""
    from ember_cuda import codegen
    from ember_cuda.codegen import Layout

    from ember.lazy.program import FusedProgram

    bool_out = frozenset(
        "eq ne lt le gt ge isnan isinf isfinite signbit logical_not logical_and logical_or logical_xor".split()
    )
    out: dict[str, list[tuple[str, str]]] = {}
    for dt in _FUSED_DTYPES + _FUSED_MORE:
        kernels = out.setdefault(dt, [])
        more = dt in _FUSED_MORE

        def add(
            name: str, prog: FusedProgram, layouts: list[Layout], kernels: list = kernels, n: int = 1 + 9 * (not more)
        ) -> None:
            for k, layout in enumerate(layouts[:n]):
                try:
                    text = codegen.source(prog, layout, name=f"{name}_{k}")
                except ValueError:  # the op does not apply to this dtype (core's dtype rules never ask)
                    return
                kernels.append((f"{name}_{k}", text))

        for op in sorted(codegen.UNARY_OPS):
            rdt = "bool" if op in bool_out else dt
            prog = FusedProgram(((dt, "tensor"),), ((op, rdt, (0,)),), (1,))
            layouts = [Layout(("c",)), Layout(("s",), 2, "long long")]
            if dt == "float32" and rdt == "float32":
                layouts.append(Layout(("c",), 0, "long long", True))
            add(f"{op}_{dt}", prog, layouts)
        for op in sorted(codegen.BINARY_OPS):
            rdt = "bool" if op in bool_out else dt
            prog = FusedProgram(((dt, "tensor"), (dt, "tensor")), ((op, rdt, (0, 1)),), (2,))
            layouts = [Layout(("c", "z")), Layout(("c", "s"), 3, "int")]
            if dt == "float32" and rdt == "float32":
                layouts.append(Layout(("c", "z"), 0, "long long", True))
            add(f"{op}_{dt}", prog, layouts)
            scalar = FusedProgram(((dt, "tensor"), (dt, "scalar")), ((op, rdt, (0, 1)),), (2,))
            add(f"{op}_{dt}_scalar", scalar, [Layout(("c",), 0, "long long")])
        where = FusedProgram((("bool", "tensor"), (dt, "tensor"), (dt, "scalar")), (("where", dt, (0, 1, 2)),), (3,))
        add(f"where_{dt}", where, [Layout(("s", "c"), 2), Layout(("c", "z"))])
        for to in _FUSED_DTYPES + _FUSED_MORE:
            add(f"cast_{dt}_{to}", FusedProgram(((dt, "tensor"),), (("cast", to, (0,)),), (1,)), [Layout(("c",))])
    return out


def test_every_fused_kernel_compiles_under_nvrtc() -> None:
    """Every op x dtype the fusion generator takes, in each layout class, compiles with NVRTC (and
    ptxas: sm_90 is a real architecture). One NVRTC run per dtype, each kernel in a namespace of its own."""
    from ember_cuda import codegen
    from ember_cuda.fusion import COMPILE_OPTIONS
    from nvrtc import compile_log, library

    lib = library()
    if lib is None:
        pytest.skip("the nvidia-cuda-nvrtc wheel is not installed (pip install 'nvidia-cuda-nvrtc==13.*')")
    sources = _fused_sources()
    float_ops = (codegen.UNARY_OPS | codegen.BINARY_OPS) - {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"}
    for dt in ("float32", "float16", "bfloat16", "float64"):
        names = {name for name, _ in sources[dt]}
        assert all(f"{op}_{dt}_0" in names for op in float_ops), dt  # every float op is generated
    assert sum(len(v) for v in sources.values()) > 900
    failed = {}
    for dt, kernels in sources.items():
        batch = "\n".join(f"namespace {name} {{\n{text}\n}}" for name, text in kernels)
        ok, log = compile_log(lib, batch, options=COMPILE_OPTIONS)  # as CuPy is asked to compile them
        if not ok:  # name the kernels that fail
            failed.update(
                {
                    name: log
                    for name, text in kernels
                    if not (done := compile_log(lib, text, options=COMPILE_OPTIONS))[0]
                    for log in [done[1]]
                }
            )
            failed.setdefault(dt, log)
    assert not failed, failed
