"""Golden training runs: a few optimizer steps of a small MLP and a small CNN in ember and in
PyTorch, from the same initial weights and on the same minibatches.

ember initialises each model (``em.seed``), its ``state_dict`` is copied into the PyTorch twin
through numpy (``strict=True``, so the parameter and buffer names must agree), then both take
``STEPS`` steps of SGD with Nesterov momentum, Adam with L2 decay, or AdamW. The loss of every
step and, at the end, every parameter and buffer (BatchNorm's running statistics included) must
agree: to 1e-9 relative in float64, and to 2e-4 relative / 1e-5 absolute in float32, where both
frameworks round differently in each matmul and convolution and five steps compound it.
Only ember's public API is used. Skipped when PyTorch is not importable (the golden-torch tox
env installs it and turns that skip into a failure).
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn, optim

torch = pytest.importorskip("torch", reason="PyTorch is not installed; the golden tests compare with torch")
tnn = torch.nn

AD = em.Device.cpu().autodiff()
STEPS = 5
BATCH = 8
CLASSES = 3
TOLERANCES = {"float64": {"rtol": 1e-9, "atol": 1e-12}, "float32": {"rtol": 2e-4, "atol": 1e-5}}


def _mlp(dtype: str):
    ember_model = nn.Sequential(
        nn.Linear(6, 16, device=AD, dtype=dtype),
        nn.Tanh(),
        nn.Linear(16, 16, device=AD, dtype=dtype),
        nn.ReLU(),
        nn.Linear(16, CLASSES, device=AD, dtype=dtype),
    )
    torch_model = tnn.Sequential(tnn.Linear(6, 16), tnn.Tanh(), tnn.Linear(16, 16), tnn.ReLU(), tnn.Linear(16, CLASSES))
    return ember_model, torch_model, (6,)


def _cnn(dtype: str):
    # (N, 1, 8, 8) -> conv 3x3 pad 1 -> BN -> ReLU -> max pool 2 -> conv 3x3 -> ReLU -> flatten -> linear.
    # The first conv has no bias: BN removes it, so its gradient is rounding noise, which Adam's
    # normalisation would turn into full-size steps of random sign in each framework.
    ember_model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=False, device=AD, dtype=dtype),
        nn.BatchNorm2d(4, device=AD, dtype=dtype),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3, device=AD, dtype=dtype),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(6 * 2 * 2, CLASSES, device=AD, dtype=dtype),
    )
    torch_model = tnn.Sequential(
        tnn.Conv2d(1, 4, 3, padding=1, bias=False),
        tnn.BatchNorm2d(4),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.Conv2d(4, 6, 3),
        tnn.ReLU(),
        tnn.Flatten(),
        tnn.Linear(6 * 2 * 2, CLASSES),
    )
    return ember_model, torch_model, (1, 8, 8)


MODELS = {"mlp": _mlp, "cnn": _cnn}

# name -> (ember optimizer, PyTorch optimizer, keyword arguments both accept)
OPTIMIZERS = {
    "sgd-nesterov": (optim.SGD, torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}),
    "adam": (optim.Adam, torch.optim.Adam, {"lr": 1e-2, "betas": (0.8, 0.99), "weight_decay": 1e-3}),
    "adamw": (optim.AdamW, torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.05}),
}


def _data(features: tuple[int, ...], dtype: str):
    rng = np.random.default_rng(2024)
    x = rng.standard_normal((STEPS * BATCH, *features)).astype(dtype)
    y = rng.integers(0, CLASSES, size=STEPS * BATCH).astype(np.int64)
    return x, y


def _ember_state(model) -> dict[str, np.ndarray]:
    return {name: value.numpy() for name, value in model.state_dict().items()}


def _copy_into_torch(ember_model, torch_model, torch_dtype) -> None:
    torch_model.to(torch_dtype)
    state = _ember_state(ember_model)
    assert list(state) == list(torch_model.state_dict()), "ember's state_dict keys (and order) differ from PyTorch's"
    torch_model.load_state_dict({k: torch.from_numpy(np.array(v, copy=True)) for k, v in state.items()}, strict=True)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
@pytest.mark.parametrize("model_name", list(MODELS))
def test_training_steps_match_torch(model_name, opt_name, dtype):
    em.seed(7)
    ember_model, torch_model, features = MODELS[model_name](dtype)
    _copy_into_torch(ember_model, torch_model, getattr(torch, dtype))
    initial = _ember_state(ember_model)
    ember_model.train(), torch_model.train()

    ember_cls, torch_cls, kwargs = OPTIMIZERS[opt_name]
    ember_opt = ember_cls(ember_model.parameters(), **kwargs)
    torch_opt = torch_cls(torch_model.parameters(), **kwargs)
    ember_loss_fn, torch_loss_fn = nn.CrossEntropyLoss(), tnn.CrossEntropyLoss()
    x, y = _data(features, dtype)
    tol = TOLERANCES[dtype]

    ember_losses, torch_losses = [], []
    for step in range(STEPS):
        xb, yb = x[step * BATCH : (step + 1) * BATCH], y[step * BATCH : (step + 1) * BATCH]

        loss = ember_loss_fn(ember_model(em.tensor(xb, device=AD)), em.tensor(yb, device=AD))
        ember_opt.zero_grad()
        loss.backward()
        ember_opt.step()
        ember_losses.append(loss.item())

        tloss = torch_loss_fn(torch_model(torch.from_numpy(xb)), torch.from_numpy(yb))
        torch_opt.zero_grad()
        tloss.backward()
        torch_opt.step()
        torch_losses.append(tloss.item())

    np.testing.assert_allclose(ember_losses, torch_losses, **tol, err_msg="loss per step")
    final = _ember_state(ember_model)
    for name, _ in ember_model.named_parameters():  # every parameter trained, so each comparison means something
        assert not np.allclose(final[name], initial[name], **tol), f"{name} did not change in {STEPS} steps"
    for name, value in torch_model.state_dict().items():
        assert final[name].dtype == value.numpy().dtype, f"{name}: dtype"
        np.testing.assert_allclose(final[name], value.numpy(), **tol, err_msg=f"{name} after {STEPS} steps")
