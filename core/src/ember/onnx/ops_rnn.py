"""ONNX handlers: the recurrent layers RNN, GRU and LSTM (one time step at a time, in ember ops)."""

from __future__ import annotations

from typing import Any

import ember as em

from ..tensor import Tensor
from .registry import Context, OnnxNode, handler
from .util import host, unsupported

_ACT = {"tanh": em.tanh, "sigmoid": em.sigmoid, "relu": em.relu}


def _acts(node: OnnxNode, defaults: list[str], dirs: int) -> list[list[Any]]:
    names = node.attr("activations") or defaults * dirs
    if node.attr("activation_alpha") or node.attr("activation_beta"):
        raise unsupported(node, "recurrent activations with alpha/beta parameters")
    fns = []
    for name in names:
        fn = _ACT.get(name.lower())
        if fn is None:
            raise unsupported(node, f"the recurrent activation {name!r}")
        fns.append(fn)
    k = len(defaults)
    return [fns[d * k : (d + 1) * k] for d in range(dirs)]


def _prepare(node: OnnxNode, xs: list[Any], gates: int) -> tuple[Any, ...]:
    xs = xs + [None] * (8 - len(xs))
    x, w, r, b, lens, h0 = xs[:6]
    layout = node.attr("layout", 0)
    if layout:
        x = x.permute((1, 0, 2))
    if lens is not None and len(set(host(lens).reshape(-1).tolist()) | {x.shape[0]}) > 1:
        raise unsupported(node, "sequence_lens shorter than the sequence")
    if node.attr("clip") is not None:
        raise unsupported(node, "cell clipping")
    dirs = w.shape[0]
    hidden = r.shape[-1]
    batch = x.shape[1]
    if b is None:
        b = em.zeros((dirs, 2 * gates * hidden), dtype=x.dtype, device=x.device)
    if h0 is None:
        h0 = em.zeros((dirs, batch, hidden), dtype=x.dtype, device=x.device)
    elif layout:
        h0 = h0.permute((1, 0, 2))
    return x, w, r, b, h0, dirs, hidden, layout, xs


def _finish(ys: list[Tensor], hs: list[Tensor], layout: int, extra: list[Tensor] | None = None) -> list[Tensor]:
    y = em.stack(ys, axis=1)  # (seq, dirs, batch, hidden)
    yh = em.stack(hs, axis=0)
    out = [y, yh]
    if extra is not None:
        out.append(em.stack(extra, axis=0))
    if layout:
        out = [y.permute((2, 0, 1, 3))] + [t.permute((1, 0, 2)) for t in out[1:]]
    return out


def _directions(node: OnnxNode, dirs: int) -> list[bool]:
    direction = node.attr("direction", "forward")
    if direction == "bidirectional":
        return [False, True]
    return [direction == "reverse"] * dirs


def _steps(x: Tensor, reverse: bool) -> list[int]:
    steps = list(range(x.shape[0]))
    return steps[::-1] if reverse else steps


@handler("RNN")
def _rnn(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    x, w, r, b, h0, dirs, hidden, layout, _ = _prepare(node, xs, 1)
    acts = _acts(node, ["Tanh"], dirs)
    ys, hs = [], []
    for d, reverse in enumerate(_directions(node, dirs)):
        wb, rb = b[d, :hidden], b[d, hidden:]
        h = h0[d]
        outs = [None] * x.shape[0]
        for t in _steps(x, reverse):
            h = acts[d][0](em.matmul(x[t], w[d].mT) + em.matmul(h, r[d].mT) + wb + rb)
            outs[t] = h
        ys.append(em.stack(outs, axis=0))
        hs.append(h)
    return _finish(ys, hs, layout)


@handler("GRU")
def _gru(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    x, w, r, b, h0, dirs, n, layout, _ = _prepare(node, xs, 3)
    acts = _acts(node, ["Sigmoid", "Tanh"], dirs)
    before = bool(node.attr("linear_before_reset", 0))
    ys, hs = [], []
    for d, reverse in enumerate(_directions(node, dirs)):
        f, g = acts[d]
        wz, wr, wh = w[d, :n], w[d, n : 2 * n], w[d, 2 * n :]
        rz, rr, rh = r[d, :n], r[d, n : 2 * n], r[d, 2 * n :]
        bw, br = b[d, : 3 * n], b[d, 3 * n :]
        h = h0[d]
        outs = [None] * x.shape[0]
        for t in _steps(x, reverse):
            xt = x[t]
            z = f(em.matmul(xt, wz.mT) + em.matmul(h, rz.mT) + bw[:n] + br[:n])
            rt = f(em.matmul(xt, wr.mT) + em.matmul(h, rr.mT) + bw[n : 2 * n] + br[n : 2 * n])
            if before:
                cand = g(em.matmul(xt, wh.mT) + rt * (em.matmul(h, rh.mT) + br[2 * n :]) + bw[2 * n :])
            else:
                cand = g(em.matmul(xt, wh.mT) + em.matmul(rt * h, rh.mT) + br[2 * n :] + bw[2 * n :])
            h = (1.0 - z) * cand + z * h
            outs[t] = h
        ys.append(em.stack(outs, axis=0))
        hs.append(h)
    return _finish(ys, hs, layout)


@handler("LSTM")
def _lstm(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    x, w, r, b, h0, dirs, n, layout, full = _prepare(node, xs, 4)
    c0, p = full[6], full[7]
    if node.attr("input_forget", 0):
        raise unsupported(node, "LSTM with input_forget")
    if c0 is None:
        c0 = em.zeros(h0.shape, dtype=x.dtype, device=x.device)
    elif layout:
        c0 = c0.permute((1, 0, 2))
    acts = _acts(node, ["Sigmoid", "Tanh", "Tanh"], dirs)
    ys, hs, cs = [], [], []
    for d, reverse in enumerate(_directions(node, dirs)):
        f, g, hact = acts[d]
        bias = b[d, : 4 * n] + b[d, 4 * n :]
        h, c = h0[d], c0[d]
        pi = po = pf = None
        if p is not None:
            pi, po, pf = p[d, :n], p[d, n : 2 * n], p[d, 2 * n :]
        outs = [None] * x.shape[0]
        for t in _steps(x, reverse):
            gates = em.matmul(x[t], w[d].mT) + em.matmul(h, r[d].mT) + bias
            i, o, fg, cc = gates[:, :n], gates[:, n : 2 * n], gates[:, 2 * n : 3 * n], gates[:, 3 * n :]
            if pi is not None:
                i = i + pi * c
                fg = fg + pf * c
            i, fg, cc = f(i), f(fg), g(cc)
            c = fg * c + i * cc
            if po is not None:
                o = o + po * c
            h = f(o) * hact(c)
            outs[t] = h
        ys.append(em.stack(outs, axis=0))
        hs.append(h)
        cs.append(c)
    return _finish(ys, hs, layout, cs)
