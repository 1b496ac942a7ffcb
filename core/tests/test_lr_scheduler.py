"""Learning-rate schedulers: lr sequences against closed-form formulas written here, state
round trips, and (when PyTorch is importable) the same sequences from torch.optim.lr_scheduler."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import ember as em
from ember.optim import lr_scheduler as ls

try:
    import torch
except ImportError:  # pragma: no cover - the golden tests need PyTorch
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed: golden tests against torch")

BASE = (0.5, 0.02)  # two parameter groups with different learning rates


def make_opt(cls=em.optim.SGD, **kwargs):
    a = em.zeros((2,), device=em.Device.cpu().autodiff(), requires_grad=True)
    b = em.zeros((3,), device=em.Device.cpu().autodiff(), requires_grad=True)
    return cls([{"params": [a], "lr": BASE[0]}, {"params": [b], "lr": BASE[1]}], **kwargs)


def lr_sequence(sched, steps):
    out = [sched.get_last_lr()]
    for _ in range(steps):
        sched.optimizer.step()
        sched.step()
        out.append(sched.get_last_lr())
    return np.array(out)


def closed(fn, steps):
    return np.array([[fn(base, t) for base in BASE] for t in range(steps + 1)])


def cos_anneal(start, end, pct):
    return end + (start - end) * (1 + math.cos(math.pi * pct)) / 2


# -- closed forms ---------------------------------------------------------------------------
def one_cycle(total, pct_start, max_lr, div, final_div, three_phase, anneal=cos_anneal):
    """lr(t) of the 1cycle policy: piecewise anneals between the phase end points."""
    initial = max_lr / div
    low = initial / final_div
    if three_phase:
        ends = [pct_start * total - 1, 2 * pct_start * total - 2, total - 1]
        values = [(initial, max_lr), (max_lr, initial), (initial, low)]
    else:
        ends = [pct_start * total - 1, total - 1]
        values = [(initial, max_lr), (max_lr, low)]

    def lr(t):
        start = 0.0
        for end, (a, b) in zip(ends, values):
            if t <= end or end == ends[-1]:
                return anneal(a, b, (t - start) / (end - start))
            start = end
        raise AssertionError

    return lr


def linear_anneal(start, end, pct):
    return start + (end - start) * pct


CLOSED_FORMS = {
    "step": (lambda mod, opt: mod.StepLR(opt, step_size=3, gamma=0.5), lambda b, t: b * 0.5 ** (t // 3), 12),
    "multistep": (
        lambda mod, opt: mod.MultiStepLR(opt, milestones=[2, 5, 5, 8], gamma=0.1),
        lambda b, t: b * 0.1 ** sum(m <= t for m in [2, 5, 5, 8]),
        10,
    ),
    "exponential": (lambda mod, opt: mod.ExponentialLR(opt, gamma=0.9), lambda b, t: b * 0.9**t, 10),
    "cosine": (
        lambda mod, opt: mod.CosineAnnealingLR(opt, T_max=10, eta_min=0.001),
        lambda b, t: 0.001 + (b - 0.001) * (1 + math.cos(math.pi * t / 10)) / 2,
        25,  # past T_max the recursive form keeps following the cosine
    ),
    "linear-warmup": (
        lambda mod, opt: mod.LinearLR(opt, start_factor=0.25, end_factor=1.0, total_iters=4),
        lambda b, t: b * (0.25 + 0.75 * min(t, 4) / 4),
        8,
    ),
    "linear-decay": (
        lambda mod, opt: mod.LinearLR(opt, start_factor=1.0, end_factor=0.1, total_iters=5),
        lambda b, t: b * (1.0 - 0.9 * min(t, 5) / 5),
        8,
    ),
    "lambda": (lambda mod, opt: mod.LambdaLR(opt, lambda e: 1.0 / (1 + e)), lambda b, t: b / (1 + t), 6),
    "sequential": (
        lambda mod, opt: mod.SequentialLR(
            opt,
            [mod.LinearLR(opt, start_factor=0.1, total_iters=3), mod.CosineAnnealingLR(opt, T_max=7)],
            milestones=[3],
        ),
        lambda b, t: b * (0.1 + 0.9 * t / 3) if t < 3 else b * (1 + math.cos(math.pi * (t - 3) / 7)) / 2,
        10,
    ),
    "chained": (
        lambda mod, opt: mod.ChainedScheduler(
            [mod.LinearLR(opt, start_factor=0.5, total_iters=4), mod.ExponentialLR(opt, 0.9)]
        ),
        lambda b, t: b * (0.5 + 0.5 * min(t, 4) / 4) * 0.9**t,
        8,
    ),
    "onecycle": (
        lambda mod, opt: mod.OneCycleLR(opt, max_lr=1.0, total_steps=20),
        lambda b, t: one_cycle(20, 0.3, 1.0, 25.0, 1e4, False)(t),
        19,
    ),
    "onecycle-linear": (
        lambda mod, opt: mod.OneCycleLR(opt, max_lr=1.0, total_steps=20, anneal_strategy="linear", div_factor=10.0),
        lambda b, t: one_cycle(20, 0.3, 1.0, 10.0, 1e4, False, linear_anneal)(t),
        20,
    ),
    "onecycle-three-phase": (
        lambda mod, opt: mod.OneCycleLR(opt, max_lr=1.0, epochs=4, steps_per_epoch=5, pct_start=0.25, three_phase=True),
        lambda b, t: one_cycle(20, 0.25, 1.0, 25.0, 1e4, True)(t),
        19,
    ),
}


@pytest.mark.parametrize("name", list(CLOSED_FORMS))
def test_lr_sequence_matches_closed_form(name):
    build, formula, steps = CLOSED_FORMS[name]
    opt = make_opt(momentum=0.9)
    sched = build(ls, opt)
    got = lr_sequence(sched, steps)
    np.testing.assert_allclose(got, closed(formula, steps), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose([g["lr"] for g in opt.param_groups], got[-1], rtol=0, atol=0)


def test_scheduler_records_initial_lr_and_needs_it_to_resume():
    opt = make_opt()
    sched = ls.ExponentialLR(opt, gamma=0.5)
    assert [g["initial_lr"] for g in opt.param_groups] == list(BASE)
    assert sched.base_lrs == list(BASE)
    with pytest.raises(KeyError, match="initial_lr"):
        ls.StepLR(make_opt(), step_size=2, last_epoch=3)


def test_onecycle_cycles_momentum_and_beta1():
    opt = make_opt(momentum=0.9)
    sched = ls.OneCycleLR(opt, max_lr=1.0, total_steps=10, base_momentum=0.8, max_momentum=0.9)
    moms = [opt.param_groups[0]["momentum"]]
    for _ in range(9):
        sched.step()
        moms.append(opt.param_groups[0]["momentum"])
    warm = 0.3 * 10 - 1
    want = [
        cos_anneal(0.9, 0.8, t / warm) if t <= warm else cos_anneal(0.8, 0.9, (t - warm) / (9 - warm))
        for t in range(10)
    ]
    np.testing.assert_allclose(moms, want, rtol=1e-12)
    adam = make_opt(em.optim.Adam)
    ls.OneCycleLR(adam, max_lr=0.1, total_steps=10)
    assert adam.param_groups[1]["betas"] == (0.95, 0.999)
    with pytest.raises(ValueError, match="momentum or betas"):
        ls.OneCycleLR(make_opt(em.optim.Adagrad), max_lr=0.1, total_steps=10)
    with pytest.raises(ValueError, match="total_steps"):
        s = ls.OneCycleLR(make_opt(momentum=0.9), max_lr=0.1, total_steps=3)
        for _ in range(4):
            s.step()


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda opt: ls.StepLR(opt, step_size=0), "step_size"),
        (lambda opt: ls.LinearLR(opt, start_factor=0.0), "start_factor"),
        (lambda opt: ls.LambdaLR(opt, [lambda e: 1.0]), "lr_lambdas"),
        (lambda opt: ls.OneCycleLR(opt, max_lr=1.0), "total_steps"),
        (lambda opt: ls.OneCycleLR(opt, max_lr=1.0, total_steps=5, pct_start=2.0), "pct_start"),
        (lambda opt: ls.OneCycleLR(opt, max_lr=[1.0], total_steps=5), "one per parameter group"),
        (lambda opt: ls.SequentialLR(opt, [ls.StepLR(opt, 2)], milestones=[1]), "milestone"),
        (lambda opt: ls.SequentialLR(opt, [ls.StepLR(make_opt(), 2)], milestones=[]), "another optimizer"),
        (lambda opt: ls.StepLR(object(), 2), "Optimizer"),
    ],
)
def test_invalid_arguments(build, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build(make_opt(momentum=0.9))


@pytest.mark.parametrize("name", list(CLOSED_FORMS))
def test_state_dict_round_trip_resumes_the_schedule(name):
    build, _, steps = CLOSED_FORMS[name]
    k = steps // 2
    opt = make_opt(momentum=0.9)
    sched = build(ls, opt)
    lr_sequence(sched, k)
    saved_opt = json.loads(json.dumps(opt.state_dict()))
    saved = json.loads(json.dumps(sched.state_dict()))
    rest = lr_sequence(sched, steps - k)

    opt2 = make_opt(momentum=0.9)
    sched2 = build(ls, opt2)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved)
    np.testing.assert_allclose(lr_sequence(sched2, steps - k), rest, rtol=1e-12)


def test_lambda_state_saves_callable_objects_only():
    class Warm:
        def __init__(self):
            self.n = 3

        def __call__(self, e):
            return min(1.0, (e + 1) / self.n)

    opt = make_opt()
    sched = ls.LambdaLR(opt, [Warm(), lambda e: 1.0])
    state = sched.state_dict()
    assert state["lr_lambdas"] == [{"n": 3}, None]
    other = ls.LambdaLR(make_opt(), [Warm(), lambda e: 1.0])
    state["lr_lambdas"][0]["n"] = 5
    other.load_state_dict(state)
    assert other.lr_lambdas[0].n == 5


# -- golden sequences from PyTorch ------------------------------------------------------------
def _torch_opt(kind="sgd"):
    a = torch.zeros(2, requires_grad=True)
    b = torch.zeros(3, requires_grad=True)
    groups = [{"params": [a], "lr": BASE[0]}, {"params": [b], "lr": BASE[1]}]
    return torch.optim.SGD(groups, momentum=0.9) if kind == "sgd" else torch.optim.Adam(groups)


GOLDEN = {
    **{name: (build, steps) for name, (build, _, steps) in CLOSED_FORMS.items()},
    "cosine-restart-free-long": (lambda mod, opt: mod.CosineAnnealingLR(opt, T_max=3), 14),
    "multistep-unsorted": (lambda mod, opt: mod.MultiStepLR(opt, milestones=[6, 2], gamma=0.5), 9),
    "chained-step-exp": (
        lambda mod, opt: mod.ChainedScheduler([mod.StepLR(opt, 2, 0.5), mod.ExponentialLR(opt, 0.9)]),
        8,
    ),
    "sequential-three": (
        lambda mod, opt: mod.SequentialLR(
            opt,
            [mod.LinearLR(opt, 0.2, total_iters=2), mod.StepLR(opt, 2, 0.5), mod.ExponentialLR(opt, 0.8)],
            milestones=[2, 6],
        ),
        10,
    ),
}


@needs_torch
@pytest.mark.parametrize("name", list(GOLDEN))
def test_lr_sequence_matches_torch(name):
    import warnings

    build, steps = GOLDEN[name]
    opt = make_opt(momentum=0.9)
    got = lr_sequence(build(ls, opt), steps)
    topt = _torch_opt()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = lr_sequence(build(torch.optim.lr_scheduler, topt), steps)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        [g.get("momentum", 0.0) for g in opt.param_groups], [g.get("momentum", 0.0) for g in topt.param_groups]
    )


@needs_torch
def test_onecycle_beta1_matches_torch():
    opt = make_opt(em.optim.Adam)
    topt = _torch_opt("adam")
    s = ls.OneCycleLR(opt, max_lr=0.1, total_steps=12, three_phase=True)
    ts = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.1, total_steps=12, three_phase=True)
    for _ in range(11):
        topt.step()
        s.step()
        ts.step()
        assert opt.param_groups[0]["betas"] == pytest.approx(topt.param_groups[0]["betas"], rel=1e-12)
        assert s.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12)
