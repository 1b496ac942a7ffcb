"""Mixed precision: autocast's op lists, dtype checks and gradients; GradScaler's skipping,
backoff and growth."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.amp import GradScalerError
from ember.dtypes import ALL_DTYPES
from ember.plugins import BackendSpec, PluginRegistry, get_registry

# inf and NaN are the point of several tests here; numpy's warnings about them are noise
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")

AD = em.Device.cpu().autodiff()
F16 = np.float16
BF16 = ml_dtypes.bfloat16


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def t(values, dtype=em.float32, device=AD, requires_grad=False):
    return em.tensor(values, dtype=dtype, device=device, requires_grad=requires_grad)


# -- the low-precision list ---------------------------------------------------------------
@pytest.mark.parametrize("dtype, np_low, rtol", [(em.float16, F16, 1e-3), (em.bfloat16, BF16, 1e-2)])
def test_matmul_runs_in_the_autocast_dtype(rng, dtype, np_low, rtol):
    a = rng.normal(size=(4, 6)).astype(np.float32)
    b = rng.normal(size=(6, 3)).astype(np.float32)
    with em.autocast(dtype=dtype):
        y = t(a) @ t(b)
    assert y.dtype is dtype
    # inputs rounded to the low dtype, products accumulated in float32, the result rounded
    want = (a.astype(np_low).astype(np.float32) @ b.astype(np_low).astype(np.float32)).astype(np_low)
    np.testing.assert_allclose(y.numpy().astype(np.float32), want.astype(np.float32), rtol=rtol, atol=rtol)
    assert (t(a) @ t(b)).dtype is em.float32  # outside the region again


def test_autocast_nesting_decorator_and_state():
    a = t(np.ones((2, 2)))
    assert not em.amp.is_autocast_enabled()
    with em.autocast():
        assert em.amp.get_autocast_dtype() is em.float16
        with em.autocast(enabled=False):
            assert (a @ a).dtype is em.float32
        with em.autocast("bfloat16"):
            assert (a @ a).dtype is em.bfloat16
        assert (a @ a).dtype is em.float16
    assert em.amp.get_autocast_dtype() is None

    @em.autocast(dtype=em.bfloat16)
    def f(x):
        return x @ x

    assert f(a).dtype is em.bfloat16
    assert (a @ a).dtype is em.float32


def test_autocast_is_thread_local():
    a = t(np.ones((2, 2)))
    seen = []
    with em.autocast():
        worker = threading.Thread(target=lambda: seen.append((a @ a).dtype))
        worker.start()
        worker.join()
        assert (a @ a).dtype is em.float16
    assert seen == [em.float32]


def test_float64_integer_and_elementwise_ops_are_not_cast():
    x64 = t(np.ones((2, 2)), em.float64)
    i = em.tensor([[1, 2], [3, 4]])
    h = t(np.ones((2, 2)), em.float16)
    with em.autocast():
        assert (x64 @ x64).dtype is em.float64
        assert (i @ i).dtype is em.int64
        assert (h + h).dtype is em.float16
        assert (t(np.ones(3)) * 2.0).dtype is em.float32
        assert h.exp().dtype is em.float16


def test_attention_and_linear_run_low(rng):
    q = t(rng.normal(size=(2, 4, 8)))
    w = t(rng.normal(size=(3, 8)))
    with em.autocast():
        out = em.scaled_dot_product_attention(q, q, q, is_causal=True)
        y = q @ w.mT
    assert out.dtype is em.float16 and y.dtype is em.float16
    ref = em.scaled_dot_product_attention(q, q, q, is_causal=True).numpy()
    np.testing.assert_allclose(out.numpy().astype(np.float32), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(not hasattr(em, "conv"), reason="ember.conv is not available in this tree")
def test_conv_runs_low(rng):
    x = t(rng.normal(size=(1, 2, 6, 6)))
    w = t(rng.normal(size=(3, 2, 3, 3)))
    b = t(rng.normal(size=(3,)))
    with em.autocast():
        y = em.conv(x, w, b, padding=1)
        z = em.conv_transpose(y, t(rng.normal(size=(3, 2, 3, 3))))
    assert y.dtype is em.float16 and z.dtype is em.float16
    np.testing.assert_allclose(y.numpy().astype(np.float32), em.conv(x, w, b, padding=1).numpy(), rtol=2e-2, atol=2e-2)


# -- the float32 list ---------------------------------------------------------------------
def _softmax64(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_softmax_of_float16_computes_in_float32(rng):
    x16 = rng.normal(scale=4.0, size=(3, 7)).astype(F16)
    h = t(x16, em.float16)
    assert h.softmax().dtype is em.float16  # without autocast: the input's dtype
    with em.autocast():
        s = h.softmax()
        ls = em.log_softmax(h)
    assert s.dtype is em.float32 and ls.dtype is em.float32
    want = _softmax64(x16.astype(np.float64))
    np.testing.assert_allclose(s.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(ls.numpy(), np.log(want), rtol=1e-6, atol=1e-6)


def test_reductions_norms_and_losses_of_half_inputs_are_float32(rng):
    x16 = rng.normal(size=(4, 5)).astype(F16)
    h = t(x16, em.float16)
    target = em.tensor([0, 2, 4, 1])
    big = t(np.full(4096, 30.0), em.float16)  # the float16 sum overflows; float32's is 122880
    with em.autocast():
        outs = {
            "sum": h.sum(),
            "mean": h.mean(axis=0),
            "layer_norm": em.layer_norm(h, 5, weight=t(np.ones(5)), bias=t(np.zeros(5))),
            "cross_entropy": em.cross_entropy(h, target),
        }
        assert big.sum().item() == 122880.0
        assert h.sum(dtype=em.float16).dtype is em.float16  # an explicit dtype wins
    assert np.isinf(big.sum().item())
    for name, out in outs.items():
        assert out.dtype is em.float32, name
    x = x16.astype(np.float64)
    np.testing.assert_allclose(outs["sum"].item(), x.sum(), rtol=1e-6)
    np.testing.assert_allclose(outs["mean"].numpy(), x.mean(axis=0), rtol=1e-6)
    norm = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(outs["layer_norm"].numpy(), norm, rtol=1e-5, atol=1e-5)
    logp = np.log(_softmax64(x))
    np.testing.assert_allclose(outs["cross_entropy"].item(), -logp[np.arange(4), [0, 2, 4, 1]].mean(), rtol=1e-6)


# -- gradients ----------------------------------------------------------------------------
def test_gradients_of_float32_parameters_are_float32(rng):
    x = t(rng.normal(size=(8, 5)))
    w0 = rng.normal(size=(3, 5)).astype(np.float32)
    target = em.tensor(rng.integers(0, 3, size=8))
    w = t(w0, requires_grad=True)
    with em.autocast():
        logits = x @ w.mT
        loss = em.cross_entropy(logits, target)
    assert logits.dtype is em.float16 and loss.dtype is em.float32
    loss.backward()
    assert w.grad.dtype is em.float32
    ref = t(w0, requires_grad=True)
    em.cross_entropy(x @ ref.mT, target).backward()
    np.testing.assert_allclose(w.grad.numpy(), ref.grad.numpy(), rtol=2e-2, atol=2e-3)


def test_backward_runs_outside_autocast(monkeypatch, rng):
    from ember.ops.linalg import MATMUL

    seen = []
    original = MATMUL.vjp

    def spy(g, out, a, b):
        seen.append((em.amp.is_autocast_enabled(), g.dtype))
        return original(g, out, a, b)

    monkeypatch.setattr(MATMUL, "vjp", spy)
    w = t(rng.normal(size=(4, 4)), requires_grad=True)
    with em.autocast():
        y = (t(rng.normal(size=(2, 4))) @ w).sum()
        y.backward()
    assert seen == [(False, em.float16)]  # the gradient op runs in the forward's dtype
    assert w.grad.dtype is em.float32


# -- dtype support --------------------------------------------------------------------------
class NoHalfBackend(em.Backend):
    """A numpy device that refuses float16 and bfloat16."""

    name = "nohalf"
    supported_dtypes = frozenset(d for d in ALL_DTYPES if d.name not in ("float16", "bfloat16"))
    unsupported_dtype_reasons = {"float16": "no half precision here", "bfloat16": "no bfloat16 here"}

    def __init__(self, device):
        super().__init__(device)
        from ember_cpu.backend import CpuBackend

        self._cpu = CpuBackend(device)

    def implementation(self, op):
        return self._cpu.implementation(op)


class NoHalfPlugin:
    @em.hookimpl
    def ember_register_backends(self, registry: PluginRegistry) -> None:
        registry.add_backend(BackendSpec(name="nohalf", kinds=("nohalf",), loader=lambda: NoHalfBackend))


@pytest.fixture
def nohalf():
    reg = get_registry()
    if "nohalf" not in reg.specs:
        reg.discover()
        reg.register(NoHalfPlugin(), name="nohalf-test-plugin")
    return em.Device("nohalf:0")


def test_unsupported_dtype_raises_a_clear_error(nohalf):
    a = em.ones((2, 2), device=nohalf)
    with em.autocast(), pytest.raises(em.DTypeError, match=r"matmul on nohalf:0 cannot compute in float16"):
        a @ a
    with pytest.raises(em.DTypeError, match="no bfloat16 here"):
        em.autocast(dtype=em.bfloat16, device=nohalf)
    with em.autocast(enabled=False, device=nohalf):
        assert (a @ a).dtype is em.float32
    with pytest.raises(em.DTypeError, match="float16 or bfloat16"):
        em.autocast(dtype=em.float32)


# -- GradScaler ---------------------------------------------------------------------------
def _model():
    w = t([1.0, -2.0], requires_grad=True)
    return w, em.optim.SGD([w], lr=0.1)


def test_scaler_scales_the_loss_and_unscales_before_the_step():
    w, opt = _model()
    scaler = em.GradScaler(init_scale=256.0)
    loss = (w * w).sum()
    scaled = scaler.scale(loss)
    assert scaled.item() == loss.item() * 256.0
    scaled.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [512.0, -1024.0])
    scaler.step(opt)
    np.testing.assert_allclose(w.numpy(), [1.0 - 0.1 * 2.0, -2.0 + 0.1 * 4.0], rtol=1e-6)
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, -4.0])
    scaler.update()
    assert scaler.get_scale() == 256.0
    h = t([1.0], em.float16, requires_grad=True)
    assert scaler.scale(h.sum()).dtype is em.float32  # no overflow of the scaled float16 loss
    assert scaler.scale([loss, loss])[1].item() == loss.item() * 256.0


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_scaler_skips_a_step_with_a_nonfinite_gradient_and_backs_off(bad):
    w, opt = _model()
    other = t([3.0], requires_grad=True)
    opt.add_param_group({"params": [other]})
    scaler = em.GradScaler(init_scale=1024.0, growth_interval=2)
    scaler.scale((w * w).sum() + other.sum()).backward()
    other.grad = t([bad])
    before = w.numpy().copy()
    assert scaler.step(opt) is None
    np.testing.assert_array_equal(w.numpy(), before)
    assert other.tolist() == [3.0]
    scaler.update()
    assert scaler.get_scale() == 512.0
    assert scaler.state_dict()["_growth_tracker"] == 0


def test_scaler_grows_after_growth_interval_good_steps():
    w, opt = _model()
    scaler = em.GradScaler(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=3)
    scales = []
    for i in range(8):
        opt.zero_grad()
        scaler.scale((w * w).sum()).backward()
        if i == 4:
            w.grad = t([np.nan, 1.0])
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    # good, good, good (grow), good, bad (back off, reset), good, good, good (grow)
    assert scales == [8.0, 8.0, 32.0, 32.0, 8.0, 8.0, 8.0, 32.0]


def test_unscale_then_clip_then_step_unscales_once():
    w, opt = _model()
    scaler = em.GradScaler(init_scale=64.0)
    scaler.scale((w * w).sum()).backward()
    scaler.unscale_(opt)
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, -4.0])
    total = em.optim.clip_grad_norm_([w], max_norm=1.0)
    np.testing.assert_allclose(total.item(), np.sqrt(20.0), rtol=1e-6)
    scaler.step(opt)
    np.testing.assert_allclose(w.numpy(), [1.0, -2.0] - 0.1 * np.array([2.0, -4.0]) / np.sqrt(20.0), rtol=1e-5)
    scaler.update()


def test_step_reads_the_device_once(monkeypatch):
    w, opt = _model()
    b = t([0.5, 0.5, 0.5], requires_grad=True)
    opt.add_param_group({"params": [b]})
    scaler = em.GradScaler()
    scaler.scale((w * w).sum() + b.sum()).backward()
    calls = []
    original = em.Tensor.item

    def counting(self):
        calls.append(self.shape)
        return original(self)

    monkeypatch.setattr(em.Tensor, "item", counting)
    scaler.step(opt)
    scaler.update()
    assert len(calls) == 1


def test_scaler_misuse_raises():
    w, opt = _model()
    scaler = em.GradScaler()
    with pytest.raises(GradScalerError, match="step"):
        scaler.update()
    scaler.scale((w * w).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(GradScalerError, match="already called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(GradScalerError, match="already called"):
        scaler.step(opt)
    with pytest.raises(GradScalerError, match="after step"):
        scaler.unscale_(opt)
    with pytest.raises(GradScalerError, match="closure"):
        em.GradScaler().step(opt, closure=lambda: None)
    scaler.update()
    with pytest.raises(ValueError, match="growth_factor"):
        em.GradScaler(growth_factor=1.0)
    with pytest.raises(ValueError, match="backoff_factor"):
        em.GradScaler(backoff_factor=1.0)
    with pytest.raises(ValueError, match="growth_interval"):
        em.GradScaler(growth_interval=0)


def test_scaler_state_dict_and_disabled_scaler():
    scaler = em.GradScaler(init_scale=4.0, growth_interval=7)
    scaler._growth_tracker = 3
    state = scaler.state_dict()
    assert state == {
        "scale": 4.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 7,
        "_growth_tracker": 3,
    }
    other = em.GradScaler()
    other.load_state_dict(state)
    assert other.state_dict() == state
    with pytest.raises(GradScalerError, match="disabled"):
        other.load_state_dict({})

    off = em.GradScaler(enabled=False)
    w, opt = _model()
    loss = (w * w).sum()
    assert off.scale(loss) is loss
    loss.backward()
    off.step(opt)
    off.update()
    np.testing.assert_allclose(w.numpy(), [0.8, -1.6], rtol=1e-6)
    assert off.state_dict() == {} and off.get_scale() == 1.0


def test_mixed_precision_training_end_to_end(rng):
    x = t(rng.normal(size=(32, 4)))
    y = x @ t([[1.0], [-2.0], [0.5], [3.0]])
    w = t(np.zeros((4, 1)), requires_grad=True)
    opt = em.optim.Adam([w], lr=0.1)
    scaler = em.GradScaler()
    losses = []
    for _ in range(50):
        opt.zero_grad()
        with em.autocast():
            pred = x @ w
            loss = ((pred - y) ** 2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert w.dtype is em.float32 and w.grad.dtype is em.float32
    assert losses[-1] < 0.01 * losses[0]
    assert scaler.get_scale() < 2.0**16  # the first steps overflowed float16 and were skipped
