"""Optimizers: trajectories against numpy float64 reimplementations of the published update
rules, parameter groups, state_dict round trips, gradient clipping, and (when PyTorch is
importable) trajectories against torch.optim."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ember as em
from ember.optim import OptimizerStateError

AD = em.Device.cpu().autodiff()

try:
    import torch
except ImportError:  # pragma: no cover - the golden tests need PyTorch
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed: golden tests against torch.optim")


# -- problems: ember loss, numpy gradient, initial values -----------------------------------
class Quadratic:
    """sum(a * (w - c)**2) over a 5-vector: every coordinate has its own curvature."""

    a = np.array([0.5, 1.0, 2.0, 4.0, 0.1])
    c = np.array([1.0, -2.0, 0.5, 3.0, -1.0])
    init = [np.array([0.3, 0.7, -1.2, 2.0, 0.0])]

    def loss(self, w):
        return (em.tensor(self.a, dtype=w.dtype) * (w - em.tensor(self.c, dtype=w.dtype)) ** 2).sum()

    def grads(self, w):
        return [2 * self.a * (w - self.c)]

    def torch_loss(self, w):
        return (torch.tensor(self.a) * (w - torch.tensor(self.c)) ** 2).sum()


class LinearRegression:
    """mean((X @ W + b - y)**2): two parameters of different shapes."""

    rng = np.random.default_rng(7)
    X = rng.normal(size=(8, 3))
    y = X @ np.array([1.5, -2.0, 0.5]) + 0.3 + 0.01 * rng.normal(size=8)
    init = [np.array([0.1, 0.2, -0.1]), np.array([0.05])]

    def loss(self, w, b):
        x = em.tensor(self.X, dtype=w.dtype)
        r = x @ w + b - em.tensor(self.y, dtype=w.dtype)
        return (r * r).mean()

    def grads(self, w, b):
        r = self.X @ w + b - self.y
        n = len(self.y)
        return [2.0 / n * self.X.T @ r, np.array([2.0 / n * r.sum()])]

    def torch_loss(self, w, b):
        r = torch.tensor(self.X) @ w + b - torch.tensor(self.y)
        return (r * r).mean()


PROBLEMS = {"quadratic": Quadratic(), "linreg": LinearRegression()}


# -- independent numpy float64 references -------------------------------------------------
def sgd_ref(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False):
    bufs = {}

    def step(i, p, g):
        g = -g if maximize else g
        g = g + weight_decay * p
        if momentum:
            bufs[i] = g.copy() if i not in bufs else momentum * bufs[i] + (1 - dampening) * g
            g = g + momentum * bufs[i] if nesterov else bufs[i]
        return p - lr * g

    return step


def adam_ref(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, maximize=False, decoupled=False):
    """Kingma & Ba Algorithm 1 (bias-corrected moments; eps added to sqrt(v_hat)); AMSGrad keeps
    the running maximum of v, as PyTorch does; decoupled decay is Loshchilov & Hutter's AdamW."""
    b1, b2 = betas
    st = {}

    def step(i, p, g):
        s = st.setdefault(i, {"t": 0, "m": np.zeros_like(p), "v": np.zeros_like(p), "vmax": np.zeros_like(p)})
        g = -g if maximize else g
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        s["t"] += 1
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * g * g
        v = s["v"]
        if amsgrad:
            s["vmax"] = np.maximum(s["vmax"], s["v"])
            v = s["vmax"]
        m_hat = s["m"] / (1 - b1 ** s["t"])
        v_hat = v / (1 - b2 ** s["t"])
        return p - lr * m_hat / (np.sqrt(v_hat) + eps)

    return step


def rmsprop_ref(lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False, maximize=False):
    st = {}

    def step(i, p, g):
        s = st.setdefault(i, {"sq": np.zeros_like(p), "avg": np.zeros_like(p), "buf": np.zeros_like(p)})
        g = -g if maximize else g
        g = g + weight_decay * p
        s["sq"] = alpha * s["sq"] + (1 - alpha) * g * g
        if centered:
            s["avg"] = alpha * s["avg"] + (1 - alpha) * g
            denom = np.sqrt(s["sq"] - s["avg"] ** 2) + eps
        else:
            denom = np.sqrt(s["sq"]) + eps
        if momentum > 0:
            s["buf"] = momentum * s["buf"] + g / denom
            return p - lr * s["buf"]
        return p - lr * g / denom

    return step


def adagrad_ref(lr, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10, maximize=False):
    st = {}

    def step(i, p, g):
        s = st.setdefault(i, {"t": 0, "sum": np.full_like(p, initial_accumulator_value)})
        g = -g if maximize else g
        g = g + weight_decay * p
        s["t"] += 1
        clr = lr / (1 + (s["t"] - 1) * lr_decay)
        s["sum"] = s["sum"] + g * g
        return p - clr * g / (np.sqrt(s["sum"]) + eps)

    return step


# (name, ember factory, reference factory, torch factory name, kwargs)
CASES = [
    ("sgd", em.optim.SGD, sgd_ref, "SGD", {"lr": 0.05}),
    ("sgd-momentum", em.optim.SGD, sgd_ref, "SGD", {"lr": 0.05, "momentum": 0.9}),
    ("sgd-dampening", em.optim.SGD, sgd_ref, "SGD", {"lr": 0.05, "momentum": 0.8, "dampening": 0.3}),
    ("sgd-nesterov", em.optim.SGD, sgd_ref, "SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
    ("sgd-wd", em.optim.SGD, sgd_ref, "SGD", {"lr": 0.05, "weight_decay": 0.1}),
    ("sgd-maximize", em.optim.SGD, sgd_ref, "SGD", {"lr": 0.01, "momentum": 0.5, "maximize": True}),
    (
        "sgd-all",
        em.optim.SGD,
        sgd_ref,
        "SGD",
        {"lr": 0.03, "momentum": 0.9, "weight_decay": 0.01, "nesterov": True},
    ),
    ("adam", em.optim.Adam, adam_ref, "Adam", {"lr": 0.1}),
    ("adam-betas", em.optim.Adam, adam_ref, "Adam", {"lr": 0.05, "betas": (0.8, 0.95), "eps": 1e-6}),
    ("adam-wd", em.optim.Adam, adam_ref, "Adam", {"lr": 0.1, "weight_decay": 0.1}),
    ("adam-amsgrad", em.optim.Adam, adam_ref, "Adam", {"lr": 0.1, "amsgrad": True}),
    ("adam-maximize", em.optim.Adam, adam_ref, "Adam", {"lr": 0.01, "maximize": True}),
    ("adamw", em.optim.AdamW, adam_ref, "AdamW", {"lr": 0.1, "weight_decay": 0.1}),
    ("adamw-amsgrad", em.optim.AdamW, adam_ref, "AdamW", {"lr": 0.1, "weight_decay": 0.05, "amsgrad": True}),
    ("rmsprop", em.optim.RMSprop, rmsprop_ref, "RMSprop", {"lr": 0.01}),
    ("rmsprop-centered", em.optim.RMSprop, rmsprop_ref, "RMSprop", {"lr": 0.01, "centered": True}),
    ("rmsprop-momentum", em.optim.RMSprop, rmsprop_ref, "RMSprop", {"lr": 0.01, "momentum": 0.5}),
    (
        "rmsprop-all",
        em.optim.RMSprop,
        rmsprop_ref,
        "RMSprop",
        {"lr": 0.01, "alpha": 0.9, "centered": True, "momentum": 0.3, "weight_decay": 0.1},
    ),
    ("adagrad", em.optim.Adagrad, adagrad_ref, "Adagrad", {"lr": 0.1}),
    ("adagrad-decay", em.optim.Adagrad, adagrad_ref, "Adagrad", {"lr": 0.1, "lr_decay": 0.1}),
    (
        "adagrad-all",
        em.optim.Adagrad,
        adagrad_ref,
        "Adagrad",
        {"lr": 0.1, "weight_decay": 0.1, "initial_accumulator_value": 0.5, "eps": 1e-6},
    ),
]
CASE_IDS = [c[0] for c in CASES]


def _ref_factory(name, ref, kwargs):
    if name.startswith("adamw"):
        return ref(**kwargs, decoupled=True)
    return ref(**kwargs)


def make_params(problem, dtype=em.float64):
    return [em.tensor(p0, dtype=dtype, device=AD, requires_grad=True) for p0 in problem.init]


def run_ember(opt, params, problem, steps):
    traj = []
    for _ in range(steps):
        opt.zero_grad()
        problem.loss(*params).backward()
        opt.step()
        traj.append([p.numpy().astype(np.float64) for p in params])
    return traj


def run_ref(step, problem, steps, init=None):
    params = [p.copy() for p in (init or problem.init)]
    traj = []
    for _ in range(steps):
        grads = problem.grads(*params)
        params = [step(i, p, g) for i, (p, g) in enumerate(zip(params, grads))]
        traj.append([p.copy() for p in params])
    return traj


def assert_traj_close(got, want, rtol, atol):
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        for gi, wi in zip(g, w):
            np.testing.assert_allclose(gi, wi, rtol=rtol, atol=atol, err_msg=f"step {k + 1}")


# -- trajectories ---------------------------------------------------------------------------
@pytest.mark.parametrize("problem", list(PROBLEMS), ids=list(PROBLEMS))
@pytest.mark.parametrize("name, cls, ref, _torch, kwargs", CASES, ids=CASE_IDS)
def test_trajectory_matches_numpy_reference(problem, name, cls, ref, _torch, kwargs):
    prob = PROBLEMS[problem]
    params = make_params(prob)
    got = run_ember(cls(params, **kwargs), params, prob, steps=8)
    want = run_ref(_ref_factory(name, ref, kwargs), prob, steps=8)
    assert_traj_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name, cls, ref, _torch, kwargs", CASES[::3], ids=CASE_IDS[::3])
def test_float32_trajectory_is_close_to_float64_reference(name, cls, ref, _torch, kwargs):
    prob = PROBLEMS["linreg"]
    params = make_params(prob, em.float32)
    got = run_ember(cls(params, **kwargs), params, prob, steps=5)
    assert all(p.dtype is em.float32 for p in params)
    want = run_ref(_ref_factory(name, ref, kwargs), prob, steps=5)
    assert_traj_close(got, want, rtol=2e-4, atol=2e-5)


@needs_torch
@pytest.mark.parametrize("problem", list(PROBLEMS), ids=list(PROBLEMS))
@pytest.mark.parametrize("name, cls, ref, torch_name, kwargs", CASES, ids=CASE_IDS)
def test_trajectory_matches_torch(problem, name, cls, ref, torch_name, kwargs):
    prob = PROBLEMS[problem]
    params = make_params(prob)
    got = run_ember(cls(params, **kwargs), params, prob, steps=8)
    tparams = [torch.tensor(p0, dtype=torch.float64, requires_grad=True) for p0 in prob.init]
    topt = getattr(torch.optim, torch_name)(tparams, **kwargs)
    want = []
    for _ in range(8):
        topt.zero_grad()
        prob.torch_loss(*tparams).backward()
        topt.step()
        want.append([p.detach().numpy().copy() for p in tparams])
    assert_traj_close(got, want, rtol=1e-10, atol=1e-12)


# -- parameter groups ---------------------------------------------------------------------
def test_param_groups_have_independent_settings():
    prob = PROBLEMS["linreg"]
    w, b = make_params(prob)
    opt = em.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.01, "momentum": 0.0}], lr=0.1, momentum=0.9)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0.9
    assert opt.param_groups[1]["lr"] == 0.01 and opt.param_groups[1]["momentum"] == 0.0
    got = run_ember(opt, [w, b], prob, steps=6)
    ref_w, ref_b = sgd_ref(0.1, momentum=0.9), sgd_ref(0.01)
    want = run_ref(lambda i, p, g: (ref_w if i == 0 else ref_b)(i, p, g), prob, steps=6)
    assert_traj_close(got, want, rtol=1e-12, atol=1e-14)
    assert b not in opt.state  # no momentum, no state


def test_add_param_group_and_changing_lr_between_steps():
    prob = PROBLEMS["linreg"]
    w, b = make_params(prob)
    opt = em.optim.Adam([w], lr=0.1)
    opt.add_param_group({"params": b, "lr": 0.02})
    assert opt.param_groups[1]["betas"] == (0.9, 0.999)
    ref_w, ref_b = adam_ref(0.1), adam_ref(0.02)
    got = run_ember(opt, [w, b], prob, steps=3)
    want = run_ref(lambda i, p, g: (ref_w if i == 0 else ref_b)(i, p, g), prob, steps=3)
    assert_traj_close(got, want, rtol=1e-10, atol=1e-12)


def test_parameters_without_grad_are_skipped():
    w = em.tensor([1.0, 2.0], device=AD, requires_grad=True)
    frozen = em.tensor([5.0], device=AD, requires_grad=True)
    opt = em.optim.Adam([w, frozen], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    assert frozen.tolist() == [5.0]
    assert frozen not in opt.state
    assert opt.state[w]["step"] == 1


def test_update_keeps_parameters_leaves_that_require_grad():
    w = em.tensor([1.0, 2.0], device=AD, requires_grad=True)
    opt = em.optim.SGD([w], lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    assert w.is_leaf and w.requires_grad and w.grad is not None
    buf = opt.state[w]["momentum_buffer"]
    assert not buf.requires_grad and buf.is_leaf


def test_zero_grad():
    w = em.tensor([1.0, 2.0], device=AD, requires_grad=True)
    opt = em.optim.SGD([w], lr=0.1)
    (w * w).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None


def test_step_with_closure_returns_the_loss():
    w = em.tensor([3.0], device=AD, requires_grad=True)
    opt = em.optim.SGD([w], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    with em.no_grad():
        loss = opt.step(closure)
    assert loss.item() == 9.0
    assert w.item() == 1.5


def test_accepts_nn_parameter_style_wrappers_and_generators():
    class Wrapped:
        def __init__(self, t):
            self.tensor = t

    w = em.tensor([1.0], device=AD, requires_grad=True)
    opt = em.optim.SGD((p for p in [Wrapped(w)]), lr=0.5)
    assert opt.param_groups[0]["params"][0] is w


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda w: em.optim.SGD([], lr=0.1), "empty parameter list"),
        (lambda w: em.optim.SGD([w, w], lr=0.1), "appears twice"),
        (lambda w: em.optim.SGD([{"params": [w]}, {"params": [w]}], lr=0.1), "appears twice"),
        (lambda w: em.optim.SGD([w * 2], lr=0.1), "not a leaf"),
        (lambda w: em.optim.SGD({w}, lr=0.1), "not a set"),
        (lambda w: em.optim.SGD([em.tensor([1, 2])], lr=0.1), "floating-point"),
        (lambda w: em.optim.SGD([1.0], lr=0.1), "ember Tensors"),
        (lambda w: em.optim.SGD([w], lr=-0.1), "lr must be"),
        (lambda w: em.optim.SGD([w], lr=0.1, nesterov=True), "nesterov"),
        (lambda w: em.optim.Adam([w], betas=(1.0, 0.9)), "beta1"),
        (lambda w: em.optim.Adam([w], betas=(0.9,)), "pair"),
        (lambda w: em.optim.RMSprop([w], alpha=-1.0), "alpha"),
        (lambda w: em.optim.Adagrad([w], lr_decay=-1.0), "lr_decay"),
        (lambda w: em.optim.SGD([{"lr": 0.1}]), "'params'"),
    ],
)
def test_invalid_arguments_raise_clear_errors(make, match):
    w = em.tensor([1.0], device=AD, requires_grad=True)
    with pytest.raises((ValueError, TypeError), match=match):
        make(w)


# -- state_dict ---------------------------------------------------------------------------
def _train(opt, params, prob, steps):
    for _ in range(steps):
        opt.zero_grad()
        prob.loss(*params).backward()
        opt.step()


def _json_round_trip(sd):
    """What a checkpoint does: tensors out to arrays (safetensors), the rest through JSON."""
    arrays = {}
    state = {}
    for idx, entries in sd["state"].items():
        state[idx] = {}
        for k, v in entries.items():
            if isinstance(v, em.Tensor):
                arrays[f"{idx}.{k}"] = v.numpy().copy()
                state[idx][k] = {"tensor": f"{idx}.{k}"}
            else:
                state[idx][k] = v
    meta = json.loads(json.dumps({"state": state, "param_groups": sd["param_groups"]}))
    for entries in meta["state"].values():
        for k, v in entries.items():
            if isinstance(v, dict):
                entries[k] = arrays[v["tensor"]]
    return meta


@pytest.mark.parametrize("via_json", [False, True], ids=["objects", "json"])
@pytest.mark.parametrize("name, cls, ref, _torch, kwargs", CASES, ids=CASE_IDS)
def test_state_dict_round_trip_mid_training_continues_identically(via_json, name, cls, ref, _torch, kwargs):
    prob = PROBLEMS["linreg"]
    params_a = make_params(prob)
    opt_a = cls(params_a, **kwargs)
    _train(opt_a, params_a, prob, 3)
    sd = opt_a.state_dict()
    assert set(sd) == {"state", "param_groups"}
    assert sd["param_groups"][0]["params"] == [0, 1]
    if via_json:
        sd = _json_round_trip(sd)
    params_b = [em.tensor(p.numpy(), device=AD, requires_grad=True) for p in params_a]
    opt_b = cls(params_b, lr=123.0)  # settings come from the state dict
    opt_b.load_state_dict(sd)
    assert opt_b.param_groups[0]["lr"] == kwargs["lr"]
    _train(opt_a, params_a, prob, 3)
    _train(opt_b, params_b, prob, 3)
    for pa, pb in zip(params_a, params_b):
        np.testing.assert_array_equal(pa.numpy(), pb.numpy())


def test_state_dict_is_a_snapshot():
    w = em.tensor([1.0, 2.0], device=AD, requires_grad=True)
    opt = em.optim.Adam([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    sd = opt.state_dict()
    before = sd["state"][0]["exp_avg"].numpy().copy()
    opt.step()
    np.testing.assert_array_equal(sd["state"][0]["exp_avg"].numpy(), before)
    assert sd["state"][0]["step"] == 1


def test_load_state_dict_mismatches_raise_clear_errors():
    prob = PROBLEMS["linreg"]
    w, b = make_params(prob)
    opt = em.optim.Adam([w, b], lr=0.1)
    _train(opt, [w, b], prob, 1)
    sd = opt.state_dict()

    two_groups = em.optim.Adam([{"params": [w]}, {"params": [b]}])
    with pytest.raises(OptimizerStateError, match="1 parameter group"):
        two_groups.load_state_dict(sd)
    fewer = em.optim.Adam([w])
    with pytest.raises(OptimizerStateError, match="group 0 has 2 parameter"):
        fewer.load_state_dict(sd)
    swapped = em.optim.Adam([b, w])
    with pytest.raises(OptimizerStateError, match="shape"):
        swapped.load_state_dict(sd)
    sgd = em.optim.SGD([w, b], momentum=0.9)
    with pytest.raises(OptimizerStateError, match="another optimizer"):
        sgd.load_state_dict(sd)
    bad = {"state": {"7": {"step": 1}}, "param_groups": sd["param_groups"]}
    with pytest.raises(OptimizerStateError, match="no parameter group lists"):
        em.optim.Adam([w, b]).load_state_dict(bad)
    with pytest.raises(OptimizerStateError, match="state_dict"):
        opt.load_state_dict([1, 2])
    assert isinstance(OptimizerStateError("x"), ValueError)


def test_load_state_dict_casts_state_to_the_parameter_dtype():
    w64 = em.tensor([1.0, 2.0], dtype=em.float64, device=AD, requires_grad=True)
    opt = em.optim.SGD([w64], lr=0.1, momentum=0.9)
    (w64 * w64).sum().backward()
    opt.step()
    w32 = em.tensor([1.0, 2.0], dtype=em.float32, device=AD, requires_grad=True)
    opt32 = em.optim.SGD([w32], lr=0.1, momentum=0.9)
    opt32.load_state_dict(opt.state_dict())
    assert opt32.state[w32]["momentum_buffer"].dtype is em.float32


@needs_torch
@pytest.mark.parametrize("name, cls, ref, torch_name, kwargs", CASES[::2], ids=CASE_IDS[::2])
def test_loads_a_torch_optimizer_state_dict(name, cls, ref, torch_name, kwargs):
    """A PyTorch checkpoint's optimizer state (tensors as arrays) continues in ember."""
    prob = PROBLEMS["linreg"]
    tparams = [torch.tensor(p0, dtype=torch.float64, requires_grad=True) for p0 in prob.init]
    topt = getattr(torch.optim, torch_name)(tparams, **kwargs)

    def torch_steps(n):
        for _ in range(n):
            topt.zero_grad()
            prob.torch_loss(*tparams).backward()
            topt.step()

    torch_steps(3)
    sd = topt.state_dict()
    state = {i: {k: (v.numpy() if torch.is_tensor(v) else v) for k, v in s.items()} for i, s in sd["state"].items()}
    params = [em.tensor(p.detach().numpy(), device=AD, requires_grad=True) for p in tparams]
    opt = cls(params)
    opt.load_state_dict({"state": state, "param_groups": sd["param_groups"]})
    assert all(isinstance(s.get("step", 0), int) for s in opt.state.values())
    _train(opt, params, prob, 3)
    torch_steps(3)
    for p, tp in zip(params, tparams):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-10, atol=1e-12)


# -- gradient clipping --------------------------------------------------------------------
def _with_grads(grads, dtype=em.float32):
    params = []
    for g in grads:
        p = em.zeros(np.shape(g), dtype=dtype, device=AD, requires_grad=True)
        p.grad = em.tensor(g, dtype=dtype)
        params.append(p)
    return params


GRADS = [np.array([[1.0, -2.0], [3.0, 0.5]]), np.array([-4.0, 0.25, 2.0]), np.array([0.0])]


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("max_norm", [1.0, 100.0])
def test_clip_grad_norm_matches_numpy(norm_type, max_norm):
    params = _with_grads(GRADS, em.float64)
    flat = np.concatenate([g.ravel() for g in GRADS])
    want_total = np.max(np.abs(flat)) if np.isinf(norm_type) else np.sum(np.abs(flat) ** norm_type) ** (1 / norm_type)
    total = em.optim.clip_grad_norm_(params, max_norm, norm_type=norm_type)
    assert isinstance(total, em.Tensor) and total.shape == () and total.dtype is em.float64
    np.testing.assert_allclose(total.item(), want_total, rtol=1e-12)
    coef = min(1.0, max_norm / (want_total + 1e-6))
    for p, g in zip(params, GRADS):
        np.testing.assert_allclose(p.grad.numpy(), g * coef, rtol=1e-12)


def test_clip_grad_norm_float32_float16_and_edge_cases():
    params = _with_grads(GRADS)
    total = em.optim.clip_grad_norm_(params, 0.5)
    flat = np.concatenate([g.ravel() for g in GRADS])
    np.testing.assert_allclose(total.item(), np.linalg.norm(flat), rtol=1e-6)
    assert total.dtype is em.float32
    assert params[0].grad.dtype is em.float32
    np.testing.assert_allclose(np.linalg.norm(np.concatenate([p.grad.numpy().ravel() for p in params])), 0.5, rtol=1e-5)
    # float16 gradients whose squares overflow float16 are summed in float32
    halves = _with_grads([np.full(4, 300.0)], em.float16)
    total = em.optim.clip_grad_norm_(halves, 1.0)
    np.testing.assert_allclose(total.item(), 600.0, rtol=1e-6)
    assert halves[0].grad.dtype is em.float16
    # no gradients at all, and a single tensor argument
    assert em.optim.clip_grad_norm_([em.zeros((2,), device=AD, requires_grad=True)], 1.0).item() == 0.0
    single = _with_grads([np.array([3.0, 4.0])])[0]
    assert em.optim.clip_grad_norm_(single, 10.0).item() == pytest.approx(5.0)


@pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")
def test_clip_grad_norm_nonfinite():
    params = _with_grads([np.array([1.0, np.inf])])
    with pytest.raises(em.optim.NonFiniteGradientError, match="error_if_nonfinite"):
        em.optim.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    total = em.optim.clip_grad_norm_(params, 1.0)
    assert np.isinf(total.item())


def test_clip_grad_value():
    params = _with_grads(GRADS)
    em.optim.clip_grad_value_(params, 1.5)
    for p, g in zip(params, GRADS):
        np.testing.assert_array_equal(p.grad.numpy(), np.clip(g, -1.5, 1.5).astype(np.float32))


@needs_torch
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_clip_grad_norm_matches_torch(norm_type):
    params = _with_grads(GRADS, em.float64)
    total = em.optim.clip_grad_norm_(params, 1.0, norm_type=norm_type)
    tparams = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in GRADS]
    for tp, g in zip(tparams, GRADS):
        tp.grad = torch.tensor(g)
    ttotal = torch.nn.utils.clip_grad_norm_(tparams, 1.0, norm_type=norm_type)
    np.testing.assert_allclose(total.item(), ttotal.item(), rtol=1e-12)
    for p, tp in zip(params, tparams):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-12)
