"""Checkpoints: tensors in safetensors plus a JSON record, written atomically, verified on load.

A checkpoint is a directory ``<root>/step-000000123/`` holding ``tensors.safetensors`` and
``record.json`` (format version, ember version, SHA-256 of the tensor file, and the state tree
in which every tensor is a reference into the safetensors file). It is built in a temporary
directory, fsync'ed and renamed into place; then ``<root>/latest.json`` is replaced
atomically. A crash at any point leaves the previous latest checkpoint intact. Nothing is
ever unpickled: loading parses JSON and safetensors only, after size and hash checks.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from .. import __version__
from ..creation import tensor
from ..dtypes import as_dtype
from ..errors import CheckpointError
from ..tensor import Tensor

__all__ = [
    "FORMAT_VERSION",
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "list_checkpoints",
    "Checkpoint",
    "flatten_state",
    "unflatten_state",
]

FORMAT_VERSION = 1
FORMAT_NAME = "ember-checkpoint"
RECORD = "record.json"
TENSORS = "tensors.safetensors"
LATEST = "latest.json"
MAX_RECORD_BYTES = 64 * 2**20
_NAME = re.compile(r"^step-\d{9,}$")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- state trees ---------------------------------------------------------------------------


def flatten_state(tree: Any, prefix: str = "") -> tuple[Any, dict[str, np.ndarray]]:
    """Split a nested state (dicts, lists, numbers, strings, tensors, arrays) into a JSON tree
    with ``{"__tensor__": key, "dtype": name}`` references and a dict of numpy arrays."""
    arrays: dict[str, np.ndarray] = {}

    def walk(node: Any, path: str) -> Any:
        if isinstance(node, Tensor):
            node = (node.numpy(), node.dtype.name)
        elif isinstance(node, np.ndarray):
            node = (node, "bool" if node.dtype == np.bool_ else node.dtype.name)
        if isinstance(node, tuple) and len(node) == 2 and isinstance(node[0], np.ndarray):
            arr, dtype = node
            key = path or "tensor"
            if key in arrays:
                raise CheckpointError(f"checkpoint: two tensors map to the key {key!r}")
            if dtype == "bfloat16":
                arr = arr.view(np.uint16)
            arrays[key] = np.ascontiguousarray(arr)
            return {"__tensor__": key, "dtype": dtype}
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if not isinstance(k, (str, int)):
                    raise CheckpointError(f"checkpoint: state keys must be str or int, got {k!r} at {path!r}")
                out[str(k)] = walk(v, f"{path}/{k}" if path else str(k))
            if any(isinstance(k, int) for k in node):
                out = {"__intkeys__": out}
            return out
        if isinstance(node, (list, tuple)):
            return [walk(v, f"{path}/{i}") for i, v in enumerate(node)]
        if isinstance(node, (np.generic,)):
            return node.item()
        if node is None or isinstance(node, (bool, int, float, str)):
            if isinstance(node, float) and not np.isfinite(node):
                return {"__float__": repr(node)}
            return node
        raise CheckpointError(f"checkpoint: cannot store a {type(node).__name__} at {path!r}")

    return walk(tree, prefix), arrays


def unflatten_state(tree: Any, arrays: dict[str, np.ndarray], device: Any = None, as_tensors: bool = True) -> Any:
    """Rebuild the state from :func:`flatten_state`'s output (tensors on ``device``)."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "__tensor__" in node:
                key = node["__tensor__"]
                if key not in arrays:
                    raise CheckpointError(f"checkpoint: the record refers to tensor {key!r}, missing from {TENSORS}")
                arr = arrays[key]
                dtype = as_dtype(node.get("dtype", "float32"))
                if dtype.name == "bfloat16":
                    arr = arr.view(dtype.numpy)
                elif arr.dtype != dtype.numpy:
                    raise CheckpointError(
                        f"checkpoint: tensor {key!r} is stored as {arr.dtype}, the record says {dtype}"
                    )
                if not as_tensors:
                    return arr
                return tensor(arr, dtype=dtype, device=device)
            if "__float__" in node:
                return float(node["__float__"])
            if "__intkeys__" in node:
                return {(int(k) if k.lstrip("-").isdigit() else k): walk(v) for k, v in node["__intkeys__"].items()}
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(tree)


# -- saving --------------------------------------------------------------------------------


def save_checkpoint(root: str | os.PathLike, state: dict[str, Any], step: int, keep: int | None = None) -> Path:
    """Write ``state`` as checkpoint ``step`` under ``root`` atomically; keep the newest ``keep``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{int(step):09d}"
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        tree, arrays = flatten_state(state)
        tensor_path = tmp / TENSORS
        save_file(arrays, str(tensor_path), metadata={"format": FORMAT_NAME})
        with open(tensor_path, "rb+") as f:
            os.fsync(f.fileno())
        record = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "ember_version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "step": int(step),
            "files": {TENSORS: {"sha256": _sha256(tensor_path), "bytes": tensor_path.stat().st_size}},
            "state": tree,
        }
        _write_file(tmp / RECORD, json.dumps(record, indent=1, allow_nan=False).encode())
        _fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    pointer = root / f".{LATEST}.tmp-{os.getpid()}"
    _write_file(pointer, json.dumps({"latest": name, "step": int(step)}).encode())
    os.replace(pointer, root / LATEST)
    _fsync_dir(root)
    if keep is not None and keep > 0:
        for old in list_checkpoints(root)[:-keep]:
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(root: str | os.PathLike) -> list[Path]:
    """Checkpoint directories under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)), key=lambda p: p.name)


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The checkpoint ``latest.json`` names (or the newest directory when the pointer is missing)."""
    root = Path(root)
    pointer = root / LATEST
    if pointer.is_file():
        try:
            name = json.loads(pointer.read_text())["latest"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"checkpoint: {pointer} is unreadable ({exc}); remove it to fall back") from None
        if not isinstance(name, str) or not _NAME.match(name):
            raise CheckpointError(f"checkpoint: {pointer} names {name!r}, which is not a checkpoint directory name")
        path = root / name
        if not path.is_dir():
            raise CheckpointError(f"checkpoint: {pointer} names {name}, but {path} does not exist")
        return path
    found = list_checkpoints(root)
    return found[-1] if found else None


# -- loading -------------------------------------------------------------------------------


class Checkpoint:
    """A verified checkpoint: ``record`` (metadata) and ``state`` (the saved tree)."""

    def __init__(self, path: Path, record: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.path = path
        self.record = record
        self._arrays = arrays

    @property
    def step(self) -> int:
        return int(self.record.get("step", 0))

    def state(self, device: Any = None, as_tensors: bool = True) -> Any:
        """The saved state tree with tensors placed on ``device``."""
        return unflatten_state(self.record["state"], self._arrays, device=device, as_tensors=as_tensors)


def _read_record(path: Path) -> dict[str, Any]:
    rec_path = path / RECORD
    if not rec_path.is_file():
        raise CheckpointError(f"checkpoint: {path} has no {RECORD}; it is not an ember checkpoint or was cut short")
    size = rec_path.stat().st_size
    if size > MAX_RECORD_BYTES:
        raise CheckpointError(f"checkpoint: {rec_path} is {size} bytes, over the {MAX_RECORD_BYTES}-byte limit")
    try:
        record = json.loads(rec_path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"checkpoint: {rec_path} is not valid JSON ({exc}); the file is corrupt or truncated"
        ) from None
    if not isinstance(record, dict) or record.get("format") != FORMAT_NAME:
        raise CheckpointError(f"checkpoint: {rec_path} is not an {FORMAT_NAME} record")
    version = record.get("format_version")
    if not isinstance(version, int):
        raise CheckpointError(f"checkpoint: {rec_path} has no integer format_version")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint: {path} has format version {version}, newer than this ember "
            f"{__version__} reads (up to {FORMAT_VERSION}); upgrade ember"
        )
    if version < FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint: {path} has format version {version}; this ember {__version__} reads version "
            f"{FORMAT_VERSION} and has no migration from {version}. Load it with the ember release that wrote it "
            f"({record.get('ember_version', 'unknown')}) and save it again."
        )
    return record


def load_checkpoint(path: str | os.PathLike, max_bytes: int = 64 * 2**30) -> Checkpoint:
    """Load and verify a checkpoint directory (or the latest under a root directory)."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"checkpoint: {p} does not exist")
    if p.is_dir() and not (p / RECORD).exists():
        found = latest_checkpoint(p)
        if found is None:
            raise CheckpointError(f"checkpoint: {p} holds no checkpoint (no {RECORD}, {LATEST} or step-* directory)")
        p = found
    record = _read_record(p)
    files = record.get("files")
    if not isinstance(files, dict) or TENSORS not in files:
        raise CheckpointError(f"checkpoint: {p}/{RECORD} does not list {TENSORS}")
    meta = files[TENSORS]
    tpath = p / TENSORS
    if not tpath.is_file():
        raise CheckpointError(f"checkpoint: {tpath} is missing")
    size = tpath.stat().st_size
    if size != meta.get("bytes"):
        raise CheckpointError(
            f"checkpoint: {tpath} has {size} bytes but the record says {meta.get('bytes')}: the file is truncated "
            f"or was replaced"
        )
    if size > max_bytes:
        raise CheckpointError(f"checkpoint: {tpath} is {size} bytes, over max_bytes={max_bytes}")
    if _sha256(tpath) != meta.get("sha256"):
        raise CheckpointError(f"checkpoint: {tpath} does not match its SHA-256 in the record: the data is corrupt")
    try:
        arrays = {k: np.array(v, copy=True) for k, v in load_file(str(tpath)).items()}
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"checkpoint: {tpath} is not a valid safetensors file ({exc})") from None
    return Checkpoint(p, record, arrays)
