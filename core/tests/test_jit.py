"""em.jit on cpu: a captured training step replayed 100 times tracks an eager twin step by step.

The twin is the same model (weights copied through numpy) trained by plain eager calls, the
path every other test checks against numpy and PyTorch; the jitted one replays a recording
that bypasses dispatch and autodiff. Parameters and losses must agree after every step.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn, optim
from ember.errors import ArgumentTypeError, InvalidArgumentError
from ember.jit import JitReadbackWarning

AD = em.Device.cpu().autodiff()
STEPS = 100


def _mlp(seed: int) -> nn.Module:
    em.seed(seed)
    return nn.Sequential(nn.Linear(5, 16, device=AD), nn.Tanh(), nn.Linear(16, 3, device=AD))


def _twin(model: nn.Module) -> nn.Module:
    twin = _mlp(1)
    twin.load_state_dict({k: em.tensor(v.numpy().copy(), device=AD) for k, v in model.state_dict().items()})
    return twin


def _step_fn(model: nn.Module, opt: optim.Optimizer):
    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


OPTIMIZERS = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.05),
    "sgd-momentum": lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    "adamw": lambda ps: optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "rmsprop-centered-momentum": lambda ps: optim.RMSprop(ps, lr=1e-3, momentum=0.5, centered=True),
    "adagrad": lambda ps: optim.Adagrad(ps, lr=0.05),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_training_step_replays_match_eager_step_by_step(name: str) -> None:
    model = _mlp(0)
    twin = _twin(model)
    make = OPTIMIZERS[name]
    jitted = em.jit(_step_fn(model, make(model.parameters())))
    eager = _step_fn(twin, make(twin.parameters()))
    rng = np.random.default_rng(0)
    for i in range(STEPS):
        x = rng.standard_normal((8, 5)).astype(np.float32)
        y = rng.standard_normal((8, 3)).astype(np.float32)
        lj = jitted(em.tensor(x, device=AD), em.tensor(y, device=AD))
        le = eager(em.tensor(x, device=AD), em.tensor(y, device=AD))
        np.testing.assert_allclose(lj.numpy(), le.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"loss, step {i}")
        for (k, p), q in zip(model.named_parameters(), twin.parameters()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{k}, step {i}")
    (capture,) = jitted.captures
    # a stateful optimizer's first call makes its state, so the second call is the one captured
    first = 1 if name == "sgd" else 2
    assert capture.replays == STEPS - first
    assert capture.counts()["matmul"] >= 2
    # training moved the weights: the replays did update them (not a frozen copy)
    assert float(np.abs(model[0].weight.numpy() - _mlp(0)[0].weight.numpy()).max()) > 1e-3


def test_adagrad_lr_decay_is_refused_inside_a_capture() -> None:
    model = _mlp(0)
    step = em.jit(_step_fn(model, optim.Adagrad(model.parameters(), lr=0.1, lr_decay=0.01)))
    x, y = em.ones((4, 5), device=AD), em.zeros((4, 3), device=AD)
    with pytest.raises(InvalidArgumentError, match="lr_decay"):
        step(x, y)


def test_adam_state_dict_counts_replayed_steps() -> None:
    model = _mlp(0)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    step = em.jit(_step_fn(model, opt))
    x, y = em.ones((4, 5), device=AD), em.zeros((4, 3), device=AD)
    for _ in range(7):
        step(x, y)
    steps = {int(s["step"]) for s in opt.state_dict()["state"].values()}
    assert steps == {7}


def test_new_shape_or_dtype_captures_again() -> None:
    calls = []

    @em.jit
    def f(x):
        calls.append(x.shape)
        return (x * 3.0).exp().sum(axis=0)

    rng = np.random.default_rng(1)
    for shape, dtype in [((2, 3), "float32"), ((4, 3), "float32"), ((2, 3), "float32"), ((2, 3), "float64")]:
        for _ in range(3):
            a = rng.standard_normal(shape).astype(dtype)
            out = f(em.tensor(a))
            assert out.dtype.name == dtype
            np.testing.assert_allclose(out.numpy(), np.exp(a.astype(np.float64) * 3.0).sum(axis=0), rtol=1e-5)
    assert calls == [(2, 3), (4, 3), (2, 3)]  # float64 (2, 3) is the third signature's capture
    assert len(f.captures) == 3


def test_python_side_effect_runs_only_at_capture() -> None:
    seen = []

    @em.jit
    def f(x, y):
        seen.append(1)
        return x @ y + 1.0, {"neg": -x}

    rng = np.random.default_rng(2)
    for _ in range(5):
        a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
        out, extra = f(em.tensor(a), em.tensor(b))
        np.testing.assert_allclose(out.numpy(), a @ b + 1.0, rtol=1e-12)
        np.testing.assert_allclose(extra["neg"].numpy(), -a)
    assert seen == [1]


@pytest.mark.filterwarnings("ignore::ember.jit.JitReadbackWarning")  # index_put checks its index bounds on the host
def test_in_place_updates_of_arguments_and_state_are_replayed() -> None:
    state = em.zeros((3,))

    @em.jit
    def f(x):
        x.copy_(x * 2.0)
        state[1] = state[1] + x.sum()
        return x

    x = em.tensor([1.0, 2.0, 3.0])
    ref_x, ref_state = np.array([1.0, 2.0, 3.0]), np.zeros(3)
    for _ in range(4):
        out = f(x)
        ref_x = ref_x * 2.0
        ref_state[1] += ref_x.sum()
        np.testing.assert_allclose(x.numpy(), ref_x)
        np.testing.assert_allclose(out.numpy(), ref_x)
        np.testing.assert_allclose(state.numpy(), ref_state)


def test_gradients_accumulate_across_replays_and_a_cleared_grad_is_reported() -> None:
    w = em.tensor([1.0, -2.0], device=AD, requires_grad=True)

    @em.jit
    def f(x):
        (w * x).sum().backward()

    x = em.tensor([3.0, 4.0], device=AD)
    f(x)  # capture: w.grad was None, so this records "grad = g"
    f(x)  # replay
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 4.0])
    g = em.jit(lambda x: (w * x).sum().backward())
    g(x)  # capture with w.grad set: records "grad = grad + g"
    g(x)
    np.testing.assert_allclose(w.grad.numpy(), [9.0, 12.0])
    w.grad = None
    with pytest.raises(InvalidArgumentError, match="zero_grad"):
        g(x)


def test_readback_inside_the_function_warns_and_replays_the_rest() -> None:
    @em.jit
    def f(x):
        scale = float(x.sum().item())  # host value: fixed at capture
        return x * 2.0, scale

    with pytest.warns(JitReadbackWarning, match="to_numpy"):
        out, scale = f(em.tensor([1.0, 2.0]))
    out, scale = f(em.tensor([5.0, 7.0]))
    np.testing.assert_allclose(out.numpy(), [10.0, 14.0])
    assert scale == 3.0


def test_describe_lists_captures_and_kernel_counts() -> None:
    model = _mlp(0)
    step = em.jit(_step_fn(model, optim.SGD(model.parameters(), lr=0.1)))
    assert "no captures" in step.describe()
    step(em.ones((2, 5), device=AD), em.ones((2, 3), device=AD))
    text = step.describe()
    assert "1 capture(s)" in text and "matmul x" in text and "float32[2, 5]@cpu:0+autodiff" in text
    assert "writes back" in text


def test_nested_jit_is_inlined_into_the_outer_capture() -> None:
    inner = em.jit(lambda x: x + 1.0)
    outer = em.jit(lambda x: inner(x) * 2.0)
    for v in (1.0, 2.0, 3.0):
        np.testing.assert_allclose(outer(em.tensor([v])).numpy(), [(v + 1.0) * 2.0])
    assert outer.captures[0].counts() == {"add": 1, "mul": 1}
    assert inner.captures == []


def test_bad_arguments() -> None:
    with pytest.raises(ArgumentTypeError, match="fn must be callable"):
        em.jit(3)
    with pytest.raises(InvalidArgumentError, match="warmup"):
        em.jit(lambda x: x, warmup=-1)


def test_warmup_runs_eagerly_before_capturing() -> None:
    seen = []
    f = em.jit(lambda x: seen.append(1) or x * 2.0, warmup=2)
    for _ in range(5):
        np.testing.assert_allclose(f(em.tensor([1.5])).numpy(), [3.0])
    assert len(seen) == 3 and f.captures[0].replays == 2


def test_a_backend_native_replay_runs_instead_of_the_step_list(monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.lazy.jit import run_steps

    backend = em.Device.cpu().backend
    launches = []

    def compile_replay(program):
        def replay(vals):
            launches.append(len(program.steps))
            run_steps(program.steps, vals)

        return replay

    monkeypatch.setattr(backend, "compile_replay", compile_replay)
    f = em.jit(lambda x: x * 2.0 + 1.0)
    for v in (1.0, 2.0, 3.0):
        np.testing.assert_allclose(f(em.tensor([v])).numpy(), [2.0 * v + 1.0])
    assert launches == [2, 2]
    assert "native (cpu)" in f.describe()


def test_random_draws_are_the_captures_on_every_replay() -> None:
    f = em.jit(lambda x: x + em.rand((4,)))
    x = em.zeros((4,))
    first = f(x).numpy()
    eager = em.rand((4,)).numpy()  # the generator moved on at capture, as an eager call moves it
    assert not np.array_equal(first, eager)
    for _ in range(3):
        np.testing.assert_array_equal(f(x).numpy(), first)  # documented: replays reuse the capture's key


def test_an_error_inside_the_capture_restores_eager_dispatch() -> None:
    def bad(x):
        y = x * 2.0
        raise ValueError(f"user error after {y.shape}")

    f = em.jit(bad)
    with pytest.raises(ValueError, match="user error"):
        f(em.ones((2,)))
    assert f.captures == []
    g = em.jit(lambda x: x + 1.0)  # a new capture starts: the tables were given back
    np.testing.assert_allclose(g(em.ones((2,))).numpy(), [2.0, 2.0])
    assert g.captures[0].counts() == {"add": 1}
