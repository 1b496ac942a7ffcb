"""What is specific to the ember-fused distribution: how it plugs in, which kernels it registers,
the CUDA sources (compiled where NVRTC is installed), and ember's nn layers taking the fused path.
The numerical cases are conformance cases (ember_fused.conformance), run on every device."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import ember as em
import ember_fused
from ember.cli import main
from ember.plugins import get_registry
from ember_conformance.test_extensions import counting
from ember_fused import kernels_cuda


def test_seen_as_em_fused():
    assert em.fused is ember_fused


def test_plugin_registers_ops_and_conformance_module():
    registry = get_registry()
    assert "ember_fused.conformance" in registry.conformance_modules()
    info = registry.plugins["fused"]
    assert info.status == "ok", info.error
    assert set(info.extensions) == {op.name for op in ember_fused.EXTENSION_OPS}


def test_ember_plugins_lists_the_ops(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "ember-fused" in out and "fused_attention" in out


@pytest.mark.parametrize("kind", ["opencl", "wgpu", "cuda"])
def test_native_kernels_where_the_backend_is_installed(kind):
    installed = importlib.util.find_spec(f"ember_{kind}") is not None
    for op in ember_fused.EXTENSION_OPS:
        assert (kind in op.kernels) == installed, (op.name, kind, op.kernels)
        assert "cpu" not in op.kernels  # cpu runs the reference: numpy's matmul is the whole cost there


def _nvrtc():
    """ember-cuda's NVRTC helper (plugins/cuda/tests/nvrtc.py: the compiler CuPy's RawKernel uses,
    through ctypes, no GPU needed) and its library, or a skip saying what is missing."""
    path = Path(__file__).resolve().parents[2] / "plugins" / "cuda" / "tests" / "nvrtc.py"
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    spec = importlib.util.spec_from_file_location("ember_cuda_nvrtc", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lib = module.library()
    if lib is None:
        pytest.skip("the nvidia-cuda-nvrtc wheel is not installed (the conformance-cuda tox env has it)")
    return module, lib


@pytest.mark.parametrize("activation", ember_fused.ACTIVATIONS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_sources_compile(dtype, activation):
    """Every CUDA source compiles with NVRTC as CuPy would compile it on the GPU (where the
    conformance cases then run them: fused/scripts/h200.sh)."""
    nvrtc, lib = _nvrtc()
    for bias in (False, True):
        ok, log = nvrtc.compile_log(lib, kernels_cuda.epilogue_source(dtype, activation, bias))
        assert ok, log
    if activation == "none":
        ok, log = nvrtc.compile_log(lib, kernels_cuda.lnr_source(dtype))
        assert ok, log


def _encoder(device, norm_first):
    em.random.seed(0)
    layer = em.nn.TransformerEncoderLayer(16, 2, dim_feedforward=24, dropout=0.0, batch_first=True,
                                          norm_first=norm_first, activation="gelu", device=device)  # fmt: skip
    return layer.eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_takes_the_fused_path_and_agrees(norm_first, monkeypatch):
    """On a device kind with the kernels the encoder layer calls the fused ops (counted), and its
    output equals the unfused layer's (the same layer with the fused path switched off)."""
    kind = "wgpu" if importlib.util.find_spec("ember_wgpu") else "opencl"
    if importlib.util.find_spec(f"ember_{kind}") is None:
        pytest.skip("neither ember-wgpu nor ember-opencl is installed: no device kind has the fused kernels")
    device = em.Device(f"{kind}:0")
    x = em.tensor(np.random.default_rng(0).normal(size=(2, 5, 16)), dtype="float32", device=device)
    layer = _encoder(device, norm_first)
    with contextlib.ExitStack() as stack, em.no_grad():
        calls = {op.name: stack.enter_context(counting(op.name, kind)) for op in ember_fused.EXTENSION_OPS}
        fused = layer(x).numpy()
        assert calls["fused_linear"][0] >= 1 and calls["fused_attention"][0] >= 1, calls
        assert calls["fused_layer_norm_residual"][0] == 2 - norm_first, calls
        monkeypatch.setenv("EMBER_NN_FUSED", "0")
        plain = layer(x).numpy()
        assert calls["fused_linear"][0] == 1, "EMBER_NN_FUSED=0 still took the fused path"
    np.testing.assert_allclose(fused, plain, rtol=1e-4, atol=1e-5)


def test_conformance_native_check_fails_when_the_kernel_does_not_run():
    """The conformance cases' check that a device's native kernel ran fails (pytest's failure, naming
    the op and kind) when nothing calls it: not a bare assert, so it also runs under python -O."""
    from types import SimpleNamespace

    from ember_fused import conformance

    op = ember_fused.ops.FUSED_LINEAR
    kinds = sorted(op.kernels)
    if not kinds:
        pytest.skip("no backend with fused kernels is installed")
    device = SimpleNamespace(kind=kinds[0])  # _native reads only the kind; nothing is launched
    with pytest.raises(pytest.fail.Exception, match=f"fused_linear: the native {kinds[0]} kernel did not run"):
        with conformance._native(op, device):
            pass
