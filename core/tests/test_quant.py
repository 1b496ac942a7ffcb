"""ember.quant: NF4 levels from their definition, int8 and NF4 quantization against references
written from the definitions (bitsandbytes' packing), the dequant_matmul op (the CPU kernel ran,
and agrees with the composite and numpy float64), quantize() reports, and QLoRA."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.dispatch import OPS
from ember.errors import DTypeError, InvalidArgumentError, NotImplementedOpError, ShapeError
from ember.nn import lora
from ember.quant import (
    NF4_LEVELS,
    QuantLinear,
    dequant_matmul,
    dequantize,
    dequantize_numpy,
    nf4_levels,
    quantize,
    quantize_int8,
    quantize_nf4,
)
from ember_cpu import quant_kernels

CPU = em.Device.cpu()
AD = CPU.autodiff()


def _weight(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


# -- references written from the definitions, element by element -------------------------------
def _nf4_reference(w, block_size):
    """bitsandbytes' blockwise NF4: per block absmax, nearest level of value/absmax, two codes a
    byte with the first in the high nibble; returns (packed bytes, absmax, dequantized float64)."""
    flat = list(w.reshape(-1).astype(np.float64))
    while len(flat) % block_size:
        flat.append(0.0)
    codes, absmax, deq = [], [], []
    for b in range(0, len(flat), block_size):
        block = flat[b : b + block_size]
        m = float(np.float32(max(abs(v) for v in block)))
        absmax.append(m)
        for v in block:
            c = min(range(16), key=lambda i: (abs(v / m - NF4_LEVELS[i]), i)) if m else 7
            codes.append(c)
            deq.append(NF4_LEVELS[c] * m)
    packed = bytes((codes[i] << 4) | codes[i + 1] for i in range(0, len(codes), 2))
    n = w.size
    return np.frombuffer(packed, np.uint8), np.array(absmax, np.float32), np.array(deq[:n]).reshape(w.shape)


def test_nf4_levels_from_their_definition_match_bitsandbytes_table():
    levels = np.array(nf4_levels())
    assert levels[0] == -1.0 and levels[-1] == 1.0 and levels[7] == 0.0 and np.all(np.diff(levels) > 0)
    np.testing.assert_allclose(levels, np.array(NF4_LEVELS), rtol=0, atol=2e-7)


def test_nf4_matches_reference_from_the_definition():
    w = _weight((5, 40))  # 200 weights: 3 full blocks of 64 and one padded
    qw = quantize_nf4(w, block_size=64)
    packed, absmax, deq = _nf4_reference(w, 64)
    np.testing.assert_array_equal(qw.qweight, packed)
    np.testing.assert_array_equal(qw.scales, absmax)
    np.testing.assert_allclose(dequantize_numpy(qw), deq, rtol=1e-7)
    # the NF4 error is bounded by half the widest gap between levels, times the block absmax
    bound = np.max(np.diff(NF4_LEVELS)) / 2 * np.repeat(absmax, 64)[: w.size].reshape(w.shape)
    assert np.all(np.abs(dequantize_numpy(qw) - w) <= bound + 1e-7)


def test_int8_per_channel_absmax():
    w = _weight((6, 9))
    qw = quantize_int8(w)
    scale = np.abs(w.astype(np.float64)).max(axis=1) / 127
    np.testing.assert_allclose(qw.scales, scale, rtol=1e-7)
    np.testing.assert_array_equal(np.abs(qw.qweight).max(axis=1), np.full(6, 127))
    err = np.abs(dequantize_numpy(qw) - w)
    assert np.all(err <= qw.scales[:, None] / 2 + 1e-7)


def test_double_quant_memory_and_error():
    w = _weight((256, 512))
    single, double = quantize_nf4(w), quantize_nf4(w, double_quant=True)
    float_bytes = w.size * 4
    assert double.nbytes / float_bytes <= 0.15
    assert abs(8 * double.nbytes / w.size - (4 + 8 / 64 + 32 / (64 * 256))) < 0.01
    assert 8 * single.nbytes / w.size == 4.5
    np.testing.assert_allclose(double.absmax(), single.scales, rtol=0, atol=np.abs(single.scales).max() / 127)


@pytest.mark.parametrize("fmt", ["int8", "nf4", "nf4-dq"])
def test_dequant_matmul_native_kernel_ran_and_agrees_with_composite_and_numpy(fmt):
    w = _weight((24, 70), seed=1)
    qw = quantize_int8(w) if fmt == "int8" else quantize_nf4(w, 64, double_quant=fmt == "nf4-dq")
    x = np.random.default_rng(2).normal(size=(2, 3, 70)).astype(np.float32)
    q = em.tensor(qw.qweight, device=CPU)
    s = em.tensor(qw.absmax(), device=CPU)
    params = {"format": qw.format, "shape": qw.shape, "block_size": qw.block_size or 64}
    before = quant_kernels.CALLS["dequant_matmul"]
    out = dequant_matmul(em.tensor(x, device=CPU), q, s, **params)
    assert quant_kernels.CALLS["dequant_matmul"] == before + 1
    expected = x.astype(np.float64) @ dequantize_numpy(qw).T
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    params["block_size"] = qw.block_size
    composite = OPS["dequant_matmul"].composite(em.tensor(x, device=CPU), q, s, **params)
    assert quant_kernels.CALLS["dequant_matmul"] == before + 1  # the composite did not call it
    np.testing.assert_allclose(composite.numpy(), out.numpy(), rtol=1e-5, atol=2e-5)  # float32 sums of 70
    w_deq = dequantize(q, s, format=qw.format, shape=qw.shape, block_size=qw.block_size, dtype="float64")
    np.testing.assert_allclose(w_deq.numpy(), dequantize_numpy(qw), rtol=1e-7, atol=1e-7)


def test_dequant_matmul_gradient_for_x_only():
    qw = quantize_nf4(_weight((8, 64), seed=3))
    x = em.tensor(np.random.default_rng(4).normal(size=(5, 64)), dtype="float64", device=AD, requires_grad=True)
    q, s = em.tensor(qw.qweight, device=AD), em.tensor(qw.scales, device=AD)
    g = np.random.default_rng(5).normal(size=(5, 8))
    before, decoded = quant_kernels.CALLS["dequant_matmul"], quant_kernels.CALLS["dequantize"]
    (dequant_matmul(x, q, s, format="nf4", shape=(8, 64)) * em.tensor(g, device=AD)).sum().backward()
    assert quant_kernels.CALLS["dequant_matmul"] == before + 1  # the vjp rule lets the kernel run while recording
    assert quant_kernels.CALLS["dequantize"] == decoded + 1  # the backward decodes W with the native dequantize
    np.testing.assert_allclose(x.grad.numpy(), g @ dequantize_numpy(qw), rtol=1e-7, atol=1e-7)


def test_dequant_matmul_bad_inputs_name_the_argument():
    qw = quantize_nf4(_weight((4, 64)))
    q, s = em.tensor(qw.qweight), em.tensor(qw.scales)
    x = em.ones((2, 64))
    with pytest.raises(InvalidArgumentError, match="format"):
        dequant_matmul(x, q, s, format="nf3", shape=(4, 64))
    with pytest.raises(ShapeError, match=r"x must have shape \(\.\.\., 64\)"):
        dequant_matmul(em.ones((2, 63)), q, s, format="nf4", shape=(4, 64))
    with pytest.raises(DTypeError, match="uint8 codes of shape"):
        dequant_matmul(x, q.astype("int8"), s, format="nf4", shape=(4, 64))
    with pytest.raises(ShapeError, match="one absmax per block"):
        dequant_matmul(x, q, em.ones((3,)), format="nf4", shape=(4, 64))
    with pytest.raises(InvalidArgumentError, match="block_size"):
        dequant_matmul(x, q, s, format="nf4", shape=(4, 64), block_size=7)
    with pytest.raises(InvalidArgumentError, match="NaN or inf"):
        quantize_nf4(np.array([[np.nan, 1.0]]))


def _classifier(seed=0):
    em.random.seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))


def test_quantize_model_reports_memory_and_metric_change():
    model = _classifier()
    x = em.tensor(np.random.default_rng(0).normal(size=(200, 32)), dtype="float32")
    reference = model(x).numpy().astype(np.float64)
    labels = reference.argmax(axis=1)

    def agreement(m):
        return float((m(x).numpy().argmax(axis=1) == labels).mean())

    report = quantize(model, "nf4", targets=["0", "2"], evaluate=agreement)
    assert report.layers == ["0", "2"] and isinstance(model[4], nn.Linear)
    assert report.before == 1.0 and 0.8 < report.after <= 1.0 and report.change == report.after - 1.0
    assert report.float_bytes == (32 * 64 + 64 * 64) * 4 and report.ratio < 0.15
    assert "nf4: 2 layer(s)" in str(report)
    with pytest.raises(InvalidArgumentError, match="format"):
        quantize(_classifier(), "int4")
    with pytest.raises(InvalidArgumentError, match="matched no Linear"):
        quantize(_classifier(), "int8", targets="head")


def test_quant_linear_matches_its_numpy_weight():
    em.random.seed(1)
    layer = nn.Sequential(nn.Linear(70, 9))
    w, b = layer[0].weight.numpy(), layer[0].bias.numpy()
    quantize(layer, "nf4", double_quant=True)
    q = layer[0]
    assert isinstance(q, QuantLinear) and q.double_quant
    qw = quantize_nf4(w, double_quant=True)
    x = np.random.default_rng(3).normal(size=(4, 70)).astype(np.float32)
    expected = x.astype(np.float64) @ dequantize_numpy(qw).T + b
    np.testing.assert_allclose(layer(em.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_qlora_trains_adapters_only_over_an_nf4_base():
    em.random.seed(0)
    model = nn.Sequential(nn.Linear(32, 64, device=AD), nn.ReLU(), nn.Linear(64, 5, device=AD))
    quantize(model, "nf4", double_quant=True)
    lora.apply_lora(model, lora.LoraConfig(rank=4, alpha=8, targets="all-linear"))
    assert [p for p, _ in lora.lora_layers(model)] == ["0", "2"]
    trainable = [p for p, t in model.named_parameters() if t.requires_grad]
    assert trainable == ["0.lora.default.A", "0.lora.default.B", "2.lora.default.A", "2.lora.default.B"]
    x = em.tensor(np.random.default_rng(0).normal(size=(16, 32)), dtype="float32", device=AD)
    y = em.tensor(np.random.default_rng(1).integers(0, 5, 16), dtype="int64", device=AD)
    opt = em.optim.AdamW([nn.ParamGroup("*").bind(model)], lr=1e-2)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert model[0].base_layer.qweight.grad is None
    with pytest.raises(NotImplementedOpError, match="quantized"):
        lora.merge(model)


def test_quantize_targets_a_param_group_and_lora_over_int8():
    model = _classifier()
    report = quantize(model, "int8", targets=nn.ParamGroup("2.*", "4.weight"))
    assert report.layers == ["2", "4"] and isinstance(model[0], nn.Linear)
    assert all(isinstance(model[i], QuantLinear) and model[i].format == "int8" for i in (2, 4))
    lora.apply_lora(model, lora.LoraConfig(rank=2, targets=nn.ParamGroup(types=QuantLinear)))
    assert [p for p, _ in lora.lora_layers(model)] == ["2", "4"]
