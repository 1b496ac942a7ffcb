"""LoRA on an imported ONNX model: ``em.onnx.load(..., layers=True)`` gives Linear, Conv and
Embedding children, ``ember.nn.lora.apply_lora`` adapts them, a few SGD steps train only the adapters,
and the adapted model matches onnxruntime running the same file with the merged weights
``W + scale * B @ A`` (computed here in numpy) written into its initializers."""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ember as em  # noqa: E402
from ember import nn  # noqa: E402
from ember.errors import ArgumentTypeError  # noqa: E402
from ember.nn import lora  # noqa: E402

RNG = np.random.default_rng(160)
#: EMBER_ONNX_DEVICES, as for the node tests (tox's onnx env adds opencl:0 and wgpu:0)
DEVICES = [d.strip() for d in os.environ.get("EMBER_ONNX_DEVICES", "cpu").split(",") if d.strip()]
ADAPTABLE = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Embedding)


def _first(y):
    return y[0] if isinstance(y, tuple) else y


def _close(got, want, tol, what):
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= tol * scale, f"{what}: off by {err:.3g} (scale {scale:.3g}, tolerance {tol:g})"


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, feeds)))[0]


def _merged_delta(adapter) -> np.ndarray:
    """``scale * B @ A`` in the base weight's layout, in float64 numpy."""
    a, b = adapter.A.numpy().astype(np.float64), adapter.B.numpy().astype(np.float64)
    if adapter.kind == "linear":
        return adapter.scale * b @ a
    if adapter.kind == "embedding":  # A (rank, vocab), B (dim, rank); the table is (vocab, dim)
        return adapter.scale * (b @ a).T
    flat = b.reshape(b.shape[0], -1) @ a.reshape(a.shape[0], -1)
    return adapter.scale * flat.reshape((b.shape[0],) + a.shape[1:])


def check_lora(path, inputs, steps=3, lr=0.05, tol=1e-4, device="cpu"):
    """Import ``path`` with layers, adapt every groups=1 Linear/Conv and every Embedding, train ``steps`` SGD steps on
    the adapters only, and check the result against onnxruntime with merged weights."""
    dev = em.Device(device).autodiff()
    plain = em.onnx.load(path, device=dev)
    model = em.onnx.load(path, device=dev, layers=True)
    with em.no_grad():
        want = _first(plain(*inputs)).numpy()
        _close(_first(model(*inputs)).numpy(), want, 1e-5, "layers=True against the plain import")
    targets = [p for p, m in model.named_modules() if isinstance(m, ADAPTABLE) and getattr(m, "groups", 1) == 1]
    assert targets, "the import lifted no Linear or Conv layer"
    lora.apply_lora(model, lora.LoraConfig(rank=2, alpha=4.0, targets=targets))
    with em.no_grad():
        _close(_first(model(*inputs)).numpy(), want, 1e-6, "a fresh adapter (B = 0) changes nothing")
    names = dict(model.named_parameters())
    trainable = [n for n, p in names.items() if p.requires_grad]
    assert trainable and all(".lora." in n for n in trainable), trainable
    base = {n: p.numpy().copy() for n, p in names.items() if ".lora." not in n}
    target = em.tensor(RNG.standard_normal(want.shape).astype(np.float32), device=dev)
    opt = em.optim.SGD([names[n] for n in trainable], lr=lr)
    losses = []
    for _ in range(steps):
        loss = ((_first(model(*inputs)) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    for n, p in model.named_parameters():
        if ".lora." not in n:
            assert p.grad is None, f"{n} got a gradient"
            np.testing.assert_array_equal(p.numpy(), base[n], err_msg=f"{n} changed in training")
    layers = lora.lora_layers(model)
    assert any(float(np.abs(ly.adapter("default").B.numpy()).max()) > 0 for _, ly in layers)
    with em.no_grad():
        adapted = _first(model(*inputs)).numpy()
    # the independent reference: onnxruntime on the file with W + scale * B @ A in its initializers
    proto = onnx.load(str(path))
    by_path = {v: k for k, v in model.parameter_names.items()}
    inits = {t.name: t for t in proto.graph.initializer}
    for p, layer in layers:
        onnx_name = by_path[f"{p}.weight"]
        w = layer.base_layer.weight.numpy().astype(np.float64) + _merged_delta(layer.adapter("default"))
        w = w.T if onnx_name in model.transposed_initializers else w
        inits[onnx_name].CopyFrom(numpy_helper.from_array(w.astype(np.float32), onnx_name))
    _close(adapted, _ort(proto, inputs), tol, "the trained adapters against onnxruntime with merged weights")
    # merged and unmerged agree; unmerging restores the base weights
    lora.merge(model)
    with em.no_grad():
        _close(_first(model(*inputs)).numpy(), adapted, 1e-5, "merged against unmerged")
    lora.unmerge(model)
    for n, p in model.named_parameters():
        if ".lora." not in n:
            np.testing.assert_allclose(p.numpy(), base[n], rtol=1e-5, atol=1e-6, err_msg=f"{n} after unmerge")
    return model


def _conv_mlp_model():
    """Conv (pads 1) -> Relu -> Conv (bias via an Identity alias) -> Flatten -> Gemm (transB) ->
    Relu -> MatMul + Add: the layouts and aliases exporters write."""
    w1 = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    b1 = RNG.standard_normal(4).astype(np.float32) * 0.1
    w2 = RNG.standard_normal((4, 4, 1, 1)).astype(np.float32) * 0.3
    wg = RNG.standard_normal((8, 4 * 6 * 6)).astype(np.float32) * 0.1
    bg = RNG.standard_normal(8).astype(np.float32) * 0.1
    wm = RNG.standard_normal((8, 5)).astype(np.float32) * 0.3
    bm = RNG.standard_normal(5).astype(np.float32) * 0.1
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (wg, "wg"),
                                                         (bg, "bg"), (wm, "wm"), (bm, "bm"))]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="/enc/conv1/Conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Identity", ["b1"], ["b1_alias"]),
        helper.make_node("Conv", ["r1", "w2", "b1_alias"], ["c2"], name="/enc/conv2/Conv"),
        helper.make_node("Flatten", ["c2"], ["f"]),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["g"], name="/head/fc/Gemm", transB=1),
        helper.make_node("Relu", ["g"], ["r2"]),
        helper.make_node("MatMul", ["r2", "wm"], ["m"], name="/head/out/MatMul"),
        helper.make_node("Add", ["m", "bm"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "convmlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def test_layers_makes_linear_and_conv_children_with_shared_biases(tmp_path):
    path = tmp_path / "convmlp.onnx"
    onnx.save(_conv_mlp_model(), path)
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    model = em.onnx.load(path, layers=True)
    kinds = {p: type(m).__name__ for p, m in model.named_modules() if p}
    assert kinds == {"enc_conv1": "Conv2d", "enc_conv2": "Conv2d", "head_fc": "Linear", "head_out": "Linear"}
    # b1 is read by conv1 and (through the Identity) conv2: one parameter, the same tensor in both
    assert model.enc_conv1.bias is model.enc_conv2.bias
    assert model.parameter_names["wm"] == "head_out.weight" and "wm" in model.transposed_initializers
    np.testing.assert_array_equal(model.head_out.weight.numpy(), numpy_helper.to_array(_init(path, "wm")).T)
    plain = em.onnx.load(path)
    assert plain.num_parameters() == model.num_parameters()
    want = _ort(onnx.load(str(path)), [x])
    _close(model(x).numpy(), want, 1e-5, "layers=True against onnxruntime")
    with pytest.raises(ArgumentTypeError, match="layers"):
        em.onnx.load(path, layers="yes")


def _init(path, name):
    return next(t for t in onnx.load(str(path)).graph.initializer if t.name == name)


@pytest.mark.parametrize("device", DEVICES)
def test_lora_on_an_imported_model_trains_only_adapters_and_matches_merged_reference(tmp_path, device):
    path = tmp_path / "convmlp.onnx"
    onnx.save(_conv_mlp_model(), path)
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    model = check_lora(path, [x], device=device)
    assert {p for p, _ in lora.lora_layers(model)} == {"enc_conv1", "enc_conv2", "head_fc", "head_out"}


def test_lora_on_an_exported_ember_transformer(tmp_path):
    # ember's own reverse-task Transformer shape: embedding, attention, feed-forward, exported then adapted
    dev = em.Device.cpu()
    net = nn.Sequential(
        nn.Embedding(16, 12, device=dev),
        nn.TransformerEncoderLayer(12, 2, 24, dropout=0.0, device=dev),
        nn.Linear(12, 16, device=dev),
    )
    tokens = RNG.integers(0, 16, size=(2, 5)).astype(np.int64)
    path = tmp_path / "tiny_transformer.onnx"
    em.onnx.export(net, (em.tensor(tokens, device=dev),), path)
    model = check_lora(path, [tokens])
    kinds = [layer.kind for _, layer in lora.lora_layers(model)]
    assert kinds.count("embedding") == 1 and kinds.count("linear") >= 3, kinds  # the token table, FFN, head
