"""Real architectures exported from PyTorch (``onnx_models.py``), imported by ember, against
onnxruntime's outputs on the same inputs to 1e-4.

The models are built at test time into ``EMBER_ONNX_MODELS_DIR`` (default: ember's cache
folder, ``onnx-models/``) and reused while the builder and the package versions stay the same;
building needs torch, torchvision, transformers and onnxscript (the ``onnx-models`` tox env).
``EMBER_ONNX_MODELS_PREBUILT=FOLDER`` uses files built elsewhere (``python onnx_models.py OUT``
writes them) and builds nothing, for a machine without those packages; a case missing there
skips. ``EMBER_ONNX_DEVICES`` (comma-separated, default ``cpu``) picks the ember devices.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx_models  # noqa: E402

import ember as em  # noqa: E402

DEVICES = [d.strip() for d in os.environ.get("EMBER_ONNX_DEVICES", "cpu").split(",") if d.strip()]
PREBUILT = os.environ.get("EMBER_ONNX_MODELS_PREBUILT", "")
TOL = 1e-4


def _cache_root() -> Path:
    env = os.environ.get("EMBER_ONNX_MODELS_DIR")
    if env:
        return Path(env)
    base = os.environ.get("EMBER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ember"
    )
    return Path(base) / "onnx-models"


@pytest.fixture(scope="module")
def models_dir() -> Path:
    if PREBUILT:
        return Path(PREBUILT)
    pytest.importorskip("torch", reason="the real-model ONNX files are exported from torch")
    pytest.importorskip("transformers", reason="the BERT and GPT-2 models come from transformers (with torch)")
    pytest.importorskip("onnxscript", reason="torch's dynamo ONNX exporter needs onnxscript (with torch)")
    return onnx_models.build(_cache_root())


def _case(models_dir: Path, name: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    if PREBUILT and not ((models_dir / f"{name}.onnx").exists() and (models_dir / f"{name}.npz").exists()):
        pytest.skip(f"{name} is not in EMBER_ONNX_MODELS_PREBUILT={PREBUILT}")
    return onnx_models.load_case(models_dir, name)


@pytest.mark.parametrize("layers", [False, True], ids=["graph", "layers"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", onnx_models.case_names())
def test_real_model_matches_onnxruntime(models_dir, name, device, layers):
    # layers=True: Gemm/MatMul/Conv run as nn.Linear/nn.Conv children (ember.onnx.layers)
    inputs, want = _case(models_dir, name)
    model = em.onnx.load(models_dir / f"{name}.onnx", device=device, layers=layers)
    model.eval()
    got = model(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.numpy()
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=f"{name} on {device}")
        # and relative to the output's own size, which for some models is well under 1
        scale = float(np.abs(w).max())
        assert scale > 0, f"{name}: onnxruntime's output is all zeros; the comparison would say nothing"
        assert float(np.abs(g - w).max()) <= TOL * scale, f"{name} on {device}: off by more than 1e-4 of its scale"


def test_the_set_covers_the_issue_list():
    # issue 16 point 3: at least 8 real architectures, these among them
    assert len(onnx_models.NAMES) >= 8
    assert set(onnx_models.NAMES) == set(onnx_models.BUILDERS)
    assert len(onnx_models.case_names()) == len(onnx_models.NAMES) * len(onnx_models.EXPORTERS)


LORA_CASES = ["resnet18-torchscript", "unet_small-torchscript", "vit_tiny-dynamo", "bert_encoder-torchscript",
              "gpt2_decoder-dynamo"]  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", LORA_CASES)
def test_lora_on_a_real_model(models_dir, name, device):
    # imported with layers=True, every groups=1 Linear/Conv adapted, 3 SGD steps on the adapters,
    # then against onnxruntime on the file with the merged weights (test_onnx_lora.check_lora)
    from test_onnx_lora import check_lora

    inputs, _ = _case(models_dir, name)
    check_lora(models_dir / f"{name}.onnx", inputs, steps=3, lr=0.01, device=device)
