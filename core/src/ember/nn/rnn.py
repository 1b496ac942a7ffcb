"""Recurrent layers: RNN, LSTM, GRU (PyTorch gate order, shapes and parameter names).

Parameters per layer k and direction: ``weight_ih_l{k}`` (G*H, H_in), ``weight_hh_l{k}`` (G*H, H),
``bias_ih_l{k}``, ``bias_hh_l{k}`` (G*H), with a ``_reverse`` suffix for the backward direction
of a bidirectional layer; G is 4 for LSTM (gates i, f, g, o), 3 for GRU (r, z, n), 1 for RNN.
All start uniform on +-1/sqrt(hidden_size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ..creation import zeros
from ..errors import InvalidArgumentError, MissingMethodError, ShapeError
from ..ops.linalg import matmul
from ..ops.movement import concat, expand_dims, squeeze, stack, unstack
from ..tensor import Tensor
from . import functional as F
from ._util import uniform_param
from .config import Config
from .module import Module

__all__ = ["RNN", "RNNConfig", "LSTM", "LSTMConfig", "GRU", "GRUConfig"]


@dataclass
class _RNNConfig(Config):
    input_size: int
    hidden_size: int
    num_layers: int = 1
    bias: bool = True
    batch_first: bool = False
    dropout: float = 0.0
    bidirectional: bool = False


@dataclass
class LSTMConfig(_RNNConfig):
    """Long short-term memory; returns output and (h_n, c_n)."""


@dataclass
class GRUConfig(_RNNConfig):
    """Gated recurrent unit; returns output and h_n."""


@dataclass
class RNNConfig(_RNNConfig):
    """Elman RNN with tanh or relu; returns output and h_n."""

    nonlinearity: str = "tanh"


class _RNNBase(Module):
    gates = 1

    def __init__(self, config: _RNNConfig, device: Any, dtype: Any) -> None:
        super().__init__()
        name = type(self).__name__
        c = config
        if c.num_layers < 1 or c.hidden_size < 1:
            raise InvalidArgumentError(
                f"{name}: num_layers and hidden_size must be >= 1, got {c.num_layers}, {c.hidden_size}"
            )
        if not 0.0 <= c.dropout <= 1.0:
            raise InvalidArgumentError(f"{name}: dropout must be in [0, 1], got {c.dropout}")
        self._config = config
        self.input_size, self.hidden_size, self.num_layers = c.input_size, c.hidden_size, c.num_layers
        self.bias, self.batch_first, self.bidirectional = c.bias, c.batch_first, c.bidirectional
        self.dropout = c.dropout
        self.num_directions = 2 if c.bidirectional else 1
        bound = 1.0 / math.sqrt(c.hidden_size)
        g = self.gates * c.hidden_size
        for layer in range(c.num_layers):
            width = c.input_size if layer == 0 else c.hidden_size * self.num_directions
            for direction in range(self.num_directions):
                sfx = f"_l{layer}" + ("_reverse" if direction else "")
                self.register_parameter("weight_ih" + sfx, uniform_param((g, width), bound, device, dtype))
                self.register_parameter("weight_hh" + sfx, uniform_param((g, c.hidden_size), bound, device, dtype))
                if c.bias:
                    self.register_parameter("bias_ih" + sfx, uniform_param((g,), bound, device, dtype))
                    self.register_parameter("bias_hh" + sfx, uniform_param((g,), bound, device, dtype))

    def _weights(self, layer: int, direction: int) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        sfx = f"_l{layer}" + ("_reverse" if direction else "")
        p = self._parameters
        return p["weight_ih" + sfx], p["weight_hh" + sfx], p.get("bias_ih" + sfx), p.get("bias_hh" + sfx)

    def _cell(self, xw: Tensor, hw: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        raise MissingMethodError

    def _check_input(self, x: Any) -> tuple[Tensor, bool]:
        name = type(self).__name__
        layout = "(N, L, H_in)" if self.batch_first else "(L, N, H_in)"
        if not isinstance(x, Tensor) or x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            got = x.shape if isinstance(x, Tensor) else type(x).__name__
            raise ShapeError(
                f"{name}: expected input of shape {layout} or unbatched (L, H_in) with H_in=input_size="
                f"{self.input_size}, got {got}"
            )
        if x.ndim == 2:
            return expand_dims(x, 1), False
        return (x.swapaxes(0, 1) if self.batch_first else x), True

    def _initial(self, h: Any, n: int, batched: bool, like: Tensor, what: str) -> Tensor:
        shape = (self.num_layers * self.num_directions, n, self.hidden_size)
        if h is None:
            return zeros(shape, dtype=like.dtype, device=like.device)
        want = shape if batched else (shape[0], shape[2])
        if not isinstance(h, Tensor) or h.shape != want:
            got = h.shape if isinstance(h, Tensor) else type(h).__name__
            raise ShapeError(
                f"{type(self).__name__}: expected {what} of shape {want} (num_layers * num_directions, "
                f"{'N, ' if batched else ''}hidden_size), got {got}"
            )
        return h if batched else expand_dims(h, 1)

    def _run(self, x: Tensor, state: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """x (L, N, H_in), state: tensors (layers * dirs, N, H) -> output (L, N, dirs * H), final states."""
        finals: list[list[Tensor]] = [[] for _ in state]
        initial = [unstack(s, 0) for s in state]
        layer_input = x
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self.num_directions):
                idx = layer * self.num_directions + direction
                w_ih, w_hh, b_ih, b_hh = self._weights(layer, direction)
                xw = matmul(layer_input, w_ih.mT)
                if b_ih is not None:
                    xw = xw + b_ih
                steps = unstack(xw, 0)
                carry = tuple(s[idx] for s in initial)
                ys: list[Tensor] = [None] * len(steps)  # type: ignore[list-item]
                order = range(len(steps) - 1, -1, -1) if direction else range(len(steps))
                for t in order:
                    hw = matmul(carry[0], w_hh.mT)
                    if b_hh is not None:
                        hw = hw + b_hh
                    carry = self._cell(steps[t], hw, carry)
                    ys[t] = carry[0]
                outputs.append(stack(ys, 0))
                for i, s in enumerate(carry):
                    finals[i].append(s)
            layer_input = outputs[0] if len(outputs) == 1 else concat(outputs, axis=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        return layer_input, [stack(f, 0) for f in finals]

    def _forward_h(self, x: Tensor, hx: Tensor | None) -> tuple[Tensor, Tensor]:
        """``output, h_n`` of a layer whose only state is h (GRU, RNN)."""
        seq, batched = self._check_input(x)
        state = [self._initial(hx, seq.shape[1], batched, seq, "h_0")]
        out, (h,) = self._finish(*self._run(seq, state), batched)
        return out, h

    def _finish(self, out: Tensor, states: list[Tensor], batched: bool) -> tuple[Tensor, list[Tensor]]:
        if not batched:
            return squeeze(out, 1), [squeeze(s, 1) for s in states]
        return (out.swapaxes(0, 1) if self.batch_first else out), states


class _GatedRNN(_RNNBase):
    """The constructor LSTM and GRU share: the fields of their config, then device and dtype."""

    config_class: ClassVar[type[_RNNConfig]]

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        cfg = self.config_class(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)
        super().__init__(cfg, device, dtype)


def _split(t: Tensor, parts: int) -> list[Tensor]:
    h = t.shape[-1] // parts
    return [t[..., i * h : (i + 1) * h] for i in range(parts)]


class LSTM(_GatedRNN):
    """Multi-layer LSTM: ``output, (h_n, c_n) = lstm(x, (h_0, c_0))``.

    ``x`` is (L, N, input_size), or (N, L, input_size) with ``batch_first``, or unbatched
    (L, input_size); states are (num_layers * num_directions, N, hidden_size), zeros by default.

    >>> import ember as em
    >>> from ember import nn
    >>> out, (h, c) = nn.LSTM(3, 5, batch_first=True)(em.ones((2, 7, 3)))
    >>> out.shape, h.shape
    ((2, 7, 5), (1, 2, 5))
    """

    config_class = LSTMConfig
    gates = 4

    def _cell(self, xw: Tensor, hw: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        i, f, g, o = _split(xw + hw, 4)
        c = F.sigmoid(f) * state[1] + F.sigmoid(i) * g.tanh()
        return F.sigmoid(o) * c.tanh(), c

    def forward(self, x: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        seq, batched = self._check_input(x)
        n = seq.shape[1]
        h0, c0 = (None, None) if hx is None else hx
        state = [self._initial(h0, n, batched, seq, "h_0"), self._initial(c0, n, batched, seq, "c_0")]
        out, (h, c) = self._finish(*self._run(seq, state), batched)
        return out, (h, c)


class GRU(_GatedRNN):
    """Multi-layer GRU: ``output, h_n = gru(x, h_0)``; shapes as for LSTM.

    r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z likewise,
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h.
    """

    config_class = GRUConfig
    gates = 3

    def _cell(self, xw: Tensor, hw: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        xr, xz, xn = _split(xw, 3)
        hr, hz, hn = _split(hw, 3)
        r = F.sigmoid(xr + hr)
        z = F.sigmoid(xz + hz)
        n = (xn + r * hn).tanh()
        return ((1.0 - z) * n + z * state[0],)

    def forward(self, x: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return self._forward_h(x, hx)


class RNN(_RNNBase):
    """Multi-layer Elman RNN: h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu)."""

    config_class = RNNConfig
    gates = 1

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        nonlinearity: str = "tanh",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise InvalidArgumentError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        cfg = RNNConfig(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, nonlinearity)
        super().__init__(cfg, device, dtype)
        self.nonlinearity = nonlinearity

    def _cell(self, xw: Tensor, hw: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        pre = xw + hw
        return (F.relu(pre) if self.nonlinearity == "relu" else pre.tanh(),)

    def forward(self, x: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return self._forward_h(x, hx)
