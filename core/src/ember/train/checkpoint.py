"""Checkpoints: tensors in safetensors plus a JSON record, both checksummed, switched in atomically.

A checkpoint is a directory ``<root>/step-000000123/`` (``step-000000123-1``, ``-2``... when the
same step is saved again) holding ``tensors.safetensors``, ``record.json`` (format version, ember
version, step, and the state tree in which every tensor is a reference into the safetensors file)
and ``SHA256SUMS`` (``sha256sum -c`` format) covering both. A save

1. removes what an earlier, interrupted save left behind (``.tmp-*``, ``.trash-*``);
2. writes the new checkpoint completely in ``.tmp-step-...`` (each file fsync'ed, then the
   directory), and renames it to a name that no existing checkpoint has;
3. switches ``latest.json`` atomically (temporary file, fsync, ``os.replace``, directory fsync);
4. only then removes what it replaced: older revisions of the same step, checkpoints of a
   later step from an abandoned run, and checkpoints beyond ``keep`` (each renamed to
   ``.trash-*`` first, so a removal cut short never looks like a checkpoint).

A kill at any instant therefore leaves either the previous or the new checkpoint loadable.
Loading a root directory tries the checkpoint ``latest.json`` names, then every other one from
the newest down, and warns about each one it skips. Nothing is ever unpickled: loading hashes the
files, then parses JSON (no NaN literals, bounded nesting, sizes and numbers) and safetensors.
One process writes to a root at a time.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file
from safetensors.numpy import save as _safetensors_bytes

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
    "parse_json",
]

FORMAT_VERSION = 2
FORMAT_NAME = "ember-checkpoint"
RECORD = "record.json"
TENSORS = "tensors.safetensors"
SUMS = "SHA256SUMS"
LATEST = "latest.json"
MAX_RECORD_BYTES = 64 * 2**20
MAX_DEPTH = 64
MAX_STRING = 2**20
MAX_INT_DIGITS = 20
_NAME = re.compile(r"^step-(\d{9,})(?:-(\d{1,9}))?$")
_HEX = re.compile(r"^[0-9a-f]{64}$")
_LEFTOVER = (".tmp-", ".trash-", f".{LATEST}.tmp-")
_FLOAT_NAMES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_DTYPES += ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")

# Tests set this to ``f(op_name)``; it is called just before and just after every OS call that
# changes the file system during a save (fault injection: kill the process at call N).
_hook: Callable[[str], None] | None = None


def _os(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    if _hook is not None:
        _hook(name)
    out = fn(*args)
    if _hook is not None:
        _hook(name)
    return out


def _fsync_dir(path: Path) -> None:
    try:
        fd = _os("open-dir", os.open, path, os.O_RDONLY)
    except OSError:
        return
    try:
        _os("fsync-dir", os.fsync, fd)
    except OSError:
        pass  # some file systems cannot fsync a directory
    finally:
        _os("close-dir", os.close, fd)


def _write_file(path: Path, data: bytes) -> None:
    fd = _os("open", os.open, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = _os("write", os.write, fd, view)
            view = view[n:]
        _os("fsync", os.fsync, fd)
    finally:
        _os("close", os.close, fd)


def _remove_dir(path: Path) -> None:
    """Remove a flat directory (a checkpoint or a leftover) file by file."""
    for child in sorted(path.iterdir()):
        if child.is_dir() and not child.is_symlink():
            _remove_dir(child)
        else:
            _os("unlink", os.unlink, child)
    _os("rmdir", os.rmdir, path)


def _discard(root: Path, path: Path) -> None:
    """Rename ``path`` out of the checkpoint namespace, then delete it."""
    trash = root / f".trash-{path.name}-{os.getpid()}"
    _os("rename", os.rename, path, trash)
    _fsync_dir(root)
    _remove_dir(trash)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- JSON with limits ----------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise CheckpointError(f"{name} is not allowed (non-finite numbers are stored as {{'__float__': ...}})")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise CheckpointError(f"an integer of {len(text)} digits is over the {MAX_INT_DIGITS}-digit limit")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise CheckpointError(f"the number {text[:40]} does not fit a finite float")
    return value


def parse_json(data: bytes | str, where: str) -> Any:
    """Parse untrusted JSON: no NaN/Infinity, integers of at most 20 digits, nesting and strings bounded."""
    try:
        tree = json.loads(data, parse_constant=_reject_constant, parse_int=_parse_int, parse_float=_parse_float)
    except CheckpointError as exc:
        raise CheckpointError(f"checkpoint: {where}: {exc}") from None
    except RecursionError:
        raise CheckpointError(f"checkpoint: {where} is nested too deeply to be a checkpoint") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"checkpoint: {where} is not valid JSON ({exc}); the file is corrupt or truncated"
        ) from None
    _check_tree(tree, where)
    return tree


def _check_tree(tree: Any, where: str) -> None:
    """Bounded depth and strings; tensor, float and int-key markers well formed."""
    stack: list[tuple[Any, int, str]] = [(tree, 0, "")]
    while stack:
        node, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            raise CheckpointError(f"checkpoint: {where}: {path or '/'} is nested over {MAX_DEPTH} levels deep")
        if isinstance(node, str):
            if len(node) > MAX_STRING:
                raise CheckpointError(f"checkpoint: {where}: {path} holds a string of {len(node)} characters")
        elif isinstance(node, int) and not isinstance(node, bool):
            if not -(2**63) <= node < 2**64:
                raise CheckpointError(f"checkpoint: {where}: {path} = {node} is out of the 64-bit range")
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise CheckpointError(f"checkpoint: {where}: {path} is not finite")
        elif isinstance(node, list):
            stack.extend((v, depth + 1, f"{path}/{i}") for i, v in enumerate(node))
        elif isinstance(node, dict):
            if "__tensor__" in node:
                ref, dtype = node.get("__tensor__"), node.get("dtype")
                if set(node) != {"__tensor__", "dtype"} or not isinstance(ref, str) or dtype not in _DTYPES:
                    raise CheckpointError(f"checkpoint: {where}: {path} is a malformed tensor reference")
                continue
            if "__float__" in node:
                if set(node) != {"__float__"} or node["__float__"] not in _FLOAT_NAMES:
                    raise CheckpointError(f"checkpoint: {where}: {path} is a malformed non-finite float")
                continue
            if "__intkeys__" in node and (set(node) != {"__intkeys__"} or not isinstance(node["__intkeys__"], dict)):
                raise CheckpointError(f"checkpoint: {where}: {path} is a malformed int-keyed dict")
            for k, v in node.items():
                if len(k) > 1024:
                    raise CheckpointError(f"checkpoint: {where}: {path} has a key of {len(k)} characters")
                stack.append((v, depth + 1, f"{path}/{k[:40]}"))
        elif node is not None and not isinstance(node, bool):
            raise CheckpointError(f"checkpoint: {where}: {path} holds a {type(node).__name__}")


# -- state trees ---------------------------------------------------------------------------


def flatten_state(tree: Any, prefix: str = "") -> tuple[Any, dict[str, np.ndarray]]:
    """Split a nested state (dicts, lists, numbers, strings, tensors, arrays) into a JSON tree
    with ``{"__tensor__": key, "dtype": name}`` references and a dict of numpy arrays."""
    arrays: dict[str, np.ndarray] = {}

    def walk(node: Any, path: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CheckpointError(f"checkpoint: the state is nested over {MAX_DEPTH} levels deep at {path[:200]!r}")
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
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise CheckpointError(f"checkpoint: state keys must be str or int, got {k!r} at {path!r}")
                out[str(k)] = walk(v, f"{path}/{k}" if path else str(k), depth + 1)
            if any(isinstance(k, int) for k in node):
                out = {"__intkeys__": out}
            return out
        if isinstance(node, (list, tuple)):
            return [walk(v, f"{path}/{i}", depth + 1) for i, v in enumerate(node)]
        if isinstance(node, (np.generic,)):
            node = node.item()
        if node is None or isinstance(node, (bool, int, float, str)):
            if isinstance(node, float) and not np.isfinite(node):
                return {"__float__": repr(node)}
            return node
        raise CheckpointError(f"checkpoint: cannot store a {type(node).__name__} at {path!r}")

    return walk(tree, prefix, 0), arrays


def unflatten_state(tree: Any, arrays: dict[str, np.ndarray], device: Any = None, as_tensors: bool = True) -> Any:
    """Rebuild the state from :func:`flatten_state`'s output (tensors on ``device``)."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "__tensor__" in node:
                key = node["__tensor__"]
                if not isinstance(key, str) or key not in arrays:
                    raise CheckpointError(f"checkpoint: the record refers to tensor {key!r}, missing from {TENSORS}")
                arr = arrays[key]
                dtype = as_dtype(node.get("dtype", "float32"))
                if dtype.name == "bfloat16":
                    if arr.dtype != np.uint16:
                        raise CheckpointError(f"checkpoint: tensor {key!r} is stored as {arr.dtype}, not bfloat16")
                    arr = arr.view(dtype.numpy)
                elif arr.dtype != dtype.numpy:
                    raise CheckpointError(
                        f"checkpoint: tensor {key!r} is stored as {arr.dtype}, the record says {dtype}"
                    )
                if not as_tensors:
                    return arr
                return tensor(arr, dtype=dtype, device=device)
            if "__float__" in node:
                return _FLOAT_NAMES[str(node["__float__"])] if node["__float__"] in _FLOAT_NAMES else float("nan")
            if "__intkeys__" in node:
                return {(int(k) if k.lstrip("-").isdigit() else k): walk(v) for k, v in node["__intkeys__"].items()}
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(tree)


# -- records -------------------------------------------------------------------------------


def _check_record(record: Any, where: str) -> dict[str, Any]:
    """The record's own fields: names, types and ranges (the state tree is checked by _check_tree)."""
    if not isinstance(record, dict) or record.get("format") != FORMAT_NAME:
        raise CheckpointError(f"checkpoint: {where} is not an {FORMAT_NAME} record")
    version = record.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(f"checkpoint: {where} has no integer format_version")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint: {where} has format version {version}, newer than this ember "
            f"{__version__} reads (up to {FORMAT_VERSION}); upgrade ember"
        )
    if version < FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint: {where} has format version {version}; this ember {__version__} reads version "
            f"{FORMAT_VERSION} and has no migration from {version}. Load it with the ember release that wrote it "
            f"({record.get('ember_version', 'unknown')!s:.40}) and save it again."
        )
    expected = {"format", "format_version", "ember_version", "created", "step", "files", "state"}
    if set(record) != expected:
        raise CheckpointError(
            f"checkpoint: {where} has fields {sorted(record)[:20]}, expected {sorted(expected)}; it was not "
            f"written by ember {FORMAT_VERSION}-format checkpoints"
        )
    for field in ("ember_version", "created"):
        if not isinstance(record[field], str) or len(record[field]) > 64:
            raise CheckpointError(f"checkpoint: {where}: field {field!r} must be a short string")
    step = record["step"]
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 2**63:
        raise CheckpointError(f"checkpoint: {where}: field 'step' must be a non-negative integer, got {step!r:.40}")
    files = record["files"]
    meta = files.get(TENSORS) if isinstance(files, dict) and set(files) == {TENSORS} else None
    size = meta.get("bytes") if isinstance(meta, dict) and set(meta) == {"bytes"} else None
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise CheckpointError(f"checkpoint: {where}: field 'files' must list {TENSORS} with its size in bytes")
    return record


def _encode_record(step: int, tree: Any, tensor_bytes: int) -> bytes:
    record = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "ember_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "step": int(step),
        "files": {TENSORS: {"bytes": tensor_bytes}},
        "state": tree,
    }
    try:
        data = json.dumps(record, indent=1, allow_nan=False).encode()
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"checkpoint: the state of step {step} cannot be written as JSON ({exc})") from None
    if len(data) > MAX_RECORD_BYTES:
        raise CheckpointError(
            f"checkpoint: the record of step {step} would be {len(data)} bytes, over the {MAX_RECORD_BYTES}-byte "
            f"limit that loading enforces; keep large values in tensors"
        )
    _check_record(parse_json(data, f"the record of step {step}"), f"the record of step {step}")
    return data


def _sums(files: dict[str, bytes]) -> bytes:
    return "".join(f"{_sha256(data)}  {name}\n" for name, data in sorted(files.items())).encode()


def _read_sums(path: Path) -> dict[str, str]:
    sums_path = path / SUMS
    if not sums_path.is_file() or sums_path.stat().st_size > 1024:
        raise CheckpointError(f"checkpoint: {path} has no readable {SUMS}; it was cut short or is not ember's")
    out = {}
    try:
        lines = sums_path.read_bytes().decode("ascii").splitlines()
    except UnicodeDecodeError:
        lines = []
    for line in lines:
        digest, _, name = line.partition("  ")
        if _HEX.match(digest) and name in (RECORD, TENSORS):
            out[name] = digest
    if len(lines) != 2 or set(out) != {RECORD, TENSORS}:
        raise CheckpointError(f"checkpoint: {sums_path} is malformed (expected a SHA-256 of {RECORD} and {TENSORS})")
    return out


# -- saving --------------------------------------------------------------------------------


def _key(path: Path) -> tuple[int, int]:
    m = _NAME.match(path.name)
    if m is None:
        return (-1, -1)
    return int(m.group(1)), int(m.group(2) or 0)


def _clean_leftovers(root: Path) -> None:
    for p in sorted(root.iterdir()):
        if not p.name.startswith(_LEFTOVER):
            continue
        if p.is_dir() and not p.is_symlink():
            _remove_dir(p)
        else:
            _os("unlink", os.unlink, p)


def save_checkpoint(root: str | os.PathLike, state: dict[str, Any], step: int, keep: int | None = None) -> Path:
    """Write ``state`` as checkpoint ``step`` under ``root``, switch ``latest.json`` to it, keep the newest ``keep``.

    >>> # save_checkpoint("runs/x", {"model": model.state_dict()}, step=100, keep=3)
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    step = int(step)
    tree, arrays = flatten_state(state)
    tensor_data = _safetensors_bytes(arrays, metadata={"format": FORMAT_NAME})
    record_data = _encode_record(step, tree, len(tensor_data))
    sums = _sums({RECORD: record_data, TENSORS: tensor_data})

    _clean_leftovers(root)
    existing = list_checkpoints(root)
    same = [p for p in existing if _key(p)[0] == step]
    rev = max((_key(p)[1] for p in same), default=-1) + 1
    name = f"step-{step:09d}" + (f"-{rev}" if rev else "")
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    _os("mkdir", os.mkdir, tmp)
    try:
        _write_file(tmp / TENSORS, tensor_data)
        _write_file(tmp / RECORD, record_data)
        _write_file(tmp / SUMS, sums)
        _fsync_dir(tmp)
        _os("rename", os.rename, tmp, final)
    except BaseException:
        try:
            _remove_dir(tmp)
        except OSError:
            pass  # the next save removes it
        raise
    _fsync_dir(root)

    pointer = root / f".{LATEST}.tmp-{os.getpid()}"
    _write_file(pointer, json.dumps({"latest": name, "step": step}).encode())
    _os("replace", os.replace, pointer, root / LATEST)
    _fsync_dir(root)

    # Only now, with latest.json naming the new checkpoint, remove what it replaced.
    stale = [p for p in existing if _key(p)[0] >= step]  # older revisions of this step, or an abandoned future
    older = [p for p in existing if _key(p)[0] < step]
    if keep is not None and keep > 0:
        stale += older[: max(0, len(older) - (keep - 1))]
    for old in stale:
        _discard(root, old)
    return final


def list_checkpoints(root: str | os.PathLike) -> list[Path]:
    """Checkpoint directories under ``root``, oldest first (complete or not: loading checks)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)), key=_key)


def _pointer(root: Path) -> tuple[Path | None, str | None]:
    """The directory ``latest.json`` names, or None and why not."""
    pointer = root / LATEST
    if not pointer.is_file():
        return None, None
    try:
        if pointer.stat().st_size > 4096:
            raise CheckpointError("it is too large")
        data = parse_json(pointer.read_bytes(), str(pointer))
        name = data.get("latest") if isinstance(data, dict) else None
    except (OSError, CheckpointError) as exc:
        return None, f"{pointer} is unreadable ({exc})"
    if not isinstance(name, str) or not _NAME.match(name):
        return None, f"{pointer} names {name!r:.80}, which is not a checkpoint directory name"
    path = root / name
    if not path.is_dir():
        return None, f"{pointer} names {name}, but {path} does not exist"
    return path, None


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The checkpoint ``latest.json`` names (or the newest directory when the pointer is missing or bad)."""
    root = Path(root)
    path, _ = _pointer(root)
    if path is not None:
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
        self.prepared: Any = None  # what load_checkpoint's ``check`` returned

    @property
    def step(self) -> int:
        return int(self.record["step"])

    def state(self, device: Any = None, as_tensors: bool = True) -> Any:
        """The saved state tree with tensors placed on ``device``."""
        try:
            return unflatten_state(self.record["state"], self._arrays, device=device, as_tensors=as_tensors)
        except CheckpointError as exc:
            raise CheckpointError(f"{exc} (in {self.path})") from None
        except Exception as exc:  # a tensor that the device refuses, a dtype name it lacks
            raise CheckpointError(f"checkpoint: {self.path}: cannot rebuild the state ({exc!r:.200})") from None


def _load_one(p: Path, max_bytes: int) -> Checkpoint:
    try:
        return _load_files(p, max_bytes)
    except OSError as exc:  # permission denied, a file vanishing under us, an I/O error
        raise CheckpointError(f"checkpoint: {p} cannot be read ({type(exc).__name__}: {exc})") from None


def _load_files(p: Path, max_bytes: int) -> Checkpoint:
    if not (p / RECORD).is_file():
        raise CheckpointError(f"checkpoint: {p} has no {RECORD}; it is not an ember checkpoint or was cut short")
    sums = _read_sums(p)
    rec_path, tpath = p / RECORD, p / TENSORS
    size = rec_path.stat().st_size
    if size > MAX_RECORD_BYTES:
        raise CheckpointError(f"checkpoint: {rec_path} is {size} bytes, over the {MAX_RECORD_BYTES}-byte limit")
    data = rec_path.read_bytes()
    if _sha256(data) != sums[RECORD]:
        raise CheckpointError(f"checkpoint: {rec_path} does not match its SHA-256 in {SUMS}: the record is corrupt")
    record = _check_record(parse_json(data, str(rec_path)), str(rec_path))
    if not tpath.is_file():
        raise CheckpointError(f"checkpoint: {tpath} is missing")
    size = tpath.stat().st_size
    expected = record["files"][TENSORS]["bytes"]
    if size != expected:
        raise CheckpointError(
            f"checkpoint: {tpath} has {size} bytes but the record says {expected}: the file is truncated "
            f"or was replaced"
        )
    if size > max_bytes:
        raise CheckpointError(f"checkpoint: {tpath} is {size} bytes, over max_bytes={max_bytes}")
    if _sha256(tpath.read_bytes()) != sums[TENSORS]:
        raise CheckpointError(f"checkpoint: {tpath} does not match its SHA-256 in {SUMS}: the data is corrupt")
    try:
        arrays = {k: np.array(v, copy=True) for k, v in load_file(str(tpath)).items()}
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"checkpoint: {tpath} is not a valid safetensors file ({exc})") from None
    ckpt = Checkpoint(p, record, arrays)
    ckpt.state(as_tensors=False)  # every reference resolves, every dtype matches
    return ckpt


def load_checkpoint(
    path: str | os.PathLike, max_bytes: int = 64 * 2**30, check: Callable[[Checkpoint], Any] | None = None
) -> Checkpoint:
    """Load and verify a checkpoint directory, or the newest good one under a root directory.

    ``check(ckpt)`` may validate further (raising CheckpointError); its result is ``ckpt.prepared``.
    Under a root, a checkpoint that fails is skipped with a warning and the next newest is tried.
    """
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"checkpoint: {p} does not exist")

    def one(q: Path) -> Checkpoint:
        ckpt = _load_one(q, max_bytes)
        if check is not None:
            ckpt.prepared = check(ckpt)
        return ckpt

    if not p.is_dir() or (p / RECORD).exists() or _NAME.match(p.name):
        return one(p)
    pointed, why = _pointer(p)
    skipped = [why] if why else []
    candidates = ([pointed] if pointed else []) + [q for q in reversed(list_checkpoints(p)) if q != pointed]
    if not candidates and not skipped:
        raise CheckpointError(f"checkpoint: {p} holds no checkpoint (no {LATEST} or step-* directory)")
    for q in candidates:
        try:
            ckpt = one(q)
        except CheckpointError as exc:
            skipped.append(str(exc))
            continue
        if skipped:
            warnings.warn(
                f"checkpoint: loaded {ckpt.path.name}, skipping what failed: " + "; ".join(skipped),
                RuntimeWarning,
                stacklevel=2,
            )
        return ckpt
    raise CheckpointError(f"checkpoint: no loadable checkpoint under {p}: " + "; ".join(skipped))
