"""Checkpoints: round trip, atomic replacement, and refusal of damaged or foreign files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember.errors import CheckpointError
from ember.train import checkpoint as ck


def sample_state():
    return {
        "model": {
            "fc.weight": em.tensor(np.arange(6.0).reshape(2, 3), dtype=em.float32),
            "emb": em.tensor([[1.5, -2.0]], dtype=em.bfloat16),
            "mask": em.tensor([True, False]),
            "count": em.tensor([3], dtype=em.int64),
        },
        "optimizer": {"state": {0: {"step": 3, "exp_avg": em.ones(2, dtype=em.float64)}}, "lr": 0.1},
        "metrics": {"loss": float("nan"), "best": float("inf"), "history": [1.0, 0.5]},
        "rng": em.random.get_state(),
        "note": "hello",
    }


def test_round_trip_preserves_values_dtypes_and_structure(tmp_path):
    state = sample_state()
    path = ck.save_checkpoint(tmp_path, state, step=5)
    assert path.name == "step-000000005"
    loaded = ck.load_checkpoint(tmp_path)
    assert loaded.step == 5
    out = loaded.state()
    for name, t in state["model"].items():
        assert out["model"][name].dtype is t.dtype
        np.testing.assert_array_equal(
            np.asarray(out["model"][name].numpy(), dtype=np.float64), np.asarray(t.numpy(), dtype=np.float64)
        )
    assert out["optimizer"]["state"][0]["step"] == 3
    assert np.isnan(out["metrics"]["loss"]) and out["metrics"]["best"] == float("inf")
    assert out["rng"] == state["rng"] and out["note"] == "hello"
    assert loaded.record["ember_version"] == em.__version__


def test_latest_pointer_and_pruning(tmp_path):
    for step in (1, 2, 3, 4):
        ck.save_checkpoint(tmp_path, {"x": em.ones(1) * step}, step=step, keep=2)
    names = [p.name for p in ck.list_checkpoints(tmp_path)]
    assert names == ["step-000000003", "step-000000004"]
    assert ck.load_checkpoint(tmp_path).state()["x"].item() == 4.0


def test_crash_while_writing_keeps_the_previous_latest(tmp_path, monkeypatch):
    ck.save_checkpoint(tmp_path, {"x": em.ones(1)}, step=1)

    def crash(*args, **kwargs):
        raise OSError("disk died")

    monkeypatch.setattr(ck.os, "rename", crash)
    with pytest.raises(OSError, match="disk died"):
        ck.save_checkpoint(tmp_path, {"x": em.zeros(1)}, step=2)
    monkeypatch.undo()
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step-000000001"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    assert ck.load_checkpoint(tmp_path).state()["x"].item() == 1.0


def _one(tmp_path) -> Path:
    return ck.save_checkpoint(tmp_path, {"w": em.arange(1000, dtype=em.float32)}, step=1)


def rewrite_record(path: Path, data: bytes) -> None:
    """Replace record.json and update SHA256SUMS to match, as a deliberate (not accidental) edit would."""
    (path / ck.RECORD).write_bytes(data)
    tensors = (path / ck.TENSORS).read_bytes() if (path / ck.TENSORS).is_file() else b""
    sums = {ck.RECORD: hashlib.sha256(data).hexdigest(), ck.TENSORS: hashlib.sha256(tensors).hexdigest()}
    (path / ck.SUMS).write_text("".join(f"{h}  {n}\n" for n, h in sums.items()))


def test_truncated_tensor_file_is_refused(tmp_path):
    path = _one(tmp_path)
    data = (path / ck.TENSORS).read_bytes()
    (path / ck.TENSORS).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        ck.load_checkpoint(path)


def test_flipped_bits_are_detected(tmp_path):
    path = _one(tmp_path)
    data = bytearray((path / ck.TENSORS).read_bytes())
    data[-10] ^= 0xFF
    (path / ck.TENSORS).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="SHA-256"):
        ck.load_checkpoint(path)


def test_corrupt_record_is_refused(tmp_path):
    path = _one(tmp_path)
    (path / ck.RECORD).write_text('{"format": "ember-checkpoint", "format_ver')
    with pytest.raises(CheckpointError, match="SHA-256"):
        ck.load_checkpoint(path)
    rewrite_record(path, b'{"format": "ember-checkpoint", "format_ver')
    with pytest.raises(CheckpointError, match="not valid JSON"):
        ck.load_checkpoint(path)


@pytest.mark.parametrize("version,words", [(99, "newer"), (0, "no migration")])
def test_other_format_versions_name_both_versions(tmp_path, version, words):
    path = _one(tmp_path)
    record = json.loads((path / ck.RECORD).read_text())
    record["format_version"] = version
    rewrite_record(path, json.dumps(record).encode())
    with pytest.raises(CheckpointError, match=words) as err:
        ck.load_checkpoint(path)
    assert str(version) in str(err.value) and str(ck.FORMAT_VERSION) in str(err.value)


def test_pointer_cannot_escape_the_directory(tmp_path):
    _one(tmp_path)
    (tmp_path / ck.LATEST).write_text(json.dumps({"latest": "../../etc"}))
    with pytest.warns(RuntimeWarning, match="not a checkpoint directory name"):
        assert ck.load_checkpoint(tmp_path).path.name == "step-000000001"


def test_foreign_files_are_refused(tmp_path):
    (tmp_path / "step-000000001").mkdir()
    rewrite_record(tmp_path / "step-000000001", json.dumps({"format": "pickle"}).encode())
    with pytest.raises(CheckpointError, match="not an ember-checkpoint"):
        ck.load_checkpoint(tmp_path / "step-000000001")
    with pytest.raises(CheckpointError, match="does not exist"):
        ck.load_checkpoint(tmp_path / "nope")


def test_loading_never_unpickles(tmp_path, monkeypatch):
    import pickle

    _one(tmp_path)

    def forbidden(*args, **kwargs):
        raise AssertionError("a checkpoint load reached an unpickler")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    monkeypatch.setattr(np, "load", forbidden)
    assert ck.load_checkpoint(tmp_path).state()["w"].shape == (1000,)
