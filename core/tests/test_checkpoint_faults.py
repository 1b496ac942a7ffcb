"""Checkpoints under faults: a kill before and after every OS call of a save, and corrupted files.

The kill test forks one child per kill point; the child saves with ``checkpoint._hook`` set to
count OS calls and ``os._exit(9)`` at call N. The parent then checks that the directory loads,
without any fallback, and holds exactly the old or the new state (bit for bit).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember.data import DataLoader, InMemoryDataset
from ember.errors import CheckpointError
from ember.train import LearnerBuilder
from ember.train import checkpoint as ck

nn = pytest.importorskip("ember.nn", reason="ember.nn is required by the restore tests")
optim = pytest.importorskip("ember.optim", reason="ember.optim is required by the restore tests")


def make_state(tag: int) -> dict:
    rng = np.random.default_rng(tag)
    return {
        "model": {
            "w": em.tensor(rng.standard_normal((3, 4)).astype(np.float32)),
            "b": em.tensor(rng.standard_normal(4)),
        },
        "epoch": tag,
        "lr": 0.1 * tag,
    }


def fingerprint(ckpt: ck.Checkpoint) -> str:
    """A digest of the loaded tree: every array's dtype, shape and bytes, and every plain value."""
    h = hashlib.sha256()

    def walk(node, path):
        if isinstance(node, np.ndarray):
            h.update(f"{path}:{node.dtype.str}:{node.shape}".encode() + node.tobytes())
        elif isinstance(node, dict):
            for k in sorted(node, key=str):
                walk(node[k], f"{path}/{k}")
        else:
            h.update(f"{path}={node!r}".encode())

    walk(ckpt.state(as_tensors=False), "")
    return h.hexdigest()


def expected_fingerprint(tmp: Path, state: dict, step: int) -> str:
    shutil.rmtree(tmp, ignore_errors=True)
    return fingerprint(ck.load_checkpoint(ck.save_checkpoint(tmp, state, step=step)))


# scenario: (checkpoints present before: [(tag, step, keep)], the save under test: (tag, step, keep))
SCENARIOS = {
    "new step": ([(1, 1, None)], (2, 2, None)),
    "same step": ([(1, 2, None)], (2, 2, None)),
    "pruning": ([(0, 1, 2), (1, 2, 2)], (2, 3, 2)),
}


class Counter:
    def __init__(self, kill_at: int | None = None) -> None:
        self.calls: list[str] = []
        self.kill_at = kill_at

    def __call__(self, name: str) -> None:
        if len(self.calls) == self.kill_at:
            os._exit(9)
        self.calls.append(name)


def prepare(root: Path, before) -> None:
    shutil.rmtree(root, ignore_errors=True)
    for tag, step, keep in before:
        ck.save_checkpoint(root, make_state(tag), step=step, keep=keep)


def save_killed_at(root: Path, save, kill_at: int) -> int:
    tag, step, keep = save
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 3
        try:
            ck._hook = Counter(kill_at)
            ck.save_checkpoint(root, make_state(tag), step=step, keep=keep)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the kill test forks a child per kill point")
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_kill_at_any_os_call_of_a_save_leaves_the_old_or_the_new_checkpoint(tmp_path, scenario):
    before, save = SCENARIOS[scenario]
    old_tag, old_step, _ = before[-1]
    new_tag, new_step, keep = save
    old = expected_fingerprint(tmp_path / "ref", make_state(old_tag), old_step)
    new = expected_fingerprint(tmp_path / "ref", make_state(new_tag), new_step)
    root = tmp_path / "run"

    prepare(root, before)
    counter = Counter()
    ck._hook = counter
    try:
        ck.save_checkpoint(root, make_state(new_tag), step=new_step, keep=keep)
    finally:
        ck._hook = None
    total = len(counter.calls)
    assert total == 2 * len([c for c in counter.calls[::2]])  # each call ticks before and after
    assert {"fsync", "fsync-dir", "rename", "replace"} <= set(counter.calls)

    outcomes = {"old": 0, "new": 0}
    for n in range(total + 1):
        prepare(root, before)
        code = save_killed_at(root, save, n)
        assert code == (0 if n == total else 9), f"kill point {n}: the child exited with {code}"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the latest checkpoint must load without any fallback
            ckpt = ck.load_checkpoint(root)
        got = fingerprint(ckpt)
        assert got in (old, new), f"{scenario}, kill point {n} ({counter.calls[min(n, total - 1)]}): mixed state"
        if got == new:
            assert ckpt.step == new_step
            outcomes["new"] += 1
        else:
            assert ckpt.step == old_step and n < total
            outcomes["old"] += 1
        # The next save cleans up whatever the killed one left, and becomes the latest.
        ck.save_checkpoint(root, make_state(7), step=new_step + 1, keep=keep)
        assert not [p.name for p in root.iterdir() if p.name.startswith(".")], f"kill point {n}: leftovers"
        assert ck.load_checkpoint(root).step == new_step + 1
    assert outcomes["old"] > 0 and outcomes["new"] > 0
    print(f"{scenario}: {total} OS-call ticks, {total + 1} kill points, outcomes {outcomes}")


# -- corrupted files against a Learner ----------------------------------------------------------


def build_learner(out: Path, seed: int):
    em.seed(seed)
    model = nn.Linear(2, 2, device=em.Device.cpu().autodiff())
    learner = (
        LearnerBuilder(model)
        .optimizer(lambda p: optim.SGD(p, lr=0.1, momentum=0.9))
        .checkpoint(out, every=1, every_steps=3, keep=10)
        .epochs(2)
        .progress(False)
        .build()
    )
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return learner, DataLoader(InMemoryDataset(x, y), batch_size=8, shuffle=True, seed=1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run with checkpoints at steps 3, 5 (epoch end), 6, 9 (mid-epoch) and 10 (the end)."""
    out = tmp_path_factory.mktemp("trained")
    learner, loader = build_learner(out, 0)
    learner.fit(loader)
    assert [p.name for p in ck.list_checkpoints(out)] == [f"step-{s:09d}" for s in (3, 5, 6, 9, 10)]
    return out


def learner_state(learner, loader) -> str:
    """A digest of everything restore may change."""
    h = hashlib.sha256()
    for p in learner.model.parameters():
        h.update(p.numpy().tobytes())
    opt = learner.optimizer.state_dict()
    for entry in opt["state"].values():
        for v in entry.values():
            h.update(v.numpy().tobytes() if hasattr(v, "numpy") else repr(v).encode())
    h.update(repr(opt["param_groups"]).encode())
    h.update(repr((em.random.get_state(), loader.state_dict(), learner.epoch, learner.step, learner.history)).encode())
    return h.hexdigest()


def model_bytes(arrays_state) -> bytes:
    return b"".join(np.asarray(v).tobytes() for v in arrays_state["model"].values())


def write_sums(path: Path) -> None:
    sums = {n: hashlib.sha256((path / n).read_bytes()).hexdigest() for n in (ck.RECORD, ck.TENSORS)}
    (path / ck.SUMS).write_text("".join(f"{h}  {n}\n" for n, h in sums.items()))


def test_random_bit_flips_are_refused_or_fall_back_to_an_older_checkpoint(trained, tmp_path):
    good = {ck.load_checkpoint(p).step: model_bytes(ck.load_checkpoint(p).state(as_tensors=False)) for p in
            ck.list_checkpoints(trained)}  # fmt: skip
    rng = np.random.default_rng(2026)
    newest = ck.list_checkpoints(trained)[-1].name
    targets = [f"{newest}/{ck.TENSORS}", f"{newest}/{ck.RECORD}", f"{newest}/{ck.SUMS}", "history.jsonl", "latest.json"]
    results = {"refused": 0, "fell back": 0, "loaded latest": 0}
    n_cases = 150
    for case in range(n_cases):
        root = tmp_path / f"c{case}"
        shutil.copytree(trained, root)
        target = root / targets[case % len(targets)]
        data = bytearray(target.read_bytes())
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(data)))
            data[i] ^= 1 << int(rng.integers(8))
        target.write_bytes(bytes(data))
        learner, loader = build_learner(root, 1)
        before = learner_state(learner, loader)
        if case % 3 == 0 and target.parent.name == newest:  # the damaged checkpoint itself: no fallback
            with pytest.raises(CheckpointError):
                learner.restore(target.parent, loader=loader)
            assert learner_state(learner, loader) == before, f"case {case}: a refused restore changed state"
            results["refused"] += 1
            shutil.rmtree(root)
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                learner.restore(loader=loader)
            except CheckpointError:
                assert learner_state(learner, loader) == before, f"case {case}: a refused restore changed state"
                results["refused"] += 1
                shutil.rmtree(root)
                continue
        params = b"".join(p.numpy().tobytes() for p in learner.model.parameters())
        assert params == good[learner.step], f"case {case}: the weights are not those of step {learner.step}"
        if target.name == "latest.json":
            results["loaded latest" if learner.step == 10 else "fell back"] += 1
        else:
            assert learner.step < 10 and caught, f"case {case}: a damaged newest checkpoint loaded without warning"
            results["fell back"] += 1
        shutil.rmtree(root)
    assert sum(results.values()) == n_cases
    print(f"bit flips: {n_cases} cases, {results}")


HOSTILE = [
    "NaN",
    "Infinity",
    "-Infinity",
    "-1",
    "1e308",
    "-1e308",
    "1e400",
    str(2**70),
    "null",
    "[]",
    "{}",
    "true",
    '"12"',
    json.dumps("x" * (2**21)),
    "[" * 100_000 + "]" * 100_000,
    '{"a": ' * 100_000 + "1" + "}" * 100_000,
]
COUNTER = ["1.5", "1000000"]
TARGETS = {
    ("step",): COUNTER,
    ("format_version",): [],
    ("files", ck.TENSORS, "bytes"): COUNTER,
    ("state", "epoch"): COUNTER,
    ("state", "step"): COUNTER,
    ("state", "rng", "k0"): ["1.5"],
    ("state", "rng", "counter"): ["1.5"],
    ("state", "history", "rows"): COUNTER,
    ("state", "history", "sha256"): [],
    ("state", "loader", "batches_done"): COUNTER,
    ("state", "loader", "epoch"): COUNTER,
    ("state", "optimizer", "param_groups", 0, "lr"): ["0", "1e7"],
    ("state", "optimizer", "param_groups", 0, "momentum"): ["1e7"],
    ("state", "optimizer", "param_groups", 0, "params"): [],
    ("state", "model", "weight", "dtype"): [],
    ("state", "model", "weight", "__tensor__"): [],
    ("state", "partial_metrics", 0, "count"): ["1.5"],
}
CASES = [(path, value) for path, extra in TARGETS.items() for value in HOSTILE + extra]


def test_hostile_record_values_are_refused_and_leave_the_learner_untouched(trained, tmp_path):
    assert len(CASES) >= 200
    step_dir = ck.list_checkpoints(trained)[-2]  # step 9: mid-epoch, so it has loader and metric state
    record = json.loads((step_dir / ck.RECORD).read_text())
    root = tmp_path / "run"
    shutil.copytree(trained, root)
    target_dir = root / step_dir.name
    learner, loader = build_learner(tmp_path / "other", 1)
    learner.fit(loader)  # a learner with state of its own: a half-done restore would show
    before = learner_state(learner, loader)
    messages = set()
    for path, value in CASES:
        rec = json.loads(json.dumps(record))
        node = rec
        for k in path[:-1]:
            node = node[k] if not isinstance(node, dict) or "__intkeys__" not in node else node["__intkeys__"][k]
        node[path[-1]] = "@@HOSTILE@@"
        (target_dir / ck.RECORD).write_text(json.dumps(rec).replace('"@@HOSTILE@@"', value))
        write_sums(target_dir)
        with pytest.raises(CheckpointError) as err:
            learner.restore(target_dir, loader=loader)
        assert learner_state(learner, loader) == before, f"{path} = {value[:20]}: the learner changed"
        messages.add(str(err.value)[:200])
    print(f"hostile values: {len(CASES)} cases refused, {len(messages)} distinct messages")


def test_restore_falls_back_past_a_hostile_newest_checkpoint_with_a_warning(trained, tmp_path):
    root = tmp_path / "run"
    shutil.copytree(trained, root)
    newest = ck.list_checkpoints(root)[-1]
    rec = json.loads((newest / ck.RECORD).read_text())
    rec["state"]["optimizer"]["param_groups"][0]["lr"] = -1
    (newest / ck.RECORD).write_text(json.dumps(rec))
    write_sums(newest)
    learner, loader = build_learner(root, 1)
    with pytest.warns(RuntimeWarning, match="lr"):
        learner.restore(loader=loader)
    assert learner.step == 9 and learner.optimizer.param_groups[0]["lr"] == 0.1


def test_save_refuses_what_load_would_refuse(tmp_path):
    with pytest.raises(CheckpointError, match="limit"):
        ck.save_checkpoint(tmp_path, {"note": "x" * (ck.MAX_RECORD_BYTES + 1)}, step=1)
    with pytest.raises(CheckpointError, match="string"):
        ck.save_checkpoint(tmp_path, {"note": "x" * (ck.MAX_STRING + 1)}, step=1)
    deep: list = []
    for _ in range(ck.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(CheckpointError, match="nested"):
        ck.save_checkpoint(tmp_path, {"deep": deep}, step=1)
    assert ck.list_checkpoints(tmp_path) == [] and not list(tmp_path.iterdir())


def all_paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from all_paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from all_paths(v, (*path, i))


def test_every_field_of_the_record_replaced_by_a_hostile_value_gives_checkpoint_error_or_a_clean_load(
    trained, tmp_path
):
    """Beyond the fields above: whatever a value is replaced by, only CheckpointError escapes."""
    step_dir = ck.list_checkpoints(trained)[-2]
    record = json.loads((step_dir / ck.RECORD).read_text())
    root = tmp_path / "run"
    shutil.copytree(trained, root)
    target_dir = root / step_dir.name
    learner, loader = build_learner(tmp_path / "other", 1)
    values = ["NaN", "-1", "1e308", str(2**70), "null", "[]", "{}", "true", '"12"', "[" * 100_000 + "]" * 100_000]
    paths = [p for p in all_paths(record) if p]
    counts = {"refused": 0, "loaded": 0}
    for path in paths:
        for value in values:
            rec = json.loads(json.dumps(record))
            node = rec
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = "@@HOSTILE@@"
            (target_dir / ck.RECORD).write_text(json.dumps(rec).replace('"@@HOSTILE@@"', value))
            write_sums(target_dir)
            before = learner_state(learner, loader)
            try:
                learner.restore(target_dir, loader=loader)
            except CheckpointError:
                assert learner_state(learner, loader) == before, f"{path} = {value[:20]}: the learner changed"
                counts["refused"] += 1
            else:
                counts["loaded"] += 1  # a harmless field (the creation time as "12"), or an accepted value
    assert counts["refused"] > 0.9 * len(paths) * len(values)
    print(f"every field: {len(paths)} fields x {len(values)} values: {counts}")


def test_an_unreadable_checkpoint_is_a_checkpoint_error(tmp_path, monkeypatch):
    """An OS error while reading (here: permission denied) comes out as CheckpointError."""
    real = Path.read_bytes

    def denied(self):
        if self.name == ck.SUMS:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    (tmp_path / ck.RECORD).write_text("{}", encoding="utf-8")
    (tmp_path / ck.SUMS).write_text("", encoding="utf-8")
    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(CheckpointError, match="cannot be read.*PermissionError"):
        ck._load_one(tmp_path, 2**20)
