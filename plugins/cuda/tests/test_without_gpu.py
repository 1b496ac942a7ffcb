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
def test_the_attention_kernel_compiles_without_spills(head: int, tmp_path) -> None:  # noqa: ANN001
    """ptxas must keep the flash kernel's tiles in registers (a spill costs it its speed)."""
    from ember_cuda.attention import source

    cu = tmp_path / f"fa{head}.cu"
    cu.write_text(source(head))
    done = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90", "--resource-usage", "-o", str(tmp_path / "fa.cubin"), str(cu)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "0 bytes spill stores" in done.stderr, done.stderr


def _every_kernel_source() -> list[tuple[str, str]]:
    """(name, CUDA source) of every kernel ember-cuda compiles at run time."""
    from ember_cuda import attention, kernels, quant, rows

    sources = [(f"attention_d{h}", attention.source(h)) for h in attention.HEAD_SIZES]
    sources += [(f"nf4_{c}", quant.source(c)) for c in ("float", "double")]
    sources += [(f"rows_{c}", rows.source(c)) for c in ("float", "double")]
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
