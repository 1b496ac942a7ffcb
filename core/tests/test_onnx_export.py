"""ember.onnx.export: models traced through dispatch, checked by onnx.checker, run by
onnxruntime on the same inputs, and imported back into ember."""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import ember as em  # noqa: E402
from ember import nn  # noqa: E402
from ember.errors import InvalidArgumentError, UnsupportedOnnxOpError  # noqa: E402

DEV = em.Device.cpu()


def _x(shape, seed=0):
    return em.randn(shape, device=DEV, key=em.random.key(seed))


def _ort(path_or_model, feeds):
    data = path_or_model if isinstance(path_or_model, (str, bytes)) else path_or_model.SerializeToString()
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _round_trip(tmp_path, model, inputs, rtol=1e-5, atol=1e-5, identical=False, **kwargs):
    """Export, check against onnxruntime, re-import into ember; return the ONNX model.

    ``identical``: the re-imported model's outputs must equal the original's bit for bit."""
    path = tmp_path / "model.onnx"
    proto = em.onnx.export(model, inputs, path, **kwargs)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    read = {name for node in proto.graph.node for name in node.input}
    params = {n for n, _ in model.named_parameters()} if isinstance(model, nn.Module) else set()
    unread = [t.name for t in proto.graph.initializer if t.name in params and t.name not in read]
    assert not unread, f"parameters no node reads (bound to another layer's weights?): {unread}"
    if isinstance(model, nn.Module):
        model.eval()  # export traces in eval mode (and puts a training module back)
    want = model(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    names = kwargs.get("input_names") or [f"input_{i}" for i in range(len(inputs))]
    got = _ort(str(path), {n: x.numpy() for n, x in zip(names, inputs)})
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w.numpy(), rtol=rtol, atol=atol)
    back = em.onnx.load(path, device=DEV)
    again = back(*inputs)
    again = again if isinstance(again, tuple) else (again,)
    if identical:
        # bit for bit, op by op: a fused region (cpu with numba) is compiled from its own graph's
        # op sequence, so the two can differ in a last bit (em.gelu vs ONNX's Erf pieces)
        with em.lazy.fusion(False, DEV):
            want, again = (r if isinstance(r, tuple) else (r,) for r in (model(*inputs), back(*inputs)))
    for w, g in zip(want, again):
        if identical:
            np.testing.assert_array_equal(g.numpy(), w.numpy())
        else:
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=atol)
    return proto


def test_mlp_round_trip_with_a_dynamic_batch(tmp_path):
    net = nn.Sequential(nn.Linear(4, 8, device=DEV), nn.GELU(), nn.Linear(8, 3, device=DEV))
    proto = _round_trip(tmp_path, net, (_x((5, 4)),), dynamic_axes={"input_0": {0: "batch"}})
    inits = {t.name for t in proto.graph.initializer}
    assert {"0.weight", "0.bias", "2.weight", "2.bias"} <= inits
    x7 = np.random.default_rng(1).standard_normal((7, 4)).astype(np.float32)
    (got,) = _ort(str(tmp_path / "model.onnx"), {"input_0": x7})
    np.testing.assert_allclose(got, net(em.tensor(x7)).numpy(), rtol=1e-5, atol=1e-5)


class _CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1, device=DEV)
        self.bn = nn.BatchNorm2d(4, device=DEV)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=2, device=DEV)
        self.head = nn.Linear(6, 10, device=DEV)

    def forward(self, x):
        x = self.pool(self.bn(self.conv1(x)).relu())
        x = self.conv2(x).relu()
        x = em.mean(x, axis=(2, 3))
        return em.log_softmax(self.head(x), axis=-1)


def test_cnn_round_trip(tmp_path):
    net = _CNN()
    net.bn.running_mean.copy_(em.full((4,), 0.1, device=DEV))
    _round_trip(tmp_path, net, (_x((2, 1, 12, 12)),), dynamic_axes={"input_0": [0]}, output_names=["logp"])


def test_small_transformer_round_trip(tmp_path):
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True, device=DEV)
    emb = nn.Embedding(20, 16, device=DEV)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.layer, self.out = emb, layer, nn.Linear(16, 20, device=DEV)

        def forward(self, tokens):
            return self.out(self.layer(self.emb(tokens)))

    tokens = em.tensor(np.random.default_rng(2).integers(0, 20, (2, 7)), dtype="int64", device=DEV)
    _round_trip(tmp_path, Net(), (tokens,), rtol=1e-4, atol=1e-4)


_X4 = ((2, 4, 8, 8), 1)
_SEQ = ((5, 2, 8), 2)
_LAYERS = {
    "GroupNorm": (lambda: nn.GroupNorm(2, 4, device=DEV), _X4),
    "RMSNorm": (lambda: nn.RMSNorm(8, device=DEV), _X4),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1, device=DEV), _X4),
    "AvgPool2d": (lambda: nn.AvgPool2d(3, stride=2, padding=1), _X4),
    "AdaptiveAvgPool2d": (lambda: nn.AdaptiveAvgPool2d(2), _X4),
    "AdaptiveMaxPool2d": (lambda: nn.AdaptiveMaxPool2d(1), _X4),
    "Conv1d": (lambda: nn.Conv1d(4, 2, 3, device=DEV), ((2, 4, 10), 3)),
    "activations": (
        lambda: nn.Sequential(nn.SiLU(), nn.Softplus(), nn.Mish(), nn.ELU(), nn.LeakyReLU(), nn.Tanh(), nn.Sigmoid()),
        _X4,
    ),
    "LSTM": (lambda: nn.LSTM(8, 16, device=DEV), _SEQ),
    "GRU": (lambda: nn.GRU(8, 16, device=DEV), _SEQ),
}


@pytest.mark.parametrize("name", sorted(_LAYERS))
def test_layers_round_trip(tmp_path, name):
    make, (shape, seed) = _LAYERS[name]
    model = make()
    x = _x(shape, seed)
    path = tmp_path / "layer.onnx"
    em.onnx.export(model, (x,), path)
    out = model(x)
    want = [t.numpy() for t in _flat(out)]
    got = _ort(str(path), {"input_0": x.numpy()})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    again = em.onnx.load(path, device=DEV)(x)
    for g, w in zip(_flat(again), want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5)


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [t for part in out for t in _flat(part)]
    return [out]


def test_a_function_with_tensor_ops_exports(tmp_path):
    def f(a, b):
        c = em.concat([a * 2.0 - b, em.exp(a)], axis=1)
        return em.softmax(c, axis=-1).sum(axis=0), em.maximum(a, b).reshape((-1,))

    _round_trip(tmp_path, f, (_x((3, 4)), _x((3, 4), 1)), opset=18)


def test_indexed_assignment_exports_as_scatter(tmp_path):
    def f(x, i):
        y = em.index_put(x, (i,), em.ones((2, 3), device=DEV) * 5.0)
        return em.index_put(y, (i,), x[:2] * 2.0, accumulate=True)

    idx = em.tensor([3, 0], dtype="int64", device=DEV)
    _round_trip(tmp_path, f, (_x((4, 3)), idx))


def test_an_op_onnx_cannot_express_is_named_with_where_it_was_called():
    def f(x):
        return em.atan2(x, x + 1.0)

    with pytest.raises(UnsupportedOnnxOpError, match=r"atan2 \(called at .*test_onnx_export.py:\d+ in f\)"):
        em.onnx.export(f, (_x((3,)),), None)


def test_bad_arguments_name_the_argument():
    with pytest.raises(InvalidArgumentError, match="opset"):
        em.onnx.export(lambda x: x + 1.0, (_x((2,)),), None, opset=7)
    with pytest.raises(InvalidArgumentError, match="input_names"):
        em.onnx.export(lambda x: x + 1.0, (_x((2,)),), None, input_names=["a", "b"])
    with pytest.raises(InvalidArgumentError, match="dynamic_axes"):
        em.onnx.export(lambda x: x + 1.0, (_x((2,)),), None, dynamic_axes={"nope": [0]})
    with pytest.raises(InvalidArgumentError, match="module_or_fn"):
        em.onnx.export(42, (_x((2,)),), None)


def test_tracing_leaves_the_device_as_it_was():
    """A lazy hook installed before export is back afterwards, and sees the next op."""
    from ember.device import set_defer

    dev = em.Device.cpu()
    seen = []

    def hook(op, handles, params, shape, dtype):
        seen.append(op.name)
        return dev._impls[op.name](*handles, **params)

    _ = dev.backend  # loaded first: loading installs the lazy layer's hook where cpu fuses (numba)
    previous = dev._defer
    set_defer(dev, hook)
    try:
        em.onnx.export(lambda x: (x * 3.0).relu(), (_x((2,)),), None)
        assert dev._defer is hook
        seen.clear()
        y = (em.ones((2,)) * 3.0).relu()
        assert "mul" in seen and y.tolist() == [3.0, 3.0]
    finally:
        set_defer(dev, previous)


def _digits_cnn():
    """The layers of `ember train digits` (ember.train.tasks.digits builds it with its data)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, device=DEV),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1, device=DEV),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128, device=DEV),
        nn.ReLU(),
        nn.Dropout(0.25),
        nn.Linear(128, 10, device=DEV),
    )


def test_the_digits_cnn_round_trip(tmp_path):
    x = _x((3, 1, 8, 8))
    _round_trip(tmp_path, _digits_cnn(), (x,), dynamic_axes={"input_0": [0]}, rtol=1e-4, atol=1e-4, identical=True)


def test_the_reverse_transformer_round_trip(tmp_path):
    from ember.train.tasks import ReverseModel

    model = ReverseModel(vocab=12, length=10, d_model=32, heads=4, layers=2, device=DEV)
    tokens = em.tensor(np.random.default_rng(3).integers(0, 12, (4, 10)), dtype="int64", device=DEV)
    _round_trip(tmp_path, model, (tokens,), rtol=1e-4, atol=1e-4, identical=True)


def test_deep_copied_layers_export_their_own_weights(tmp_path):
    # TransformerEncoder deep-copies its layer, and a copy shares its source's storage; each layer
    # must still be written with its own initializers, so changing one in the file changes the output
    from ember.train.tasks import ReverseModel

    model = ReverseModel(vocab=12, length=10, d_model=16, heads=2, layers=2, device=DEV)
    tokens = em.tensor(np.random.default_rng(4).integers(0, 12, (2, 10)), dtype="int64", device=DEV)
    proto = _round_trip(tmp_path, model, (tokens,), rtol=1e-4, atol=1e-4, identical=True)
    back = em.onnx.from_model(proto, device=DEV)
    before = back(tokens).numpy()
    key = back.parameter_names["encoder.layers.0.linear1.weight"]
    with em.no_grad():
        getattr(back, key).zero_()
    assert not np.allclose(back(tokens).numpy(), before)


def test_the_benchmark_workload_models_round_trip(tmp_path):
    """W2's MLP, W3's CNN and W4's pre-norm encoder layer at shared/WORKLOADS.md's CPU sizes
    (smaller batches: the models are the same)."""
    w2 = nn.Sequential(
        nn.Linear(784, 1024, device=DEV),
        nn.ReLU(),
        nn.Linear(1024, 1024, device=DEV),
        nn.ReLU(),
        nn.Linear(1024, 10, device=DEV),
    )
    _round_trip(tmp_path, w2, (_x((8, 784)),), rtol=1e-4, atol=1e-4, identical=True)
    w3 = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, device=DEV),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, device=DEV),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128, device=DEV),
        nn.ReLU(),
        nn.Linear(128, 10, device=DEV),
    )
    _round_trip(tmp_path, w3, (_x((2, 1, 28, 28)),), rtol=1e-4, atol=1e-4, identical=True)
    w4 = nn.TransformerEncoderLayer(
        256, 4, dim_feedforward=1024, dropout=0.0, activation="gelu", batch_first=True, norm_first=True, device=DEV
    )
    _round_trip(tmp_path, w4, (_x((2, 128, 256)),), rtol=1e-4, atol=1e-4, identical=True)


_DEVICES = [d.strip() for d in os.environ.get("EMBER_ONNX_DEVICES", "cpu").split(",") if d.strip()]


@pytest.mark.parametrize("spec", _DEVICES)
def test_export_traces_and_import_runs_on_each_device(spec):
    """Tracing computes with the device's own kernels; the re-imported model runs there too
    (EMBER_ONNX_DEVICES, as for the node tests: tox's onnx env adds opencl:0 and wgpu:0)."""
    dev = em.Device(spec)
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, device=dev), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3, device=dev)
    )
    x = em.randn((2, 1, 6, 6), device=dev, key=em.random.key(0))
    proto = em.onnx.export(net, (x,), None)
    want = net(x).numpy()
    (got,) = _ort(proto, {"input_0": x.numpy()})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    back = em.onnx.from_model(proto, device=dev)
    np.testing.assert_allclose(back(x).numpy(), want, rtol=1e-5, atol=1e-5)


def test_traces_do_not_nest():
    def outer(x):
        em.onnx.export(lambda y: y + 1.0, (x,), None)
        return x

    with pytest.raises(InvalidArgumentError, match="do not nest"):
        em.onnx.export(outer, (_x((2,)),), None)
