"""LoRA: low-rank adapters on Linear, Conv and Embedding weights (Hu et al., 2021).

``apply_lora(model, LoraConfig(...))`` replaces each target layer by a :class:`LoraLayer`
that keeps the layer as ``base_layer`` (frozen) and adds, per named adapter, ``A`` (rank x
fan-in) and ``B`` (out x rank)::

    y = base(x) + scale * B (A dropout(x))        scale = alpha / rank   (alpha / sqrt(rank): rslora)

``A`` starts Kaiming-uniform (``init="kaiming"``, bound 1/sqrt(fan_in), as peft) or Gaussian
(``init="gaussian"``, std 1/rank), ``B`` at zero, so a fresh adapter leaves the model
unchanged. ``targets`` speaks peft's idioms and ember's: ``"all-linear"`` (every Linear), a
string is a regular expression matching a whole module path, a list of strings matches
module paths or their suffixes (``["q", "v"]`` hits ``layer.0.q``), and an
:class:`~ember.nn.ParamGroup` selects by glob, regex or type. Several named adapters can live
on one model; :func:`set_adapter` switches, :func:`disable_adapters` turns them off,
:func:`merge` folds one into the base weights (and :func:`unmerge` takes it out again).
:func:`save_adapter` writes only the adapter (safetensors and a JSON record with the config and
a fingerprint of the base weights); :func:`load_adapter` refuses a different base.

>>> import ember as em
>>> from ember import nn
>>> from ember.nn import lora
>>> dev = em.Device.cpu().autodiff()
>>> model = nn.Sequential(nn.Linear(16, 16, device=dev), nn.ReLU(), nn.Linear(16, 4, device=dev))
>>> _ = lora.apply_lora(model, lora.LoraConfig(rank=2, alpha=4, targets="all-linear"))
>>> lora.trainable_parameters(model)
(104, 444)
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import hashlib
import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load as _safetensors_load
from safetensors.numpy import save as _safetensors_save

from ..autodiff.mode import no_grad
from ..creation import tensor as new_tensor
from ..errors import ArgumentTypeError, CheckpointError, InvalidArgumentError, NotImplementedOpError
from ..tensor import Tensor
from . import functional as F
from . import init as _init
from ._util import new_param
from .conv import Conv1d, Conv2d
from .linear import Embedding, Linear
from .module import Module, Parameter
from .paramgroup import ParamGroup

__all__ = [
    "LoraConfig", "LoraLayer", "LoraAdapter", "apply_lora", "lora_layers", "adapter_names", "set_adapter",
    "disable_adapters", "enable_adapters", "adapters_disabled", "delete_adapter", "merge", "unmerge",
    "trainable_parameters", "fingerprint", "save_adapter", "load_adapter", "AdapterMismatchError",
]  # fmt: skip

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_TENSORS = "adapter_model.safetensors"
FORMAT = "ember-lora"
FORMAT_VERSION = 1
MAX_CONFIG_BYTES = 1 << 20
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_INITS = ("kaiming", "gaussian")
_BIAS = ("none", "all", "lora_only")


class AdapterMismatchError(CheckpointError):
    """A saved adapter does not fit this model (another base, other layers or shapes)."""


@dataclass
class LoraConfig:
    """The adapter's hyperparameters (peft's names: ``r``, ``lora_alpha``, ``lora_dropout``,
    ``target_modules``, ``use_rslora``, ``init_lora_weights`` map to these fields).

    ``modules_to_save`` (module globs) stay trainable and are saved with the adapter (a
    classifier head); ``bias`` is ``"none"``, ``"all"`` (every bias trains) or ``"lora_only"``
    (the biases of adapted layers train).
    """

    rank: int = 8
    alpha: float = 8.0
    dropout: float = 0.0
    targets: Any = "all-linear"
    rslora: bool = False
    init: str = "kaiming"
    modules_to_save: tuple[str, ...] = field(default_factory=tuple)
    bias: str = "none"

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise InvalidArgumentError(
                f"LoraConfig: rank must be an int >= 1, got {self.rank!r}; typical ranks are 4-64"
            )
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not self.alpha > 0:
            raise InvalidArgumentError(f"LoraConfig: alpha must be a number > 0, got {self.alpha!r}; e.g. alpha=2*rank")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise InvalidArgumentError(f"LoraConfig: dropout must be in [0, 1), got {self.dropout!r}")
        if self.init not in _INITS:
            raise InvalidArgumentError(f"LoraConfig: init must be one of {_INITS}, got {self.init!r}")
        if self.bias not in _BIAS:
            raise InvalidArgumentError(f"LoraConfig: bias must be one of {_BIAS}, got {self.bias!r}")
        if isinstance(self.modules_to_save, str):
            self.modules_to_save = (self.modules_to_save,)
        self.modules_to_save = tuple(self.modules_to_save or ())
        t = self.targets
        ok = isinstance(t, (str, ParamGroup)) or (
            isinstance(t, (list, tuple)) and bool(t) and all(isinstance(s, str) for s in t)
        )
        if not ok:
            raise ArgumentTypeError(
                f"LoraConfig: targets must be 'all-linear', a regex string, a list of module names or suffixes, "
                f"or an nn.ParamGroup; got {t!r}"
            )

    @property
    def scale(self) -> float:
        """``alpha / rank``, or ``alpha / sqrt(rank)`` with rslora."""
        return self.alpha / (math.sqrt(self.rank) if self.rslora else self.rank)

    @classmethod
    def from_peft(cls, **kw: Any) -> LoraConfig:
        """A config from peft's keyword names (``r=8, lora_alpha=16, target_modules=[...]...``)."""
        names = {"r": "rank", "lora_alpha": "alpha", "lora_dropout": "dropout", "target_modules": "targets",
                 "use_rslora": "rslora", "modules_to_save": "modules_to_save", "bias": "bias"}  # fmt: skip
        out: dict[str, Any] = {}
        for k, v in kw.items():
            if k == "init_lora_weights":
                out["init"] = "gaussian" if v == "gaussian" else "kaiming"
            elif k in names:
                out[names[k]] = v
            else:
                raise InvalidArgumentError(f"LoraConfig.from_peft: {k!r} is not a LoraConfig setting ember knows")
        return cls(**out)

    def to_record(self, target_paths: list[str]) -> dict[str, Any]:
        """The config as JSON data; ``targets`` becomes the resolved module paths."""
        rec = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        rec["targets"] = list(target_paths)
        rec["modules_to_save"] = list(self.modules_to_save)
        return rec


def _kind(module: Module) -> str | None:
    """'linear', 'conv' or 'embedding' for a layer LoRA can adapt (a quantized linear layer
    says so with a ``lora_kind`` class attribute), else None."""
    if isinstance(module, Linear):
        return "linear"
    if isinstance(module, (Conv1d, Conv2d)):
        return "conv"
    if isinstance(module, Embedding):
        return "embedding"
    return getattr(type(module), "lora_kind", None)


class LoraAdapter(Module):
    """One adapter's ``A`` and ``B`` and its scale, for a layer of kind ``kind``."""

    def __init__(self, kind: str, base: Module, config: LoraConfig) -> None:
        super().__init__()
        r = config.rank
        w = getattr(base, "weight", None)
        if isinstance(w, Tensor) and w.dtype.is_floating:
            dev, dt = w.device, w.dtype
        else:  # a quantized base: adapters in its compute dtype, where its weight was
            dev, dt = getattr(base, "adapter_device", None) or base.device, getattr(base, "compute_dtype", "float32")
        if kind == "linear":
            a_shape, b_shape = (r, base.in_features), (base.out_features, r)
        elif kind == "conv":
            if base.groups != 1:
                raise NotImplementedOpError(
                    f"apply_lora: a conv layer with groups={base.groups} cannot take an adapter; target groups=1 convs"
                )
            a_shape = (r, base.in_channels) + tuple(base.kernel_size)
            b_shape = (base.out_channels, r) + (1,) * len(base.kernel_size)
        else:
            a_shape, b_shape = (r, base.num_embeddings), (base.embedding_dim, r)
        a = new_param(a_shape, dev, dt)
        if config.init == "kaiming":
            _init.kaiming_uniform_(a, a=math.sqrt(5))
        else:
            _init.normal_(a, 0.0, 1.0 / r)
        self.A = Parameter(a)
        self.B = Parameter(_init.zeros_(new_param(b_shape, dev, dt)))
        self.kind, self.rank, self.alpha, self.dropout = kind, r, float(config.alpha), float(config.dropout)
        self.scale = config.scale
        self.config = config

    def delta_weight(self) -> Tensor:
        """``scale * B @ A`` in the base weight's layout."""
        a, b = self.A, self.B
        if self.kind == "linear":
            return (b @ a) * self.scale
        if self.kind == "conv":
            r = self.rank
            flat = b.reshape(b.shape[0], r) @ a.reshape(r, -1)
            return flat.reshape((b.shape[0],) + tuple(a.shape[1:])) * self.scale
        return (b @ a).mT * self.scale

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, rank={self.rank}, scale={self.scale:g}"


class _Adapters(Module):
    """The named adapters of one layer, as children."""


class LoraLayer(Module):
    """A layer with LoRA adapters: ``base_layer`` (frozen), ``lora.<name>`` adapters, at most
    one active; ``merged`` names the adapter folded into the base weight."""

    def __init__(self, base: Module, kind: str) -> None:
        super().__init__()
        self.base_layer = base
        self.lora = _Adapters()
        self.kind = kind
        self.active: str | None = None
        self.merged: str | None = None
        self.disabled = False

    def add_adapter(self, name: str, config: LoraConfig) -> LoraAdapter:
        if name in self.lora._modules:
            raise InvalidArgumentError(f"apply_lora: this layer already has an adapter {name!r}; pick another name")
        adapter = LoraAdapter(self.kind, self.base_layer, config)
        self.lora.register_module(name, adapter)
        return adapter

    def adapter(self, name: str) -> LoraAdapter:
        found = self.lora._modules.get(name)
        if found is None:
            raise InvalidArgumentError(
                f"LoRA: no adapter {name!r} on this layer (it has {sorted(self.lora._modules)}); check the name"
            )
        return found  # type: ignore[return-value]

    def _weight_param(self) -> Tensor:
        if getattr(type(self.base_layer), "quantized", False):
            raise NotImplementedOpError(
                "LoRA merge: the base layer is quantized (QLoRA); merging would requantize the weights and lose the "
                "adapter's precision. Keep the adapter unmerged, or dequantize the base first"
            )
        return self.base_layer.weight

    def merge(self, name: str | None = None) -> None:
        """Fold adapter ``name`` (default: the active one) into the base weight."""
        name = name or self.active
        if name is None:
            raise InvalidArgumentError("LoRA merge: no active adapter; pass the name of the adapter to merge")
        if self.merged is not None:
            if self.merged == name:
                return
            raise InvalidArgumentError(f"LoRA merge: adapter {self.merged!r} is merged; unmerge() it first")
        w = self._weight_param()
        with no_grad():
            w.copy_(w + self.adapter(name).delta_weight().astype(w.dtype))
        self.merged = name

    def unmerge(self) -> None:
        """Take the merged adapter back out of the base weight (exact up to float rounding)."""
        if self.merged is None:
            return
        w = self._weight_param()
        with no_grad():
            w.copy_(w - self.adapter(self.merged).delta_weight().astype(w.dtype))
        self.merged = None

    def forward(self, x: Tensor) -> Tensor:
        out = self.base_layer(x)
        if self.disabled or self.active is None or self.merged is not None:
            return out
        ad = self.adapter(self.active)
        if self.kind == "embedding":
            return out + F.embedding(x, ad.A.mT) @ ad.B.mT * ad.scale
        h = F.dropout(x, ad.dropout, self.training) if ad.dropout else x
        if self.kind == "linear":
            return out + F.linear(F.linear(h, ad.A), ad.B) * ad.scale
        base = self.base_layer
        conv = F.conv1d if len(base.kernel_size) == 1 else F.conv2d
        h = conv(h, ad.A, None, base.stride, base.padding, base.dilation)
        return out + conv(h, ad.B) * ad.scale

    def extra_repr(self) -> str:
        return f"active={self.active!r}, adapters={sorted(self.lora._modules)}, merged={self.merged!r}"


# -- applying, selecting, switching ---------------------------------------------------------
def lora_layers(model: Module) -> list[tuple[str, LoraLayer]]:
    """``(path, layer)`` of every LoraLayer in ``model``."""
    return [(p, m) for p, m in model.named_modules() if isinstance(m, LoraLayer)]


def adapter_names(model: Module) -> list[str]:
    """The adapter names present on ``model``, sorted."""
    return sorted({n for _, layer in lora_layers(model) for n in layer.lora._modules})


def _candidates(model: Module) -> list[tuple[str, Module, str]]:
    """Layers LoRA could adapt: ``(path, module, kind)``; a LoraLayer stands for its base."""
    out = []
    inside: list[str] = []
    for path, mod in model.named_modules():
        if any(path == p or path.startswith(p + ".") for p in inside):
            continue
        if isinstance(mod, LoraLayer):
            out.append((path, mod, mod.kind))
            inside.append(path)
            continue
        kind = _kind(mod)
        if kind is not None and path:
            out.append((path, mod, kind))
    return out


def _matches(targets: Any, path: str, kind: str, group_paths: set[str] | None) -> bool:
    if group_paths is not None:
        return path in group_paths or f"{path}.base_layer" in group_paths
    if isinstance(targets, str):
        if targets == "all-linear":
            return kind == "linear"
        return re.fullmatch(targets, path) is not None
    return any(path == t or path.endswith("." + t) for t in targets)


def _glob_or_suffix(path: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(path, p) or path == p or path.endswith("." + p) for p in patterns)


def _set_child(model: Module, path: str, child: Module) -> None:
    parent_path, _, attr = path.rpartition(".")
    parent = model.get_submodule(parent_path)
    parent._modules[attr] = child


def apply_lora(model: Module, config: LoraConfig, name: str = "default") -> Module:
    """Add adapter ``name`` to the layers ``config.targets`` selects; freeze everything else.

    Returns ``model`` (changed in place): each target layer becomes a :class:`LoraLayer`, the
    new adapter is the active one and the only trainable parameters are its ``A`` and ``B``,
    plus ``modules_to_save`` and the biases ``config.bias`` asks for.
    """
    if not isinstance(model, Module):
        raise ArgumentTypeError(f"apply_lora: model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(config, LoraConfig):
        raise ArgumentTypeError(f"apply_lora: config must be a LoraConfig, got {type(config).__name__}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgumentError(f"apply_lora: name must be an identifier (letters, digits, _), got {name!r}")
    if name in adapter_names(model):
        raise InvalidArgumentError(f"apply_lora: the model already has an adapter {name!r}; pick another name")
    targets = config.targets
    group_paths = None
    if isinstance(targets, ParamGroup):
        group_paths = {p for p, _ in targets.select_modules(model)}
    chosen = [c for c in _candidates(model) if _matches(targets, c[0], c[2], group_paths)]
    if not chosen:
        known = ", ".join(p for p, _, _ in _candidates(model)) or "<none>"
        raise InvalidArgumentError(
            f"apply_lora: targets={targets!r} matched no Linear, Conv or Embedding layer of {type(model).__name__}; "
            f"the layers LoRA can adapt are: {known}"
        )
    model.freeze()
    for path, mod, kind in chosen:
        layer = mod if isinstance(mod, LoraLayer) else LoraLayer(mod, kind)
        if layer is not mod:
            _set_child(model, path, layer)
        layer.add_adapter(name, config)
    set_adapter(model, name)
    _unfreeze_extras(model, config, [p for p, _, _ in chosen])
    return model


def _unfreeze_extras(model: Module, config: LoraConfig, adapted: list[str]) -> None:
    for path, mod in model.named_modules():
        if config.modules_to_save and path and _glob_or_suffix(path, config.modules_to_save):
            mod.unfreeze()
        bias = mod._parameters.get("bias")
        if bias is None:
            continue
        owner = path[: -len(".base_layer")] if path.endswith(".base_layer") else path
        if config.bias == "all" or (config.bias == "lora_only" and owner in adapted):
            mod._frozen.discard("bias")
            if bias.device.autodiff_enabled:
                bias.requires_grad_()


def set_adapter(model: Module, name: str) -> None:
    """Make adapter ``name`` the active (and the only trainable) adapter of every layer that has it."""
    layers = lora_layers(model)
    if name not in adapter_names(model):
        raise InvalidArgumentError(f"set_adapter: no adapter {name!r} on the model (it has {adapter_names(model)})")
    for _, layer in layers:
        if layer.merged is not None and layer.merged != name:
            layer.unmerge()
        layer.active = name if name in layer.lora._modules else None
        for ad_name, ad in layer.lora._modules.items():
            if ad.device is not None and ad.device.autodiff_enabled:
                ad.requires_grad_(ad_name == name)


def disable_adapters(model: Module) -> None:
    """Run every LoRA layer as its base layer alone (merged adapters are unmerged)."""
    for _, layer in lora_layers(model):
        layer.unmerge()
        layer.disabled = True


def enable_adapters(model: Module) -> None:
    """Undo :func:`disable_adapters`."""
    for _, layer in lora_layers(model):
        layer.disabled = False


@contextlib.contextmanager
def adapters_disabled(model: Module) -> Iterator[Module]:
    """``with adapters_disabled(model):`` runs the base model, then turns adapters back on."""
    disable_adapters(model)
    try:
        yield model
    finally:
        enable_adapters(model)


def delete_adapter(model: Module, name: str) -> None:
    """Remove adapter ``name``; a layer left without adapters becomes its base layer again."""
    if name not in adapter_names(model):
        raise InvalidArgumentError(f"delete_adapter: no adapter {name!r} on the model (it has {adapter_names(model)})")
    for path, layer in lora_layers(model):
        if name not in layer.lora._modules:
            continue
        if layer.merged == name:
            layer.unmerge()
        layer.lora._discard(name)
        if layer.active == name:
            layer.active = None
        if not layer.lora._modules:
            _set_child(model, path, layer.base_layer)


def merge(model: Module, name: str | None = None) -> None:
    """Fold adapter ``name`` (default: the active one) into the base weights of every layer."""
    for _, layer in lora_layers(model):
        if (name or layer.active) in layer.lora._modules:
            layer.merge(name)


def unmerge(model: Module) -> None:
    """Take merged adapters back out of the base weights."""
    for _, layer in lora_layers(model):
        layer.unmerge()


def trainable_parameters(model: Module) -> tuple[int, int]:
    """``(trainable, total)`` parameter element counts."""
    return model.num_parameters(trainable_only=True), model.num_parameters()


# -- saving and loading adapters -----------------------------------------------------------
def _base_path(path: str) -> str:
    return path.replace(".base_layer.", ".").replace("base_layer.", "")


def fingerprint(model: Module, exclude: Any = ()) -> str:
    """SHA-256 of the base model: every parameter and buffer outside the adapters (paths as in
    the model without LoRA, shapes, dtypes, bytes), leaving out the paths in ``exclude`` (what
    an adapter trains besides A and B: ``modules_to_save``, biases)."""
    skip = {_base_path(p) for p in exclude}
    merged = [layer for _, layer in lora_layers(model) if layer.merged is not None]
    if merged:
        raise InvalidArgumentError("fingerprint: an adapter is merged into the base weights; call unmerge(model) first")
    h = hashlib.sha256()
    entries = list(model.state_dict().items())
    for path, t in sorted(entries):
        if ".lora." in f".{path}" or _base_path(path) in skip:
            continue
        arr = np.ascontiguousarray(t.numpy())
        h.update(f"{_base_path(path)}|{arr.shape}|{t.dtype}\n".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _adapter_tensors(model: Module, name: str, config: LoraConfig) -> tuple[dict[str, np.ndarray], list[str]]:
    arrays: dict[str, np.ndarray] = {}
    paths = []
    for path, layer in lora_layers(model):
        ad = layer.lora._modules.get(name)
        if ad is None:
            continue
        paths.append(path)
        arrays[f"{path}.lora.{name}.A"] = np.ascontiguousarray(ad.A.numpy())
        arrays[f"{path}.lora.{name}.B"] = np.ascontiguousarray(ad.B.numpy())
    for path, t in model.named_parameters():
        if ".lora." in f".{path}" or not t.requires_grad:
            continue
        arrays[path] = np.ascontiguousarray(t.numpy())  # modules_to_save and trained biases
    return arrays, paths


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_adapter(model: Module, directory: str | os.PathLike, name: str = "default") -> Path:
    """Write adapter ``name`` alone to ``directory``: ``adapter_model.safetensors`` (A, B and the
    other trained parameters) and ``adapter_config.json`` (format, config, the base fingerprint,
    the tensors' SHA-256)."""
    if name not in adapter_names(model):
        raise InvalidArgumentError(f"save_adapter: no adapter {name!r} on the model (it has {adapter_names(model)})")
    config = next(layer.adapter(name).config for _, layer in lora_layers(model) if name in layer.lora._modules)
    if name != next((layer.active for _, layer in lora_layers(model) if layer.active), name):
        set_adapter(model, name)  # the trained extras saved with it are the active adapter's
    arrays, paths = _adapter_tensors(model, name, config)
    extras = sorted(k for k in arrays if ".lora." not in f".{k}")
    blob = _safetensors_save(arrays, metadata={"format": FORMAT})
    record = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": name,
        "config": config.to_record(paths),
        "base_fingerprint": fingerprint(model, extras),
        "trained_paths": extras,
        "tensors_sha256": hashlib.sha256(blob).hexdigest(),
        "tensors_bytes": len(blob),
    }
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / ADAPTER_TENSORS, blob)
    _atomic_write(out / ADAPTER_CONFIG, json.dumps(record, indent=2, sort_keys=True).encode())
    return out


def _reject_constant(value: str) -> Any:
    raise AdapterMismatchError(f"load_adapter: {ADAPTER_CONFIG} holds {value}, which is not valid JSON")


def _read_regular(path: Path, limit: int, what: str) -> bytes:
    if path.is_symlink() or not path.is_file():
        raise AdapterMismatchError(f"load_adapter: {path} is missing or not a regular file ({what})")
    size = path.stat().st_size
    if size > limit:
        raise AdapterMismatchError(f"load_adapter: {path} is {size} bytes, over the {limit}-byte limit ({what})")
    data = path.read_bytes()
    if len(data) != size:
        raise AdapterMismatchError(f"load_adapter: {path} changed while it was read")
    return data


def _config_from_record(rec: Any) -> tuple[str, LoraConfig, list[str], dict[str, Any]]:
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        raise AdapterMismatchError(f"load_adapter: {ADAPTER_CONFIG} is not an ember LoRA record (format {FORMAT!r})")
    if rec.get("format_version") != FORMAT_VERSION:
        raise AdapterMismatchError(
            f"load_adapter: record format_version {rec.get('format_version')!r}; this ember reads {FORMAT_VERSION}"
        )
    cfg = rec.get("config")
    if not isinstance(cfg, dict):
        raise AdapterMismatchError("load_adapter: the record has no config")
    paths = cfg.get("targets")
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and len(p) < 1024 for p in paths):
        raise AdapterMismatchError("load_adapter: the record's config.targets is not a list of module paths")
    allowed = {f.name for f in dataclasses.fields(LoraConfig)}
    if set(cfg) - allowed:
        raise AdapterMismatchError(f"load_adapter: unknown config fields {sorted(set(cfg) - allowed)}")
    try:
        config = LoraConfig(**{**cfg, "targets": list(paths), "modules_to_save": tuple(cfg.get("modules_to_save", ()))})
    except (InvalidArgumentError, ArgumentTypeError, TypeError) as exc:
        raise AdapterMismatchError(f"load_adapter: the saved config is invalid ({exc})") from None
    name = rec.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise AdapterMismatchError(f"load_adapter: the saved adapter name {name!r} is not an identifier")
    return name, config, paths, rec


def load_adapter(
    model: Module,
    directory: str | os.PathLike,
    name: str | None = None,
    *,
    max_bytes: int = 4 << 30,
    check_base: bool = True,
) -> str:
    """Add the adapter saved in ``directory`` to ``model`` (as ``name``, default: the saved
    name) and make it active; returns its name.

    The files are read as untrusted data: regular files only, sizes bounded (``max_bytes``),
    the tensors' SHA-256 checked, JSON without NaN, every tensor name, shape and dtype checked
    against the adapter the config describes. With ``check_base`` a model whose base weights
    differ from the ones the adapter was trained on is refused.
    """
    where = Path(directory)
    if not where.is_dir():
        raise AdapterMismatchError(f"load_adapter: {where} is not a directory written by save_adapter")
    raw = _read_regular(where / ADAPTER_CONFIG, MAX_CONFIG_BYTES, "the adapter record")
    try:
        rec = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise AdapterMismatchError(f"load_adapter: {where / ADAPTER_CONFIG} is not valid JSON ({exc})") from None
    saved_name, config, paths, rec = _config_from_record(rec)
    name = saved_name if name is None else name
    extras = rec.get("trained_paths", [])
    if not isinstance(extras, list) or not all(isinstance(p, str) for p in extras):
        raise AdapterMismatchError("load_adapter: the record's trained_paths is not a list of parameter paths")
    if check_base:
        want, got = rec.get("base_fingerprint"), fingerprint(model, extras)
        if want != got:
            raise AdapterMismatchError(
                f"load_adapter: adapter {saved_name!r} was trained on another base model (base fingerprint "
                f"{str(want)[:12]}..., this model's is {got[:12]}...); load it onto the model it was trained on, or "
                f"pass check_base=False if you know the bases are compatible"
            )
    blob = _read_regular(where / ADAPTER_TENSORS, max_bytes, "the adapter tensors")
    if hashlib.sha256(blob).hexdigest() != rec.get("tensors_sha256"):
        raise AdapterMismatchError(f"load_adapter: {where / ADAPTER_TENSORS} does not match its SHA-256: corrupt")
    try:
        arrays = _safetensors_load(blob)
    except Exception as exc:  # safetensors raises its own error types
        raise AdapterMismatchError(
            f"load_adapter: {where / ADAPTER_TENSORS} is not valid safetensors ({exc})"
        ) from None
    candidates = {p for p, _, _ in _candidates(model)}
    absent = [p for p in paths if p not in candidates]
    if absent:
        raise AdapterMismatchError(f"load_adapter: the model has no adaptable layer at {absent[:3]}")
    apply_lora(model, config, name)
    expected = dict(_adapter_tensors(model, name, config)[0])
    keys = {k.replace(f".lora.{saved_name}.", f".lora.{name}.") if k.endswith((".A", ".B")) else k for k in arrays}
    if keys != set(expected):
        delete_adapter(model, name)
        raise AdapterMismatchError(
            f"load_adapter: the saved tensors do not fit the adapter the config describes (extra: "
            f"{sorted(keys - set(expected))[:3]}, missing: {sorted(set(expected) - keys)[:3]})"
        )
    own = dict(model.named_parameters())
    with no_grad():
        for key, arr in arrays.items():
            target_key = key.replace(f".lora.{saved_name}.", f".lora.{name}.") if key.endswith((".A", ".B")) else key
            target = own[target_key]
            if arr.shape != target.shape or arr.dtype.kind != "f":
                delete_adapter(model, name)
                raise AdapterMismatchError(
                    f"load_adapter: {key} is {arr.dtype} {arr.shape}; the model expects float {target.shape}"
                )
            target.copy_(new_tensor(np.array(arr), dtype=target.dtype, device=target.device.without_autodiff()))
    return name
