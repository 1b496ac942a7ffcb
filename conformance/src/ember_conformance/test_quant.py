"""Quantized weights and LoRA layers on the device under test.

``dequant_matmul`` (int8, NF4, NF4 with double-quantized absmax) against numpy float64 ``x @
W.T`` with ``W`` decoded from the codes by the definition; the device's own dispatch (its native
kernel when it declares one) against the core's composite run on the same device; finite-
difference gradients for ``x`` through the op, and for ``x``, ``A`` and ``B`` through a LoRA
layer over a float and over an NF4 base (QLoRA).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.dispatch import OPS
from ember.nn import lora
from ember.quant import NF4_LEVELS, QuantLinear, dequant_matmul, dequantize, quantize, quantize_int8, quantize_nf4

from .checks import GRAD_TOLERANCES, assert_close, numeric_gradient, require_dtype, widest_float

FORMATS = ("int8", "nf4", "nf4-dq")
#: (batch shape, out_features, in_features): a padded last NF4 block, a vector input, k = 256
SHAPES = (((3,), 10, 70), ((2, 3), 8, 64), ((), 5, 32), ((4,), 33, 256))


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _quantized(fmt: str, out: int, inp: int, rng: np.random.Generator):
    w = rng.standard_normal((out, inp)).astype(np.float32)
    return quantize_int8(w) if fmt == "int8" else quantize_nf4(w, 64, double_quant=fmt == "nf4-dq")


def _reference_weight(qw) -> np.ndarray:
    """Decode by the definition, element by element (independent of ember.quant's decoder)."""
    out, inp = qw.shape
    if qw.format == "int8":
        return qw.qweight.astype(np.float64) * qw.absmax().astype(np.float64)[:, None]
    absmax = qw.absmax().astype(np.float64)
    w = np.empty(out * inp)
    for j in range(out * inp):
        byte = int(qw.qweight[j // 2])
        code = byte >> 4 if j % 2 == 0 else byte & 15
        w[j] = NF4_LEVELS[code] * absmax[j // qw.block_size]
    return w.reshape(out, inp)


def _operands(qw, device):
    q = em.tensor(qw.qweight, device=device)
    s = em.tensor(qw.absmax(), device=device)
    return q, s, {"format": qw.format, "shape": qw.shape, "block_size": qw.block_size or 64}


@pytest.mark.parametrize("dtype", ["float32", "widest"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}x{s[2]}")
@pytest.mark.parametrize("fmt", FORMATS)
def test_dequant_matmul_matches_numpy(device, fmt, shape, dtype):
    dt = widest_float(device) if dtype == "widest" else em.float32
    require_dtype(device, dt, em.uint8, em.int8)
    batch, out, inp = shape
    rng = _rng(f"dq-{fmt}-{shape}")
    qw = _quantized(fmt, out, inp, rng)
    x = rng.standard_normal(batch + (inp,))
    q, s, params = _operands(qw, device)
    got = dequant_matmul(em.tensor(x, dtype=dt, device=device), q, s, **params)
    assert got.shape == batch + (out,) and got.dtype == dt
    xr = x.astype(dt.numpy).astype(np.float64)
    assert_close(got, xr @ _reference_weight(qw).T, dt, scale=float(np.sqrt(inp)), what=f"dequant_matmul {fmt}")


@pytest.mark.parametrize("dtype", ["float32", "widest"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_matches_numpy(device, fmt, dtype):
    dt = widest_float(device) if dtype == "widest" else em.float32
    require_dtype(device, dt, em.uint8, em.int8)
    qw = _quantized(fmt, 7, 100, _rng(f"deq-{fmt}"))
    q, s, params = _operands(qw, device)
    got = dequantize(q, s, dtype=dt, **params)
    assert got.shape == (7, 100) and got.dtype == dt
    assert_close(got, _reference_weight(qw), dt, what=f"dequantize {fmt}")


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequant_matmul_native_agrees_with_composite(device, fmt):
    """The device's road (its kernel, if it declares one, and then that kernel is the one that
    runs) and the core composite on the device."""
    dt = widest_float(device)
    require_dtype(device, em.uint8, em.int8)
    rng = _rng(f"composite-{fmt}")
    qw = _quantized(fmt, 24, 130, rng)
    x = em.tensor(rng.standard_normal((5, 130)), dtype=dt, device=device)
    q, s, params = _operands(qw, device)
    declared = "dequant_matmul" in device.capabilities.native_ops
    impls, calls = device._impls, []
    kernel = impls["dequant_matmul"]
    if declared:  # count the calls dispatch makes to the backend's kernel
        impls["dequant_matmul"] = lambda *a, **k: calls.append(1) or kernel(*a, **k)
    try:
        native = dequant_matmul(x, q, s, **params)
    finally:
        impls["dequant_matmul"] = kernel
    assert calls == ([1] if declared else []), "the declared native dequant_matmul kernel did not run"
    params["block_size"] = qw.block_size
    composite = OPS["dequant_matmul"].composite(x, q, s, **params)
    assert_close(native, composite.numpy().astype(np.float64), dt, scale=30.0, what="native vs composite")


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequant_matmul_gradient(ad_device, fmt):
    dt = widest_float(ad_device)
    require_dtype(ad_device, em.uint8, em.int8)
    rng = _rng(f"grad-{fmt}")
    qw = _quantized(fmt, 6, 70, rng)
    w_ref = _reference_weight(qw)
    x0 = rng.standard_normal((3, 70))
    cot = rng.uniform(-1, 1, (3, 6))
    x = em.tensor(x0, dtype=dt, device=ad_device, requires_grad=True)
    q, s, params = _operands(qw, ad_device)
    (dequant_matmul(x, q, s, **params) * em.tensor(cot, dtype=dt, device=ad_device)).sum().backward()
    numeric = numeric_gradient(lambda a: float(((a[0] @ w_ref.T) * cot).sum()), [x0], 0)
    rtol, atol = GRAD_TOLERANCES[dt.name]
    np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=rtol, atol=atol, err_msg=f"d x, {fmt}")


def _lora_numpy(x, w, b, a, bb, scale):
    return x @ w.T + b + scale * (x @ a.T) @ bb.T


@pytest.mark.parametrize("base", ["float", "nf4"])
def test_lora_layer_gradients(ad_device, base):
    """Gradients of a LoRA layer (over a float Linear, and over NF4: QLoRA) for x, A and B."""
    dt = widest_float(ad_device) if base == "float" else em.float32
    if base == "nf4":
        require_dtype(ad_device, em.uint8)
    rng = _rng(f"lora-{base}")
    em.seed(7)
    model = nn.Sequential(nn.Linear(12, 6, device=ad_device, dtype=dt))
    w0 = model[0].weight.numpy().astype(np.float64)
    b0 = model[0].bias.numpy().astype(np.float64)
    if base == "nf4":
        qw = quantize_nf4(model[0].weight.numpy(), 64)
        quantize(model, "nf4")
        assert isinstance(model[0], QuantLinear)
        w0 = _reference_weight(qw)
    cfg = lora.LoraConfig(rank=3, alpha=6.0, targets="all-linear")
    lora.apply_lora(model, cfg)
    ad = model[0].adapter("default")
    b_init = rng.standard_normal(ad.B.shape)
    with em.no_grad():
        ad.B.copy_(em.tensor(b_init, dtype=ad.B.dtype, device=ad_device.without_autodiff()))
    a0 = ad.A.numpy().astype(np.float64)
    x0 = rng.standard_normal((4, 12))
    cot = rng.uniform(-1, 1, (4, 6))
    x = em.tensor(x0, dtype=ad.A.dtype, device=ad_device, requires_grad=True)
    out = model(x)
    expected = _lora_numpy(x0, w0, b0, a0, b_init, cfg.scale)
    assert_close(out, expected, ad.A.dtype, scale=20.0, what=f"LoRA forward over {base}")
    (out * em.tensor(cot, dtype=ad.A.dtype, device=ad_device)).sum().backward()
    rtol, atol = GRAD_TOLERANCES[ad.A.dtype.name]
    args = [x0, w0, b0, a0, b_init, cfg.scale]

    def loss(v):
        return float((_lora_numpy(*v) * cot).sum())

    for pos, got, name in ((0, x.grad, "x"), (3, ad.A.grad, "A"), (4, ad.B.grad, "B")):
        np.testing.assert_allclose(got.numpy(), numeric_gradient(loss, args, pos), rtol=rtol, atol=atol, err_msg=name)


def test_lora_merge_matches_unmerged(device):
    dt = widest_float(device)
    em.seed(11)
    model = nn.Sequential(nn.Linear(9, 7, device=device, dtype=dt))
    lora.apply_lora(model, lora.LoraConfig(rank=2, targets="all-linear"))
    ad = model[0].adapter("default")
    with em.no_grad():
        ad.B.copy_(em.tensor(_rng("merge").standard_normal(ad.B.shape), dtype=dt, device=device))
    x = em.tensor(_rng("merge-x").standard_normal((3, 9)), dtype=dt, device=device)
    unmerged = model(x).numpy().astype(np.float64)
    lora.merge(model)
    assert_close(model(x), unmerged, dt, scale=10.0, what="merged vs unmerged")
