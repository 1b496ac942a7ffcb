"""``quantize(model, "int8" | "nf4", targets=...)``: Linear layers replaced by QuantLinear, with
a report of the weight memory and (given an ``evaluate`` function) the accuracy change."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentTypeError, InvalidArgumentError
from ..nn.linear import Linear
from ..nn.module import Module
from ..nn.paramgroup import ParamGroup
from ..ops.quant import FORMATS
from .modules import QuantLinear

__all__ = ["quantize", "QuantReport"]


@dataclass
class QuantReport:
    """What :func:`quantize` did: the layers, their weight bytes before and after, and the
    metric ``evaluate`` returned before and after (None without ``evaluate``)."""

    format: str
    layers: list[str] = field(default_factory=list)
    float_bytes: int = 0
    quant_bytes: int = 0
    before: float | None = None
    after: float | None = None

    @property
    def ratio(self) -> float:
        """Quantized weight bytes over the float weights they replace."""
        return self.quant_bytes / self.float_bytes if self.float_bytes else 0.0

    @property
    def bits_per_weight(self) -> float:
        n = self.float_bytes / 4 if self.float_bytes else 0
        return 8 * self.quant_bytes / n if n else 0.0

    @property
    def change(self) -> float | None:
        """``after - before`` of the metric (e.g. accuracy points lost, negative)."""
        return None if self.before is None or self.after is None else self.after - self.before

    def __str__(self) -> str:
        line = (
            f"{self.format}: {len(self.layers)} layer(s), weights {self.float_bytes} -> {self.quant_bytes} bytes "
            f"({self.ratio:.3f}x, {self.bits_per_weight:.2f} bits/weight)"
        )
        if self.change is not None:
            line += f"; metric {self.before:.4f} -> {self.after:.4f} ({self.change:+.4f})"
        return line


def _selected(model: Module, targets: Any) -> list[tuple[str, Linear]]:
    linears = [(p, m) for p, m in model.named_modules() if isinstance(m, Linear) and p]
    if isinstance(targets, str) and targets == "all-linear":
        return linears
    if isinstance(targets, ParamGroup):
        paths = {p for p, _ in targets.select_modules(model)}
        return [(p, m) for p, m in linears if p in paths]
    if isinstance(targets, str):
        return [(p, m) for p, m in linears if re.fullmatch(targets, p)]
    if isinstance(targets, (list, tuple)) and all(isinstance(t, str) for t in targets):
        return [(p, m) for p, m in linears if any(p == t or p.endswith("." + t) for t in targets)]
    raise ArgumentTypeError(
        f"quantize: targets must be 'all-linear', a regex, a list of module names/suffixes or an nn.ParamGroup, "
        f"got {targets!r}"
    )


def quantize(
    model: Module,
    format: str,
    targets: Any = "all-linear",
    *,
    block_size: int = 64,
    double_quant: bool = False,
    evaluate: Callable[[Module], float] | None = None,
) -> QuantReport:
    """Replace the ``targets`` Linear layers of ``model`` (in place) by :class:`QuantLinear`
    holding ``format`` codes ("int8": per-channel absmax; "nf4": blocks of ``block_size``,
    ``double_quant`` for 8-bit absmax values). ``evaluate(model) -> float`` is called before
    and after, and the report carries both values.

    >>> import ember as em
    >>> from ember import nn
    >>> model = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    >>> print(em.quant.quantize(model, "nf4", double_quant=True))
    nf4: 2 layer(s), weights 35328 -> 4570 bytes (0.129x, 4.14 bits/weight)
    """
    if not isinstance(model, Module):
        raise ArgumentTypeError(f"quantize: model must be an nn.Module, got {type(model).__name__}")
    if format not in FORMATS:
        raise InvalidArgumentError(f"quantize: format must be one of {FORMATS}, got {format!r}")
    chosen = _selected(model, targets)
    if not chosen:
        raise InvalidArgumentError(
            f"quantize: targets={targets!r} matched no Linear layer of {type(model).__name__}; its Linear layers are "
            f"{[p for p, m in model.named_modules() if isinstance(m, Linear)]}"
        )
    report = QuantReport(format)
    if evaluate is not None:
        report.before = float(evaluate(model))
    for path, layer in chosen:
        q = QuantLinear.from_linear(layer, format, block_size, double_quant)
        parent_path, _, attr = path.rpartition(".")
        model.get_submodule(parent_path)._modules[attr] = q
        report.layers.append(path)
        report.float_bytes += layer.weight.size * 4
        report.quant_bytes += q.weight_bytes()
    if evaluate is not None:
        report.after = float(evaluate(model))
    return report
