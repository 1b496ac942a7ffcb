"""The Learner: a training loop built once with :class:`LearnerBuilder`, then ``fit``.

>>> # learner = (LearnerBuilder(model).optimizer(opt).metrics(Accuracy())
>>> #            .checkpoint("runs/x", every=1, keep=3).epochs(10).build())
>>> # history = learner.fit(train_loader, valid_loader)

Checkpoints hold the model, optimizer, scheduler, random stream, data-loader position,
early-stopping state and partial-epoch metrics, so ``fit(..., resume=True)`` after a crash
continues exactly where the last checkpoint was taken. The epoch records go to an append-only
``history.jsonl`` beside the checkpoints (a checkpoint stores its row count and SHA-256, so its
record stays the same size however long the run). ``restore`` is all or nothing: it validates
every field against this learner before it assigns any.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import random as _random
from ..amp import GradScaler, autocast
from ..autodiff.mode import no_grad
from ..device import Device
from ..dtypes import as_dtype
from ..errors import ArgumentTypeError, CheckpointError, EmberKeyError, InvalidArgumentError
from ..ops.movement import concat
from ..ops.nn import cross_entropy
from ..optim.clip import clip_grad_norm_
from ..tensor import Tensor
from .checkpoint import (
    Checkpoint,
    flatten_state,
    latest_checkpoint,
    load_checkpoint,
    parse_json,
    save_checkpoint,
    unflatten_state,
)
from .logs import MetricsLog
from .metrics import Loss, Metric
from .progress import Progress
from .restore import StateChecker

__all__ = ["Learner", "LearnerBuilder", "EarlyStopping"]

HISTORY = "history.jsonl"  # one line per finished epoch, appended; checkpoints hold its row count and SHA-256
_STATE_KEYS = {"model", "optimizer", "rng", "epoch", "step", "history"}
_OPTIONAL_KEYS = {"scheduler", "scaler", "early_stopping", "loader", "partial_metrics", "model_config"}


def _default_loss(output: Any, target: Any) -> Any:
    return cross_entropy(output, target)


class EarlyStopping:
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs."""

    def __init__(self, monitor: str = "valid_loss", patience: int = 5, mode: str | None = None, min_delta: float = 0.0):
        if mode not in (None, "min", "max"):
            raise InvalidArgumentError(f"early_stopping: mode must be 'min' or 'max', got {mode!r}")
        self.monitor = monitor
        self.patience = patience
        self.mode = mode or ("min" if monitor.endswith(("loss", "mae", "rmse", "perplexity")) else "max")
        self.min_delta = min_delta
        self.best: float | None = None
        self.bad_epochs = 0

    def step(self, metrics: dict[str, float]) -> bool:
        """Record an epoch; True when training should stop."""
        if self.monitor not in metrics:
            raise EmberKeyError(f"early_stopping: no metric {self.monitor!r}; available: {sorted(metrics)}")
        value = metrics[self.monitor]
        better = self.best is None or (
            value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta
        )
        if better:
            self.best = value
            self.bad_epochs = 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience

    def state(self) -> dict[str, Any]:
        return {"best": self.best, "bad_epochs": self.bad_epochs}

    def load_state(self, state: dict[str, Any]) -> None:
        self.best = state.get("best")
        self.bad_epochs = int(state.get("bad_epochs", 0))


def _split_batch(batch: Any) -> tuple[tuple[Any, ...], Any]:
    if isinstance(batch, dict):
        if "target" not in batch:
            raise EmberKeyError(
                "Learner: a dict batch needs a 'target' entry; the other entries go to the model by name"
            )
        return (), batch
    if isinstance(batch, (tuple, list)):
        if len(batch) < 2:
            raise InvalidArgumentError("Learner: a batch must be (inputs..., target)")
        return tuple(batch[:-1]), batch[-1]
    raise ArgumentTypeError(
        f"Learner: expected a (inputs..., target) tuple or a dict batch, got {type(batch).__name__}"
    )


class Learner:
    """Runs training, evaluation and prediction for one model (build it with LearnerBuilder)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.model = cfg["model"]
        self.optimizer = cfg["optimizer"]
        self.scheduler = cfg.get("scheduler")
        self.scheduler_interval = cfg.get("scheduler_interval", "epoch")
        self.loss_fn: Callable[[Any, Any], Any] = cfg.get("loss") or _default_loss
        self.metric_factories: list[Callable[[], Metric]] = cfg.get("metrics", [])
        self.checkpoint_dir: Path | None = cfg.get("checkpoint_dir")
        self.checkpoint_every: int | None = cfg.get("checkpoint_every", 1)
        self.checkpoint_every_steps: int | None = cfg.get("checkpoint_every_steps")
        self.keep: int | None = cfg.get("keep", 3)
        self.early: EarlyStopping | None = cfg.get("early_stopping")
        self.num_epochs: int = cfg.get("epochs", 1)
        self.accumulate: int = cfg.get("accumulate", 1)
        self.clip_norm: float | None = cfg.get("clip_norm")
        self.amp_dtype: Any = cfg.get("amp_dtype")
        self.show_progress: bool = cfg.get("progress", True)
        self.model_config: dict[str, Any] | None = cfg.get("model_config")
        self.callbacks: list[Callable[[Learner], None]] = cfg.get("callbacks", [])
        self.log_dir: Path | None = cfg.get("log_dir") or self.checkpoint_dir
        self.log = MetricsLog(self.log_dir) if self.log_dir is not None else None
        self.epoch = 0
        self.step = 0
        self.history: list[dict[str, Any]] = []
        self._history_blob = bytearray()  # the bytes of history.jsonl that self.history came from
        self.should_stop = False
        self._last_plot = 0.0
        self._scaler = None
        if self.amp_dtype is not None and getattr(self.amp_dtype, "name", "") == "float16":
            self._scaler = GradScaler()

    # -- helpers ---------------------------------------------------------------------------
    @property
    def device(self) -> Any:
        for p in self.model.parameters():
            return p.device
        return Device.default()

    def _to_device(self, x: Any) -> Any:
        if isinstance(x, Tensor):
            dev = self.device
            return x if x.device.same_hardware(dev) else x.to(dev.without_autodiff())
        if isinstance(x, (tuple, list)):
            return type(x)(self._to_device(v) for v in x)
        if isinstance(x, dict):
            return {k: self._to_device(v) for k, v in x.items()}
        return x

    def _forward(self, batch: Any) -> tuple[Any, Any, Any]:
        inputs, target = _split_batch(self._to_device(batch))
        if isinstance(target, dict):
            named = {k: v for k, v in target.items() if k != "target"}
            output = self.model(**named)
            target = target["target"]
        else:
            output = self.model(*inputs)
        loss = self.loss_fn(output, target)
        return output, target, loss

    def _autocast(self) -> Any:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return autocast(dtype=self.amp_dtype)

    def _new_metrics(self) -> list[Metric]:
        return [Loss()] + [f() for f in self.metric_factories]

    # -- checkpoints -----------------------------------------------------------------------
    def state(self, loader: Any = None, metrics: list[Metric] | None = None) -> dict[str, Any]:
        """Everything needed to continue training exactly from here (history as a row count and hash)."""
        state: dict[str, Any] = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": _random.get_state(),
            "epoch": self.epoch,
            "step": self.step,
            "history": {"rows": len(self.history), "sha256": hashlib.sha256(self._history_blob).hexdigest()},
        }
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        if self._scaler is not None:
            state["scaler"] = self._scaler.state_dict()
        if self.early is not None:
            state["early_stopping"] = self.early.state()
        if loader is not None and hasattr(loader, "state_dict"):
            state["loader"] = loader.state_dict()
        if metrics is not None:
            state["partial_metrics"] = [m.state() for m in metrics]
        if self.model_config is not None:
            state["model_config"] = self.model_config
        return state

    def save(self, loader: Any = None, metrics: list[Metric] | None = None) -> Path | None:
        if self.checkpoint_dir is None:
            return None
        return save_checkpoint(self.checkpoint_dir, self.state(loader, metrics), step=self.step, keep=self.keep)

    def restore(self, path: str | Path | None = None, loader: Any = None) -> dict[str, Any] | None:
        """Load a checkpoint (the newest good one under the checkpoint dir by default) into this learner.

        All or nothing: the checkpoint is validated and every value built before any is assigned;
        if assigning still fails, the model, optimizer, loader and random stream are put back.
        """
        where = Path(path) if path is not None else self.checkpoint_dir
        if where is None:
            raise CheckpointError("restore: no checkpoint directory; pass a path or configure .checkpoint(dir)")
        if path is None and latest_checkpoint(where) is None:
            return None
        ckpt = load_checkpoint(where, check=lambda c: self._prepare(c, loader))
        prepared = ckpt.prepared
        before = self._snapshot(loader)
        try:
            self._assign(prepared, loader)
        except Exception as exc:
            failed = self._assign(before, loader, best_effort=True)
            state = f"could not put back {', '.join(failed)}" if failed else "the learner is unchanged"
            raise CheckpointError(
                f"restore: {ckpt.path} passed validation but could not be applied ({exc}); {state}. "
                f"Resume from another checkpoint or start fresh."
            ) from exc
        if self.log is not None:
            self.log.truncate(self.step, self.epoch)
        return prepared["state"]

    def _snapshot(self, loader: Any) -> dict[str, Any]:
        """The learner's current state, in the form _assign takes (to undo a failed restore)."""
        state = self.state(loader)
        state["scheduler"] = copy.deepcopy(state.get("scheduler"))
        return {"state": state, "history": list(self.history), "blob": bytes(self._history_blob)}

    def _assign(self, prepared: dict[str, Any], loader: Any, best_effort: bool = False) -> list[str]:
        """Assign a prepared state; with ``best_effort`` (undoing a failed restore) go on past failures."""
        state = prepared["state"]
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("model", lambda: self.model.load_state_dict(state["model"])),
            ("optimizer", lambda: self.optimizer.load_state_dict(state["optimizer"])),
        ]
        if self.scheduler is not None and state.get("scheduler") is not None:
            steps.append(("scheduler", lambda: self.scheduler.load_state_dict(state["scheduler"])))
        if self._scaler is not None and "scaler" in state:
            steps.append(("scaler", lambda: self._scaler.load_state_dict(state["scaler"])))
        if self.early is not None and "early_stopping" in state:
            steps.append(("early_stopping", lambda: self.early.load_state(state["early_stopping"])))
        steps.append(("rng", lambda: _random.set_state(state["rng"])))
        if loader is not None and "loader" in state and hasattr(loader, "load_state_dict"):
            steps.append(("loader", lambda: loader.load_state_dict(state["loader"])))
        failed = []
        for name, assign in steps:
            try:
                assign()
            except Exception:
                if not best_effort:
                    raise
                failed.append(name)
        self.epoch = int(state["epoch"])
        self.step = int(state["step"])
        self.history = list(prepared["history"])
        self._history_blob = bytearray(prepared["blob"])
        return failed

    def _prepare(self, ckpt: Checkpoint, loader: Any) -> dict[str, Any]:
        """Build and validate everything a restore assigns; raise CheckpointError naming the field."""
        check = StateChecker(ckpt.path)
        state = ckpt.state(device=self.device)
        if not isinstance(state, dict):
            check.fail("state", "is not a dict")
        missing, unknown = _STATE_KEYS - set(state), set(state) - _STATE_KEYS - _OPTIONAL_KEYS
        if missing or unknown:
            check.fail("state", f"lacks {sorted(missing)} or has unknown entries {sorted(unknown)[:10]}")
        check.model(state["model"], self.model.state_dict())
        check.optimizer(state["optimizer"], self.optimizer.state_dict(), self.optimizer.param_groups)
        rng = state["rng"]
        if not isinstance(rng, dict) or set(rng) != {"k0", "k1", "counter"}:
            check.fail("rng", "must hold exactly k0, k1 and counter")
        for k in ("k0", "k1", "counter"):
            check.integer(rng[k], f"rng/{k}", hi=2**64 - 1)
        epoch = check.integer(state["epoch"], "epoch", hi=10**9)
        step = check.integer(state["step"], "step", hi=2**53)
        if step != ckpt.step:
            check.fail("step", f"is {step} but the record's step is {ckpt.step}")
        history, blob = self._read_history(ckpt, check, state["history"], epoch, step)
        if "loader" in state and loader is not None and hasattr(loader, "state_dict"):
            check.loader(state["loader"], loader, epoch)
        if "partial_metrics" in state:
            saved = state["partial_metrics"]
            fresh = self._new_metrics()
            if not isinstance(saved, list) or len(saved) != len(fresh):
                check.fail("partial_metrics", f"must be a list of {len(fresh)} metric states")
            for i, (m, s) in enumerate(zip(fresh, saved)):
                check.like(s, m.state(), f"partial_metrics/{i}", exact_keys=True)
        if self.scheduler is not None and "scheduler" in state:
            check.like(state["scheduler"], self.scheduler.state_dict(), "scheduler")
        if self._scaler is not None and "scaler" in state:
            check.like(state["scaler"], self._scaler.state_dict(), "scaler", exact_keys=True)
            scaler = state["scaler"]
            if scaler and not (scaler["scale"] > 0 and scaler["growth_interval"] >= 1):
                check.fail("scaler", "needs scale > 0 and growth_interval >= 1")
        if self.early is not None and "early_stopping" in state:
            early = state["early_stopping"]
            if not isinstance(early, dict) or set(early) != {"best", "bad_epochs"}:
                check.fail("early_stopping", "must hold exactly best and bad_epochs")
            if early["best"] is not None:
                check.number(early["best"], "early_stopping/best")
            check.integer(early["bad_epochs"], "early_stopping/bad_epochs", hi=10**9)
        return {"state": state, "history": history, "blob": blob}

    def _read_history(
        self, ckpt: Checkpoint, check: StateChecker, meta: Any, epoch: int, step: int
    ) -> tuple[list[dict[str, Any]], bytes]:
        if not isinstance(meta, dict) or set(meta) != {"rows", "sha256"}:
            check.fail("history", "must hold exactly rows and sha256")
        rows = check.integer(meta["rows"], "history/rows", hi=10**9)
        if rows != epoch:
            check.fail("history/rows", f"is {rows} but epoch is {epoch} (one row per finished epoch)")
        path = ckpt.path.parent / HISTORY
        data = path.read_bytes() if path.is_file() else b""
        lines = data.splitlines(keepends=True)
        if len(lines) < rows:
            check.fail("history/rows", f"is {rows} but {path} has {len(lines)} complete rows")
        blob = b"".join(lines[:rows])
        if hashlib.sha256(blob).hexdigest() != meta["sha256"]:
            check.fail("history/sha256", f"does not match the first {rows} rows of {path}: the history is corrupt")
        history = []
        for i, line in enumerate(lines[:rows]):
            row = unflatten_state(parse_json(line, f"{path} row {i + 1}"), {})
            if not isinstance(row, dict) or row.get("epoch") != i + 1 or not 0 <= row.get("step", -1) <= step:
                check.fail("history", f"row {i + 1} of {path} is not the record of epoch {i + 1}")
            history.append(row)
        return history, blob

    def _append_history(self, record: dict[str, Any]) -> None:
        line = (json.dumps(flatten_state(record)[0], allow_nan=False) + "\n").encode()
        self._history_blob += line
        if self.checkpoint_dir is None:
            return
        with open(self.checkpoint_dir / HISTORY, "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _sync_history_file(self) -> None:
        """Make history.jsonl hold exactly the rows this learner has (drops rows of an abandoned run)."""
        if self.checkpoint_dir is None:
            return
        path = self.checkpoint_dir / HISTORY
        if path.is_file() and path.read_bytes() == self._history_blob:
            return
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".jsonl.tmp")
        with open(tmp, "wb") as f:
            f.write(self._history_blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    # -- training --------------------------------------------------------------------------
    def fit(
        self, train_loader: Any, valid_loader: Any = None, resume: bool | str | Path = False
    ) -> list[dict[str, Any]]:
        """Train for the configured epochs; returns one metrics dict per epoch."""
        partial = None
        if resume:
            state = self.restore(None if resume is True else resume, loader=train_loader)
            if state is not None:
                partial = state.get("partial_metrics")
        self._sync_history_file()
        if self.log is not None:
            self.log.truncate(self.step, self.epoch)
        while self.epoch < self.num_epochs and not self.should_stop:
            if hasattr(train_loader, "set_epoch") and partial is None:
                train_loader.set_epoch(self.epoch)
            record = self._train_epoch(train_loader, partial)
            partial = None
            if valid_loader is not None:
                record.update({f"valid_{k}": v for k, v in self.evaluate(valid_loader).items()})
            self.epoch += 1
            record = {"kind": "epoch", "epoch": self.epoch, "step": self.step, **record}
            if self.optimizer.param_groups:
                record["lr"] = float(self.optimizer.param_groups[0]["lr"])
            self.history.append(record)
            self._append_history(record)
            if self.scheduler is not None and self.scheduler_interval == "epoch":
                self.scheduler.step()
            if self.early is not None and self.early.step(record):
                self.should_stop = True
            if self.log is not None:
                self.log.append(record)
                self.log.write_csv()
                last = self.epoch >= self.num_epochs or self.should_stop
                if last or time.perf_counter() - self._last_plot > 30.0:
                    self.log.plot()  # matplotlib costs ~1 s a plot: at most every 30 s, and at the end
                    self._last_plot = time.perf_counter()
            if (
                self.checkpoint_dir is not None
                and self.checkpoint_every
                and (self.epoch % self.checkpoint_every == 0 or self.epoch == self.num_epochs or self.should_stop)
            ):
                self.save(train_loader)
        for cb in self.callbacks:
            close = getattr(cb, "close", None)  # a callback with a last word (MemoryReport's plot)
            if close is not None:
                close(self)
        return self.history

    def _train_epoch(self, loader: Any, partial: list[dict[str, Any]] | None) -> dict[str, float]:
        self.model.train()
        metrics = self._new_metrics()
        if partial is not None:
            for m, s in zip(metrics, partial):
                m.load_state(s)
        done = loader.state_dict()["batches_done"] if hasattr(loader, "state_dict") else 0
        total = len(loader) if hasattr(loader, "__len__") else 0
        bar = Progress(total, f"epoch {self.epoch + 1}/{self.num_epochs}", self.show_progress, initial=done)
        pending = 0
        start = time.perf_counter()
        for batch in loader:
            with self._autocast():
                output, target, loss = self._forward(batch)
            scaled = loss / self.accumulate if self.accumulate > 1 else loss
            if self._scaler is not None:
                scaled = self._scaler.scale(scaled)
            scaled.backward()
            pending += 1
            loss_value = float(loss.item())
            for m in metrics:
                m.update(output.detach(), target, loss_value)
            if pending == self.accumulate:
                self._optimizer_step()
                pending = 0
                for cb in self.callbacks:
                    cb(self)
                if (
                    self.checkpoint_every_steps
                    and self.step % self.checkpoint_every_steps == 0
                    and not self._epoch_end_save_follows(loader)
                ):
                    self.save(loader, metrics)
            bar.update(1, loss=loss_value)
        if pending:
            self._optimizer_step()
        bar.close(**{m.name: m.compute() for m in metrics})
        out = {f"train_{m.name}": m.compute() for m in metrics}
        out["train_seconds"] = time.perf_counter() - start
        return out

    def _epoch_end_save_follows(self, loader: Any) -> bool:
        """True on an epoch's last batch when fit will checkpoint this same step at the epoch's end."""
        if not (hasattr(loader, "state_dict") and hasattr(loader, "__len__")):
            return False
        if loader.state_dict().get("batches_done") != len(loader):
            return False
        done = self.epoch + 1
        return bool(self.checkpoint_every) and (done % self.checkpoint_every == 0 or done == self.num_epochs)

    def _optimizer_step(self) -> None:
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        if self._scaler is not None:
            self._scaler.unscale_(self.optimizer)
        if self.clip_norm is not None:
            clip_grad_norm_(params, self.clip_norm)
        if self._scaler is not None:
            self._scaler.step(self.optimizer)
            self._scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad()
        self.step += 1
        if self.scheduler is not None and self.scheduler_interval == "step":
            self.scheduler.step()

    # -- evaluation ------------------------------------------------------------------------
    def evaluate(self, loader: Any, metrics: Sequence[Metric] | None = None) -> dict[str, float]:
        """Loss and metrics over ``loader`` with the model in eval mode and no graph."""
        was_training = getattr(self.model, "training", True)
        self.model.eval()
        ms = list(metrics) if metrics is not None else self._new_metrics()
        for m in ms:
            m.reset()
        try:
            with no_grad(), self._autocast():
                for batch in loader:
                    output, target, loss = self._forward(batch)
                    value = float(loss.item())
                    for m in ms:
                        m.update(output, target, value)
        finally:
            self.model.train(was_training)
        return {m.name: m.compute() for m in ms}

    def predict(self, loader: Any) -> Any:
        """Model outputs for every batch of ``loader`` (inputs only, or (inputs..., target))."""
        was_training = getattr(self.model, "training", True)
        self.model.eval()
        outs = []
        try:
            with no_grad():
                for batch in loader:
                    batch = self._to_device(batch)
                    if isinstance(batch, Tensor):
                        outs.append(self.model(batch))
                    else:
                        inputs = batch[:-1] if isinstance(batch, (tuple, list)) and len(batch) > 1 else batch
                        outs.append(self.model(*inputs))
        finally:
            self.model.train(was_training)
        return concat(outs, axis=0) if outs else None


class LearnerBuilder:
    """Configure a :class:`Learner` step by step (Burn's LearnerBuilder, in Python)."""

    def __init__(self, model: Any) -> None:
        if not hasattr(model, "parameters"):
            raise ArgumentTypeError(f"LearnerBuilder: model must be an ember.nn.Module, got {type(model).__name__}")
        self._cfg: dict[str, Any] = {"model": model, "metrics": [], "callbacks": []}

    def optimizer(self, optimizer: Any) -> LearnerBuilder:
        """An optimizer instance, or a factory ``params -> optimizer``."""
        if callable(optimizer) and not hasattr(optimizer, "step"):
            optimizer = optimizer(self._cfg["model"].parameters())
        self._cfg["optimizer"] = optimizer
        return self

    def scheduler(self, scheduler: Any, interval: str = "epoch") -> LearnerBuilder:
        """An LR scheduler (or factory ``optimizer -> scheduler``), stepped per 'epoch' or 'step'."""
        if interval not in ("epoch", "step"):
            raise InvalidArgumentError(f"scheduler: interval must be 'epoch' or 'step', got {interval!r}")
        self._cfg["scheduler"] = scheduler
        self._cfg["scheduler_interval"] = interval
        return self

    def loss(self, fn: Callable[[Any, Any], Any]) -> LearnerBuilder:
        """``fn(output, target) -> scalar loss`` (default: cross-entropy)."""
        self._cfg["loss"] = fn
        return self

    def metrics(self, *metrics: Metric | type[Metric] | Callable[[], Metric]) -> LearnerBuilder:
        """Metrics to track; pass instances or classes (a fresh copy is made each epoch)."""
        for m in metrics:
            if isinstance(m, Metric):
                self._cfg["metrics"].append(lambda m=m: copy.deepcopy(m))
            elif isinstance(m, type) and issubclass(m, Metric):
                self._cfg["metrics"].append(m)
            elif callable(m):
                self._cfg["metrics"].append(m)
            else:
                raise ArgumentTypeError(f"metrics: expected Metric instances or classes, got {m!r}")
        return self

    def checkpoint(
        self, directory: str | Path, every: int | None = 1, every_steps: int | None = None, keep: int | None = 3
    ) -> LearnerBuilder:
        """Save checkpoints under ``directory`` every ``every`` epochs and/or ``every_steps`` steps."""
        self._cfg["checkpoint_dir"] = Path(directory)
        self._cfg["checkpoint_every"] = every
        self._cfg["checkpoint_every_steps"] = every_steps
        self._cfg["keep"] = keep
        return self

    def log_dir(self, directory: str | Path) -> LearnerBuilder:
        """Where metrics.jsonl/csv/png go (default: the checkpoint directory)."""
        self._cfg["log_dir"] = Path(directory)
        return self

    def early_stopping(
        self, monitor: str = "valid_loss", patience: int = 5, mode: str | None = None, min_delta: float = 0.0
    ) -> LearnerBuilder:
        self._cfg["early_stopping"] = EarlyStopping(monitor, patience, mode, min_delta)
        return self

    def epochs(self, n: int) -> LearnerBuilder:
        if n < 1:
            raise InvalidArgumentError(f"epochs: must be >= 1, got {n}")
        self._cfg["epochs"] = n
        return self

    def grad_accumulation(self, steps: int) -> LearnerBuilder:
        """Sum gradients over ``steps`` batches before each optimizer step."""
        if steps < 1:
            raise InvalidArgumentError(f"grad_accumulation: steps must be >= 1, got {steps}")
        self._cfg["accumulate"] = steps
        return self

    def clip_grad_norm(self, max_norm: float) -> LearnerBuilder:
        self._cfg["clip_norm"] = float(max_norm)
        return self

    def mixed_precision(self, dtype: Any) -> LearnerBuilder:
        """Run forward passes under ``ember.autocast(dtype)`` (float16 adds loss scaling)."""
        self._cfg["amp_dtype"] = as_dtype(dtype)
        return self

    def progress(self, enabled: bool = True) -> LearnerBuilder:
        self._cfg["progress"] = enabled
        return self

    def model_config(self, config: dict[str, Any]) -> LearnerBuilder:
        """A JSON-able description of the model, stored in every checkpoint."""
        self._cfg["model_config"] = config
        return self

    def callback(self, fn: Callable[[Learner], None]) -> LearnerBuilder:
        """Call ``fn(learner)`` after every optimizer step."""
        self._cfg["callbacks"].append(fn)
        return self

    def build(self) -> Learner:
        if "optimizer" not in self._cfg:
            raise InvalidArgumentError("LearnerBuilder: set an optimizer with .optimizer(...) before build()")
        sched = self._cfg.get("scheduler")
        if sched is not None and callable(sched) and not hasattr(sched, "step"):
            self._cfg["scheduler"] = sched(self._cfg["optimizer"])
        return Learner(self._cfg)
