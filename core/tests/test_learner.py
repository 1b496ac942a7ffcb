"""The Learner: fitting, metrics, logs, early stopping, and exact resume after a crash."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember as em
from ember.data import DataLoader, InMemoryDataset
from ember.train import F1, MAE, RMSE, Accuracy, LearnerBuilder, Precision, Recall, TopKAccuracy

nn = pytest.importorskip("ember.nn", reason="ember.nn is required by the Learner tests")
optim = pytest.importorskip("ember.optim", reason="ember.optim is required by the Learner tests")


def blobs(n=200, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 2)).astype(np.float32)
    y = ((x[:, 0] + 0.5 * x[:, 1]) > 0).astype(np.int64)
    return x, y


def test_fit_learns_and_writes_logs_plot_and_checkpoints(tmp_path):
    em.seed(0)
    dev = em.Device.cpu().autodiff()
    x, y = blobs()
    train, valid = InMemoryDataset(x, y).split(0.75, 0.25, seed=0)
    model = nn.Sequential(nn.Linear(2, 16, device=dev), nn.ReLU(), nn.Linear(16, 2, device=dev))
    learner = (
        LearnerBuilder(model)
        .optimizer(lambda p: optim.SGD(p, lr=0.2))
        .metrics(Accuracy(), Precision(2), Recall(2), F1(2))
        .checkpoint(tmp_path, every=1, keep=2)
        .epochs(8)
        .progress(False)
        .build()
    )
    history = learner.fit(DataLoader(train, batch_size=16, shuffle=True), DataLoader(valid, batch_size=64))
    assert len(history) == 8
    assert history[-1]["valid_accuracy"] > 0.9
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert {"metrics.jsonl", "metrics.csv", "latest.json"} <= set(names)
    assert len([n for n in names if n.startswith("step-")]) == 2
    pytest.importorskip("matplotlib", reason="the PNG plot needs matplotlib")
    assert (tmp_path / "metrics.png").stat().st_size > 1000


def test_evaluate_matches_a_numpy_reference():
    dev = em.Device.cpu().autodiff()
    x, y = blobs(64)
    model = nn.Linear(2, 2, device=dev)
    learner = (
        LearnerBuilder(model).optimizer(lambda p: optim.SGD(p, lr=0.1)).metrics(Accuracy()).progress(False).build()
    )
    got = learner.evaluate(DataLoader(InMemoryDataset(x, y), batch_size=10))
    w, b = model.weight.numpy().astype(np.float64), model.bias.numpy().astype(np.float64)
    logits = x @ w.T + b
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    assert got["loss"] == pytest.approx(-logp[np.arange(64), y].mean(), rel=1e-5)
    assert got["accuracy"] == pytest.approx((logits.argmax(1) == y).mean())


def test_metrics_against_numpy():
    rng = np.random.default_rng(3)
    scores = rng.standard_normal((50, 4))
    target = rng.integers(0, 4, 50)
    pred = scores.argmax(1)
    for metric, expected in [
        (Accuracy(), (pred == target).mean()),
        (TopKAccuracy(2), np.mean([t in np.argsort(-s)[:2] for s, t in zip(scores, target)])),
    ]:
        metric.update(em.tensor(scores), em.tensor(target))
        assert metric.compute() == pytest.approx(expected)
    prec, rec = [], []
    for c in range(4):
        tp = np.sum((pred == c) & (target == c))
        prec.append(tp / max(1, np.sum(pred == c)))
        rec.append(tp / max(1, np.sum(target == c)))
    f1 = [2 * p * r / (p + r) if p + r else 0.0 for p, r in zip(prec, rec)]
    for cls, ref in ((Precision, prec), (Recall, rec), (F1, f1)):
        m = cls(4)
        m.update(scores[:20], target[:20])
        m.update(scores[20:], target[20:])
        assert m.compute() == pytest.approx(np.mean(ref))
    out, t = rng.standard_normal(30), rng.standard_normal(30)
    mae, rmse = MAE(), RMSE()
    mae.update(out, t)
    rmse.update(out, t)
    assert mae.compute() == pytest.approx(np.abs(out - t).mean())
    assert rmse.compute() == pytest.approx(np.sqrt(((out - t) ** 2).mean()))


def test_early_stopping_stops():
    dev = em.Device.cpu().autodiff()
    x, y = blobs(40)
    model = nn.Linear(2, 2, device=dev)
    learner = (
        LearnerBuilder(model)
        .optimizer(lambda p: optim.SGD(p, lr=0.0))
        .early_stopping("valid_loss", patience=2)
        .epochs(50)
        .progress(False)
        .build()
    )
    loader = DataLoader(InMemoryDataset(x, y), batch_size=8)
    assert len(learner.fit(loader, loader)) == 3


def test_gradient_accumulation_equals_a_big_batch():
    x, y = blobs(32)
    results = []
    for bs, acc in ((32, 1), (8, 4)):
        em.seed(5)
        model = nn.Linear(2, 2, device=em.Device.cpu().autodiff())
        learner = (
            LearnerBuilder(model)
            .optimizer(lambda p: optim.SGD(p, lr=0.5))
            .grad_accumulation(acc)
            .epochs(1)
            .progress(False)
            .build()
        )
        learner.fit(DataLoader(InMemoryDataset(x.astype(np.float64), y), batch_size=bs))
        results.append(model.weight.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-10)


SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    import ember as em
    from ember import nn, optim
    from ember.data import DataLoader, InMemoryDataset
    from ember.train import LearnerBuilder

    out, kill_at, resume = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "resume"
    em.seed(0)
    dev = em.Device.cpu().autodiff()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 4)).astype(np.float32)
    y = (x[:, 0] - x[:, 2] > 0).astype(np.int64)
    model = nn.Sequential(nn.Linear(4, 16, device=dev), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2, device=dev))

    def crash(learner):
        if learner.step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    learner = (
        LearnerBuilder(model)
        .optimizer(lambda p: optim.SGD(p, lr=0.1, momentum=0.9))
        .checkpoint(out, every=1, every_steps=5, keep=2)
        .epochs(3)
        .callback(crash)
        .progress(False)
        .build()
    )
    learner.fit(DataLoader(InMemoryDataset(x, y), batch_size=8, shuffle=True, seed=1, num_workers=2), resume=resume)
    np.save(os.path.join(out, "final.npy"), np.concatenate([p.numpy().ravel() for p in model.parameters()]))
    """
)


def test_killed_mid_epoch_then_resumed_gives_identical_weights(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)

    def run(out, kill_at, mode):
        return subprocess.run(
            [sys.executable, str(script), str(out), str(kill_at), mode], capture_output=True, text=True
        )

    clean = run(tmp_path / "clean", -1, "fresh")
    assert clean.returncode == 0, clean.stderr
    crashed = run(tmp_path / "crash", 17, "fresh")  # epoch 2 of 3, two steps after the step-15 checkpoint
    assert crashed.returncode != 0 and not (tmp_path / "crash" / "final.npy").exists()
    latest = json.loads((tmp_path / "crash" / "latest.json").read_text())
    assert latest["step"] == 15
    resumed = run(tmp_path / "crash", -1, "resume")
    assert resumed.returncode == 0, resumed.stderr
    a = np.load(tmp_path / "clean" / "final.npy")
    b = np.load(tmp_path / "crash" / "final.npy")
    np.testing.assert_array_equal(a, b)
    epochs = [json.loads(line) for line in (tmp_path / "crash" / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]


def small_learner(out, epochs=2, every_steps=None, seed=0):
    em.seed(seed)
    model = nn.Linear(2, 2, device=em.Device.cpu().autodiff())
    learner = (
        LearnerBuilder(model)
        .optimizer(lambda p: optim.SGD(p, lr=0.1, momentum=0.9))
        .checkpoint(out, every=1, every_steps=every_steps, keep=3)
        .epochs(epochs)
        .progress(False)
        .build()
    )
    x, y = blobs(40)
    return learner, DataLoader(InMemoryDataset(x, y), batch_size=8, shuffle=True, seed=1)


class Unsized:
    """A resumable loader without ``len``: the Learner cannot tell its last batch, so it saves twice."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        return iter(self.loader)

    def set_epoch(self, epoch):
        self.loader.set_epoch(epoch)

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)


def test_an_epoch_end_is_saved_once(tmp_path):
    learner, loader = small_learner(tmp_path, every_steps=5)
    learner.fit(loader)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("step-")) == [
        "step-000000005",
        "step-000000010",
    ]


def test_a_crash_between_the_two_saves_of_an_epoch_end_leaves_one_metrics_row_per_epoch(tmp_path, monkeypatch):
    from ember.train import learner as learner_mod

    clean, loader = small_learner(tmp_path / "clean", every_steps=5)
    clean.fit(loader)

    class Killed(Exception):
        pass

    real = learner_mod.save_checkpoint

    def save(root, state, step, keep=None):
        if step == 5 and "partial_metrics" not in state:  # the epoch-end save that follows the step save
            raise Killed
        return real(root, state, step=step, keep=keep)

    monkeypatch.setattr(learner_mod, "save_checkpoint", save)
    crashed, loader = small_learner(tmp_path / "crash", every_steps=5)
    with pytest.raises(Killed):
        crashed.fit(Unsized(loader))
    monkeypatch.undo()
    assert json.loads((tmp_path / "crash" / "latest.json").read_text())["step"] == 5  # the step save, mid-epoch
    rows = [json.loads(line) for line in (tmp_path / "crash" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1]  # written before the save that did not happen
    for _ in range(2):  # resuming twice changes nothing
        resumed, loader = small_learner(tmp_path / "crash", every_steps=5, seed=9)
        resumed.fit(Unsized(loader), resume=True)
        rows = [json.loads(line) for line in (tmp_path / "crash" / "metrics.jsonl").read_text().splitlines()]
        assert [r["epoch"] for r in rows] == [1, 2]
    assert [r["epoch"] for r in resumed.history] == [1, 2]
    for a, b in zip(clean.model.parameters(), resumed.model.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not [p for p in (tmp_path / "crash").iterdir() if p.name.startswith(".")]


def test_the_record_does_not_grow_with_the_history(tmp_path):
    learner, loader = small_learner(tmp_path, epochs=12)
    learner.fit(loader)
    first, last = (tmp_path / "step-000000050" / "record.json"), (tmp_path / "step-000000060" / "record.json")
    assert abs(first.stat().st_size - last.stat().st_size) < 16
    assert len((tmp_path / "history.jsonl").read_text().splitlines()) == 12
    again, loader = small_learner(tmp_path, epochs=12, seed=3)
    again.restore(loader=loader)
    assert again.history == learner.history and again.epoch == 12


def test_a_restore_that_fails_while_assigning_leaves_the_learner_as_it_was(tmp_path, monkeypatch):
    from ember.errors import CheckpointError

    trained, loader = small_learner(tmp_path)
    trained.fit(loader)
    fresh, loader = small_learner(tmp_path, seed=4)
    before = [p.numpy().copy() for p in fresh.model.parameters()]
    rng_before = em.random.get_state()

    real = fresh.optimizer.load_state_dict
    calls = []

    def broken(state):  # fails once (after the model was assigned), then works for the undo
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the device went away")
        real(state)

    monkeypatch.setattr(fresh.optimizer, "load_state_dict", broken)
    with pytest.raises(CheckpointError, match="unchanged"):
        fresh.restore(loader=loader)
    monkeypatch.undo()
    for a, b in zip(before, fresh.model.parameters()):
        np.testing.assert_array_equal(a, b.numpy())
    assert em.random.get_state() == rng_before and fresh.step == 0 and fresh.history == []
