"""Checks of a checkpoint's state against the learner restoring it: every field's type,
range and shape, before anything is assigned (restore is all or nothing)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError
from ..tensor import Tensor

__all__ = ["StateChecker", "MAX_HYPERPARAMETER"]

#: the largest optimizer setting (lr, betas, weight decay...) a checkpoint may hold
MAX_HYPERPARAMETER = 1e6


class StateChecker:
    """Validation of a checkpoint's state against this learner; every failure names the field."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, field: str, what: str) -> Any:
        raise CheckpointError(
            f"checkpoint: {self.path}: field {field!r} {what}; the checkpoint is damaged or was written by a "
            f"different setup. Resume from another checkpoint or start without --resume."
        )

    def integer(self, value: Any, field: str, hi: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= hi:
            self.fail(field, f"must be an integer in [0, {hi}], got {value!r:.40}")
        return value

    def number(self, value: Any, field: str, bound: float = 2.0**53) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            self.fail(field, f"must be a finite number, got {value!r:.40}")
        if abs(value) > bound:
            self.fail(field, f"is {value!r:.40}, beyond the bound {bound:g}")
        return float(value)

    def like(self, saved: Any, own: Any, field: str, exact_keys: bool = False, depth: int = 0) -> None:
        """``saved`` has the shape of ``own``: same kinds of values, dict keys a subset (or equal)."""
        if depth > 8:
            self.fail(field, "is nested deeper than this learner's state")
        if isinstance(own, bool):
            if not isinstance(saved, bool):
                self.fail(field, f"must be a bool, got {saved!r:.40}")
        elif isinstance(own, int):  # a count (or an int setting): an int again, non-negative if it was
            if not isinstance(saved, int) or isinstance(saved, bool) or (own >= 0 > saved):
                self.fail(field, f"must be an integer like {own}, got {saved!r:.40}")
            self.number(saved, field)
        elif isinstance(own, float):
            self.number(saved, field)
        elif isinstance(own, str):
            if not isinstance(saved, str):
                self.fail(field, f"must be a string, got {saved!r:.40}")
        elif own is None:
            if saved is not None and not isinstance(saved, (bool, int, float, str)):
                self.fail(field, f"must be a plain value, got {type(saved).__name__}")
            if isinstance(saved, (int, float)) and not isinstance(saved, bool):
                self.number(saved, field)
        elif isinstance(own, (list, tuple)):
            if not isinstance(saved, list) or len(saved) != len(own):
                self.fail(field, f"must be a list of {len(own)} values")
            for i, (s, o) in enumerate(zip(saved, own)):
                self.like(s, o, f"{field}/{i}", depth=depth + 1)
        elif isinstance(own, dict):
            if not isinstance(saved, dict) or not set(saved) <= set(own) or (exact_keys and set(saved) != set(own)):
                self.fail(field, f"must be a dict with the keys {sorted(map(str, own))[:12]}")
            for k, v in saved.items():
                self.like(v, own[k], f"{field}/{k}", depth=depth + 1)
        elif isinstance(own, (Tensor, np.ndarray)):
            if not isinstance(saved, (Tensor, np.ndarray)) or tuple(saved.shape) != tuple(own.shape):
                self.fail(field, f"must be a tensor of shape {tuple(own.shape)}")
        else:
            self.fail(field, f"cannot be checked against a {type(own).__name__}")

    def model(self, saved: Any, own: dict[str, Any]) -> None:
        if not isinstance(saved, dict) or list(saved) != list(own):
            self.fail("model", "must hold exactly the model's parameters and buffers, in order")
        for k, t in own.items():
            v = saved[k]
            if not isinstance(v, Tensor) or v.shape != t.shape or v.dtype is not t.dtype:
                self.fail(f"model/{k}", f"must be a {t.dtype} tensor of shape {t.shape}")

    def optimizer(self, saved: Any, own: dict[str, Any], groups_now: list[dict[str, Any]]) -> None:
        if not isinstance(saved, dict) or set(saved) != {"state", "param_groups"}:
            self.fail("optimizer", "must hold exactly state and param_groups")
        groups = saved["param_groups"]
        if not isinstance(groups, list) or len(groups) != len(own["param_groups"]):
            self.fail("optimizer/param_groups", f"must be a list of {len(own['param_groups'])} groups")
        index: dict[int, int] = {}  # numbered as Optimizer.state_dict numbers them
        shapes: dict[int, tuple[int, ...]] = {}
        for g in groups_now:
            for p in g["params"]:
                shapes[index.setdefault(id(p), len(index))] = tuple(p.shape)
        for i, (g, o) in enumerate(zip(groups, own["param_groups"])):
            field = f"optimizer/param_groups/{i}"
            ids = g.get("params") if isinstance(g, dict) else None
            if not isinstance(ids, list) or any(type(k) is not int for k in ids) or ids != o["params"]:
                self.fail(field, f"must be a group of the parameters {o['params'][:8]}")
            self.like({k: v for k, v in g.items() if k != "params"}, o, field)
            for k, v in g.items():
                values = v if isinstance(v, list) else [v]
                for x in values:
                    if isinstance(x, (int, float)) and not isinstance(x, bool):
                        self.number(x, f"{field}/{k}", bound=MAX_HYPERPARAMETER)
                        if x < 0 and k != "params":
                            self.fail(f"{field}/{k}", f"must not be negative, got {x!r}")
            if "lr" in o and not (isinstance(g.get("lr"), (int, float)) and g["lr"] > 0):
                self.fail(f"{field}/lr", f"must be a finite number > 0, got {g.get('lr')!r:.40}")
        entries = saved["state"]
        if not isinstance(entries, dict):
            self.fail("optimizer/state", "must be a dict")
        for key, entry in entries.items():
            field = f"optimizer/state/{key}"
            if not isinstance(key, int) or key not in shapes or not isinstance(entry, dict):
                self.fail(field, "must be the state of a parameter the groups list")
            for name, v in entry.items():
                if name == "step":
                    if isinstance(v, Tensor):
                        v = v.item()
                    self.number(v, f"{field}/step")
                    if v < 0 or float(v) != int(v):
                        self.fail(f"{field}/step", f"must be a non-negative integer count, got {v!r}")
                elif v is not None and (not isinstance(v, Tensor) or tuple(v.shape) != shapes[key]):
                    self.fail(f"{field}/{name}", f"must be a tensor of the parameter's shape {shapes[key]}")

    def loader(self, saved: Any, loader: Any, epoch: int) -> None:
        own = loader.state_dict()
        if not isinstance(saved, dict) or set(saved) != set(own):
            self.fail("loader", f"must hold exactly {sorted(own)}")
        for k in saved:
            self.integer(saved[k], f"loader/{k}", hi=2**63 - 1)
        total = len(loader) if hasattr(loader, "__len__") else None
        if total is not None and saved.get("batches_done", 0) > total:
            self.fail("loader/batches_done", f"is {saved['batches_done']} but an epoch has {total} batches")
        if "epoch" in saved and saved["epoch"] not in (epoch, epoch - 1):
            self.fail("loader/epoch", f"is {saved['epoch']} but the learner is at epoch {epoch}")
